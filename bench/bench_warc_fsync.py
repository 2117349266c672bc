"""What fsync before the index commit costs the record path: records per second written and
made durable by ``DurableStore.sync`` with ``concurrency`` fetches waiting at once, fsync on
and off, and the fsync rounds taken (one shared by the fetches that wait together).

Run: .venv/bin/python bench/bench_warc_fsync.py [--dir DIR] [--records 4000]
     [--concurrency 1,16,64]

Put --dir on the disk being measured (fsync on a tmpfs is free).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

from crawler.store.base import Capture
from crawler.store.durable import DurableStore
from crawler.store.warc import WarcStore


def capture(n: int) -> Capture:
    body = (b"<html><body>" + b"<p>a fairly ordinary paragraph of text</p>" * 200
            + str(n).encode() + b"</body></html>")
    return Capture(url=f"http://127.0.0.1:9/p{n}", fetched_at=1.8e9 + n, status=200,
                   reason="OK", payload=body, response_headers=(("Content-Type", "text/html"),))


async def one(root: Path, records: int, concurrency: int, fsync: bool) -> tuple[float, int]:
    store = DurableStore(WarcStore(root, max_bytes=10**9, writer_name="bench", fsync=fsync))
    captures = [capture(n) for n in range(records)]
    queue = iter(captures)

    async def fetcher() -> None:
        for c in queue:
            await store.run(lambda s, c=c: s.write_response(c))  # type: ignore[misc]
            await store.sync()

    started = time.perf_counter()
    await asyncio.gather(*(fetcher() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    await store.close()
    return records / elapsed, store.syncs


async def main_async(args: argparse.Namespace) -> None:
    print(f"{'concurrency':>11} {'fsync':>6} {'records/s':>10} {'fsyncs':>7}")
    for concurrency in [int(x) for x in args.concurrency.split(",")]:
        for fsync in (False, True):
            root = Path(tempfile.mkdtemp(prefix="bench-fsync-", dir=args.dir))
            try:
                rate, syncs = await one(root, args.records, concurrency, fsync)
            finally:
                shutil.rmtree(root)
            print(f"{concurrency:>11} {'on' if fsync else 'off':>6} {rate:>10.0f} {syncs:>7}",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=os.environ.get("TMPDIR"), help="Where to write.")
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--concurrency", default="1,16,64")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
