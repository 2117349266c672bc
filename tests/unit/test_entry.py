"""The `crawler` command installs its signal handling before loading the CLI, whichever way
it starts (crawler.entry): a SIGTERM in the second or two of imports must not kill `crawler
run` with the default action (exit 143), as it did through the installed script."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

PROBE = """
import signal, sys
from crawler import entry
entry.prepare({argv!r})
term, intr = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
print("crawler.cli" in sys.modules, callable(term), getattr(intr, "__name__", intr))
"""


def probe(argv: list[str]) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], check=True,
                          capture_output=True, text=True, timeout=120)
    return done.stdout.split()


def test_the_installed_script_enters_through_the_early_handlers() -> None:
    (script,) = entry_points(group="console_scripts", name="crawler")
    assert script.value == "crawler.entry:main"


def test_run_counts_signals_before_the_cli_is_imported() -> None:
    cli_loaded, term_handled, _ = probe(["run", "--processes", "1"])
    assert cli_loaded == "False"
    assert term_handled == "True"


def test_other_commands_quit_quietly_on_ctrl_c_while_starting() -> None:
    cli_loaded, term_handled, sigint = probe(["status"])
    assert cli_loaded == "False"
    assert term_handled == "False"  # SIGTERM keeps its default for short commands
    assert sigint == "_interrupted_while_starting"
