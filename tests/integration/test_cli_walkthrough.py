"""What a QA walk-through of the CLI found: each defect, as the user met it, must stay fixed.

In-process (``crawler.cli.main``) like test_cli_errors.py, except where a real pipe or a
process of its own is the point.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
from test_cli_errors import REFUSED, crawler

pytestmark = pytest.mark.timeout(120)



def assert_usage_error(result: subprocess.CompletedProcess[str], prefix: str, *names: str,
                       code: int = 2) -> None:
    """One line on stderr, starting with ``prefix``, naming ``names``; no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(prefix), result.stderr
    for name in names:
        assert name in result.stderr, (name, result.stderr)


# --- 1. numbers that reached SQL or numpy unchecked ------------------------------------------


@pytest.mark.parametrize("args, names", [
    (("urls", "--offset", "-5"), ("--offset", "0 or more")),
    (("urls", "--limit", "0"), ("--limit", "at least 1")),
    (("show", "http://a.example/", "--limit", "-1"), ("--limit", "0 or more")),
    (("changes", "--since", "2026-11-23T19:52", "--limit", "-1"), ("--limit", "at least 1")),
    (("changes", "--limit", "0"), ("--limit", "at least 1")),
    (("run", "--duration", "-1"), ("--duration", "above 0")),
    (("demo", "--sites", "0"), ("--sites", "at least 1")),
    (("demo", "--pages", "-3"), ("--pages", "at least 1")),
    (("simulate", "--seed", "-1"), ("--seed", "0 or more")),
    (("simulate", "--pages", "0"), ("--pages", "at least 1")),
    (("simulate", "--days", "nan"), ("--days", "finite")),
    (("simulate", "--mean-interval", "0"), ("--mean-interval", "above 0")),
    (("simulate", "--warmup-days", "-1"), ("--warmup-days", "0 or more")),
    (("simulate", "--beta-days", "-1"), ("--beta-days", "above 0")),
    (("simulate", "--beta-days", "0"), ("--beta-days", "above 0")),
    (("simulate", "--last-modified-share", "1.5"), ("--last-modified-share", "between 0")),
])
def test_out_of_range_numbers_are_usage_errors(args: tuple[str, ...],
                                               names: tuple[str, ...]) -> None:
    # Refused by argparse: the database (nothing listens) is never reached.
    assert_usage_error(crawler(*args, db_url=REFUSED), f"crawler {args[0]}: ", *names)


def test_simulate_warmup_against_days_names_the_default() -> None:
    result = crawler("simulate", "--days", "5")
    assert_usage_error(result, "crawler simulate: ", "--warmup-days 360 (the default)",
                       "--days 5")


def test_simulate_with_seed_zero_runs() -> None:
    result = crawler("simulate", "--policy", "optimal", "--pages", "50", "--days", "40",
                     "--warmup-days", "10", "--seed", "0")
    assert result.returncode == 0, result.stderr
    assert "optimal" in result.stdout


# --- 2. urls --site pages like urls ---------------------------------------------------------


def _windowed_site(db_url: str) -> str:
    root = "http://127.0.0.1:8765/"
    assert crawler("seed", "--window", "10", root, db_url=db_url).returncode == 0
    more = [f"http://127.0.0.1:8765/p{i}" for i in range(5)]
    assert crawler("seed", *more, db_url=db_url).returncode == 0

    async def attach() -> None:  # what discovery would do: the pages join the site
        conn = await asyncpg.connect(db_url)
        try:
            await conn.execute("UPDATE urls SET site_id = (SELECT id FROM sites), depth = 1 "
                               "WHERE url <> $1", root)
            await conn.execute("UPDATE urls SET state = 'gone' WHERE url = $1", more[0])
        finally:
            await conn.close()

    import asyncio

    asyncio.run(attach())
    return root


def test_urls_site_applies_limit_offset_and_state(db_url: str) -> None:
    root = _windowed_site(db_url)
    every = json.loads(crawler("urls", "--site", root, "--json", db_url=db_url).stdout)
    assert len(every) == 6
    first = crawler("urls", "--site", root, "--limit", "3", "--json", db_url=db_url)
    assert [u["url"] for u in json.loads(first.stdout)] == [u["url"] for u in every[:3]]
    assert "--offset 3" in first.stderr
    rest = crawler("urls", "--site", root, "--limit", "3", "--offset", "3", "--json",
                   db_url=db_url)
    assert [u["url"] for u in json.loads(rest.stdout)] == [u["url"] for u in every[3:]]
    gone = json.loads(crawler("urls", "--site", root, "--state", "gone", "--json",
                              db_url=db_url).stdout)
    assert [u["url"] for u in gone] == ["http://127.0.0.1:8765/p0"]
    assert_usage_error(crawler("urls", "--site", root, "--state", "nope", db_url=db_url),
                       "crawler: ", "--state")
    assert_usage_error(crawler("urls", "--site", root, "--host", root, db_url=db_url),
                       "crawler: ", "--site", "--host")


# --- 3. a reader that closes the pipe --------------------------------------------------------


def _process(db_url: str, *args: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    env.update(CRAWLER_DATABASE_URL=db_url, CRAWLER_LOG_LEVEL="WARNING")
    return subprocess.Popen([sys.executable, "-m", "crawler", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("args", [("export", "urls"), ("urls", "--json", "--limit", "5000")],
                         ids=lambda a: a[0])
def test_a_closed_pipe_is_no_database_error(db_url: str, tmp_path: Path,
                                            args: tuple[str, ...]) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"http://127.0.0.{2 + i % 5}:8700/p{i}\n" for i in range(3000)))
    assert crawler("seed", "--file", str(seeds), db_url=db_url).returncode == 0
    proc = _process(db_url, *args)  # `crawler ... | head -1`: far more than a pipe holds
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert "database" not in err and "Broken pipe" not in err and "Traceback" not in err, err


def test_a_closed_pipe_in_process_exits_141(db_url: str) -> None:
    """Whatever write finds the pipe closed, main says nothing and exits 141."""
    from crawler.cli import main

    class Closed(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    err = io.StringIO()
    os.environ["CRAWLER_DATABASE_URL"] = db_url
    try:
        with contextlib.redirect_stdout(Closed()), contextlib.redirect_stderr(err):
            code = main(["status"])
    finally:
        del os.environ["CRAWLER_DATABASE_URL"]
    assert code == 141
    assert err.getvalue() == ""


# --- 6. messages that named the wrong thing -------------------------------------------------


@pytest.mark.parametrize("command", [
    ("status",), ("urls",), ("export", "urls"), ("get", "http://a.example/"),
    ("versions", "http://a.example/"), ("changes",), ("diff", "http://a.example/"),
    ("db", "upgrade"),
])
def test_an_unusable_data_dir_names_crawler_data_dir(command: tuple[str, ...],
                                                     tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    result = crawler(*command, CRAWLER_DATA_DIR=str(not_a_dir / "data"))
    assert_usage_error(result, "crawler: ", "CRAWLER_DATA_DIR", "not writable")
    assert "CRAWLER_DATABASE_URL" not in result.stderr


def test_watch_window_does_not_blame_a_site_option(db_url: str) -> None:
    assert crawler("seed", "http://127.0.0.1:8765/a", db_url=db_url).returncode == 0
    result = crawler("watch", "http://127.0.0.1:8765/a", "--window", "--ignore", "nav",
                     db_url=db_url)
    assert_usage_error(result, "crawler: ", "watch --window", "not a windowed site")
    assert "--site" not in result.stderr


@pytest.mark.parametrize("command", [("pause", "--host"), ("remove", "--yes", "--host")],
                         ids=lambda c: c[0])
def test_an_unknown_host_points_to_a_command_that_lists_hosts(db_url: str,
                                                               command: tuple[str, ...]) -> None:
    result = crawler(*command, "http://127.0.0.99:5", db_url=db_url)
    assert_usage_error(result, "crawler: ", "unknown host", "crawler export urls")
    assert "status lists hosts" not in result.stderr


def test_importance_names_the_weight_argument(db_url: str) -> None:
    result = crawler("importance", "http://127.0.0.1:8765/a", "nan", db_url=db_url)
    assert_usage_error(result, "crawler: argument W: ", "'nan'", "positive")


# --- 7. seed files --------------------------------------------------------------------------


def test_seed_file_with_a_bom_and_a_duplicate(db_url: str, tmp_path: Path) -> None:
    seeds = tmp_path / "bom.txt"
    lines = [f"http://127.0.0.1:8765/p{i}" for i in range(5)] + ["http://127.0.0.1:8765/p2"]
    seeds.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    result = crawler("seed", "--file", str(seeds), db_url=db_url)
    assert result.returncode == 0, result.stderr
    assert "malformed" not in result.stderr
    assert "seeded 5 new URLs (0 already known, 0 malformed, 1 duplicate)" in result.stdout


def test_seed_file_from_stdin(db_url: str) -> None:
    text = "http://127.0.0.1:8765/a\n# a comment\nhtp:/x\n"
    result = crawler("seed", "--file", "-", db_url=db_url, stdin=text)
    assert result.returncode == 1, result.stderr
    assert "<stdin>:3: malformed URL 'htp:/x'" in result.stderr
    assert "seeded 1 new URL (0 already known, 1 malformed)" in result.stdout


def test_ctrl_c_after_reading_says_what_was_committed(db_url: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from crawler.commands import seed

    def interrupted(*args: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(seed, "partition", interrupted)
    result = crawler("seed", "http://127.0.0.1:8765/a", "http://127.0.0.1:8765/b",
                     db_url=db_url)
    assert_usage_error(result, "crawler seed: ", "interrupted after committing 0 of 2 URLs",
                       "resumable", code=1)


# --- 4 and 8. the collection's commands -----------------------------------------------------

T0 = 1_800_000_000.0  # 2027-01-15


def _store_versions(db_url: str, warc: Path, url: str, bodies: list[str]) -> None:
    """Versions of ``url`` a day apart from T0, as the daemon stores them (a WARC record and
    its index row), with no reason phrase, as some servers send."""
    import asyncio

    from crawler.db import frontier
    from crawler.db.collection import insert_stored_record
    from crawler.store.base import Capture
    from crawler.store.warc import WarcStore

    store = WarcStore(warc, max_bytes=10**9, writer_name="t")
    stored = [store.write_response(Capture(
        url=url, fetched_at=T0 + 86400 * n, status=200, reason="",
        response_headers=(("Content-Type", "text/html; charset=utf-8"),),
        payload=f"<html><body><p>{body}</p></body></html>".encode(),
    )) for n, body in enumerate(bodies)]
    store.close()

    async def index() -> None:
        conn = await asyncpg.connect(db_url)
        try:
            await frontier.seed(conn, [(url, 1.0)], T0)
            url_id, host_id = await conn.fetchrow("SELECT id, host_id FROM urls")
            for n, s in enumerate(stored):
                at = dt.datetime.fromtimestamp(T0 + 86400 * n, dt.UTC).isoformat()
                row = {"url_id": url_id, "host_id": host_id, "fetched_at": at,
                       "record_type": s.record_type, "status": 200, "warc_file": s.file,
                       "warc_offset": s.offset, "warc_length": s.length,
                       "record_id": s.record_id, "payload_digest": s.payload_digest,
                       "payload_bytes": s.payload_bytes, "changed": n > 0, "refers_to": None}
                await conn.execute(insert_stored_record(), json.dumps([row]), "[]")
        finally:
            await conn.close()

    asyncio.run(index())


URL = "http://127.0.0.1:8765/page"


@pytest.fixture
def collection(db_url: str, tmp_path: Path) -> dict[str, str]:
    _store_versions(db_url, tmp_path / "warc", URL, ["first", "second", "third"])
    return {"db_url": db_url, "CRAWLER_WARC_DIR": str(tmp_path / "warc")}


@pytest.mark.parametrize("option", ["--from", "--to"])
@pytest.mark.breaks_invariant(
    "index_rows", reason="its index rows are inserted by hand, with no warc_files row (as before "
    "migration 0031)")
def test_diff_refuses_a_time_before_the_first_version(collection: dict[str, str],
                                                      option: str) -> None:
    result = crawler("diff", URL, option, "2020-01-01", **collection)
    assert_usage_error(result, "no stored version of ", URL, "2020-01-01", option, code=1)
    assert result.stdout == ""


@pytest.mark.breaks_invariant(
    "index_rows", reason="its index rows are inserted by hand, with no warc_files row (as before "
    "migration 0031)")
def test_diff_between_stored_times_still_works(collection: dict[str, str]) -> None:
    result = crawler("diff", URL, "--from", "2027-01-15T12:00", "--to", "2027-01-17T12:00",
                     **collection)
    assert result.returncode == 0, result.stderr
    assert "-first" in result.stdout and "+third" in result.stdout


@pytest.mark.breaks_invariant(
    "index_rows", reason="its index rows are inserted by hand, with no warc_files row (as before "
    "migration 0031)")
def test_get_headers_says_the_standard_reason_phrase(collection: dict[str, str]) -> None:
    result = crawler("get", URL, "--headers", **collection)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("HTTP/1.1 200 OK  (response, ")


def test_show_prints_no_python_none(db_url: str) -> None:
    assert crawler("seed", URL, db_url=db_url).returncode == 0
    result = crawler("show", URL, db_url=db_url)
    assert result.returncode == 0, result.stderr
    assert "None" not in result.stdout
    assert any(line.split() == ["last_status", "-"] for line in result.stdout.splitlines())


@pytest.mark.parametrize("command", ["get", "diff", "changes", "versions", "watch"])
def test_help_is_plain_text(command: str) -> None:
    from crawler.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "``" not in sub.choices[command].format_help()
