"""Whether the collection can be written now, and why not.

A fetch whose record cannot be stored is a request wasted and an answer lost, so the daemon
claims no host while the store is faulted and says why (``crawler status``, a metric,
``/readyz``). A fault is raised by the write that failed and cleared only by a probe that
writes, syncs and removes a file (``crawler.store.durable``), so work resumes within a probe
interval of the space being freed or the directory being writable again.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable

from crawler.core.model import ErrorKind

# Fault kinds: a bounded set, so they can label a metric.
DISK_FULL = "disk_full"
READ_ONLY = "read_only"
DIRECTORY_GONE = "directory_gone"
IO_ERROR = "io_error"
FAULT_KINDS = (DISK_FULL, READ_ONLY, DIRECTORY_GONE, IO_ERROR)

_KIND_OF_ERRNO = {
    **dict.fromkeys((errno.ENOSPC, errno.EDQUOT, errno.EFBIG), DISK_FULL),
    **dict.fromkeys((errno.EROFS, errno.EACCES, errno.EPERM), READ_ONLY),
    **dict.fromkeys((errno.ENOENT, errno.ENOTDIR, errno.ESTALE), DIRECTORY_GONE),
}


def fault_kind(exc: BaseException) -> str:
    """The fault an exception from the file system means."""
    if isinstance(exc, StorageError):
        return exc.kind
    if isinstance(exc, OSError) and exc.errno is not None:
        return _KIND_OF_ERRNO.get(exc.errno, IO_ERROR)
    return IO_ERROR


class StorageError(Exception):
    """A record could not be made durable: ``kind`` is one of ``FAULT_KINDS``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def storage_error(exc: BaseException, doing: str) -> StorageError:
    """``exc`` (raised while ``doing``) as a ``StorageError`` naming its kind."""
    if isinstance(exc, StorageError):
        return exc
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return StorageError(fault_kind(exc), f"{doing}: {detail or type(exc).__name__}")


class StorageHealth:
    """The store's state, shared by the writer, the probe, the fetch loop and ``/readyz``."""

    def __init__(self) -> None:
        self.fault: StorageError | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self.changes = 0  # bumped on every change, so a watcher can publish it once
        # Records the fetch path found damaged (and the daemon marked): no reason to stop,
        # but said in /readyz beside "ready".
        self.damaged_found = 0
        self.listeners: list[Callable[[StorageError | None], None]] = []  # told every change

    @property
    def writable(self) -> bool:
        return self.fault is None

    def describe(self) -> str | None:
        """One line for status and /readyz; None while writable."""
        if self.fault is None:
            return None
        return f"collection not writable ({self.fault.kind}): {self.fault.message}"

    def set_fault(self, fault: StorageError) -> bool:
        """Record ``fault``; True when the store was writable until now."""
        first = self.fault is None
        changed = first or (self.fault is not None and self.fault.kind != fault.kind)
        self.fault = fault
        self._writable.clear()
        if changed:
            self.changes += 1
            for listener in self.listeners:
                listener(fault)
        return first

    def clear(self) -> bool:
        """The probe wrote again: True when that ends a fault."""
        if self.fault is None:
            return False
        self.fault = None
        self.changes += 1
        self._writable.set()
        for listener in self.listeners:
            listener(None)
        return True

    async def wait_writable(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the store to be writable; whether it is."""
        if self.fault is None:
            return True
        try:
            await asyncio.wait_for(self._writable.wait(), timeout)
        except TimeoutError:
            return False
        return True


# The error_kind of a fetch whose storing failed: the fault's kind after this prefix
# (``storage_disk_full``, ...), ``storage_error`` for any other exception.
STORAGE_ERROR_PREFIX = "storage_"


def not_stored_kind(exc: BaseException) -> ErrorKind:
    """The error kind of a fetch whose record storing or writing raised ``exc``."""
    if isinstance(exc, OSError | StorageError):
        return ErrorKind(STORAGE_ERROR_PREFIX + fault_kind(exc))  # a kind of FAULT_KINDS
    return ErrorKind.STORAGE_ERROR
