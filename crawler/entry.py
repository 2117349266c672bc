"""The ``crawler`` command's first lines (the script and ``python -m crawler``): its signal
handling, before the slow imports. Loading the CLI and a command's modules can take a second
or more; a SIGTERM in that window would otherwise kill ``crawler run`` with exit 143 instead
of the clean stop, exit 0, that the daemon promises for a signal at any moment.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from crawler import __version__


def _interrupted_while_starting(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C before the CLI is loaded: nothing has been done yet, so quit without a trace."""
    sys.stderr.write("crawler: interrupted before starting; nothing was done\n")
    os._exit(1)


def prepare(argv: Sequence[str]) -> None:
    """Install the start-up handlers for the command in ``argv`` (without the program name):
    ``run`` counts SIGTERM/SIGINT from here on (``crawler.daemon.signals``); any other command
    quits quietly on Ctrl-C until the CLI takes over."""
    if list(argv[:1]) == ["run"]:
        from crawler.daemon.signals import process_shutdown  # heavy: asyncio, for `run` alone

        process_shutdown()
    else:
        signal.signal(signal.SIGINT, _interrupted_while_starting)


def version_only(argv: Sequence[str]) -> bool:
    """``crawler --version``, answered without the CLI's imports (pydantic)."""
    if list(argv) != ["--version"]:
        return False
    print(f"crawler {__version__}")
    return True


def main() -> int:
    if version_only(sys.argv[1:]):
        return 0
    prepare(sys.argv[1:])
    from crawler.cli import main as cli_main  # heavy: the lazy command load, after the handlers

    return cli_main()
