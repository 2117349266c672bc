"""SSRF protection: which addresses the crawler may connect to, checked where it connects.

The check runs twice at the socket edge, so that no byte ever reaches a refused address:
``PolicyResolver`` drops refused addresses from every DNS answer (DNS rebinding), and
``guarded_socket_factory`` refuses a socket for a refused address (IP literals, which aiohttp
never sends to the resolver). Every redirect hop goes through the same connector.

Numeric IPv4 spellings that ``inet_aton`` accepts (``0x7f.1``) are written as the dotted quad
when a URL enters the frontier and again by ``canonical_url`` before any request.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from crawler.core.ipv4 import numeric_ipv4

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# IANA special-purpose registries (RFC 6890 and updates); anything in here is refused unless
# an operator allows it explicitly. ``ipaddress.is_global`` covers most of it, but it is not
# stable across Python versions and treats multicast as global, so the list is explicit.
BLOCKED_NETWORKS = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "0.0.0.0/8",  # "this network", unspecified
        "10.0.0.0/8",  # RFC 1918
        "100.64.0.0/10",  # carrier-grade NAT (RFC 6598)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, cloud metadata (169.254.169.254)
        "172.16.0.0/12",  # RFC 1918
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # TEST-NET-1
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",  # RFC 1918
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # TEST-NET-2
        "203.0.113.0/24",  # TEST-NET-3
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and 255.255.255.255 broadcast
        "::/128",  # unspecified
        "::1/128",  # loopback
        "::/96",  # IPv4-compatible (deprecated); its IPv4 part is checked too
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments (Teredo, benchmarking, ORCHID...)
        "2001:db8::/32",  # documentation
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)

# IPv6 forms that carry an IPv4 address: the embedded address must pass as well.
NAT64_NETWORKS = (
    ipaddress.IPv6Network("64:ff9b::/96"),  # RFC 6052 well-known prefix
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # RFC 8215 local-use
)


class AddressBlocked(OSError):
    """A connection refused by the address policy. An ``OSError`` so that aiohttp wraps it
    like any connect failure; one message for every address, so that happy-eyeballs keeps
    this type when all attempts fail."""

    def __init__(self, detail: str = "") -> None:
        super().__init__("address refused by SSRF policy")
        self.detail = detail


# The IPv4 address an ``inet_aton``-style spelling denotes (``127.1``), or None for a name;
# ``ValueError`` when out of range. The parser ``normalize_url`` uses too.
canonical_ipv4 = numeric_ipv4


def parse_ip(host: str) -> IPAddress | None:
    """An IP literal (with or without brackets or a zone id, any IPv4 spelling), else None."""
    host = host.strip("[]").split("%", 1)[0]
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host)
    try:
        return canonical_ipv4(host)
    except ValueError:
        return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, 6to4, NAT64, Teredo)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    packed = ip.packed
    if any(ip in network for network in NAT64_NETWORKS) or packed[:12] == bytes(12):
        return ipaddress.IPv4Address(packed[12:])  # NAT64 or IPv4-compatible (::a.b.c.d)
    return None


class AddressPolicy:
    """Refuses non-public addresses; ``allow_networks`` opens exactly the CIDRs named."""

    def __init__(self, allow_networks: Sequence[str] = ()) -> None:
        self.allow_networks = tuple(
            ipaddress.ip_network(cidr, strict=False) for cidr in allow_networks
        )

    def __repr__(self) -> str:
        return f"AddressPolicy(allow_networks={[str(n) for n in self.allow_networks]})"

    def _explicitly_allowed(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.allow_networks)

    def is_allowed(self, ip: IPAddress | str) -> bool:
        """Whether a connection to ``ip`` may be opened. Unparseable input is refused."""
        address = parse_ip(ip) if isinstance(ip, str) else ip
        if address is None:
            return False
        if self._explicitly_allowed(address):
            return True
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            return self.is_allowed(address.ipv4_mapped)  # ::ffff:a.b.c.d is a.b.c.d on the wire
        if any(address.version == net.version and address in net for net in BLOCKED_NETWORKS):
            return False
        if isinstance(address, ipaddress.IPv6Address):
            embedded = _embedded_ipv4(address)
            if embedded is not None and not self.is_allowed(embedded):
                return False
        return not (address.is_multicast or address.is_reserved or address.is_unspecified)


class PolicyResolver(AbstractResolver):
    """Wraps a resolver and drops every address the policy refuses; ``AddressBlocked`` when
    nothing is left (an SSRF refusal, not a DNS failure)."""

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self.inner = inner if inner is not None else DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers = await self.inner.resolve(host, port, family)
        allowed = [answer for answer in answers if self.policy.is_allowed(answer["host"])]
        if not allowed:
            raise AddressBlocked(f"{host} resolves only to refused addresses")
        return allowed

    async def close(self) -> None:
        await self.inner.close()


def guarded_socket_factory(policy: AddressPolicy) -> Callable[[Any], socket.socket]:
    """An aiohttp ``socket_factory`` that refuses to create a socket for a refused address
    (it sees the exact address about to be connected to, IP literals included)."""

    def create(addr_info: Any) -> socket.socket:
        family, type_, proto, _canonname, sockaddr = addr_info
        if not policy.is_allowed(str(sockaddr[0])):
            raise AddressBlocked(f"connect to {sockaddr[0]} refused")
        return socket.socket(family=family, type=type_, proto=proto)

    return create


def is_address_blocked(exc: BaseException) -> bool:
    """Whether an exception raised by aiohttp comes from an ``AddressBlocked`` refusal."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, AddressBlocked):
            return True
        stack.extend([getattr(current, "os_error", None), current.__cause__, current.__context__])
    return False
