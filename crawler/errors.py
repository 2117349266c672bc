"""The exit statuses and the error a user can fix: one line on stderr, never a traceback.

Exit statuses, as README.md documents them: 0 done; 1 done in part (some input rejected,
or interrupted with Ctrl-C after committing some of it); 2 nothing done because of a usage
or configuration error, the line naming the setting, option or command that fixes it; 4 a
stored record is missing or damaged (one line naming it; ``crawler verify`` finds them all).

It imports nothing of the crawler's: the daemon's start-up errors are of this kind too, and
the commands above it and the daemon below them both raise it.
"""

from __future__ import annotations

USAGE = 2
PARTIAL = 1
# A stored record is missing or damaged (crawler.store.damage): get, diff, versions, verify.
DAMAGED = 4


class UserError(Exception):
    """A one-line message for the user and the exit status that goes with it."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
