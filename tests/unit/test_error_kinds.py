"""Every error kind the crawler records is an ``ErrorKind`` member, or ``http_<status>``."""

from __future__ import annotations

import builtins
import errno
import ssl
from collections.abc import Iterator

import aiohttp
import pytest

from crawler.core.model import ErrorKind, http_error_kind
from crawler.net.fetch import failure_of
from crawler.net.tls import _VERIFY_KINDS, tls_error_kind
from crawler.store.health import (
    FAULT_KINDS,
    STORAGE_ERROR_PREFIX,
    StorageError,
    not_stored_kind,
)


def _subclasses(cls: type[BaseException]) -> Iterator[type[BaseException]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _subclasses(sub)


def _instance(cls: type[BaseException]) -> BaseException:
    """An instance of ``cls`` without calling its constructor (each takes other arguments),
    with the attributes ``failure_of`` reads."""
    exc = cls.__new__(cls)
    exc.__dict__.update(message="", _certificate_error=ssl.SSLError())
    return exc


# Every class ``fetch`` catches: aiohttp's, the OS's and the standard library's.
CAUGHT = sorted(
    {c for base in (aiohttp.ClientError, OSError, ValueError) for c in _subclasses(base)
     if c.__module__ in ("builtins", "ssl") or c.__module__.startswith("aiohttp")},
    key=lambda c: (c.__module__, c.__qualname__),
)


@pytest.mark.parametrize("cls", CAUGHT, ids=lambda c: c.__qualname__)
@pytest.mark.parametrize("phase", ["connect", "body"])
def test_every_exception_fetch_catches_maps_to_a_member(
    cls: type[BaseException], phase: str
) -> None:
    _outcome, kind = failure_of(_instance(cls), phase)
    assert type(kind) is ErrorKind


@pytest.mark.parametrize(("exc", "kind"), [
    (aiohttp.ClientOSError(errno.ECONNRESET, "reset"), ErrorKind.CLIENT_OS_ERROR),
    (ConnectionResetError(errno.ECONNRESET, "reset"), ErrorKind.CONNECTION_RESET),
    (ConnectionAbortedError(errno.ECONNABORTED, "aborted"), ErrorKind.CONNECTION_ERROR),
    (aiohttp.ServerFingerprintMismatch(b"", b"", "h", 443), ErrorKind.SERVER_CONNECTION_ERROR),
    (TimeoutError(), ErrorKind.TIMEOUT_TOTAL),
    (ValueError("idna"), ErrorKind.BAD_URL),
])
def test_a_failure_no_test_names_keeps_its_class_name(exc: BaseException, kind: ErrorKind) -> None:
    assert failure_of(exc, "body")[1] is kind


def test_class_named_kinds_name_real_classes() -> None:
    """Stored rows and dashboards match these names: each is the class it was named from."""
    for kind in ErrorKind:
        if kind.value[0].isupper():
            assert getattr(aiohttp, kind.value, None) or getattr(builtins, kind.value), kind


def test_tls_kinds_are_members() -> None:
    assert all(type(kind) is ErrorKind for kind in _VERIFY_KINDS.values())
    error = ssl.SSLCertVerificationError()
    for code in [*_VERIFY_KINDS, 12345, None]:
        error.verify_code = code
        assert type(tls_error_kind(error)) is ErrorKind


def test_storage_kinds_are_the_fault_after_the_prefix() -> None:
    for fault in FAULT_KINDS:
        kind = not_stored_kind(StorageError(fault, "x"))
        assert (type(kind), kind) == (ErrorKind, STORAGE_ERROR_PREFIX + fault)
    assert not_stored_kind(OSError(errno.ENOSPC, "full")) == "storage_disk_full"
    assert not_stored_kind(RuntimeError("bug")) is ErrorKind.STORAGE_ERROR


def test_an_error_status_is_named_by_its_number() -> None:
    assert http_error_kind(503) == "http_503"
