"""Shorthand IPv4 hosts are one canonical dotted quad in the frontier (WHATWG URL Standard).

QA: ``http://127.1/``, ``http://0x7f.0.0.1/`` and ``http://2130706433/`` were three frontier
rows and three hosts (three politeness clocks for one server), none of them shown as the
address it is, while a browser reads each as 127.0.0.1. ``normalize_url`` now runs the
standard's IPv4 parser on the host; the SSRF policy must refuse every spelling it merges.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.core.ipv4 import parse_ipv4
from crawler.core.links import normalize_url, site_of
from crawler.net.fetch import canonical_url
from crawler.net.ssrf import AddressPolicy

LOOPBACK_SPELLINGS = [
    "127.1", "0x7f.0.0.1", "2130706433", "0177.0.0.1", "0x7f.1", "0x7F000001", "0177.0.0.01",
    "127.0.0.1.", "127.0.1", "0x7f.0x0.0x0.0x1", "017700000001", "127.0.0.0x1", "%31%32%37.1",
    "127.0x0.1", "00000000177.0.0.1", "127.0.0.1",
]


@pytest.mark.parametrize("spelling", LOOPBACK_SPELLINGS)
def test_every_spelling_of_loopback_is_one_url_and_one_host(spelling: str) -> None:
    assert normalize_url(f"http://{spelling}/a") == "http://127.0.0.1/a"
    assert normalize_url(f"https://user:pw@{spelling}:8443/a?b=1&a=2") == (
        "https://127.0.0.1:8443/a?a=2&b=1")
    assert site_of(normalize_url(f"http://{spelling}:80/") or "") == "http://127.0.0.1"


@pytest.mark.parametrize(("spelling", "address"), [
    ("10.1", "10.0.0.1"), ("0xa.0.0.1", "10.0.0.1"), ("167772161", "10.0.0.1"),
    ("0xa9fea9fe", "169.254.169.254"), ("0251.0376.0251.0376", "169.254.169.254"),
    ("169.254.43518", "169.254.169.254"), ("192.168.257", "192.168.1.1"), ("0", "0.0.0.0"),
    ("0x", "0.0.0.0"), ("4294967295", "255.255.255.255"), ("8.8.2056", "8.8.8.8"),
    ("00000127.0.0.1", "87.0.0.1"),  # octal, as browsers read it
])
def test_shorthand_spellings_of_other_addresses(spelling: str, address: str) -> None:
    assert normalize_url(f"http://{spelling}/") == f"http://{address}/"


@pytest.mark.parametrize("host", [
    "256.0.0.1", "1.2.3.4.5", "4294967296", "1.16777216", "1.2.3.08", "0x100.0.0.1",
    "example.123", "a.0x", "12a.1", "1..2", "0x1g.1", "%32%35%36.1",
])
def test_a_host_that_ends_in_a_number_but_is_no_address_is_malformed(host: str) -> None:
    # The standard's "ends in a number" rule: such a host is an IPv4 address or invalid.
    assert normalize_url(f"http://{host}/") is None


@pytest.mark.parametrize("host", [
    "example.com", "1.2.3.example", "127.0.0.1.nip.io", "0x7f.example", "x127.1.org",
    "[::1]", "[::ffff:7f00:1]",
])
def test_names_and_ipv6_literals_are_left_as_they_were(host: str) -> None:
    assert normalize_url(f"http://{host}/") == f"http://{host}/"


@given(st.integers(0, 2**32 - 1), st.data())
def test_any_spelling_of_any_address_normalises_to_it_and_is_policed_as_it(
    value: int, data: st.DataObject
) -> None:
    address = ipaddress.IPv4Address(value)
    octets = address.packed
    spelling = data.draw(st.sampled_from([
        str(value), hex(value), "0" + oct(value)[2:],
        ".".join(hex(octet) for octet in octets),
        ".".join("0" + oct(octet)[2:] for octet in octets),
        f"{octets[0]}.{int.from_bytes(octets[1:], 'big')}",
        f"{octets[0]}.{octets[1]}.{int.from_bytes(octets[2:], 'big')}",
        str(address) + ".",
    ]))
    assert parse_ipv4(spelling) == address
    url = normalize_url(f"http://{spelling}:8080/p")
    assert url == f"http://{address}:8080/p", spelling
    assert normalize_url(url) == url
    # What the frontier stores is what the fetch edge checks: the same address, the same
    # verdict of the default policy and of an allow-list.
    requested = urlsplit(canonical_url(url)).hostname
    assert requested == str(address)
    for policy in (AddressPolicy(), AddressPolicy(["127.0.0.0/8", "10.0.0.0/8"])):
        assert policy.is_allowed(requested or "") == policy.is_allowed(address)


@pytest.mark.parametrize("spelling", [*LOOPBACK_SPELLINGS, "10.1", "0xa9fea9fe", "0"])
def test_the_canonical_host_of_a_private_spelling_is_refused_by_default(spelling: str) -> None:
    url = normalize_url(f"http://{spelling}/latest/meta-data/")
    assert url is not None
    host = urlsplit(canonical_url(url)).hostname or ""
    assert not AddressPolicy().is_allowed(host)
    assert AddressPolicy(["0.0.0.0/0"]).is_allowed(host)
