import os
import signal
import sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C before the CLI is loaded: nothing has been done yet, so quit without a trace."""
    sys.stderr.write("crawler: interrupted before starting; nothing was done\n")
    os._exit(1)


if sys.argv[1:2] == ["run"]:
    # The daemon counts SIGTERM/SIGINT from here, before the (slow) imports: a signal is never
    # lost or fatal, and one that came during start-up stops it as soon as it can (exit 0).
    from crawler.daemon.signals import process_shutdown

    process_shutdown()
else:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

from crawler.cli import main  # noqa: E402  (after the handler, so imports are covered)

# Guarded: the planner's process starts by ``spawn``, which imports this module again.
if __name__ == "__main__":
    raise SystemExit(main())
