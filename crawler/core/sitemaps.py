"""Sitemaps and feeds read as lists of URLs with the dates they claim.

One reader takes every format the major engines accept, told apart by the document itself
(never by the Content-Type, which servers get wrong): XML ``urlset`` and ``sitemapindex``
(sitemaps.org 0.9, any or no namespace), plain-text sitemaps (one URL a line), RSS 2.0 and
RSS 1.0 (RDF) and Atom feeds. Of the news, image, video and hreflang extensions only
``news:publication_date`` is read (a ``published`` date). Gzip is undone by the caller
(``crawler.net.sitemapfetch``).

Expat (the standard library's streaming parser) is fed chunks as they arrive, and the reader
keeps only the entry being read (at most ``MAX_TEXT`` characters of any element, ``MAX_DEPTH``
levels of nesting), so its memory does not grow with the file: no maintained package both
does that and leaves the fetching to ``crawler.net.fetch``. A document that declares entities
is refused: no sitemap needs one, and every expansion bomb does.

Past ``MAX_URLS`` entries or ``MAX_BYTES`` bytes (uncompressed) a file is cut (``cut`` says
which); invalid XML ends it the same way (``error``); either way the entries read before are
kept. ``location_allows`` is the protocol's rule for which URLs a sitemap may list.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import codecs
import email.utils
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import urljoin, urlsplit
from xml.parsers import expat

from crawler.core.links import normalize_url

MAX_URLS = 50_000  # sitemaps.org: per file, index or urlset
MAX_BYTES = 50 * 1024 * 1024  # sitemaps.org: 50 MB uncompressed per file
# Index levels followed below a site's first sitemap: the protocol allows none (an index
# lists urlsets), real sites nest one or two.
MAX_INDEX_DEPTH = 3

URLSET = "urlset"
INDEX = "sitemapindex"
RSS = "rss"
ATOM = "atom"
TEXT = "text"

LASTMOD = "lastmod"
UPDATED = "updated"
PUBLISHED = "published"

CUT_URLS = "max_urls"
# Character data kept of one element (a URL or a date; longer is not one of them), and the
# nesting followed: neither grows with a hostile file.
MAX_TEXT = 8192
MAX_DEPTH = 64
_RDF_ABOUT = "http://www.w3.org/1999/02/22-rdf-syntax-ns#}about"
CUT_BYTES = "max_bytes"
# An index past MAX_INDEX_DEPTH: the files it names are not read.
CUT_DEPTH = "max_depth"

# Root element (local name) -> the kind of document and its entry element.
_ROOTS = {
    "urlset": (URLSET, "url"),
    "sitemapindex": (INDEX, "sitemap"),
    "rss": (RSS, "item"),
    "RDF": (RSS, "item"),
    "feed": (ATOM, "entry"),
}
# Date elements directly under an entry: local name -> hint kind.
_ENTRY_DATES = {
    "lastmod": LASTMOD,
    "updated": UPDATED,
    "published": PUBLISHED,
    "pubDate": PUBLISHED,
    "date": UPDATED,  # Dublin Core dc:date, as RSS 1.0 and many RSS 2.0 feeds carry it
    "modified": UPDATED,  # dcterms:modified
    "issued": PUBLISHED,  # Atom 0.3
}
_W3C_DATE = re.compile(
    r"(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?"
    r"\s*([Zz]|[+-]\d{2}(?::?\d{2})?)?)?)?)?"
)
_UTF8_BOM = b"\xef\xbb\xbf"
# C0 control characters XML 1.0 does not allow (all but tab, line feed, carriage return):
# never part of a multi-byte UTF-8 sequence, so they are dropped byte by byte.
_XML_CONTROLS = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20)])
_REPLACEMENT = "\ufffd"
_REPLACEMENT_BYTES = _REPLACEMENT.encode()
# How much of an XML document's start is held back to read its declared encoding.
_DECLARATION_BYTES = 512
_ENCODING_DECLARED = re.compile(rb"""^<\?xml[^>]*?\bencoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


@dataclass(frozen=True, slots=True)
class DateHint:
    """A date a sitemap or feed claims for a URL: ``kind`` is LASTMOD, UPDATED or
    PUBLISHED; ``claimed`` is seconds since the epoch."""

    kind: str
    claimed: float


@dataclass(frozen=True, slots=True)
class Entry:
    """One URL a file lists (a page, or in an index a sitemap), normalised, with its dates."""

    url: str
    hints: tuple[DateHint, ...] = ()


def parse_date(text: str) -> float | None:
    """A W3C datetime in any of its forms (``1997`` to ``1997-07-16T19:20:30.45+01:00``, also
    with a space for ``T`` or a ``+hhmm`` zone), or an RFC 822 date (RSS ``pubDate``), as
    seconds since the epoch; None when it is neither. A time without a zone is UTC."""
    text = text.strip()
    match = _W3C_DATE.fullmatch(text)
    if match is not None:
        year, month, day, hour, minute, second, fraction, zone = match.groups()
        try:
            when = datetime(
                int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0),
                int(second or 0), int((fraction or "0")[:6].ljust(6, "0")),
                tzinfo=_zone(zone),
            )
        except ValueError:
            return None
        return when.timestamp()
    try:
        parsed = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _zone(text: str | None) -> timezone:
    if not text or text in ("Z", "z"):
        return UTC
    digits = text[1:].replace(":", "")
    offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
    return timezone(-offset if text[0] == "-" else offset)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


class _Stop(Exception):
    """Reading ends here (cut at a limit, or not a sitemap)."""


@dataclass(slots=True)
class _Pending:
    loc: str | None = None
    link: str | None = None
    guid: str | None = None
    hints: list[DateHint] = field(default_factory=list)


class _Refused(Exception):
    """The document declares entities: a sitemap never needs them, a bomb always does."""


class SitemapReader:
    """Reads one sitemap or feed fed in chunks; ``feed`` and ``close`` return the entries
    completed so far. Once ``done`` (cut at a limit, or invalid), more input is ignored.

    ``base_url`` is the file's URL: relative links of feeds are resolved against it.
    ``invalid`` counts entries whose URL was missing or malformed (dropped).

    In a UTF-8 document (declared so, or declaring nothing), invalid sequences become U+FFFD
    and control characters XML does not allow are dropped before expat sees them (feeds
    pasted together from other text have both, and expat would stop at the first);
    ``repaired`` counts them.
    """

    def __init__(self, base_url: str, *, max_urls: int = MAX_URLS,
                 max_bytes: int = MAX_BYTES) -> None:
        self.base_url = base_url
        self.max_urls = max_urls
        self.max_bytes = max_bytes
        self.kind: str | None = None
        self.cut: str | None = None
        self.error: str | None = None
        self.size = 0
        self.count = 0
        self.invalid = 0
        self.repaired = 0
        self._started = False
        # The XML document's first bytes while its declaration is read; then the UTF-8
        # decoder the bytes go through (None: given to expat as they are).
        self._head: bytes | None = None
        self._utf8: codecs.IncrementalDecoder | None = None
        self._xml: Any = None  # a pyexpat parser (its type is not exported)
        self._text_tail = b""
        self._entry_name = ""
        self._depth = 0
        self._entry_depth = -1  # the depth of the entry element being read, -1 outside one
        # Within an entry: the open elements' (local name, attributes), and the character
        # data of the innermost one, kept only there and only up to MAX_TEXT characters.
        self._open: list[tuple[str, dict[str, str]]] = []
        self._text: list[str] = []
        self._text_size = 0
        self._pending = _Pending()
        self._out: list[Entry] = []
        # Dates as written -> as parsed: a file repeats a few dates on thousands of entries.
        self._dates: dict[str, float | None] = {}

    @property
    def done(self) -> bool:
        return self.cut is not None or self.error is not None

    def feed(self, data: bytes) -> list[Entry]:
        if self.done or not data:
            return self._take()
        room = self.max_bytes - self.size
        if len(data) > room:
            data = data[:room]
            self.cut = CUT_BYTES
        self.size += len(data)
        if not self._started:
            data = self._start(data)
        if self._xml is not None:
            data = self._repair(data, final=False)
            if data:
                self._parse(data, final=False)
        elif self._started:
            self._feed_text(data, final=self.cut is not None)
        return self._take()

    def close(self) -> list[Entry]:
        if not self._started:
            if self.error is None:
                self.error = "empty"
        elif self._xml is not None:
            if not self.done:
                self._parse(self._repair(b"", final=True), final=True)
        elif self.cut is None:
            self._feed_text(b"", final=True)
        return self._take()

    def _take(self) -> list[Entry]:
        out, self._out = self._out, []
        return out

    def _start(self, data: bytes) -> bytes:
        """Decide XML or plain text from the first bytes that are not white space; returns
        what of ``data`` is to be read."""
        bom = _UTF8_BOM if data.startswith(_UTF8_BOM) else b""
        stripped = data[len(bom):].lstrip()
        if not stripped:
            return b""  # only white space so far: decide on the next chunk
        self._started = True
        utf16 = data.startswith((b"\xff\xfe", b"\xfe\xff"))
        if utf16:
            stripped, bom = data, b""
        elif not stripped.startswith(b"<"):
            self.kind = TEXT
            return stripped
        parser = expat.ParserCreate(namespace_separator="}")
        parser.buffer_text = True
        parser.StartElementHandler = self._on_start
        parser.EndElementHandler = self._on_end
        parser.CharacterDataHandler = self._on_text
        parser.EntityDeclHandler = self._on_entity
        self._xml = parser
        if utf16:  # expat reads it itself
            return stripped
        self._head = b""
        # White space before the XML declaration is fatal to expat, and WordPress plugins
        # print a newline there: it is dropped, as browsers and the major engines do.
        return bom + stripped

    # --- invalid bytes ------------------------------------------------------------------

    def _repair(self, data: bytes, *, final: bool) -> bytes:
        """What expat is given of ``data``: the document's start held back until its
        declaration is read; then, for UTF-8, invalid sequences replaced and disallowed
        control characters dropped."""
        if self._head is not None:
            head = self._head + data
            if not final and len(head) < _DECLARATION_BYTES and b">" not in head:
                self._head = head
                return b""
            self._head = None
            match = _ENCODING_DECLARED.match(head.removeprefix(_UTF8_BOM))
            declared = match.group(1).decode("ascii").lower() if match else "utf-8"
            if declared in ("utf-8", "utf8"):
                self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
            data = head
        decoder = self._utf8
        if decoder is None:
            return data
        cleaned = data.translate(None, _XML_CONTROLS)
        self.repaired += len(data) - len(cleaned)
        if cleaned.isascii() and not decoder.getstate()[0] and not final:
            return cleaned  # nearly every chunk of nearly every file: nothing to decode
        text = decoder.decode(cleaned, final)
        if _REPLACEMENT in text:
            self.repaired += text.count(_REPLACEMENT) - cleaned.count(_REPLACEMENT_BYTES)
        return text.encode("utf-8")

    # --- plain text ---------------------------------------------------------------------

    def _feed_text(self, data: bytes, *, final: bool) -> None:
        lines = (self._text_tail + data).split(b"\n")
        self._text_tail = b"" if final else lines.pop()
        if len(self._text_tail) > MAX_TEXT:
            self._text_tail = b""  # a line longer than any URL: not one
        for raw in lines:
            line = raw.decode("utf-8", "replace").strip().lstrip("\ufeff")
            if line and not self._add(line, ()):
                return

    # --- XML ----------------------------------------------------------------------------

    def _parse(self, data: bytes, *, final: bool) -> None:
        try:
            self._xml.Parse(data, final)
        except expat.ExpatError as error:
            if self.cut is None:  # past a cut, the rest was never meant to be read
                self.error = f"invalid_xml: {error}"
        except _Refused:
            self.error = "invalid_xml: entity declarations refused"
        except _Stop:
            pass

    def _on_entity(self, *_args: object) -> None:
        raise _Refused

    def _on_start(self, tag: str, attributes: dict[str, str]) -> None:
        depth = self._depth
        self._depth += 1
        if depth >= MAX_DEPTH:
            self.error = f"invalid_xml: nested deeper than {MAX_DEPTH} elements"
            raise _Stop
        name = _local(tag)
        if depth == 0:
            kind = _ROOTS.get(name)
            if kind is None:
                self.error = f"not_a_sitemap: root element {name[:40]!r}"
                raise _Stop
            self.kind, self._entry_name = kind
        elif self._entry_depth < 0:
            if name == self._entry_name:
                self._entry_depth = depth
                self._pending = _Pending()
                about = attributes.get(_RDF_ABOUT)
                if about:
                    self._pending.link = about.strip()
        else:
            self._open.append((name, attributes))
            self._text, self._text_size = [], 0

    def _on_text(self, data: str) -> None:
        if self._open and self._text_size < MAX_TEXT:
            self._text.append(data)
            self._text_size += len(data)

    def _on_end(self, tag: str) -> None:
        self._depth -= 1
        if self._entry_depth < 0:
            return
        if self._depth == self._entry_depth:
            self._entry_depth = -1
            self._open.clear()
            self._finish_entry()
            if self.cut == CUT_URLS:
                raise _Stop
            return
        level = self._depth - self._entry_depth
        name, attributes = self._open.pop()
        text = "".join(self._text).strip()[:MAX_TEXT]
        self._text, self._text_size = [], 0
        self._read_child(name, attributes, text, level)

    def _read_child(self, name: str, attributes: dict[str, str], text: str, level: int) -> None:
        pending = self._pending
        if level == 1:
            if name == "loc" and self.kind in (URLSET, INDEX):
                pending.loc = text
            elif name == "link" and self.kind in (RSS, ATOM):
                href = attributes.get("href")
                if href is not None:  # Atom: the entry's alternate (or unlabelled) link
                    if attributes.get("rel", "alternate") == "alternate" and pending.link is None:
                        pending.link = href.strip()
                elif text and pending.link is None:
                    pending.link = text
            elif self._permalink(name, attributes, text):
                pending.guid = text
            elif name in _ENTRY_DATES and text:
                self._hint(_ENTRY_DATES[name], text)
        elif level == 2 and name == "publication_date" and text:  # news:news
            self._hint(PUBLISHED, text)

    def _permalink(self, name: str, attributes: dict[str, str], text: str) -> bool:
        """An RSS guid that is a permalink, or an Atom id that is a URL: the entry's URL
        when it has no link."""
        if name == "guid":
            return attributes.get("isPermaLink", "true") != "false"
        return name == "id" and self.kind == ATOM and text.startswith(("http:", "https:"))

    def _hint(self, kind: str, text: str) -> None:
        if text not in self._dates:
            self._dates[text] = parse_date(text)
        claimed = self._dates[text]
        if claimed is not None and len(self._pending.hints) < 8:
            self._pending.hints.append(DateHint(kind, claimed))

    def _finish_entry(self) -> None:
        pending = self._pending
        url = pending.loc or pending.link or pending.guid
        if url is None:
            self.invalid += 1
            return
        self._add(url, tuple(dict.fromkeys(pending.hints)))

    def _add(self, text: str, hints: tuple[DateHint, ...]) -> bool:
        """Take one listed URL; False once the file is cut at MAX_URLS."""
        if self.count >= self.max_urls:
            self.cut = CUT_URLS
            return False
        if self.repaired and _REPLACEMENT in text:
            self.invalid += 1  # the URL held bytes that were no UTF-8: not the site's URL
            return True
        try:
            absolute = urljoin(self.base_url, text) if self.kind in (RSS, ATOM) else text
        except ValueError:
            absolute = ""
        url = normalize_url(absolute) if absolute else None
        if url is None:
            self.invalid += 1
            return True
        self.count += 1
        self._out.append(Entry(url, hints))
        return True


def read_document(data: bytes, base_url: str, **limits: int) -> tuple[SitemapReader, list[Entry]]:
    """A whole (already decompressed) document read at once: the reader and the entries."""
    reader = SitemapReader(base_url, **limits)
    return reader, reader.feed(data) + reader.close()


# --- where sitemaps are and what they may list ------------------------------------------

_SITEMAP_LINE = re.compile(r"^\s*sitemap\s*:\s*(\S+)", re.IGNORECASE | re.MULTILINE)


def robots_sitemaps(robots_body: str) -> list[str]:
    """The ``Sitemap:`` lines of a robots.txt, in order, normalised, each once. They belong to
    no group (RFC 9309 2.2.4), so they are read wherever they stand."""
    found: dict[str, None] = {}
    for match in _SITEMAP_LINE.finditer(robots_body):
        url = normalize_url(match.group(1).split("#", 1)[0])
        if url is not None:
            found[url] = None
    return list(found)


def default_sitemap(origin: str) -> str:
    """Where a site without ``Sitemap:`` lines keeps its sitemap by convention."""
    return origin.rstrip("/") + "/sitemap.xml"


def location_allows(sitemap_url: str, url: str, robots_origin: str | None) -> bool:
    """Whether a sitemap at ``sitemap_url`` may list ``url`` (sitemaps.org, "Sitemap file
    location"): a URL of the sitemap's origin under the sitemap's directory, or, when the
    robots.txt of ``robots_origin`` listed the sitemap (cross-submission), any URL of that
    origin."""
    try:
        target = urlsplit(url)
        own = urlsplit(sitemap_url)
    except ValueError:
        return False
    target_origin = f"{target.scheme}://{target.netloc}".lower()
    if robots_origin is not None and target_origin == robots_origin.lower():
        return True
    if target_origin != f"{own.scheme}://{own.netloc}".lower():
        return False
    directory = own.path[: own.path.rfind("/") + 1] or "/"
    return (target.path or "/").startswith(directory)


def location_prefixes(sitemap_url: str, robots_origin: str | None) -> tuple[str, ...]:
    """``location_allows`` as prefixes of normalised URLs (which always have a path): ``url``
    is allowed when ``url.startswith(prefixes)``, one C call where ``location_allows`` parses
    two URLs."""
    try:
        own = urlsplit(sitemap_url)
    except ValueError:
        return ()
    directory = own.path[: own.path.rfind("/") + 1] or "/"
    prefixes = [f"{own.scheme}://{own.netloc}".lower() + directory]
    if robots_origin is not None:
        prefixes.append(robots_origin.lower().rstrip("/") + "/")
    return tuple(prefixes)
