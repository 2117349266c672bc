"""From response bytes to the visible text and the weighted token features that get simhashed.

Pure: bytes and headers in, plain data out. Parsing uses selectolax's lexbor backend.
"""

from __future__ import annotations

import codecs
import contextlib
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from itertools import filterfalse
from typing import Final

import numpy as np
from selectolax.lexbor import LexborHTMLParser

from crawler.core.fingerprint import simhash64_encoded
from crawler.core.links import Link, extract_links, feed_hrefs
from crawler.core.region import Region

try:
    from crawler.core import _speedups
except ImportError:  # built without a C compiler: the Python versions give the same results
    _speedups = None  # type: ignore[assignment]

# Elements whose text a reader never sees. <template> content is an inert fragment that
# lexbor already leaves out of the text; <head> holds no text once these are gone except
# <title>, which stays on purpose: it is shown in the tab and changes with the content.
INVISIBLE_TAGS: Final = (
    "script", "style", "noscript", "template", "iframe", "noembed", "noframes", "object",
)
# One selector for them all: one walk of the tree, where ``strip_tags`` walks it once per tag.
_INVISIBLE_SELECTOR: Final = ", ".join(INVISIBLE_TAGS)
META_SNIFF_BYTES: Final = 2048

_WORD: Final = re.compile(r"\w+")
# Every ASCII byte that \w does not match (re's \w is str.isalnum() plus "_") becomes a space
# and every ASCII capital lower case; bytes of multi-byte UTF-8 characters (>= 0x80) stay.
_ASCII_NONWORD_TO_SPACE_LOWER: Final = bytes(
    byte if byte >= 0x80
    else ord(chr(byte).lower()) if chr(byte).isalnum() or byte == ord("_")
    else ord(" ")
    for byte in range(256)
)
# The one character whose lower case str.lower() takes from its neighbours (Unicode's
# Final_Sigma): a text holding it is lower-cased whole, as the definition does.
_CAPITAL_SIGMA: Final = "\u03a3"
_HEADER_CHARSET: Final = re.compile(r"""charset\s*=\s*["']?\s*([^\s"';,]+)""", re.IGNORECASE)
# Covers both <meta charset="x"> and <meta http-equiv="content-type" content="...charset=x">.
_META_CHARSET: Final = re.compile(
    rb"""<meta\b[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE
)
_BOMS: Final = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# WHATWG Encoding Standard: these labels mean windows-1252 in browsers, and a <meta> cannot
# declare UTF-16 (the bytes it was read from were ASCII-compatible).
_LABEL_ALIASES: Final = dict.fromkeys(
    ("iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "us-ascii", "ascii", "windows-1252"),
    "cp1252",
)
_META_UTF16: Final = frozenset({"utf-16", "utf-16le", "utf-16be", "utf16"})


@dataclass(frozen=True)
class ParsedPage:
    """One parse of a page: visible text, its simhash, title and (optionally) out-links."""

    raw_text: str  # visible text as the parser joined it, whitespace not yet collapsed
    simhash: int  # simhash64 of text_features(raw_text)
    title: str | None
    links: list[Link] = field(default_factory=list)
    # The feeds the page announces, as written (crawler.core.links.feed_hrefs).
    feeds: tuple[str, ...] = ()

    @cached_property
    def features(self) -> dict[str, int]:
        """The weighted features ``simhash`` was computed from (the fetch path needs none)."""
        return text_features(self.raw_text)

    @cached_property
    def text(self) -> str:
        """Visible text with whitespace collapsed (lazily: most callers never need it)."""
        return " ".join(self.raw_text.split())


def _text_codec(label: str) -> str | None:
    """Python's codec for a charset label, or None when Python has no text codec of that name
    (rot13, base64, ... are codecs but not charsets)."""
    name = _LABEL_ALIASES.get(label.lower(), label)
    try:
        info = codecs.lookup(name)
        if not info._is_text_encoding:
            return None
        info.decode(b"")  # the 'undefined' codec refuses to decode at all
    except (LookupError, ValueError):  # ValueError covers its UnicodeError
        return None
    return info.name


def _body_codec(body: bytes, content_type_header: str | None) -> str:
    """The codec ``decode_body`` reads ``body`` with (a BOM's codec drops the BOM itself: a
    UTF-8 one is read as ``utf-8-sig``)."""
    for bom, codec_name in _BOMS:
        if body.startswith(bom):
            return codec_name
    header = _HEADER_CHARSET.search(content_type_header or "")
    if header and (codec := _text_codec(header.group(1).strip())) is not None:
        return codec
    meta = _META_CHARSET.search(body, 0, META_SNIFF_BYTES)
    if meta:
        label = meta.group(1).decode("ascii").lower()
        if (codec := _text_codec("utf-8" if label in _META_UTF16 else label)) is not None:
            return codec
    return "utf-8"


def decode_body(body: bytes, content_type_header: str | None) -> str:
    """Decode an HTML body; never raises, invalid bytes become U+FFFD.

    Order: byte-order mark (first, as in browsers: it is unambiguous while headers are often
    wrong), Content-Type charset, <meta> charset in the first 2 KiB, UTF-8. An unknown charset
    name falls through to the next source.
    """
    return body.decode(_body_codec(body, content_type_header), errors="replace")


def parser_input(body: bytes, content_type_header: str | None) -> str | bytes:
    """What the HTML parser is given: ``decode_body``'s text, or the body itself when that
    text is the body read as valid UTF-8 with no byte-order mark (nearly every page): lexbor
    reads bytes as UTF-8, so the tree is the same and a page-sized encode is saved."""
    codec = _body_codec(body, content_type_header)
    if codec == "utf-8":  # not "utf-8-sig": a BOM is not part of the text
        with contextlib.suppress(UnicodeDecodeError):
            body.decode("utf-8")  # valid: no byte would be replaced in the text
            return body
    return body.decode(codec, errors="replace")


def strip_invisible(tree: LexborHTMLParser) -> None:
    """Remove every ``INVISIBLE_TAGS`` element, with what it holds, from the tree: the tree
    ``tree.strip_tags(list(INVISIBLE_TAGS))`` leaves (a test checks it), in one walk instead
    of one per tag. Innermost first: a match inside another is freed with its ancestor."""
    for node in reversed(tree.css(_INVISIBLE_SELECTOR)):
        node.decompose()


def _raw_visible_text(tree: LexborHTMLParser, region: Region | None = None) -> str:
    """Visible text of a parsed tree, whitespace as is; with a region, ``ignore``'s matches
    removed, then the text of ``watch``'s outermost matches (a match inside another is
    already in its text), joined in document order. Strips invisible elements in place."""
    strip_invisible(tree)
    if region is not None and region.ignore is not None:
        # Innermost first: a match inside another is gone once its ancestor is decomposed.
        for node in reversed(tree.css(region.ignore)):
            node.decompose()
    if region is None or region.watch is None:
        root = tree.root
        return root.text(separator=" ") if root is not None else ""
    matches = tree.css(region.watch)
    chosen = {node.mem_id for node in matches}
    parts = []
    for node in matches:
        parent = node.parent
        while parent is not None and parent.mem_id not in chosen:
            parent = parent.parent
        if parent is None:
            parts.append(node.text(separator=" "))
    return " ".join(parts)


def visible_text(html: str, region: Region | None = None) -> str:
    """The text a reader sees (title included; scripts, styles, comments not), one space apart;
    only the region's when one is given."""
    return " ".join(_raw_visible_text(LexborHTMLParser(html), region).split())


def _token_counts(text: str) -> Counter[bytes]:
    """Each lower-cased \\w+ token of ``text``, UTF-8 encoded, with its count: exactly
    ``re.findall(r"\\w+", text.lower())`` (a test checks it), without per-word Python work.

    Each ASCII part of ``_word_bytes`` split is a token, counted in C; only the few parts
    holding non-ASCII characters (which may hide Unicode punctuation or spaces) are lowered as
    str and go through the regex. str.lower() turns no non-ASCII character into ASCII but a
    letter, so the parts split where they would in the lowered text.
    """
    counts: Counter[bytes] = Counter(_word_bytes(text).split())
    unicode_parts = list(filterfalse(bytes.isascii, counts))
    if unicode_parts:
        counts.update(_unicode_tokens(b"".join(
            [(part + b" ") * counts.pop(part) for part in unicode_parts]
        )))
    return counts


def _word_bytes(text: str) -> bytes:
    """``text`` as UTF-8 with every ASCII non-word character a space and ASCII letters lower
    case (lowered whole first when it holds a capital sigma): its ASCII parts are tokens."""
    if _CAPITAL_SIGMA in text:
        text = text.lower()
    return text.encode("utf-8", "surrogatepass").translate(_ASCII_NONWORD_TO_SPACE_LOWER)


def _unicode_tokens(parts: bytes) -> list[bytes]:
    """The tokens of space-separated parts holding non-ASCII characters: lowered as str, split
    by the regex (which may find Unicode punctuation or spaces in them), encoded again."""
    # \\w never matches a surrogate, so every word encodes strictly.
    return list(map(str.encode, _WORD.findall(parts.decode("utf-8", "surrogatepass").lower())))


def text_features(text: str) -> dict[str, int]:
    """Lower-cased word unigrams (regex \\w+) weighted 1 + floor(log2(count)); any whitespace.

    Why sublinear weights (Manning et al., IIR section 6.4.1), measured at k = 6: with raw
    counts frequent words dominate the vote and most paragraph rewrites go unseen; binary
    weights or word 2-shingles see them but also flag many mere timestamp edits. Log weights
    sit between, and unigrams are the cheapest features.
    """
    # 1 + floor(log2(count)) == count.bit_length().
    return {token.decode(): count.bit_length() for token, count in _token_counts(text).items()}


def text_simhash(text: str) -> int:
    """``simhash64(text_features(text))``: in C (count, hash and vote in one pass) when
    ``crawler.core._speedups`` is built, else ``text_simhash_python``; a test holds the two to
    the same fingerprint."""
    if _speedups is None:
        return text_simhash_python(text)
    data = _word_bytes(text)
    # As in _token_counts: only the parts holding non-ASCII characters go through the regex.
    unicode_parts = _speedups.non_ascii_parts(data)
    extra = _unicode_tokens(b" ".join(unicode_parts)) if unicode_parts else []
    return _speedups.ascii_simhash(data, extra)


def text_simhash_python(text: str) -> int:
    """``simhash64(text_features(text))`` with the tokens kept bytes and the weights computed
    in numpy (no str-keyed features)."""
    counts = _token_counts(text)
    if not counts:
        return 0
    tallies = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
    # frexp(c) = (m, e) with c = m * 2**e and 0.5 <= m < 1, so e == c.bit_length() (exact in
    # float64 for any count a page can hold).
    weights = np.frexp(tallies)[1].astype(np.float64)
    return simhash64_encoded(list(counts), weights)


def parse_page(
    body: bytes,
    content_type: str | None,
    *,
    page_url: str | None = None,
    max_links: int = 1000,
    follow_nofollow: bool = False,
    region: Region | None = None,
) -> ParsedPage:
    """Decode and parse once; text, features, title, the feeds the page announces, and
    out-links when `page_url` is given. With a ``region`` the text and features are the
    region's; the title and links stay the whole page's (a window grows through every link)."""
    tree = LexborHTMLParser(parser_input(body, content_type))
    title_node = tree.css_first("title")
    title = " ".join(title_node.text().split()) if title_node is not None else None
    links = (
        extract_links(tree, page_url, max_links=max_links, follow_nofollow=follow_nofollow)
        if page_url is not None
        else []
    )
    feeds = feed_hrefs(tree)
    # After the links: stripping removes <noscript>, which may hold links.
    raw_text = _raw_visible_text(tree, region)
    return ParsedPage(
        raw_text=raw_text, simhash=text_simhash(raw_text), title=title or None, links=links,
        feeds=feeds,
    )
