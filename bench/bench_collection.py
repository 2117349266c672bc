"""End-to-end cost of the collection: the real daemon on the loopback demo web, with WARC
storage off, on, and on with a webhook whose receiver is down.

Run: .venv/bin/python bench/bench_collection.py --database-url postgresql://postgres@127.0.0.1/postgres
     [--seconds 20] [--rounds 2] [--warc-root DIR]

Each run gets a fresh database on that server. Prints fetches per second per configuration
(rounds alternate the configurations, so machine load drifts hit all of them alike), each
round's ratio to that round's storage-off run and their median, and the storage figures:
compressed bytes stored per fetch, per stored record and per response, and the share of
revisit records. Targets: storing costs at most 10% of throughput; a receiver that is down
costs at most 10% more.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
from scratch import with_database

from crawler.db import frontier
from crawler.db.migrate import upgrade
from crawler.demo.processes import PoissonProcess
from crawler.demo.sites import PageSpec, SiteSpec
from crawler.demo.web import DemoWeb

CONFIGS = ("storage off", "storage on", "on, no fsync", "on + webhook down")


def sites(count: int, pages: int) -> list[SiteSpec]:
    return [
        SiteSpec(f"b{k}", tuple(
            PageSpec(f"/p{i}", real=PoissonProcess(rate_per_second=0.1), seed=f"{k}/{i}",
                     cosmetic_per_request=i % 4 == 0)
            for i in range(pages)
        ))
        for k in range(count)
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def one_run(admin_url: str, config: str, seconds: float, warm_up: float,
                  profile: Path | None = None, warc_root: Path | None = None
                  ) -> dict[str, float]:
    name = f"crawler_bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    db_url = with_database(admin_url, name)
    web = DemoWeb(sites(12, 6))
    try:
        await upgrade(db_url)
        await web.start()
        pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
        await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
        # On a real disk (not a tmpfs, where fsync is free): --warc-root.
        warc_dir = Path(tempfile.mkdtemp(prefix="bench-warc-", dir=warc_root))
        env = {
            **os.environ,
            "CRAWLER_DATABASE_URL": db_url, "CRAWLER_METRICS_PORT": "0",
            "CRAWLER_ALLOW_NETWORKS": '["127.0.0.0/8"]', "CRAWLER_SCHEDULE": "uniform",
            "CRAWLER_DEFAULT_INTERVAL": "0.2", "CRAWLER_MIN_INTERVAL": "0.2",
            "CRAWLER_POLITENESS_DELAY": "0", "CRAWLER_POLL_INTERVAL": "0.05",
            "CRAWLER_LOG_LEVEL": "WARNING", "CRAWLER_WARC_DIR": str(warc_dir),
            "CRAWLER_STORE_VERSIONS": "false" if config == "storage off" else "true",
            # What fsync before each index commit costs (CRAWLER_WARC_FSYNC, on by default).
            "CRAWLER_WARC_FSYNC": "false" if config == "on, no fsync" else "true",
        }
        if config == "on + webhook down":
            env["CRAWLER_WEBHOOK_URL"] = f"http://127.0.0.1:{free_port()}/hook"
        profiler = () if profile is None else (
            "-m", "cProfile", "-o", str(profile / (config.replace(" ", "_") + ".prof")))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *profiler, "-m", "crawler", "run", env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )
        count = "SELECT count(*) FROM observations"
        while not await pool.fetchval(count):
            await asyncio.sleep(0.1)
        await asyncio.sleep(warm_up)
        start_n, start_t = await pool.fetchval(count), time.monotonic()
        await asyncio.sleep(seconds)
        end_n, end_t = await pool.fetchval(count), time.monotonic()
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
        stored = await pool.fetchrow(
            "SELECT count(*) AS records, coalesce(sum(warc_length), 0) AS bytes, "
            "count(*) FILTER (WHERE record_type = 'revisit') AS revisits, "
            "coalesce(sum(warc_length) FILTER (WHERE record_type = 'response'), 0) AS rbytes "
            "FROM stored_records")
        fetches = await pool.fetchval(count)
        events = await pool.fetchval("SELECT count(*) FROM change_events")
        await pool.close()
        file_bytes = sum(p.stat().st_size for p in warc_dir.iterdir())
        for p in warc_dir.iterdir():
            p.unlink()
        warc_dir.rmdir()
        responses = stored["records"] - stored["revisits"]
        return {
            "rate": (end_n - start_n) / (end_t - start_t),
            "fetches": fetches,
            "records": stored["records"],
            "revisit_share": stored["revisits"] / max(1, stored["records"]),
            "bytes_per_fetch": file_bytes / max(1, fetches),
            "bytes_per_response": stored["rbytes"] / max(1, responses),
            "bytes_per_revisit": (stored["bytes"] - stored["rbytes"]) / max(1, stored["revisits"]),
            "events": events,
        }
    finally:
        await web.stop()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def main_async(args: argparse.Namespace) -> None:
    results: dict[str, list[dict[str, float]]] = {c: [] for c in CONFIGS}
    for round_number in range(args.rounds):
        # Every other round in reverse order: no configuration always runs first.
        for config in CONFIGS if round_number % 2 == 0 else reversed(CONFIGS):
            result = await one_run(args.database_url, config, args.seconds, args.warm_up,
                                   args.profile, args.warc_root)
            results[config].append(result)
            print(f"round {round_number + 1} {config:18} {result['rate']:7.1f} fetches/s",
                  flush=True)
    # Each round's ratio to that round's "storage off" run (they ran back to back, under the
    # same machine load); the median over rounds is the figure.
    print(f"\n{'configuration':18} {'fetches/s':>10} {'vs off':>8}  per round")
    for config in CONFIGS:
        rate = statistics.median(r["rate"] for r in results[config])
        ratios = [r["rate"] / off["rate"]
                  for r, off in zip(results[config], results["storage off"], strict=True)]
        print(f"{config:18} {rate:10.1f} {statistics.median(ratios):8.3f}  "
              + " ".join(f"{x:.3f}" for x in ratios))
    on = results["storage on"]
    print("\nstorage (storage on, all rounds):")
    print(f"  fetches {sum(r['fetches'] for r in on):.0f}, "
          f"records {sum(r['records'] for r in on):.0f}")
    print(f"  WARC bytes per fetch     {statistics.mean(r['bytes_per_fetch'] for r in on):8.0f}")
    print(f"  bytes per response (+request) "
          f"{statistics.mean(r['bytes_per_response'] for r in on):8.0f}")
    print(f"  bytes per revisit        {statistics.mean(r['bytes_per_revisit'] for r in on):8.0f}")
    print(f"  revisit share            {statistics.mean(r['revisit_share'] for r in on):8.3f}")
    down = results["on + webhook down"]
    print(f"  events queued while the webhook was down: {sum(r['events'] for r in down):.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("CRAWLER_DATABASE_URL"),
                        required="CRAWLER_DATABASE_URL" not in os.environ,
                        help="A server where the bench may create databases.")
    parser.add_argument("--seconds", type=float, default=20.0, help="Measured seconds per run.")
    parser.add_argument("--warm-up", type=float, default=3.0, help="Seconds before measuring.")
    parser.add_argument("--rounds", type=int, default=2, help="Runs of each configuration.")
    parser.add_argument("--warc-root", type=Path, default=None,
                        help="Where the WARC directories go (default: the temporary directory; "
                        "put it on the disk being measured: fsync on a tmpfs is free).")
    parser.add_argument("--profile", type=Path, default=None,
                        help="Write the daemon's cProfile output here, one file per config.")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
