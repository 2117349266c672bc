"""Every mistake issue 15 lists gets one line naming the fix and exit 2 (1 where documented).

Each case runs the real command line, ``crawler.cli.main``, with its own environment;
in-process (an interpreter start costs seconds on a busy machine), except Ctrl-C, which needs
a process of its own to interrupt.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

pytestmark = pytest.mark.timeout(120)

REFUSED = "postgresql://postgres@127.0.0.1:1/crawler"  # port 1: nothing listens


def crawler(*args: str, db_url: str | None = None, stdin: str | None = None, **env: str
            ) -> subprocess.CompletedProcess[str]:
    """``crawler ARGS`` with only the given CRAWLER_* variables set (and ``stdin`` as its
    standard input, when given)."""
    from crawler.cli import main

    saved = dict(os.environ)
    saved_stdin = sys.stdin
    for key in [k for k in os.environ if k.startswith("CRAWLER_")]:
        del os.environ[key]
    os.environ.update(CRAWLER_LOG_LEVEL="WARNING", **env)
    if db_url is not None:
        os.environ["CRAWLER_DATABASE_URL"] = db_url
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit:  # argparse's usage errors
                code = exit.code if isinstance(exit.code, int) else 2
    finally:
        sys.stdin = saved_stdin
        os.environ.clear()
        os.environ.update(saved)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def assert_one_line(result: subprocess.CompletedProcess[str], *names: str, code: int = 2
                    ) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert 1 <= len(lines) <= 2, result.stderr
    assert "Traceback" not in result.stderr
    for name in names:
        assert name in result.stderr, (name, result.stderr)


COMMANDS = [
    ("status",), ("db", "upgrade"), ("seed", "http://a.example/"), ("run", "--duration", "1"),
    ("show", "http://a.example/"), ("sites",), ("urls", "--site", "http://a.example/"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_nothing_listening_names_the_database_setting(command: tuple[str, ...]) -> None:
    assert_one_line(crawler(*command, db_url=REFUSED), "CRAWLER_DATABASE_URL")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_missing_database_names_the_database_setting(command: tuple[str, ...],
                                                     pg_server_url: str) -> None:
    # The path names the database; the embedded server's socket directory is in the query.
    missing = urlunsplit(urlsplit(pg_server_url)._replace(path="/no_such_database_h15"))
    assert_one_line(crawler(*command, db_url=missing), "CRAWLER_DATABASE_URL",
                    "does not exist")


@pytest.mark.parametrize("command", [c for c in COMMANDS if c[0] != "db"], ids=lambda c: c[0])
def test_unmigrated_database_says_run_db_upgrade(command: tuple[str, ...],
                                                 empty_db_url: str) -> None:
    assert_one_line(crawler(*command, db_url=empty_db_url), "crawler db upgrade")


def test_db_upgrade_then_status_works(empty_db_url: str) -> None:
    assert crawler("db", "upgrade", db_url=empty_db_url).returncode == 0
    assert crawler("status", db_url=empty_db_url).returncode == 0


def test_missing_seed_file_is_named(db_url: str, tmp_path: Path) -> None:
    assert_one_line(crawler("seed", "--file", str(tmp_path / "missing.txt"), db_url=db_url),
                    "missing.txt", "--file")


def test_report_into_an_unwritable_place(db_url: str, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert_one_line(crawler("report", "--out", str(blocker / "report"), db_url=db_url),
                    "--out", "Not a directory")


@pytest.mark.parametrize("value", ["127.0.0.0/8", "127.0.0.0/8, ::1/128", '["127.0.0.0/8"]'])
def test_allow_list_accepts_commas_and_json(value: str, db_url: str) -> None:
    assert crawler("status", db_url=db_url, CRAWLER_ALLOW_NETWORKS=value).returncode == 0


@pytest.mark.parametrize("value", ['["banana"]', '["127.0.0.0/33"]', "127.0.0.0/8,banana",
                                   "[not json"])
def test_bad_allow_list_is_named(value: str) -> None:
    result = crawler("status", db_url=REFUSED, CRAWLER_ALLOW_NETWORKS=value)
    assert_one_line(result, "CRAWLER_ALLOW_NETWORKS")
    if "banana" in value or "/33" in value:
        assert ("banana" if "banana" in value else "127.0.0.0/33") in result.stderr


def test_allow_networks_option_takes_commas(db_url: str) -> None:
    good = crawler("run", "--duration", "0.1", "--metrics-port", "0",
                   "--allow-networks", "127.0.0.0/8,::1/128", db_url=db_url)
    assert good.returncode == 0, good.stderr
    bad = crawler("run", "--allow-networks", "127.0.0.0/8,10.0.0.0/99", db_url=REFUSED)
    assert_one_line(bad, "--allow-networks", "10.0.0.0/99")


@pytest.mark.parametrize("args,names", [
    (("seed", "--importance", "-1", "http://a.example/"), ("--importance",)),
    (("seed", "--importance", "nan", "http://a.example/"), ("--importance",)),
    (("seed", "--window", "0", "http://a.example/"), ("--window",)),
    (("seed", "--window", "-5", "http://a.example/"), ("--window",)),
    (("seed",), ("URL", "--file")),
])
def test_malformed_seed_input_is_refused(args: tuple[str, ...], names: tuple[str, ...]) -> None:
    assert_one_line(crawler(*args, db_url=REFUSED), *names)


async def _count(db_url: str) -> int:
    conn = await asyncpg.connect(db_url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM urls"))
    finally:
        await conn.close()


URLS = 1_000_000


async def test_ctrl_c_during_seed_says_what_was_committed(db_url: str, tmp_path: Path) -> None:
    seeds = tmp_path / "many.txt"
    # Enough that the signal lands mid-seed on any machine: at 100,000 URLs/s the first batch
    # commits within a second and the rest takes ten.
    seeds.write_text("".join(f"http://h{i % 500}.example/p{i}\n" for i in range(URLS)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    env.update(CRAWLER_DATABASE_URL=db_url, CRAWLER_LOG_LEVEL="WARNING")
    proc = subprocess.Popen([sys.executable, "-m", "crawler", "seed", "--file", str(seeds)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while await _count(db_url) == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    committed = await _count(db_url)
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) <= 2 and "Traceback" not in err, err
    assert f"interrupted after committing {committed} of {URLS} URLs" in err
    assert "resumable" in err


def _has_loaded(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


# Stages of start-up, by the extension module each one loads first: the settings (pydantic),
# the database check (asyncpg), the daemon's event loop (uvloop).
@pytest.mark.parametrize("stage", ["_pydantic_core", "asyncpg/protocol", "uvloop/loop"])
def test_ctrl_c_early_in_run_is_one_line(stage: str, db_url: str) -> None:
    if not Path("/proc/self/maps").exists():
        pytest.skip("needs /proc to see how far start-up got")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    env.update(CRAWLER_DATABASE_URL=db_url, CRAWLER_LOG_LEVEL="WARNING",
               CRAWLER_METRICS_PORT="0")
    proc = subprocess.Popen([sys.executable, "-m", "crawler", "run"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _has_loaded(proc.pid, stage) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 1), err
    assert len(err.strip().splitlines()) <= 2 and "Traceback" not in err, err


def sql(db_url: str, statement: str) -> None:
    async def go() -> None:
        conn = await asyncpg.connect(db_url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(go())


def test_status_says_which_budget_and_when_planned(db_url: str) -> None:
    assert crawler("seed", "http://a.example/", db_url=db_url).returncode == 0
    human = crawler("status", db_url=db_url)
    assert "plan in force" not in human.stdout  # no planner has run: nothing to date
    sql(db_url,
        "INSERT INTO plans (solved_at, solved_by, mode, objective, beta_seconds, "
        "default_interval_seconds, min_interval_seconds, max_interval_seconds, "
        "budget_setting_per_day, budget_per_day, budget_source, mu, prior_shape, prior_rate, "
        "estimated_freshness) VALUES (now() - interval '44 minutes', 'test', 'optimal', "
        "'freshness', 86400, 86400, 60, 31536000, NULL, 1.0, 'default', 0.1, 0.5, 15, 0.8)")

    planner = json.loads(crawler("status", "--json", db_url=db_url).stdout)["planner"]
    assert planner["budget_source"].startswith("default") and "CRAWLER_DEFAULT_INTERVAL" in \
        planner["budget_source"]
    assert planner["computed_at"] is not None and 43 * 60 < planner["age_seconds"] < 50 * 60
    human = crawler("status", db_url=db_url)
    assert "plan in force" in human.stdout and "44 min ago" in human.stdout
    assert "optimal schedule, freshness, budget derived" in human.stdout


def test_a_site_is_its_origin_and_an_unknown_one_is_an_error(db_url: str) -> None:
    assert crawler("seed", "--window", "30", "http://127.0.0.1:8765/", db_url=db_url
                   ).returncode == 0
    for spelling in ("http://127.0.0.1:8765/", "http://127.0.0.1:8765", "HTTP://127.0.0.1:8765/x"):
        listed = crawler("urls", "--site", spelling, "--json", db_url=db_url)
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)[0]["url"] == "http://127.0.0.1:8765/"
    for bad in ("http://127.0.0.1:9999/", "garbage"):
        assert_one_line(crawler("urls", "--site", bad, db_url=db_url), "--site",
                        "http://127.0.0.1:8765")


def test_window_resize_takes_effect_and_one_window_per_site(db_url: str) -> None:
    assert crawler("seed", "--window", "30", "http://a.example/", db_url=db_url).returncode == 0
    resized = crawler("seed", "--window", "50", "http://a.example/", db_url=db_url)
    assert resized.returncode == 0 and "resized from 30 to 50" in resized.stdout
    sites = json.loads(crawler("sites", "--json", db_url=db_url).stdout)
    assert [s["window_size"] for s in sites] == [50]
    second = crawler("seed", "--window", "10", "http://a.example/other", db_url=db_url)
    assert_one_line(second, "http://a.example/", "one window")
    assert json.loads(crawler("status", "--json", db_url=db_url).stdout)["urls"] == 1


@pytest.mark.parametrize("command", ["plan", "report"])
def test_plan_and_report_help_in_the_common_style(command: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from crawler.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert "(default: None)" not in text and "crawler.core" not in text
    assert "CRAWLER_DATABASE_URL" in text and "--data-dir" in text
