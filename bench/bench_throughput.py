"""End-to-end throughput: `crawler run` against Scrapy on a loopback web of many hosts.

Run: .venv/bin/python bench/bench_throughput.py [--hosts 1000] [--pages-per-host 40]
     (a quick check: --hosts 1000 --pages-per-host 3)

The web: ``--hosts`` distinct addresses 127.20.x.y, each serving the same document root with a
robots.txt and real HTML pages (Debian's python3-doc pages up to 100 KB, ~47 KB on average),
served by nginx (Debian's nginx-light) or, when nginx is missing, by an aiohttp server in a
process of its own. For the real figures install them first (not needed by the tests):

    apt-get install nginx-light python3-doc

The crawler: `crawler run` (one fetch process per CPU unless --processes) on the embedded
PostgreSQL, every fetch recorded, robots.txt fetched, one request in flight per host, no
politeness delay. Scrapy (the ``bench`` extra): the same URLs with
CONCURRENT_REQUESTS_PER_DOMAIN=1 and ROBOTSTXT_OBEY=True, computing the same fingerprint per
page and storing nothing. Pages/s is pages over the time from the first to the last response
(start-up excluded for both). Targets (issue 14): >= 1,100 pages/s and >= 2.5x Scrapy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncpg

from crawler.db import frontier
from crawler.db.connect import database_url, embedded_server
from crawler.db.migrate import upgrade_blocking
from crawler.settings import Settings

HERE = Path(__file__).resolve().parent
DOC_ROOTS = (Path("/usr/share/doc/python3-doc/html"), Path("/usr/share/doc/python3.11/html"))
MAX_PAGE_BYTES = 100_000
ROBOTS_TXT = "User-agent: *\nDisallow: /private/\n"


def host_address(index: int) -> str:
    """Distinct loopback addresses: 127.20.0.10, 127.20.0.11, ... (200 per /24)."""
    return f"127.20.{index // 200}.{index % 200 + 10}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def build_docroot(root: Path) -> tuple[str, list[int]]:
    """The corpus as files p0.html, p1.html, ... in ``root``, plus robots.txt; returns its name
    and the page sizes. Real HTML from python3-doc when installed, else generated pages."""
    root.mkdir(parents=True)
    (root / "robots.txt").write_text(ROBOTS_TXT)
    corpus: list[bytes] = []
    for doc_root in DOC_ROOTS:
        if doc_root.is_dir():
            files = sorted(p for p in doc_root.rglob("*.html")
                           if p.stat().st_size <= MAX_PAGE_BYTES)
            corpus = [p.read_bytes() for p in files]
            name = f"python3-doc ({len(corpus)} pages of {doc_root})"
            break
    if not corpus:
        sys.path.insert(0, str(HERE))
        from bench_fingerprint import make_page

        corpus = [make_page(seed, 47_000).encode() for seed in range(50)]
        name = "generated news pages (python3-doc missing: apt-get install python3-doc)"
    random.Random(14).shuffle(corpus)
    for k, body in enumerate(corpus):
        (root / f"p{k}.html").write_bytes(body)
    return name, [len(body) for body in corpus]


def nginx_config(workdir: Path, docroot: Path, addresses: list[str], port: int) -> str:
    listens = "".join(f"    listen {address}:{port};\n" for address in addresses)
    temp = "".join(
        f"  {kind}_temp_path {workdir / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;\n" if os.geteuid() == 0 else ""
    return (
        f"{user}worker_processes 1;\ndaemon off;\npid {workdir / 'nginx.pid'};\n"
        f"error_log {workdir / 'error.log'} error;\nworker_rlimit_nofile 16384;\n"
        "events { worker_connections 8192; }\n"
        "http {\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n"
        "  keepalive_requests 100000;\n  default_type text/html;\n"
        "  types { text/html html; text/plain txt; }\n"
        f"{temp}"
        f"  server {{\n{listens}    root {docroot};\n  }}\n}}\n"
    )


def serve_aiohttp(docroot: str, addresses: list[str], port: int) -> None:
    """Fallback static server (nginx missing), in a process of its own."""
    from aiohttp import web

    async def main() -> None:
        app = web.Application()
        app.router.add_static("/", docroot)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        for address in addresses:
            await web.TCPSite(runner, address, port, backlog=1024).start()
        await asyncio.Event().wait()

    asyncio.run(main())


class StaticWeb:
    """nginx (or the aiohttp fallback) serving ``docroot`` on every address."""

    def __init__(self, workdir: Path, docroot: Path, addresses: list[str]) -> None:
        self.workdir, self.docroot, self.addresses = workdir, docroot, addresses
        self.port = free_port()
        self.kind = ""
        self._nginx: subprocess.Popen[bytes] | None = None
        self._fallback: multiprocessing.Process | None = None

    def start(self) -> None:
        nginx = shutil.which("nginx") or (
            "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
        )
        if nginx:
            config = self.workdir / "nginx.conf"
            config.write_text(nginx_config(self.workdir, self.docroot, self.addresses,
                                           self.port))
            self._nginx = subprocess.Popen([nginx, "-c", str(config), "-p", str(self.workdir)])
            self.kind = "nginx"
        else:
            self._fallback = multiprocessing.Process(
                target=serve_aiohttp, args=(str(self.docroot), self.addresses, self.port),
                daemon=True,
            )
            self._fallback.start()
            self.kind = "aiohttp (nginx missing: apt-get install nginx-light)"
        deadline = time.monotonic() + 30
        for address in (self.addresses[0], self.addresses[-1]):
            while True:
                try:
                    socket.create_connection((address, self.port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{self.kind} did not start") from None
                    time.sleep(0.1)

    def stop(self) -> None:
        if self._nginx is not None:
            self._nginx.terminate()
            self._nginx.wait(10)
        if self._fallback is not None:
            self._fallback.terminate()
            self._fallback.join(10)


def process_tree_memory_bytes(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of ``pid`` and its children (the --processes set), from /proc. RSS counts
    the pages forked children share with the parent once per process; PSS splits them."""
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(child) for child in children]
    except OSError:
        return 0, 0
    rss = pss = 0
    for each in pids:
        try:
            for line in Path(f"/proc/{each}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
        except OSError:
            continue
    return rss, pss


async def run_crawler(url: str, urls: list[str], args: argparse.Namespace,
                      data_dir: Path) -> tuple[int, float, tuple[int, int]]:
    """Seed, run `crawler run` until every URL is fetched; (pages, seconds, peak RSS and PSS)."""
    pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
    await frontier.seed(pool, [(u, 1.0) for u in urls], time.time() - 1)
    env = {
        **os.environ,
        "CRAWLER_DATABASE_URL": url,
        "CRAWLER_DATA_DIR": str(data_dir),
        "CRAWLER_ALLOW_NETWORKS": '["127.0.0.0/8"]',
        "CRAWLER_POLITENESS_DELAY": "0",
        "CRAWLER_CONCURRENCY": str(args.concurrency),
        "CRAWLER_CLAIM_BATCH_HOSTS": "64",
        "CRAWLER_CLAIM_URLS_PER_HOST": str(args.pages_per_host),
        "CRAWLER_DEFAULT_INTERVAL": "86400",
        "CRAWLER_MIN_INTERVAL": "86400",
        "CRAWLER_METRICS_PORT": "0",
        "CRAWLER_POLL_INTERVAL": "0.2",
        "CRAWLER_LOG_LEVEL": "WARNING",
    }
    if args.processes:
        env["CRAWLER_PROCESSES"] = str(args.processes)
    daemon = subprocess.Popen([sys.executable, "-m", "crawler", "run"], env=env)
    peak_rss = peak_pss = 0
    try:
        deadline = time.monotonic() + args.timeout
        while True:
            fetched = await pool.fetchval(
                "SELECT count(*) FROM urls WHERE last_fetched_at IS NOT NULL"
            )
            rss, pss = process_tree_memory_bytes(daemon.pid)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            if fetched >= len(urls) or time.monotonic() > deadline or daemon.poll() is not None:
                break
            await asyncio.sleep(0.5)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(120)
    row = await pool.fetchrow(
        "SELECT count(*) AS n, extract(epoch FROM max(fetched_at) - min(fetched_at)) AS span, "
        "count(*) FILTER (WHERE outcome = 'ok') AS ok FROM observations"
    )
    await pool.close()
    assert row is not None
    if row["ok"] != row["n"]:
        print(f"  warning: {row['n'] - row['ok']} of {row['n']} fetches were not 'ok'")
    return int(row["n"]), float(row["span"] or 0.0), (peak_rss, peak_pss)


def run_scrapy(urls_file: Path, concurrency: int, timeout: float) -> tuple[int, float] | None:
    try:
        import scrapy  # noqa: F401
    except ImportError:
        print("scrapy: not installed (pip install -e '.[bench]'); skipped")
        return None
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    done = subprocess.run(
        [sys.executable, str(HERE / "scrapy_spider.py"), str(urls_file), str(concurrency)],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )
    if done.returncode != 0:
        print("scrapy failed:", done.stderr[-2000:])
        return None
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return int(result["pages"]), float(result["last"] - (result["first"] or result["last"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages-per-host", type=int, default=40)
    parser.add_argument("--processes", type=int, default=None,
                        help="crawler fetch processes (default: one per CPU)")
    parser.add_argument("--concurrency", type=int, default=256,
                        help="hosts in flight per crawler fetch process")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--no-scrapy", action="store_true")
    args = parser.parse_args()

    addresses = [host_address(i) for i in range(args.hosts)]
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)  # nginx workers read the document root
        corpus, sizes = build_docroot(work / "www")
        web = StaticWeb(work, work / "www", addresses)
        web.start()
        try:
            # Host i serves pages i*P .. i*P+P-1 of the corpus (cycled): every page is fetched
            # about equally often, so the mean size is the corpus's.
            files = [
                (i * args.pages_per_host + k) % len(sizes)
                for k in range(args.pages_per_host) for i in range(args.hosts)
            ]
            urls = [
                f"http://{addresses[n % args.hosts]}:{web.port}/p{f}.html"
                for n, f in enumerate(files)
            ]
            mean_bytes = sum(sizes[f] for f in files) / len(files)
            urls_file = work / "urls.txt"
            urls_file.write_text("\n".join(urls) + "\n")
            # The embedded server's data lives beside, deleted at exit after the server stops.
            data_dir = Path(tempfile.mkdtemp(prefix="bench-throughput-pg-"))
            embedded_server(data_dir, cleanup_mode="delete")
            url = database_url(Settings(data_dir=data_dir, database_url=None))
            upgrade_blocking(url)
            print(f"web: {args.hosts} hosts x {args.pages_per_host} pages = {len(urls):,} URLs, "
                  f"served by {web.kind}; corpus {corpus}, mean page {mean_bytes / 1000:.1f} KB")
            print(f"machine: {os.cpu_count()} CPUs, load average "
                  f"{os.getloadavg()[0]:.1f} at start (shared: absolute figures are low)")
            pages, seconds, (rss, pss) = asyncio.run(run_crawler(url, urls, args, data_dir))
            crawler_rate = pages / seconds if seconds > 0 else 0.0
            print(f"crawler run: {pages:,} pages recorded in {seconds:.1f} s = "
                  f"{crawler_rate:,.0f} pages/s [target >= 1,100 pages/s: "
                  f"{'met' if crawler_rate >= 1100 else 'MISSED'}]")
            print(f"crawler memory, parent and fetch processes at peak: RSS {rss / 2**20:,.0f} "
                  f"MiB, PSS {pss / 2**20:,.0f} MiB (pages shared after fork counted once)")
            scrapy = None if args.no_scrapy else run_scrapy(
                urls_file, args.hosts, args.timeout
            )
            if scrapy is not None:
                scrapy_pages, scrapy_seconds = scrapy
                scrapy_rate = scrapy_pages / scrapy_seconds if scrapy_seconds > 0 else 0.0
                ratio = crawler_rate / scrapy_rate if scrapy_rate else float("inf")
                print(f"scrapy: {scrapy_pages:,} pages fingerprinted in {scrapy_seconds:.1f} s "
                      f"= {scrapy_rate:,.0f} pages/s")
                print(f"ratio crawler/scrapy: {ratio:.2f}x "
                      f"[target >= 2.5x: {'met' if ratio >= 2.5 else 'MISSED'}]")
        finally:
            web.stop()


if __name__ == "__main__":
    main()
