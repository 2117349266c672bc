"""The exit statuses (README.md) and the error a user can fix: one line on stderr, never a
traceback. It imports nothing of the crawler's: the commands and the daemon both raise it.
"""

from __future__ import annotations

PARTIAL = 1  # done in part: some input rejected, or interrupted after committing some
USAGE = 2  # nothing done: a usage or configuration error, the line naming what fixes it
DAMAGED = 4  # a stored record is missing or damaged (crawler.store.damage)


class UserError(Exception):
    """A one-line message for the user and the exit status that goes with it."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
