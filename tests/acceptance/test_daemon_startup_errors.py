"""Start-up errors a setting fixes: one line naming the setting, exit 2, no traceback, nothing
left unclosed. The daemons start concurrently (each is a cold interpreter)."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest
from daemon import daemon_env

pytestmark = pytest.mark.timeout(180)


async def _run(env: dict[str, str]) -> tuple[int, list[str]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "run", "--duration", "30", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 150)
    assert proc.returncode is not None
    return proc.returncode, [line for line in out.decode().splitlines() if line.strip()]


async def test_startup_errors_are_one_line_and_exit_2(db_url: str, tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("a file where the data directory should be\n")
    try:
        unwritable = daemon_env(db_url, data_dir=str(not_a_dir / "data"))
        del unwritable["CRAWLER_DATABASE_URL"]  # the embedded server would live there
        cases = {
            "CRAWLER_METRICS_PORT": daemon_env(db_url, metrics_port=str(busy.getsockname()[1])),
            "CRAWLER_DATABASE_URL": daemon_env(
                f"postgresql://postgres@127.0.0.1:{refused.getsockname()[1]}/crawler"
            ),
            "CRAWLER_DATA_DIR": unwritable,
            "CRAWLER_LEASE_SECONDS": daemon_env(db_url, lease_seconds="10"),
        }
        results = await asyncio.gather(*(_run(env) for env in cases.values()))
    finally:
        busy.close()
        refused.close()
    for setting, (code, lines) in zip(cases, results, strict=True):
        text = "\n".join(lines)
        assert code == 2, (setting, text)
        assert setting in text, (setting, text)
        assert "Traceback" not in text and "Unclosed" not in text, (setting, text)
        if setting != "CRAWLER_LEASE_SECONDS":  # pydantic's report adds its own lines
            assert len(lines) == 1, (setting, text)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _serving(port: int, first: asyncio.subprocess.Process, seconds: float) -> None:
    """Until the first daemon answers /healthz on ``port`` (or exits: a failure)."""
    import aiohttp

    deadline = asyncio.get_running_loop().time() + seconds
    async with aiohttp.ClientSession() as session:
        while first.returncode is None:
            assert asyncio.get_running_loop().time() < deadline, "the first daemon never served"
            try:
                async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.1)  # polling the first daemon's start, not a fixed wait
    raise AssertionError("the first daemon exited")


@pytest.mark.parametrize("processes", ["2", "1"])
async def test_a_second_daemon_fails_at_once_in_one_line(db_url: str, processes: str) -> None:
    """Two daemons on one machine with the same settings: the second stops at once, one line
    naming the metrics port, exit 2, whatever --processes is: the supervisor of --processes N
    binds the port before it forks a fetch process."""
    port = _free_port()
    env = daemon_env(db_url, metrics_port=str(port), processes=processes)
    first = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "run", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await _serving(port, first, 120)
        started = asyncio.get_running_loop().time()
        code, lines = await _run(env)  # --duration 30: a failure that waits for it shows
        took = asyncio.get_running_loop().time() - started
    finally:
        first.terminate()
        await first.wait()
    text = "\n".join(lines)
    assert code == 2 and len(lines) == 1, text
    assert f"cannot serve metrics on 127.0.0.1:{port}" in text and "CRAWLER_METRICS_PORT" in text
    assert took < 25, (took, text)
