"""Side tasks retry database errors; one that will not pass is said once, not swallowed."""

from __future__ import annotations

import logging

import asyncpg.exceptions
import pytest

from crawler.db.errors import retried_later

LOG = logging.getLogger("test.retried_later")


def _fail(exc: BaseException, what: str = "the heartbeat") -> None:
    with retried_later(what, LOG):
        raise exc


def test_a_refused_statement_is_logged_once_per_task_and_kind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger=LOG.name)
    refused = asyncpg.exceptions.FeatureNotSupportedError(
        "could not run distributed query with FOR UPDATE/SHARE commands"
    )
    for _ in range(3):
        _fail(refused, "a task that fails for good")
    _fail(asyncpg.exceptions.UndefinedColumnError('column "x" does not exist'),
          "a task that fails for good")
    _fail(refused, "another task")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages
    assert "a task that fails for good failed and will be retried (logged once): " \
        "FeatureNotSupportedError: could not run distributed query" in messages[0]
    assert "UndefinedColumnError" in messages[1] and messages[2].startswith("another task")


@pytest.mark.parametrize("exc", [
    asyncpg.exceptions.DeadlockDetectedError("deadlock detected"),
    asyncpg.exceptions.SerializationError("could not serialize access"),
    asyncpg.exceptions.QueryCanceledError("canceling statement due to statement timeout"),
    asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
    ConnectionRefusedError("connection refused"),
])
def test_passing_conditions_are_waited_out_in_silence(
    exc: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOG.name)
    _fail(exc, f"quiet {type(exc).__name__}")
    assert caplog.records == []


def test_anything_else_is_not_suppressed() -> None:
    with pytest.raises(ZeroDivisionError):
        _fail(ZeroDivisionError())
