"""TLS for the HTTP edge: which certificate authorities are trusted, and what a refusal is
called (an error kind naming the check, so that an expired certificate is told from a wrong
name or an unknown issuer without a traceback).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp

from crawler.core.model import ErrorKind

# OpenSSL X509_V_ERR_* codes (include/openssl/x509_vfy.h) named by the error kind recorded.
_VERIFY_KINDS = {
    9: ErrorKind.TLS_NOT_YET_VALID,  # X509_V_ERR_CERT_NOT_YET_VALID
    10: ErrorKind.TLS_EXPIRED,  # X509_V_ERR_CERT_HAS_EXPIRED
    18: ErrorKind.TLS_SELF_SIGNED,  # X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT
    19: ErrorKind.TLS_UNTRUSTED,  # X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN
    20: ErrorKind.TLS_UNTRUSTED,  # X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY
    21: ErrorKind.TLS_UNTRUSTED,  # X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE
    62: ErrorKind.TLS_HOSTNAME_MISMATCH,  # X509_V_ERR_HOSTNAME_MISMATCH
    64: ErrorKind.TLS_HOSTNAME_MISMATCH,  # X509_V_ERR_IP_ADDRESS_MISMATCH
}


def tls_context(ca_bundle: Path | None = None) -> ssl.SSLContext:
    """The system's trusted roots plus the PEM certificates in ``ca_bundle`` (an operator's
    internal CA, or the tests'); verification and host-name checks are always on."""
    context = ssl.create_default_context()
    if ca_bundle is not None:
        try:
            context.load_verify_locations(cafile=str(ca_bundle))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"CRAWLER_CA_BUNDLE={ca_bundle}: cannot load it: {exc}") from exc
    return context


def tls_error_kind(exc: BaseException) -> ErrorKind:
    """The error kind of a failed TLS connection: which certificate check refused it."""
    is_cert = isinstance(exc, aiohttp.ClientConnectorCertificateError)
    cert_error: BaseException = (
        exc.certificate_error if isinstance(exc, aiohttp.ClientConnectorCertificateError) else exc
    )
    code = getattr(cert_error, "verify_code", None)
    if isinstance(code, int):
        return _VERIFY_KINDS.get(code, ErrorKind.TLS_CERT_INVALID)
    return ErrorKind.TLS_CERT_INVALID if is_cert else ErrorKind.TLS_HANDSHAKE


