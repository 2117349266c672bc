"""Fixtures shared by every suite: a real PostgreSQL, a fresh database per test.

The server is the embedded one (started once per session in a temporary directory) unless
``CRAWLER_TEST_DATABASE_URL`` names another. The schema is migrated once into a template
database; each test gets its own database cloned from it.

Invariants over examples (tests/invariants.py) run after every scenario that passed so far,
and fail it (an error at teardown, naming the invariant) when they do not hold:

* ``db_url``'s teardown, on the test's database: every URL not removed has a next fetch time
  (``urls_scheduled``), every host not leased is due by its earliest URL (``hosts_due``),
  every index row reads back from the directory ``warc_files`` names (``index_rows``); and
  no daemon ``start_daemon`` started still runs (``daemons_stopped``: a bug of the test).
* an autouse fixture's teardown: no loopback server (tests/loopback.py) got two requests
  from a crawler to one host closer than the delay the crawler was started with
  (``polite``), and every plan check ``stop_daemon`` made before stopping a daemon held
  (``plan_applied``).

A test that breaks one on purpose says so, with its reason:
``@pytest.mark.breaks_invariant("index_rows", reason="it truncates a WARC file")``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import daemon
import invariants
import loopback
import pytest

from crawler.db.connect import _run_blocking, embedded_server
from crawler.db.migrate import upgrade_blocking

# The invariants checked after every scenario, by the name a test opts out with.
INVARIANTS = {
    "urls_scheduled": "every URL not removed has a next fetch time",
    "hosts_due": "every host not leased is due no later than its earliest URL",
    "index_rows": "every index row reads back a record whose digest matches",
    "polite": "no request to a host sooner than its politeness delay",
    "plan_applied": "every fetch process applies the newest plan",
    "daemons_stopped": "no daemon of the test still runs when it ends",
}
_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every opt-out names known invariants and carries its reason."""
    for item in items:
        for mark in item.iter_markers("breaks_invariant"):
            unknown = [name for name in mark.args if name not in INVARIANTS]
            reason = mark.kwargs.get("reason")
            if not mark.args or unknown or not isinstance(reason, str) or not reason.strip():
                raise pytest.UsageError(
                    f"{item.nodeid}: breaks_invariant(NAME..., reason=WHY) takes names of "
                    f"{sorted(INVARIANTS)} (got {list(mark.args)}) and a reason "
                    f"(got {reason!r})")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Each phase's report, kept on the item: a fixture's teardown checks invariants only
    after a test that passed (a failure already reported is not masked by another)."""
    report: pytest.TestReport = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


def _passed_so_far(node: pytest.Item) -> bool:
    reports = node.stash.get(_REPORTS, {})
    return "call" in reports and all(r.passed for r in reports.values())


def _checked(node: pytest.Item) -> set[str]:
    """The invariants this test keeps (all but those it opts out of)."""
    out = {name for mark in node.iter_markers("breaks_invariant") for name in mark.args}
    return set(INVARIANTS) - out


def _violations(failures: list[tuple[str, str]]) -> str:
    return "\n".join(
        f"invariant {name!r} ({INVARIANTS[name]}) does not hold after the test: {what}"
        for name, what in failures)


def _daemons_left_running(started: daemon.Started) -> list[str]:
    """Daemons ``start_daemon`` started that still run: stopped here (SIGTERM, then SIGKILL),
    and named, since a check of the frontier is meaningful only once they have stopped."""
    left = []
    for proc, _ in started.daemons:
        if proc.returncode is not None or invariants.pid_gone(proc.pid):
            continue
        left.append(f"daemon pid {proc.pid} (start_daemon) still ran: the test must stop it")
        for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and not invariants.pid_gone(proc.pid):
                time.sleep(0.05)
            if invariants.pid_gone(proc.pid):
                break
    return left


async def _frontier_and_index(url: str, checked: set[str]) -> list[tuple[str, str]]:
    failures: list[tuple[str, str]] = []
    if "urls_scheduled" in checked:
        unscheduled = await invariants.unscheduled_urls(url)
        if unscheduled:
            failures.append(("urls_scheduled", f"{len(unscheduled)} URLs with no next fetch "
                                               f"time: {unscheduled[:10]}"))
    if "hosts_due" in checked:
        late = await invariants.hosts_due_after_their_urls(url)
        if late:
            failures.append(("hosts_due", f"{len(late)} hosts due later than their earliest "
                                          f"URL: {late[:10]}"))
    if "index_rows" in checked:
        try:
            await invariants.assert_index_rows_read_back(url)
        except AssertionError as exc:
            failures.append(("index_rows", str(exc)))
    return failures


@pytest.fixture(autouse=True)
def _invariants_after_scenario(request: pytest.FixtureRequest) -> Iterator[None]:
    """This test's loopback servers and daemons, recorded afresh; after a test that passed,
    the invariants of the servers' logs and of the daemons' stops."""
    loopback.reset_registry()
    daemon.reset_started()
    yield
    servers, started = loopback.reset_registry(), daemon.reset_started()
    if not _passed_so_far(request.node):
        return
    checked = _checked(request.node)
    failures: list[tuple[str, str]] = []
    if "daemons_stopped" in checked:  # without db_url (its teardown looked already)
        failures += [("daemons_stopped", left) for left in _daemons_left_running(started)]
    if "plan_applied" in checked:
        failures += [("plan_applied", failed) for failed in started.plan_failures]
    if "polite" in checked:
        failures += [("polite", failed) for failed in servers.politeness_failures()]
    if failures:
        pytest.fail(_violations(failures), pytrace=False)


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


async def _admin(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A URL of the test server's maintenance database ('postgres')."""
    configured = os.environ.get("CRAWLER_TEST_DATABASE_URL")
    if configured:
        yield _with_database(configured, "postgres")
        return
    tmp = Path(tempfile.mkdtemp(prefix="crawler-test-pg-"))
    # atexit runs last-registered first: the server's own handler (registered by
    # embedded_server below) stops it and deletes its data, then this removes the parent.
    atexit.register(shutil.rmtree, tmp, True)
    server = embedded_server(tmp, cleanup_mode="delete")
    try:
        yield server.get_uri(database="postgres")
    finally:
        _stop_server(server.get_pid())


def _stop_server(pid: int | None, timeout: float = 60.0) -> None:
    """Stop this session's server now (fast shutdown), not only from the wheel's atexit
    handler, which stops it only when its list of handle pids holds this process alone: a
    leftover pid in that list once left a test server running after the suite."""
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


@pytest.fixture(scope="session")
def template_db(pg_server_url: str) -> Iterator[str]:
    name = f"crawler_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    _run_blocking(_admin(pg_server_url, f'CREATE DATABASE "{name}"'))
    upgrade_blocking(_with_database(pg_server_url, name))
    yield name
    _run_blocking(_admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def db_url(
    request: pytest.FixtureRequest, pg_server_url: str, template_db: str, tmp_path: Path
) -> Iterator[str]:
    """A fresh, migrated database for one test; after a test that passed, the invariants of
    its frontier and its collection (the module's docstring). ``tmp_path`` is asked for so
    that it is torn down after this: the WARC files the index names are still there."""
    name = f"crawler_t_{uuid.uuid4().hex[:12]}"
    _run_blocking(_admin(pg_server_url, f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"'))
    url = _with_database(pg_server_url, name)
    yield url
    failures: list[tuple[str, str]] = []
    try:
        if _passed_so_far(request.node):
            checked = _checked(request.node)
            if "daemons_stopped" in checked:
                failures += [("daemons_stopped", left)
                             for left in _daemons_left_running(daemon.STARTED)]
            failures += _run_blocking(_frontier_and_index(url, checked))
    finally:
        _run_blocking(_admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    if failures:
        pytest.fail(_violations(failures), pytrace=False)


@pytest.fixture
def empty_db_url(pg_server_url: str) -> Iterator[str]:
    """A fresh database with no schema at all (for migration tests)."""
    name = f"crawler_e_{uuid.uuid4().hex[:12]}"
    _run_blocking(_admin(pg_server_url, f'CREATE DATABASE "{name}"'))
    yield _with_database(pg_server_url, name)
    _run_blocking(_admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["plain", "citus"])
def statements(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test twice: with the plain statements, and with the Citus variants
    (crawler/db/queries_citus.sql) forced on this plain PostgreSQL, whose semantics must be
    the same. Forced in this process only: a daemon started as a subprocess looks the
    extension up for itself (and runs the plain statements here)."""
    from crawler.db.queries import force_citus

    force_citus(request.param == "citus")
    try:
        yield request.param
    finally:
        force_citus(None)
