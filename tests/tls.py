"""A throw-away certificate authority and HTTPS servers on loopback, for the TLS tests.

Keys are EC P-256 (fast to generate). ``TestCA.issue`` signs a leaf for the names given with
any validity window, so that each certificate failure (expired, wrong name, self-signed,
unknown issuer) is one call.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

PAGE = b"<html><head><title>tls</title></head><body><p>over tls</p></body></html>"
ROBOTS = b"User-agent: *\nDisallow: /private\n"
DAY = dt.timedelta(days=1)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class TestCA:
    """A root CA whose certificate a test trusts through ``CRAWLER_CA_BUNDLE``."""

    __test__ = False  # not a pytest class

    def __init__(self, name: str = "crawler test CA") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - DAY)
            .not_valid_after(now + 30 * DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, path: Path) -> Path:
        path.write_bytes(self.pem)
        return path

    def issue(
        self,
        names: list[str],
        *,
        not_before: dt.datetime | None = None,
        not_after: dt.datetime | None = None,
        self_signed: bool = False,
    ) -> tuple[bytes, bytes]:
        """A leaf certificate for ``names`` (PEM chain, PEM key)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        subject = _name(names[0])
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject if self_signed else self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before or now - DAY)
            .not_valid_after(not_after or now + 7 * DAY)
            .add_extension(_san(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        cert = builder.sign(key if self_signed else self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def server_context(cert_pem: bytes, key_pem: bytes, directory: Path) -> ssl.SSLContext:
    """A server-side context serving this certificate (files, as ``ssl`` requires)."""
    cert_file = directory / f"cert-{id(cert_pem)}.pem"
    key_file = directory / f"key-{id(cert_pem)}.pem"
    cert_file.write_bytes(cert_pem)
    key_file.write_bytes(key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context


def site_app(peers: set[tuple[str, int]] | None = None) -> web.Application:
    """Pages, robots.txt and redirects: ``/to?url=...`` answers 302 to that URL. Each
    client address:port seen is added to ``peers`` (one per connection)."""

    def note(request: web.Request) -> None:
        if peers is not None and request.transport is not None:
            peers.add(request.transport.get_extra_info("peername"))

    async def page(request: web.Request) -> web.Response:
        note(request)
        return web.Response(body=PAGE, content_type="text/html")

    async def robots(request: web.Request) -> web.Response:
        note(request)
        return web.Response(body=ROBOTS, content_type="text/plain")

    async def to(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["url"])

    app = web.Application()
    app.router.add_get("/robots.txt", robots)
    app.router.add_get("/to", to)
    app.router.add_get("/{tail:.*}", page)
    return app


@contextlib.asynccontextmanager
async def serve(
    context: ssl.SSLContext | None = None,
    host: str = "127.0.0.1",
    peers: set[tuple[str, int]] | None = None,
    app: web.Application | None = None,
) -> AsyncIterator[str]:
    """Serve ``app`` (else ``site_app``) on a free port; yields the origin (https when
    ``context`` is set)."""
    runner = web.AppRunner(app or site_app(peers), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0, ssl_context=context)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.Server)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if context else 'http'}://{host}:{port}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def never_handshakes(host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Accepts TCP and never says a word: a TLS client waits for a ServerHello forever."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, host, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"https://{host}:{port}"
    finally:
        server.close()
        for writer in held:
            writer.close()
