"""The WHATWG URL Standard's IPv4 parser: ``127.1``, ``0x7f.0.0.1`` and ``2130706433`` are
127.0.0.1, as browsers and ``inet_aton`` read them.

Pure. ``crawler.core.links.normalize_url`` writes such hosts as the dotted quad, so that one
address is one frontier host (one politeness clock) and the SSRF policy, the status and the
operator all see the address itself; ``crawler.net.ssrf`` checks every spelling with the same
numbers.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final

# One part of an IPv4 spelling: 0x-prefixed hex (digits optional: "0x" is 0), 0-prefixed
# octal, or decimal. Nothing else: no sign, no underscore, no non-ASCII digit (int() would
# take each of them).
_HEX: Final = re.compile(r"0[xX]([0-9a-fA-F]*)")
_OCTAL: Final = re.compile(r"0([0-7]+)")
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]*")  # 08 is a bad octal number, not 8
# The standard's "ends in a number": the last part (a trailing dot aside) is digits, or 0x and
# hex digits. Such a host is an IPv4 address or no valid host at all, never a domain name.
_NUMBER: Final = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")


def _part_value(part: str) -> int | None:
    """One dot-separated part's number, or None when it is not a number in any base."""
    if match := _HEX.fullmatch(part):
        return int(match.group(1), 16) if match.group(1) else 0
    if match := _OCTAL.fullmatch(part):
        return int(match.group(1), 8)
    if _DECIMAL.fullmatch(part):
        return int(part, 10)
    return None


def _parts(host: str) -> list[str]:
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # a trailing dot, as in a fully qualified name
    return parts


def ends_in_a_number(host: str) -> bool:
    """Whether the standard parses ``host`` as IPv4 (and refuses it if that fails)."""
    return _NUMBER.fullmatch(_parts(host)[-1]) is not None


def numeric_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The address an all-numeric spelling (1 to 4 parts, ``inet_aton``'s forms) denotes;
    None when a part is not a number or there are more than 4 (a name, for the resolver).
    Raises ``ValueError`` for numbers out of range (``256.1.1.1``, ``4294967296``)."""
    parts = _parts(host)
    if not 1 <= len(parts) <= 4:
        return None
    values = [_part_value(part) for part in parts]
    numbers = [value for value in values if value is not None]
    if len(numbers) != len(values):
        return None
    *leading, last = numbers
    if any(value > 255 for value in leading) or last >= 256 ** (5 - len(numbers)):
        raise ValueError(f"IPv4 address out of range: {host!r}")
    return ipaddress.IPv4Address(
        last + sum(value << (8 * (3 - index)) for index, value in enumerate(leading)))


def parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The standard's verdict on an (ASCII, lower-cased) URL host: its address when it ends in
    a number, None when it is a domain name. Raises ``ValueError`` when it ends in a number but
    is no address (``1.2.3.4.5``, ``1.2.3.08``, ``example.123``): browsers refuse such a URL."""
    if not host or not ends_in_a_number(host):
        return None
    address = numeric_ipv4(host)
    if address is None:
        raise ValueError(f"ends in a number but is no IPv4 address: {host!r}")
    return address
