import sys

from crawler.entry import prepare, version_only

if __name__ == "__main__" and version_only(sys.argv[1:]):
    raise SystemExit(0)

# Before the (slow) imports of the CLI: see crawler.entry.
prepare(sys.argv[1:])

from crawler.cli import main  # noqa: E402  (after the handlers, so imports are covered)

# Guarded: the planner's process starts by ``spawn``, which imports this module again.
if __name__ == "__main__":
    raise SystemExit(main())
