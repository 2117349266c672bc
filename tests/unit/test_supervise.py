"""The supervisor restarts a failing side task with doubling waits and reports it down."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

from crawler.daemon.supervise import SideTask, Supervisor


async def test_a_failing_task_is_restarted_with_backoff_and_reported_down() -> None:
    runs: list[float] = []
    healthy = asyncio.Event()

    async def flaky() -> None:
        runs.append(time.monotonic())
        if len(runs) <= 3:
            raise RuntimeError(f"failure {len(runs)}")
        healthy.set()
        await asyncio.Event().wait()  # runs until cancelled

    async def steady() -> None:
        await asyncio.Event().wait()

    supervisor = Supervisor(
        [SideTask("flaky", flaky, required=True), SideTask("steady", steady, required=False)],
        restart_min_seconds=0.05, restart_max_seconds=0.15,
    )
    supervisor.start()
    seen_down = False
    deadline = time.monotonic() + 10
    while not healthy.is_set() and time.monotonic() < deadline:
        seen_down = seen_down or supervisor.required_down() == ["flaky"]
        await asyncio.sleep(0.005)
    assert healthy.is_set() and seen_down
    assert supervisor.required_down() == []
    assert supervisor.restarts == {"flaky": 3, "steady": 0}
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    # Waits of 0.05, 0.1, then 0.15 (capped); the loop's clock may fire a millisecond early.
    assert gaps[0] >= 0.045 and gaps[1] >= 0.095 and gaps[2] >= 0.145, gaps
    await supervisor.stop()


async def test_stop_ends_a_task_that_swallowed_its_cancellation(caplog) -> None:  # type: ignore[no-untyped-def]
    # The daemon-exit hang of a side task whose cancellation came back as a database error
    # (crawler.db.errors.cancelling): it caught the error and went to sleep for an hour.
    swallowed = asyncio.Event()

    async def swallows_once() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            swallowed.set()
        await asyncio.sleep(3600)

    supervisor = Supervisor([SideTask("swallows once", swallows_once, required=False)])
    supervisor.start()
    await asyncio.sleep(0)
    await supervisor.stop(timeout=30)
    assert swallowed.is_set()
    # Ended by the second cancellation, a second later: not left behind after 30 s.
    assert all(runner.done() for runner in supervisor._runners)
    assert "left behind" not in caplog.text


async def test_stop_gives_up_on_a_task_that_never_ends(caplog) -> None:  # type: ignore[no-untyped-def]
    mortal = asyncio.Event()

    async def immortal() -> None:
        while not mortal.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)

    supervisor = Supervisor([SideTask("immortal", immortal, required=False)])
    supervisor.start()
    await asyncio.sleep(0)
    await supervisor.stop(timeout=0.3)
    assert not any(runner.done() for runner in supervisor._runners)
    assert "left behind: side task immortal" in caplog.text
    mortal.set()  # now the next cancellation ends it
    await supervisor.stop(timeout=10)
    assert all(runner.done() for runner in supervisor._runners)
