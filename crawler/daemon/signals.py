"""SIGTERM and SIGINT, counted from the first line of ``crawler run`` to the process's exit.

A signal must never be lost, whenever it comes: before the event loop exists (settings, the
embedded server's start), while it runs, and while it is torn down. So a plain handler counts
signals from the start; while a loop runs, the loop's own handler (which wakes it at once)
takes over, and the plain one is put back before the loop closes. The first signal asks for a
drain; the second for skipping the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """SIGTERM when the parent process dies, even by SIGKILL (Linux prctl)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class Shutdown:
    """The signals received so far, and events a running loop can wait on."""

    def __init__(self) -> None:
        self.count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.stop = asyncio.Event()
        self.hurry = asyncio.Event()

    def install(self) -> Shutdown:
        """Count signals from now on (call before anything that can block).

        Both handlers go in with the signals blocked: else a SIGINT between the two would meet
        Python's handler (KeyboardInterrupt, exit 1) while SIGTERM is already counted."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            for sig in SIGNALS:
                signal.signal(sig, self._on_signal_frame)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return self

    def _on_signal_frame(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake)

    def _on_signal(self) -> None:
        self.count += 1
        self._wake()

    def _wake(self) -> None:
        if self.count >= 1:
            self.stop.set()
        if self.count >= 2:
            self.hurry.set()

    @property
    def requested(self) -> bool:
        return self.count >= 1

    def attach(self) -> None:
        """Hand the signals to the running loop; signals already counted take effect now."""
        self.stop = asyncio.Event()
        self.hurry = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            self._loop.add_signal_handler(sig, self._on_signal)
        self._wake()

    def detach(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Give the signals back to the plain counting handler before the loop closes (else
        the loop restores the default ones, and a late Ctrl-C would end in a traceback).
        ``loop``: a loop whose own handlers (not ``attach``'s) hold the signals."""
        loop = loop or self._loop
        self._loop = None
        for sig in SIGNALS:
            if loop is not None:
                loop.remove_signal_handler(sig)
            signal.signal(sig, self._on_signal_frame)


_process_shutdown: list[Shutdown] = []


def process_shutdown() -> Shutdown:
    """The process's one ``Shutdown``, installed on the first call (``crawler/__main__.py``
    makes that call before importing anything else for ``crawler run``)."""
    if not _process_shutdown:
        _process_shutdown.append(Shutdown().install())
    return _process_shutdown[0]
