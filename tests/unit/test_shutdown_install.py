"""Installing the daemon's signal handlers is atomic: a signal that comes between the two
``signal.signal`` calls is counted, never met by the handler it had before."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# In a process of its own (signals go to the main thread): SIGINT is sent to itself right after
# the SIGTERM handler is installed and before the SIGINT one is, the moment a loaded machine
# can stretch to hundreds of milliseconds.
SCRIPT = textwrap.dedent("""
    import os, signal
    from crawler.daemon import signals

    real = signal.signal
    def signal_then_interrupt(sig, handler):
        previous = real(sig, handler)
        if sig == signal.SIGTERM:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # bytecode boundaries, where Python runs a pending handler
                pass
        return previous
    signal.signal = signal_then_interrupt
    shutdown = signals.Shutdown().install()
    for _ in range(1000):
        pass
    print("counted", shutdown.count)
""")


def test_a_signal_between_the_two_handlers_is_counted_not_raised() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "counted 1"
