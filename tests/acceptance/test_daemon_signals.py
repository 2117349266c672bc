"""Signals are never lost: SIGINT or SIGTERM at a random moment of start-up or of running, one
or two of them, and the daemon exits 0 within the grace period plus 5 s, every time.

To run 50+ daemons in about a minute on a busy machine, most are forked from this process after
the heavy imports (a fork costs no interpreter start-up); each then runs `crawler run`'s own
entry point (``crawler.cli.main``), a real process receiving real signals. Two more are cold
`python -m crawler run` processes. A signal is sent only once the process catches SIGTERM (read
from /proc/PID/status): before that the interpreter itself is starting (`crawler/__main__.py`
installs the handlers before any other import). That they come before any connection is
checked too: they are in place while the daemon waits on a database that does not answer.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from daemon import LOOPBACK

pytestmark = pytest.mark.timeout(300)

GRACE_SECONDS = 2.0
RUNS_FORKED = 52
CONCURRENT = 8
SIGNAL_WINDOW_SECONDS = 4.0  # start-up of a forked daemon takes ~0.3-3 s; the rest is running


def _env(db_url: str) -> dict[str, str]:
    return {
        "CRAWLER_DATABASE_URL": db_url,
        "CRAWLER_METRICS_PORT": "0",
        "CRAWLER_ALLOW_NETWORKS": LOOPBACK,
        "CRAWLER_SHUTDOWN_GRACE": str(GRACE_SECONDS),
        "CRAWLER_POLL_INTERVAL": "0.5",
        "CRAWLER_SCHEDULE": "uniform",
    }


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (the SigCgt mask of /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def fork_daemon(env: dict[str, str], log_path: Path) -> int:
    """A child running ``crawler run`` from this already-imported process."""
    pid = os.fork()
    if pid:
        return pid
    code = 99
    try:
        # What `python -m crawler run` does first (crawler/__main__.py): count the signals from
        # here, with handlers of this process's own, not a Shutdown this test process may hold.
        from crawler.daemon import signals as daemon_signals

        daemon_signals._process_shutdown.clear()
        daemon_signals.process_shutdown()
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.update(env)
        from crawler.cli import main

        code = main(["run", "--duration", "60"])
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


@dataclass
class Run:
    log: Path
    signals: list[int]
    delay: float  # from the moment the process catches SIGTERM to the first signal
    pid: int = 0
    forked_at: float = 0.0
    armed_seconds: float = 0.0  # from the fork to catching SIGTERM
    next_signal_at: float = 0.0
    first_signal_at: float | None = None
    code: int | None = None
    exit_seconds: float = float("inf")  # from the first signal


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


def exit_code(pid: int) -> int | None:
    done, status = os.waitpid(pid, os.WNOHANG)
    return None if done == 0 else os.waitstatus_to_exitcode(status)


def drive(runs: list[Run], start: Callable[[Run], int]) -> None:
    """Start runs (at most CONCURRENT at once), signal each at its moment, reap it; never
    blocks on one run, so every moment and every exit time is measured to ~10 ms."""
    pending = list(runs)
    active: list[Run] = []
    while pending or active:
        while pending and len(active) < CONCURRENT:
            run = pending.pop(0)
            run.forked_at = time.monotonic()
            run.pid = start(run)
            run.next_signal_at = float("inf")  # armed once it catches SIGTERM
            active.append(run)
        now = time.monotonic()
        for run in list(active):
            if run.next_signal_at == float("inf") and catches_sigterm(run.pid):
                run.next_signal_at = now + run.delay
                run.armed_seconds = now - run.forked_at
            if run.signals and now >= run.next_signal_at:
                os.kill(run.pid, run.signals.pop(0))
                run.first_signal_at = run.first_signal_at or now
                run.next_signal_at = now + 0.3  # a second signal, if any, a little later
            code = exit_code(run.pid)
            if code is not None:
                run.code = code
                if run.first_signal_at is not None:
                    run.exit_seconds = now - run.first_signal_at
                active.remove(run)
            elif run.first_signal_at and now - run.first_signal_at > GRACE_SECONDS + 30:
                os.kill(run.pid, signal.SIGKILL)  # lost: fail, but do not hang
        time.sleep(0.01)


def test_signals_at_random_moments_are_never_lost(db_url: str, tmp_path: Path) -> None:
    # Import now what the forked children need, so that they start in milliseconds.
    import sqlalchemy.dialects.postgresql.asyncpg  # noqa: F401
    import uvloop  # noqa: F401

    import crawler.cli
    import crawler.daemon.run

    crawler.cli.build_parser()  # imports every command module (scipy, numpy, ...)
    rng = random.Random(20261122)
    env = _env(db_url)
    runs = []
    for i in range(RUNS_FORKED):
        sig = (signal.SIGINT, signal.SIGTERM)[i % 2]
        signals = [sig, sig] if i % 5 == 0 else [sig]  # every fifth gets a second signal
        runs.append(Run(tmp_path / f"daemon-{i}.log", signals,
                        rng.uniform(0.0, SIGNAL_WINDOW_SECONDS)))
    started = time.monotonic()
    # One fetch process: the daemon itself. (`--processes N`'s parent, crawler/daemon/
    # processes.py, forwards signals with handlers of its own and is tested with it.)
    env["CRAWLER_PROCESSES"] = "1"
    # A child counts as armed once it catches SIGTERM, so it must not inherit a handler from
    # this process (one an earlier test left in this worker): armed at once, it could get a
    # SIGINT before `run` counts signals, and exit 1 on KeyboardInterrupt.
    inherited = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        drive(runs, lambda run: fork_daemon(env, run.log))
    finally:
        for sig, handler in inherited.items():
            if handler is not None:  # None: not a Python-level handler, nothing to put back
                signal.signal(sig, handler)
    elapsed = time.monotonic() - started
    failures = []
    for run in runs:
        out = run.log.read_text(errors="replace")
        clean = "Traceback" not in out and "Unclosed" not in out
        if run.code != 0 or run.exit_seconds > GRACE_SECONDS + 5 or not clean:
            failures.append((run.log.name, run.delay, run.code, run.exit_seconds, out[-1500:]))
    assert not failures, failures
    print(f"{len(runs)} forked daemons signalled in {elapsed:.0f}s; "
          f"slowest exit {max(r.exit_seconds for r in runs):.2f}s after the signal; handlers "
          f"caught SIGTERM {max(r.armed_seconds for r in runs):.2f}s after the fork at most")


@pytest.mark.parametrize("command", ["python -m crawler", "installed script"])
def test_cold_daemons_catch_signals_before_connecting(tmp_path: Path, command: str) -> None:
    """A real `crawler run` whose database never answers, started both ways (the script pip
    installs, as a service manager starts it, and `python -m crawler`): the handlers are in
    place while it waits to connect, and SIGINT or SIGTERM there exits 0 at once."""
    argv = ([sys.executable, "-m", "crawler", "run"] if command == "python -m crawler"
            else [str(Path(sys.executable).with_name("crawler")), "run"])
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # accepts TCP, never speaks: the connection attempt hangs
    port = silent.getsockname()[1]
    # One process: the one that connects is the one signalled.
    env = {**os.environ, **_env(f"postgresql://postgres@127.0.0.1:{port}/x"),
           "CRAWLER_PROCESSES": "1"}
    try:
        procs = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            proc = subprocess.Popen(argv, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            procs.append((proc, sig))
        for proc, sig in procs:
            assert wait_until(lambda p=proc: catches_sigterm(p.pid), 120)
            # Handlers first, then connecting: wait until it is waiting on the silent server.
            assert wait_until(lambda p=proc: _has_connection(p.pid, port), 60)
            proc.send_signal(sig)
            sent = time.monotonic()
            out, _ = proc.communicate(timeout=GRACE_SECONDS + 5 + 30)
            assert proc.returncode == 0, out.decode()[-2000:]
            assert time.monotonic() - sent <= GRACE_SECONDS + 5, out.decode()[-2000:]
            assert b"Traceback" not in out and b"Unclosed" not in out, out.decode()[-2000:]
    finally:
        silent.close()


def _has_connection(pid: int, port: int) -> bool:
    """Whether ``pid`` has a TCP connection to 127.0.0.1:``port`` (from /proc/net/tcp)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    wanted = f"0100007F:{port:04X}"
    return any(line.split()[2] == wanted and line.split()[9] in inodes for line in lines)
