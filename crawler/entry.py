"""The ``crawler`` command's first lines: its signal handling, before the slow imports.

Both ways of starting the command come through here, the installed ``crawler`` script
(``main``) and ``python -m crawler`` (``crawler/__main__.py``). Loading the CLI and a
command's modules takes a fraction of a second to a second or more on a loaded machine
(pydantic, then asyncpg, numpy, aiohttp as the command needs them); a SIGTERM from a service
manager in that window would otherwise kill ``crawler run`` with the default action (exit 143)
instead of the clean stop, exit 0, that the daemon promises for a signal at any moment.
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
    """Install the start-up handlers for the command in ``argv`` (without the program name).

    ``run`` counts SIGTERM/SIGINT from here on (``crawler.daemon.signals``): a signal is never
    lost or fatal, and one that came during start-up stops the daemon as soon as it can. Any
    other command quits quietly on Ctrl-C until the CLI takes over."""
    if list(argv[:1]) == ["run"]:
        from crawler.daemon.signals import process_shutdown  # heavy: asyncio, for `run` alone

        process_shutdown()
    else:
        signal.signal(signal.SIGINT, _interrupted_while_starting)


def version_only(argv: Sequence[str]) -> bool:
    """``crawler --version``, answered here: the CLI's parser needs the settings (pydantic),
    a fifth of a second of imports for one line that needs none of them."""
    if list(argv) != ["--version"]:
        return False
    print(f"crawler {__version__}")
    return True


def main() -> int:
    """The installed ``crawler`` script's entry point."""
    if version_only(sys.argv[1:]):
        return 0
    prepare(sys.argv[1:])
    from crawler.cli import main as cli_main  # heavy: the lazy command load, after the handlers

    return cli_main()
