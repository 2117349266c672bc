"""README's quick start, run as it is written, by a new user with a fresh data directory.

The shell blocks under README's "Quick start" heading are parsed and every command in them is
run as a subprocess, in order, with ``https://example.org`` replaced by a loopback site that
stands in for the user's (``CRAWLER_ALLOW_NETWORKS`` opens loopback for it, as the quick start
tells a user whose site is on their own machine). Nothing else is configured: the commands use
the embedded PostgreSQL in a new ``CRAWLER_DATA_DIR`` (``CRAWLER_METRICS_PORT=0`` only keeps
the daemon off a port another test may hold). A command that ends in ``&``, or the daemon the
README runs "until Ctrl-C", runs in the background and is stopped with SIGINT, which must exit
0. What the README says appears (the seed's answer, the pages of the window, the sitemap
seed's answer and the page only the sitemap lists, the change log line, the change in
``crawler changes``, the words in ``crawler diff --words``) is checked in the output of the
very commands it quotes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
EXAMPLE = "https://example.org"
COMMAND_TIMEOUT = 60.0


def quick_start_blocks(text: str) -> dict[str, list[str]]:
    """The command lines of each ``sh`` block under "## Quick start", by its ### heading."""
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    blocks: dict[str, list[str]] = {}
    heading = ""
    pieces = re.split(r"(^### [^\n]*$|^```sh\n.*?^```$)", section, flags=re.MULTILINE | re.DOTALL)
    for part in pieces:
        if part.startswith("### "):
            heading = part[4:].strip()
        elif part.startswith("```sh"):
            lines = [line.strip() for line in part.splitlines()[1:-1]]
            blocks.setdefault(heading, []).extend(line for line in lines if line)
    return blocks


def words(line: str) -> list[str]:
    """A command line as the shell splits it, its comment dropped."""
    return shlex.split(line, comments=True)


class Site:
    """The user's site: a page with a price, linked from the home page, served on loopback,
    with a robots.txt naming its sitemap, which lists a page no link leads to as well."""

    def __init__(self) -> None:
        self.price = "12.50"
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                pages = {
                    "/": '<html><head><title>Example</title></head><body><h1>Example</h1>'
                         '<p>The home page of a small shop.</p>'
                         '<a href="/prices">Prices</a> <a href="/about">About</a></body></html>',
                    "/about": "<html><body><h1>About</h1><p>We sell widgets and gadgets.</p>"
                              '<a href="/">Home</a></body></html>',
                    "/prices": "<html><body><h1>Widget</h1><p>A widget made of steel and oak, "
                               "with a long description of its many uses that stays the same "
                               "from one day to the next, as shop pages do, and a price "
                               f"that changes.</p><p>Price: {site.price} EUR</p>"
                               '<a href="/">Home</a></body></html>',
                    "/contact": "<html><body><h1>Contact</h1><p>Write to us.</p></body></html>",
                    "/robots.txt": f"User-agent: *\nAllow: /\nSitemap: {site.url}/sitemap.xml\n",
                    "/sitemap.xml": '<?xml version="1.0" encoding="UTF-8"?>\n'
                                    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                                    + "".join(f"<url><loc>{site.url}{path}</loc>"
                                              "<lastmod>2024-05-01</lastmod></url>"
                                              for path in ("/", "/about", "/prices", "/contact"))
                                    + "</urlset>",
                }
                body = pages.get(self.path)
                self.send_response(200 if body is not None else 404)
                data = (body or "not found").encode()
                kind = {"/robots.txt": "text/plain", "/sitemap.xml": "application/xml"}.get(
                    self.path, "text/html")
                self.send_header("Content-Type", f"{kind}; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Site:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Shell:
    """Runs the README's lines as a user's shell would, one subprocess each."""

    site: str
    env: dict[str, str]
    background: list[subprocess.Popen[str]] = field(default_factory=list)

    def argv(self, line: str) -> list[str]:
        return [w.replace(EXAMPLE, self.site) for w in words(line) if w != "&"]

    def source(self, line: str) -> None:
        """``. .venv/bin/activate``: the venv's bin directory goes first on PATH."""
        script = ROOT / words(line)[1]
        assert script.name == "activate", line
        # The repository's .venv, or (a test run from an installed copy) this interpreter's.
        bin_dir = script.parent if script.exists() else Path(sys.executable).parent
        self.env["PATH"] = f"{bin_dir}{os.pathsep}{self.env['PATH']}"

    def run(self, line: str) -> str:
        done = subprocess.run(self.argv(line), env=self.env, cwd=self.env["HOME"], text=True,
                              capture_output=True, timeout=COMMAND_TIMEOUT)
        assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        return done.stdout + done.stderr

    def start(self, line: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(self.argv(line), env=self.env, cwd=self.env["HOME"], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.background.append(proc)
        return proc

    def until(self, line: str, check: Callable[[str], bool], what: str,
              timeout: float = 60.0) -> str:
        """Run ``line`` again until its output passes ``check``: what a user waiting does."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.run(line)
            if check(out):
                return out
            assert time.monotonic() < deadline, f"{what}: never seen in `{line}`:\n{out}"

    def interrupt(self, proc: subprocess.Popen[str]) -> str:
        """Ctrl-C: SIGINT, and the exit 0 the README promises."""
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=COMMAND_TIMEOUT)
        self.background.remove(proc)
        assert proc.returncode == 0, f"{proc.args}: exit {proc.returncode} on Ctrl-C\n{out}"
        return out

    def close(self) -> None:
        for proc in self.background:
            proc.kill()
            proc.communicate()


@pytest.fixture
def shell() -> Iterator[Shell]:
    with tempfile.TemporaryDirectory(prefix="crawler-quickstart-") as home, Site() as site:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
        env.update(
            HOME=home,
            CRAWLER_DATA_DIR=str(Path(home) / "data"),
            CRAWLER_ALLOW_NETWORKS="127.0.0.0/8",
            CRAWLER_METRICS_PORT="0",
        )
        env.pop("VIRTUAL_ENV", None)
        sh = Shell(site.url, env)
        sh.site_server = site  # type: ignore[attr-defined]
        try:
            yield sh
        finally:
            sh.close()


def test_the_readme_quick_start_does_what_it_says(shell: Shell) -> None:
    text = README.read_text()
    blocks = quick_start_blocks(text)
    assert set(blocks) == {"Crawl a site", "Seed a site from its sitemaps", "Watch a page"}, \
        blocks
    site: Site = shell.site_server  # type: ignore[attr-defined]
    home, prices = f"{shell.site}/", f"{shell.site}/prices"
    prose = " ".join(text.split())

    # Crawl a site: the set-up lines, then the daemon "until Ctrl-C" and the lines run beside it.
    crawl, beside = blocks["Crawl a site"][:4], blocks["Crawl a site"][4:]
    assert words(crawl[0])[0] == "."
    shell.source(crawl[0])
    shell.run(crawl[1])
    seeded = shell.run(crawl[2])
    quoted = re.search(r"`crawler seed` answers `(.*?)`", prose)
    assert quoted is not None
    assert quoted.group(1).replace(EXAMPLE, shell.site) in " ".join(seeded.split())
    assert words(crawl[3]) == ["crawler", "run"]
    daemon = shell.start(crawl[3])
    status, urls, show = beside
    assert words(urls)[:3] == ["crawler", "urls", "--site"]
    shell.until(urls, lambda out: f"{shell.site}/about" in out and home in out,
                "the pages of the window")
    assert re.search(r"^URLs\s+3$", shell.run(status), re.MULTILINE)
    assert home in shell.run(show)
    shell.interrupt(daemon)

    # Seed a site from its sitemaps: robots.txt names the sitemap, which lists one page more.
    [from_sitemaps] = blocks["Seed a site from its sitemaps"]
    assert words(from_sitemaps)[:3] == ["crawler", "seed", "--sitemaps"]
    seeded = " ".join(shell.run(from_sitemaps).split())
    answers = re.findall(r"`((?:read|seeded) \d+ [^`]*)`", prose)
    assert len(answers) == 2, answers
    for quoted in answers:
        assert quoted in seeded, (quoted, seeded)
    # In the frontier (`crawler show` exits 1 on a URL it does not know), not fetched yet.
    contact = json.loads(shell.run(f"crawler show --json {shell.site}/contact"))
    assert contact["url"] == f"{shell.site}/contact" and contact["state"] == "new", contact

    # Watch a page: seed it exactly, the daemon in the background, the page changes, recheck.
    seed, run, recheck, changes, diff = blocks["Watch a page"]
    assert words(run)[-1] == "&"
    shell.run(seed)
    daemon = shell.start(run)
    shell.until(f"crawler show {prices}",
                lambda out: re.search(r"^last_status\s+200$", out, re.MULTILINE) is not None,
                "the watched page's first fetch")
    site.price = "15.99"  # the page changes
    shell.run(recheck)
    listed = shell.until(changes, lambda out: any(
        "changed" in line and prices in line for line in out.splitlines()), "the change event")
    assert "changed" in listed
    shown = shell.run(diff)
    quoted = re.search(r"`crawler diff --words` shows the words that changed: `(.*?)`", prose)
    assert quoted is not None and quoted.group(1) in " ".join(shown.split()), shown
    log = shell.interrupt(daemon)
    quoted = re.search(r"the daemon logs `(crawler\.changes: changed: \S+) \(simhash distance "
                       r"\d+ bits\)`", prose)
    assert quoted is not None
    line = quoted.group(1).replace(EXAMPLE, shell.site)
    assert re.search(re.escape(line) + r" \(simhash distance \d+ bits\)", log), log
