"""The address policy, IPv4 spellings, and the resolver that filters DNS answers."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from hypothesis import given
from hypothesis import strategies as st

from crawler.net.fetch import _Refused, canonical_url
from crawler.net.ssrf import (
    AddressBlocked,
    AddressPolicy,
    PolicyResolver,
    canonical_ipv4,
    guarded_socket_factory,
    is_address_blocked,
)

REFUSED = [
    "127.0.0.1", "127.255.255.254", "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.0.1",
    "169.254.169.254", "169.254.0.1", "100.64.0.1", "100.127.255.255", "224.0.0.1",
    "239.255.255.250", "0.0.0.0", "0.1.2.3", "240.0.0.1", "255.255.255.255", "192.0.2.1",
    "198.18.0.1", "::", "::1", "fc00::1", "fdff::1", "fe80::1", "fec0::1", "ff02::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1",
    "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::", "2002:a9fe:a9fe::",
    "2001:db8::1",
]
ALLOWED = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "100.128.0.1", "172.32.0.1",
           "2606:4700:4700::1111", "2001:4860:4860::8888", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address", REFUSED)
def test_refused_by_default(address: str) -> None:
    assert not AddressPolicy().is_allowed(address)


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_allowed(address: str) -> None:
    assert AddressPolicy().is_allowed(address)


def test_garbage_is_refused() -> None:
    assert not AddressPolicy().is_allowed("not-an-ip")


@given(st.integers(0, 2**32 - 1))
def test_allow_list_opens_exactly_what_is_named(value: int) -> None:
    address = ipaddress.IPv4Address(value)
    policy = AddressPolicy(["127.0.0.0/8", "10.1.0.0/16"])
    named = address in ipaddress.ip_network("127.0.0.0/8") or address in ipaddress.ip_network(
        "10.1.0.0/16"
    )
    if named:
        assert policy.is_allowed(address)
    else:
        assert policy.is_allowed(address) == AddressPolicy().is_allowed(address)


@given(st.integers(0, 2**32 - 1))
def test_numeric_spellings_denote_the_same_address(value: int) -> None:
    address = ipaddress.IPv4Address(value)
    octets = address.packed
    spellings = [
        str(value),
        hex(value),
        "0" + oct(value)[2:] if value else "0",
        ".".join(hex(octet) for octet in octets),
        ".".join("0" + oct(octet)[2:] for octet in octets),
        f"{octets[0]}.{int.from_bytes(octets[1:], 'big')}",
        f"{octets[0]}.{octets[1]}.{int.from_bytes(octets[2:], 'big')}",
        str(address) + ".",
    ]
    for spelling in spellings:
        assert canonical_ipv4(spelling) == address, spelling


@pytest.mark.parametrize("name", ["example.com", "1.2.3.example", "12a.1", "a.1.2.3", "1..2"])
def test_names_are_not_addresses(name: str) -> None:
    assert canonical_ipv4(name) is None


@pytest.mark.parametrize("spelling", ["256.0.0.1", "1.2.3.4.5", "4294967296", "1.16777216"])
def test_out_of_range_numbers(spelling: str) -> None:
    if len(spelling.split(".")) > 4:
        assert canonical_ipv4(spelling) is None
    else:
        with pytest.raises(ValueError):
            canonical_ipv4(spelling)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://2130706433/a?b", "http://127.0.0.1/a?b"),
        ("http://0177.0.0.1:8080/", "http://127.0.0.1:8080/"),
        ("http://0x7f.1/", "http://127.0.0.1/"),
        ("https://example.com/x", "https://example.com/x"),
        ("http://[::1]:80/", "http://[::1]:80/"),
    ],
)
def test_canonical_url(url: str, expected: str) -> None:
    assert canonical_url(url) == expected


@pytest.mark.parametrize(
    ("url", "kind"),
    [("ftp://example.com/", "bad_scheme"), ("http:///x", "bad_url"),
     ("http://256.1.1.1/", "bad_url"), ("http://x/" + "a" * 2100, "url_too_long"),
     ("http://[::1/", "bad_url")],
)
def test_refused_urls(url: str, kind: str) -> None:
    with pytest.raises(_Refused) as refused:
        canonical_url(url)
    assert refused.value.kind == kind


class FakeResolver(AbstractResolver):
    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [{"hostname": host, "host": a, "port": port, "family": family, "proto": 0,
                 "flags": 0} for a in self.addresses]

    async def close(self) -> None:
        return None


async def test_resolver_drops_refused_answers() -> None:
    resolver = PolicyResolver(AddressPolicy(), FakeResolver(["10.0.0.1", "8.8.8.8", "::1"]))
    answers = await resolver.resolve("rebind.example", 80)
    assert [answer["host"] for answer in answers] == ["8.8.8.8"]


async def test_resolver_refuses_when_nothing_is_left() -> None:
    resolver = PolicyResolver(AddressPolicy(), FakeResolver(["127.0.0.1", "169.254.169.254"]))
    with pytest.raises(AddressBlocked):
        await resolver.resolve("rebind.example", 80)


def test_socket_factory_refuses_before_creating_a_socket() -> None:
    create = guarded_socket_factory(AddressPolicy())
    with pytest.raises(AddressBlocked):
        create((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80)))
    with pytest.raises(AddressBlocked):
        create((socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fe80::1%1", 80, 0, 1)))
    sock = create((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("8.8.8.8", 80)))
    sock.close()  # created, never connected


def test_blocked_is_found_through_wrapping() -> None:
    try:
        try:
            raise AddressBlocked("x")
        except AddressBlocked as inner:
            raise OSError("wrapped") from inner
    except OSError as outer:
        assert is_address_blocked(outer)
    assert not is_address_blocked(OSError("other"))
