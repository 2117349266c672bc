"""Issue 7: the real daemon crawls the demo web, `crawler report` draws what it saw, and
headless Chromium (Debian's `chromium`) loads the page with every image.

The page's inline script marks each <img> data-loaded="yes"/"no" after the load event;
Chromium's --dump-dom prints the DOM after that, so a broken or missing PNG shows. The images
are data: URIs (index.html alone is the report); data-file names the PNG copy beside it.
"""

from __future__ import annotations

import asyncio
import base64
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest
from daemon import daemon_env, start_daemon, stop_daemon
from toolcheck import require_tool

from crawler.db import frontier
from crawler.demo.sites import demo_sites
from crawler.demo.web import DemoWeb

pytestmark = pytest.mark.timeout(120)

CRAWL_SECONDS = 20.0
EXPECTED_IMAGES = {
    "lifetime_cdf.png", "mean_lifetimes.png", "level_set.png", "change_arrivals.png",
    "change_rates.png", "revisit_intervals.png",
}


async def crawl_demo_web(db_url: str, seconds: float) -> tuple[int, str, int]:
    """Serve the demo web, seed it, run `crawler run` for `seconds`; (exit code, output,
    observations recorded)."""
    web = DemoWeb(demo_sites(n_sites=3, pages_per_site=8, seed=4, mean_change_seconds=4.0))
    await web.start()
    try:
        pool = await asyncpg.create_pool(db_url)
        try:
            await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
            proc = await start_daemon(daemon_env(
                db_url, schedule="uniform", default_interval="1", min_interval="0.5",
                politeness_delay="0.02", poll_interval="0.1",
            ))
            await asyncio.sleep(seconds)
            out = await stop_daemon(proc)
            observations = await pool.fetchval("SELECT count(*) FROM observations")
        finally:
            await pool.close()
    finally:
        await web.stop()
    assert proc.returncode is not None
    return proc.returncode, out, int(observations)


def dump_dom(chromium: str, page: Path, profile: Path) -> str:
    """The page's DOM after load, from headless Chromium with every network feature off."""
    result = subprocess.run(
        [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-extensions", "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def image_states(dom: str) -> dict[str, str]:
    states = {}
    for tag in re.findall(r"<img\b[^>]*>", dom):
        source = re.search(r'data-file="([^"]+)"', tag)
        loaded = re.search(r'data-loaded="(\w+)"', tag)
        assert source is not None
        states[source.group(1)] = loaded.group(1) if loaded else "unmarked"
    return states


def test_report_of_a_demo_crawl_loads_in_chromium(db_url: str, tmp_path: Path) -> None:
    chromium = require_tool("chromium", "chromium")
    code, output, observations = asyncio.run(crawl_demo_web(db_url, CRAWL_SECONDS))
    assert code == 0, output
    assert observations > 100, output

    out = tmp_path / "report"
    report = subprocess.run(
        [sys.executable, "-m", "crawler.commands.report", "--out", str(out),
         "--database-url", db_url],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert report.returncode == 0, report.stderr
    page = (out / "index.html").read_text(encoding="utf-8")
    assert 'id="empty"' not in page
    # The demo's pages change every few seconds: enough to fit, and every plot has data.
    assert "fitted to this crawler" in page, page
    assert set(re.findall(r'<img src="data:image/png;base64,[^"]+" data-file="([^"]+)"', page)
               ) == EXPECTED_IMAGES

    dom = dump_dom(chromium, out / "index.html", tmp_path / "profile")
    states = image_states(dom)
    assert states == dict.fromkeys(EXPECTED_IMAGES, "yes"), states
    assert 'data-images-loaded="6"' in dom

    # The page alone is the report: without the PNG files beside it, every image still loads.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(out / "index.html", alone / "index.html")
    dom = dump_dom(chromium, alone / "index.html", tmp_path / "profile-alone")
    assert image_states(dom) == dict.fromkeys(EXPECTED_IMAGES, "yes")

    # The check can fail: the same page with one embedded PNG broken reports it not loaded.
    broken = tmp_path / "broken"
    broken.mkdir()
    level_set = re.search(r'src="(data:[^"]+)" data-file="level_set.png"', page)
    assert level_set is not None
    broken_uri = "data:image/png;base64," + base64.b64encode(b"not a png").decode()
    (broken / "index.html").write_text(page.replace(level_set.group(1), broken_uri),
                                       encoding="utf-8")
    states = image_states(dump_dom(chromium, broken / "index.html", tmp_path / "profile2"))
    assert states["level_set.png"] == "no"
    assert sum(state == "yes" for state in states.values()) == 5
