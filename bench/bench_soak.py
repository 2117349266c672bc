"""Soak: the real daemon against the demo web at full speed; memory and file descriptors must
not grow. Not part of the suite (10 minutes by default).

    python bench/bench_soak.py [--duration 600] [--sites 20] [--pages 50]
        [--database-url postgresql://postgres@127.0.0.1:5432/postgres]

A fresh database is created on that server (the embedded one when no URL is given), migrated,
seeded with the demo web's pages, and dropped at the end. RSS and open descriptors of the
daemon are sampled every 5 s from its first recorded fetch; the baseline is the sample after
the first minute (a fifth of the run when shorter). Target: RSS at the end within 10% of the
baseline, descriptors no more than the baseline plus the daemon's concurrency (sockets in
flight come and go).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import asyncpg
from scratch import add_database_url, server_url, with_database

from crawler.db import frontier
from crawler.db.migrate import upgrade
from crawler.demo.sites import demo_sites
from crawler.demo.web import DemoWeb

SAMPLE_SECONDS = 5.0
CONCURRENCY = 32


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def soak(args: argparse.Namespace, maintenance_url: str) -> int:
    name = f"crawler_soak_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(maintenance_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    db_url = with_database(maintenance_url, name)
    proc: asyncio.subprocess.Process | None = None
    try:
        await upgrade(db_url)
        web = DemoWeb(demo_sites(args.sites, args.pages, mean_change_seconds=20.0))
        await web.start()
        pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
        await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
        env = {
            **os.environ,
            "CRAWLER_DATABASE_URL": db_url,
            "CRAWLER_METRICS_PORT": "0",
            "CRAWLER_ALLOW_NETWORKS": '["127.0.0.0/8"]',
            "CRAWLER_SCHEDULE": "uniform",
            "CRAWLER_DEFAULT_INTERVAL": "1",
            "CRAWLER_MIN_INTERVAL": "0.5",
            "CRAWLER_POLITENESS_DELAY": "0.02",
            "CRAWLER_POLL_INTERVAL": "0.1",
            "CRAWLER_CONCURRENCY": str(CONCURRENCY),
            "CRAWLER_LOG_LEVEL": "WARNING",
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", "run", env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        # The clock starts at the first recorded fetch (start-up on a busy machine is slow).
        while not await pool.fetchval("SELECT count(*) FROM observations"):
            if proc.returncode is not None:
                raise RuntimeError(f"daemon exited with {proc.returncode}")
            await asyncio.sleep(0.5)
        started = time.monotonic()
        baseline_at = min(60.0, args.duration / 5.0)
        baseline: tuple[int, int] | None = None
        samples: list[tuple[float, int, int]] = []
        while time.monotonic() - started < args.duration:
            await asyncio.sleep(SAMPLE_SECONDS)
            if proc.returncode is not None:
                raise RuntimeError(f"daemon exited with {proc.returncode}")
            elapsed = time.monotonic() - started
            sample = (elapsed, rss_bytes(proc.pid), open_fds(proc.pid))
            samples.append(sample)
            if baseline is None and elapsed >= baseline_at:
                baseline = sample[1], sample[2]
        end_rss, end_fds = samples[-1][1], samples[-1][2]
        fetches = await pool.fetchval("SELECT count(*) FROM observations")
        await pool.close()
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        await web.stop()
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    assert baseline is not None
    base_rss, base_fds = baseline
    peak_rss = max(s[1] for s in samples)
    rss_ratio = end_rss / base_rss
    rss_ok = rss_ratio <= 1.10
    fds_ok = end_fds <= base_fds + CONCURRENCY
    print(f"soak: {args.duration:.0f} s, {args.sites} sites x {args.pages} pages, "
          f"{fetches} fetches ({fetches / args.duration:.1f}/s), exit {proc.returncode}")
    print(f"RSS after {baseline_at:.0f} s {base_rss / 2**20:.1f} MiB, at the end "
          f"{end_rss / 2**20:.1f} MiB (ratio {rss_ratio:.3f}, peak {peak_rss / 2**20:.1f} MiB): "
          f"{'ok' if rss_ok else 'GREW'}")
    print(f"open fds after {baseline_at:.0f} s {base_fds}, at the end {end_fds} "
          f"(max {max(s[2] for s in samples)}): {'ok' if fds_ok else 'LEAK'}")
    if err.strip():
        print("daemon stderr (last lines):\n" + err.decode(errors="replace")[-2000:])
    return 0 if rss_ok and fds_ok and proc.returncode == 0 else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="Seconds (default 600).")
    parser.add_argument("--sites", type=int, default=20, help="Demo sites (default 20).")
    parser.add_argument("--pages", type=int, default=50, help="Pages per site (default 50).")
    add_database_url(parser)
    args = parser.parse_args()
    with server_url(args.database_url) as url:
        code = asyncio.run(soak(args, url))
    raise SystemExit(code)


if __name__ == "__main__":
    main()
