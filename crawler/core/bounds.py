"""Bounds on what the HTML parser is given, so that no page costs more than a page should.

An HTML tree builder checks "has an element in scope" against the stack of open elements
for most start tags (WHATWG HTML, 13.2.4.2), so a document of n nested elements costs O(n^2):
about an hour for the 10^6 a 10 MB page can hold. Browsers bound the depth instead: Chromium's
tree builder stops nesting at 512 (``kMaximumHTMLParserDOMTreeDepth``). ``flatten_deep_html``
does the same before parsing, in numpy over the bytes: start tags deeper than
``MAX_TREE_DEPTH`` and their end tags are removed, their text kept, so the visible text (and
the fingerprint) hardly moves.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt

from crawler.core.extract import ParsedPage
from crawler.core.model import OK, ErrorKind, FetchResult
from crawler.core.observe import is_html, parse_result
from crawler.core.region import Region

try:
    from crawler.core import _speedups
except ImportError:  # built without a C compiler: the numpy version gives the same bound
    _speedups = None  # type: ignore[assignment]

MAX_TREE_DEPTH = 512  # Chromium's kMaximumHTMLParserDOMTreeDepth
SMALL_PAGE_BYTES = 8192  # below this, counting '<' is cheaper than the numpy bound
BINARY_TYPE = "application/octet-stream"
# Names are compared as one 8-byte integer: every name below fits (a longer name that starts
# with "optgroup" or "colgroup" counts as flat, which only under-counts depth).
NAME_BYTES = 8
# Elements that never hold children (void) or whose end tag is usually omitted: they add no
# depth, or the count of an ordinary page's <li>, <p> and <br> would be taken for nesting.
FLAT_ELEMENTS = (
    b"area", b"base", b"br", b"col", b"embed", b"hr", b"img", b"input", b"link", b"meta",
    b"source", b"track", b"wbr", b"param", b"keygen", b"frame",
    b"p", b"li", b"dt", b"dd", b"tr", b"td", b"th", b"option", b"optgroup", b"thead",
    b"tbody", b"tfoot", b"colgroup", b"rb", b"rt", b"rp", b"rtc", b"html", b"head", b"body",
)
_FLAT = np.array(FLAT_ELEMENTS, dtype=f"S{NAME_BYTES}").view(np.uint64)
_LT, _GT, _SLASH = ord("<"), ord(">"), ord("/")
_BOMS = (b"\xef\xbb\xbf", b"\xfe\xff", b"\xff\xfe")
# WHATWG MIME Sniffing, "binary data byte": control bytes no text encoding of HTML uses.
_BINARY_BYTES = bytes([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)])
BINARY_SNIFF_BYTES = 1445  # the resource header length of the same standard


def looks_binary(body: bytes) -> bool:
    """Whether a body is binary, whatever its Content-Type says (WHATWG MIME Sniffing, 7.1
    "rules for identifying an unknown MIME type": a binary data byte in the first 1445 bytes,
    unless a byte-order mark says UTF-16 or UTF-8)."""
    if body.startswith(_BOMS):
        return False
    head = body[:BINARY_SNIFF_BYTES]
    return any(byte in head for byte in _BINARY_BYTES)


def _names(data: npt.NDArray[np.uint8], starts: npt.NDArray[np.intp]) -> npt.NDArray[np.uint64]:
    """The lower-cased element names beginning at ``starts``, as 8-byte integers."""
    last = len(data) - 1
    window = np.zeros((starts.size, NAME_BYTES), dtype=np.uint8)
    in_name = np.ones(starts.size, dtype=bool)
    for column in range(NAME_BYTES):  # column by column: 8 vector operations, not 8n
        byte = data[np.minimum(starts + column, last)] | 0x20  # ASCII letters to lower case
        in_name &= ((byte >= ord("a")) & (byte <= ord("z"))) | (
            (byte >= ord("0")) & (byte <= ord("9"))
        )
        window[:, column] = np.where(in_name, byte, 0)
    return window.view(np.uint64).ravel()


def tag_depths(body: bytes) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Tag positions (of '<') and the nesting depth each leaves the document at, counting
    only elements that nest (not ``FLAT_ELEMENTS``); a stray end tag never goes below 0."""
    data = np.frombuffer(body, dtype=np.uint8)
    lt = np.flatnonzero(data[:-1] == _LT)
    if lt.size == 0:
        return lt, lt
    following = data[lt + 1] | 0x20
    opens = (following >= ord("a")) & (following <= ord("z"))
    closes = data[lt + 1] == _SLASH
    delta = np.zeros(lt.size, dtype=np.intp)
    if opens.any():
        delta[opens] = np.where(np.isin(_names(data, lt[opens] + 1), _FLAT), 0, 1)
    if closes.any():
        delta[closes] = np.where(np.isin(_names(data, lt[closes] + 2), _FLAT), 0, -1)
    running = np.cumsum(delta)
    depth = running - np.minimum.accumulate(np.minimum(running, 0))
    counted = delta != 0
    return lt[counted], depth[counted] + (delta[counted] < 0)  # an end tag: depth before it


def _depth_upper_bound(body: bytes) -> int:
    """The depth counting every start tag as nesting (void ones too): cheap, and never less
    than the depth ``tag_depths`` finds, so an ordinary page is let through on this alone.
    In C when ``crawler.core._speedups`` is built (one pass, no arrays)."""
    if _speedups is not None:
        return int(_speedups.depth_upper_bound(body))
    return _depth_upper_bound_numpy(body)


def _depth_upper_bound_numpy(body: bytes) -> int:
    """``_depth_upper_bound`` in numpy: the definition, and the path without the C module."""
    data = np.frombuffer(body, dtype=np.uint8)
    following = data[np.flatnonzero(data[:-1] == _LT) + 1]
    letter = following | 0x20
    delta = ((letter >= ord("a")) & (letter <= ord("z"))).astype(np.int32)
    delta -= following == _SLASH
    running = np.cumsum(delta)
    if running.size == 0:
        return 0
    depth = running - np.minimum.accumulate(np.minimum(running, 0))
    return int(depth.max())


def flatten_deep_html(body: bytes, max_depth: int = MAX_TREE_DEPTH) -> bytes:
    """``body`` without the tags nested deeper than ``max_depth`` (their text kept).

    Returns ``body`` itself when nothing is that deep, which is every ordinary page.
    """
    # Counting '<' settles a small page at once; a typical page has too many tags for it.
    if len(body) <= SMALL_PAGE_BYTES and body.count(b"<") <= max_depth:
        return body
    if _depth_upper_bound(body) <= max_depth:
        return body
    positions, depths = tag_depths(body)
    deep = positions[depths > max_depth]
    if deep.size == 0:
        return body
    data = np.frombuffer(body, dtype=np.uint8)
    gt = np.flatnonzero(data == _GT)
    ends = np.searchsorted(gt, deep)  # each deep tag runs to the next '>'
    ends = np.where(ends < gt.size, gt[np.minimum(ends, gt.size - 1)] + 1, len(data))
    marks = np.zeros(len(data) + 1, dtype=np.int32)
    np.add.at(marks, deep, 1)
    np.add.at(marks, ends, -1)
    keep = np.cumsum(marks[:-1], dtype=np.int32) == 0
    flat: bytes = data[keep].tobytes()
    return flat


def parse_bounded(
    result: FetchResult, *, page_url: str | None = None, max_links: int = 1000,
    region: Region | None = None,
) -> tuple[FetchResult, ParsedPage | None]:
    """``parse_result`` within bounds, never raising: the result to record, and the page.

    A body that claims HTML but is binary is recorded as what it is
    (``application/octet-stream``: exact hash only, no parse). A page nested deeper than
    ``MAX_TREE_DEPTH`` is parsed flattened. A page the parser still fails on is recorded with
    ``error_kind="parse_error"`` and the exact hash only (its Content-Type replaced so that
    ``observe`` does not parse it again), and the fetch loop goes on.
    """
    if result.outcome != OK or not is_html(result.content_type, result.body):
        return result, None
    if looks_binary(result.body):
        return replace(result, content_type=BINARY_TYPE), None
    try:
        page = parse_result(
            replace(result, body=flatten_deep_html(result.body)),
            page_url=page_url, max_links=max_links, region=region,
        )
    except Exception:  # any failure of the parser is this page's, not the fetch loop's
        return replace(result, content_type=BINARY_TYPE, error_kind=ErrorKind.PARSE_ERROR), None
    return result, page
