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
import atexit
import contextlib
import json
import multiprocessing
import os
import random
import resource
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


# A server that never answers 304: no ETag, If-Modified-Since ignored.
NO_CONDITIONAL = "  etag off;\n  if_modified_since off;\n"


def nginx_config(workdir: Path, docroot: Path, addresses: list[str], port: int,
                 conditional: bool = True) -> str:
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
        f"{'' if conditional else NO_CONDITIONAL}"
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

    def __init__(self, workdir: Path, docroot: Path, addresses: list[str],
                 conditional: bool = True) -> None:
        self.workdir, self.docroot, self.addresses = workdir, docroot, addresses
        self.conditional = conditional
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
                                           self.port, self.conditional))
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

    def cpu_seconds(self) -> float:
        """CPU seconds the server has used so far (its master and workers)."""
        if self._nginx is not None:
            return tree_cpu_seconds(self._nginx.pid)
        if self._fallback is not None and self._fallback.pid is not None:
            return tree_cpu_seconds(self._fallback.pid)
        return 0.0

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


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) of ``root``, its live descendants, and the children it has
    already waited for. Summed per process from /proc, so a figure per page holds however
    busy the rest of the machine is (unlike pages per second)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime, stime, cutime, cstime: fields 14-17 of proc(5), 11-14 after the name.
        total += sum(int(value) for value in fields[11:15])
        stack.extend(children.get(pid, []))
    return total / CLOCK_TICKS


def postmaster_pid(data_dir: Path) -> int | None:
    """The embedded server's postmaster, from its pid file (first line)."""
    for pid_file in data_dir.rglob("postmaster.pid"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int(pid_file.read_text().split()[0])
    return None


async def run_crawler(url: str, urls: list[str], args: argparse.Namespace, data_dir: Path,
                      *, recrawl: bool = False) -> tuple[int, float, tuple[int, int], float]:
    """Seed, run `crawler run` until every URL is fetched; (pages, seconds, peak RSS and PSS,
    CPU seconds of the crawler's processes). With ``recrawl``, make every URL due again
    instead (the pages have not changed: the steady state of a re-crawl)."""
    pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
    since = await pool.fetchval("SELECT now()")
    if recrawl:
        await pool.execute("UPDATE urls SET next_fetch_at = now() - interval '1 second'")
        await pool.execute("UPDATE hosts SET next_due_at = now() - interval '1 second'")
    else:
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
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_rss = peak_pss = 0
    try:
        deadline = time.monotonic() + args.timeout
        while True:
            fetched = await pool.fetchval(
                "SELECT count(*) FROM urls WHERE last_fetched_at >= $1", since
            )
            rss, pss = process_tree_memory_bytes(daemon.pid)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            if fetched >= len(urls) or time.monotonic() > deadline or daemon.poll() is not None:
                break
            await asyncio.sleep(0.5)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(120)
    # The daemon and its fetch processes, waited for: their whole CPU, start-up included.
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    crawler_cpu = (children_after.ru_utime - children_before.ru_utime
                   + children_after.ru_stime - children_before.ru_stime)
    row = await pool.fetchrow(
        "SELECT count(*) AS n, extract(epoch FROM max(fetched_at) - min(fetched_at)) AS span, "
        "count(*) FILTER (WHERE outcome IN ('ok', 'not_modified')) AS ok, "
        "count(*) FILTER (WHERE outcome = 'not_modified') AS not_modified "
        "FROM observations WHERE fetched_at >= $1", since
    )
    if args.timeline:
        per_second = await pool.fetch(
            "SELECT floor(extract(epoch FROM fetched_at - (SELECT min(fetched_at) FROM "
            "observations WHERE fetched_at >= $1)))::int AS s, count(*) AS n FROM observations "
            "WHERE fetched_at >= $1 GROUP BY 1 ORDER BY 1", since)
        print("  pages fetched in each second of the crawl:",
              " ".join(str(r["n"]) for r in per_second))
    await pool.close()
    assert row is not None
    if row["ok"] != row["n"]:
        print(f"  warning: {row['n'] - row['ok']} of {row['n']} fetches were not 'ok'")
    if recrawl:
        print(f"  re-crawl: {row['not_modified']:,} of {row['n']:,} answered 304 Not Modified")
    return int(row["n"]), float(row["span"] or 0.0), (peak_rss, peak_pss), crawler_cpu


def run_scrapy(urls_file: Path, concurrency: int,
               timeout: float) -> tuple[int, float, float] | None:
    try:
        import scrapy  # noqa: F401
    except ImportError:
        print("scrapy: not installed (pip install -e '.[bench]'); skipped")
        return None
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, str(HERE / "scrapy_spider.py"), str(urls_file), str(concurrency)],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )
    if done.returncode != 0:
        print("scrapy failed:", done.stderr[-2000:])
        return None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return (int(result["pages"]), float(result["last"] - (result["first"] or result["last"])),
            cpu)


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
    parser.add_argument("--recrawl", action="store_true",
                        help="then fetch every URL once more (unchanged pages: the steady "
                             "state of a re-crawl), and print that rate too")
    parser.add_argument("--timeline", action="store_true",
                        help="print the pages fetched in each second (ramp-up, dips, tail)")
    parser.add_argument("--no-conditional", action="store_true",
                        help="nginx sends no ETag and ignores If-Modified-Since, as many "
                             "dynamic sites do: every re-fetch is a full 200")
    args = parser.parse_args()

    addresses = [host_address(i) for i in range(args.hosts)]
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)  # nginx workers read the document root
        corpus, sizes = build_docroot(work / "www")
        web = StaticWeb(work, work / "www", addresses, conditional=not args.no_conditional)
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
            # Registered before the server's own exit handler, so it runs after it (atexit
            # is last in, first out): the directory, with the crawler's WARC files (300 MB a
            # run, which the server's "delete" left behind), goes once the server has stopped.
            atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
            embedded_server(data_dir, cleanup_mode="delete")
            url = database_url(Settings(data_dir=data_dir, database_url=None))
            upgrade_blocking(url)
            print(f"web: {args.hosts} hosts x {args.pages_per_host} pages = {len(urls):,} URLs, "
                  f"served by {web.kind}; corpus {corpus}, mean page {mean_bytes / 1000:.1f} KB")
            print(f"machine: {os.cpu_count()} CPUs, load average "
                  f"{os.getloadavg()[0]:.1f} at start (shared: absolute figures are low)")
            postmaster = postmaster_pid(data_dir)
            pg_before = tree_cpu_seconds(postmaster) if postmaster else 0.0
            web_before = web.cpu_seconds()
            pages, seconds, (rss, pss), crawler_cpu = asyncio.run(
                run_crawler(url, urls, args, data_dir)
            )
            pg_cpu = (tree_cpu_seconds(postmaster) - pg_before) if postmaster else 0.0
            web_cpu = web.cpu_seconds() - web_before
            crawler_rate = pages / seconds if seconds > 0 else 0.0
            print(f"crawler run: {pages:,} pages recorded in {seconds:.1f} s = "
                  f"{crawler_rate:,.0f} pages/s [target >= 1,100 pages/s: "
                  f"{'met' if crawler_rate >= 1100 else 'MISSED'}]")
            print(f"crawler memory, parent and fetch processes at peak: RSS {rss / 2**20:,.0f} "
                  f"MiB, PSS {pss / 2**20:,.0f} MiB (pages shared after fork counted once)")
            per_page = 1000 / max(pages, 1)
            total_ms = (crawler_cpu + pg_cpu + web_cpu) * per_page
            cpus = os.cpu_count() or 1
            print(f"CPU per page (ms): crawler {crawler_cpu * per_page:.2f} (start-up "
                  f"included), PostgreSQL {pg_cpu * per_page:.2f}, {web.kind.split()[0]} "
                  f"{web_cpu * per_page:.2f}; total {total_ms:.2f}, so at most "
                  f"{1000 * cpus / max(total_ms, 1e-9):,.0f} pages/s on {cpus} idle CPUs")
            if args.recrawl:
                again, again_seconds, _, again_cpu = asyncio.run(
                    run_crawler(url, urls, args, data_dir, recrawl=True)
                )
                print(f"crawler re-crawl of the unchanged pages: {again:,} fetches in "
                      f"{again_seconds:.1f} s = {again / max(again_seconds, 1e-9):,.0f} "
                      f"pages/s, crawler CPU {1000 * again_cpu / max(again, 1):.2f} ms per page")
            scrapy = None if args.no_scrapy else run_scrapy(
                urls_file, args.hosts, args.timeout
            )
            if scrapy is not None:
                scrapy_pages, scrapy_seconds, scrapy_cpu = scrapy
                scrapy_rate = scrapy_pages / scrapy_seconds if scrapy_seconds > 0 else 0.0
                ratio = crawler_rate / scrapy_rate if scrapy_rate else float("inf")
                scrapy_ms = 1000 * scrapy_cpu / max(scrapy_pages, 1)
                crawler_ms = crawler_cpu * per_page
                print(f"scrapy: {scrapy_pages:,} pages fingerprinted in {scrapy_seconds:.1f} s "
                      f"= {scrapy_rate:,.0f} pages/s, {scrapy_ms:.2f} ms CPU per page "
                      f"(crawler: {crawler_ms:.2f}, {scrapy_ms / max(crawler_ms, 1e-9):.2f}x less)")
                print(f"ratio crawler/scrapy: {ratio:.2f}x "
                      f"[target >= 2.5x: {'met' if ratio >= 2.5 else 'MISSED'}]")
        finally:
            web.stop()


if __name__ == "__main__":
    main()
