"""The supervisor restarts a failing side task with doubling waits and reports it down."""

from __future__ import annotations

import asyncio
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
