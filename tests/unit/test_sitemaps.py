"""The sitemap and feed reader (crawler.core.sitemaps, crawler.net.sitemapfetch.read_body):
every format, every W3C date form, the protocol's limits, and hostile files read with flat
memory."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from crawler.core.sitemaps import (
    ATOM,
    CUT_BYTES,
    CUT_URLS,
    INDEX,
    LASTMOD,
    PUBLISHED,
    RSS,
    TEXT,
    UPDATED,
    URLSET,
    SitemapReader,
    location_allows,
    parse_date,
    read_document,
    robots_sitemaps,
)
from crawler.net.sitemapfetch import read_body

DATA = Path(__file__).resolve().parents[1] / "data" / "sitemaps"
BASE = "https://example.org/sitemap.xml"
MiB = 1024 * 1024


@pytest.mark.parametrize(("name", "kind", "urls", "kinds"), [
    ("usp-simple-urlset.xml", URLSET, ["/page1", "/page2"], {LASTMOD}),
    ("usp-simple-index.xml", INDEX, ["/sitemap1.xml", "/sitemap2.xml"], {LASTMOD}),
    ("usp-plaintext.txt", TEXT, ["/page1", "/page2"], set()),
    ("usp-rss2.0.xml", RSS, ["/page1", "/page2"], {PUBLISHED}),
    ("usp-atom0.3.xml", ATOM, ["/page1", "/page2"], {PUBLISHED}),
    ("usp-atom1.0.xml", ATOM, ["/page1", "/page2"], {UPDATED}),
    ("usp-google-news.xml", URLSET, ["/page1", "/page2"], {LASTMOD, PUBLISHED}),
    # The image extension's own <image:loc> is not a page of the site.
    ("usp-google-image.xml", URLSET, ["/news/one", "/news/two"], set()),
    # hreflang alternates (<xhtml:link>) are tolerated, not taken.
    ("usp-hreflang.xml", URLSET, ["/en/page", "/fr/page"], {LASTMOD}),
])
def test_every_format_of_the_fixtures(name: str, kind: str, urls: list[str],
                                      kinds: set[str]) -> None:
    reader, entries = read_document((DATA / name).read_bytes(), BASE)
    assert (reader.kind, reader.cut, reader.error) == (kind, None, None)
    assert [e.url for e in entries] == ["https://example.org" + u for u in urls]
    assert {h.kind for e in entries for h in e.hints} == kinds


def test_gzip_is_undone_by_its_magic_number() -> None:
    body = gzip.compress((DATA / "usp-simple-urlset.xml").read_bytes())
    found: list[str] = []
    reader = read_body(body, BASE, on_entries=lambda es: found.extend(e.url for e in es))
    assert reader.kind == URLSET and reader.error is None
    assert found == ["https://example.org/page1", "https://example.org/page2"]


@pytest.mark.parametrize(("text", "expected"), [
    ("1997", "1997-01-01T00:00:00+00:00"),
    ("1997-07", "1997-07-01T00:00:00+00:00"),
    ("1997-07-16", "1997-07-16T00:00:00+00:00"),
    ("1997-07-16T19:20+01:00", "1997-07-16T18:20:00+00:00"),
    ("1997-07-16T19:20:30+01:00", "1997-07-16T18:20:30+00:00"),
    ("1997-07-16T19:20:30.45+01:00", "1997-07-16T18:20:30.450000+00:00"),
    ("1997-07-16T19:20:30Z", "1997-07-16T19:20:30+00:00"),
    ("1997-07-16T19:20:30-0500", "1997-07-17T00:20:30+00:00"),  # no colon, as in the wild
    ("1997-07-16 19:20:30", "1997-07-16T19:20:30+00:00"),  # no zone: UTC
    ("Wed, 16 Jul 1997 19:20:30 GMT", "1997-07-16T19:20:30+00:00"),  # RSS pubDate
])
def test_every_w3c_datetime_form(text: str, expected: str) -> None:
    from datetime import UTC, datetime

    claimed = parse_date(text)
    assert claimed is not None
    assert datetime.fromtimestamp(claimed, UTC).isoformat() == expected


@pytest.mark.parametrize("text", ["", "yesterday", "1997-13-01", "1997-02-30", "97-07-16"])
def test_dates_that_are_not_dates_are_dropped(text: str) -> None:
    assert parse_date(text) is None


def test_invalid_xml_keeps_what_came_before_the_fault() -> None:
    body = (b"<urlset><url><loc>http://a.example/1</loc></url>"
            b"<url><loc>http://a.example/2</loc></url><url><loc>http://a.exa</urlset>")
    reader, entries = read_document(body, "http://a.example/sitemap.xml")
    assert [e.url for e in entries] == ["http://a.example/1", "http://a.example/2"]
    assert reader.error is not None and reader.error.startswith("invalid_xml")


@pytest.mark.parametrize("body", [
    b"<html><body>not a sitemap</body></html>",
    b"\x00\x01\x02garbage",
    b"",
])
def test_what_is_no_sitemap_lists_nothing(body: bytes) -> None:
    reader, entries = read_document(body, "http://a.example/sitemap.xml")
    assert entries == []
    assert reader.error is not None or reader.invalid == 1


def test_an_entity_expansion_bomb_is_refused() -> None:
    lol = b"".join(b'<!ENTITY l%d "&l%d;&l%d;&l%d;&l%d;&l%d;&l%d;&l%d;&l%d;&l%d;&l%d;">'
                   % ((i,) + (i - 1,) * 10) for i in range(1, 10))
    body = (b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY l0 "lol">' + lol + b"]>"
            b"<urlset><url><loc>http://a.example/&l9;</loc></url></urlset>")
    reader, entries = read_document(body, "http://a.example/sitemap.xml")
    assert entries == [] and reader.error is not None


def test_robots_sitemap_lines_and_the_location_rule() -> None:
    body = "User-agent: *\nDisallow: /x\nSitemap: http://A.example/s.xml # c\n" \
           "sitemap:http://cdn.example/b/s.xml\nSITEMAP: not a url\n"
    assert robots_sitemaps(body) == ["http://a.example/s.xml", "http://cdn.example/b/s.xml"]
    # A sitemap lists URLs of its own origin, under its own directory.
    assert location_allows("http://a.example/blog/s.xml", "http://a.example/blog/p", None)
    assert not location_allows("http://a.example/blog/s.xml", "http://a.example/p", None)
    assert not location_allows("http://a.example/s.xml", "http://b.example/p", None)
    assert not location_allows("http://a.example/s.xml", "https://a.example/p", None)
    # Listed in a.example's robots.txt, a sitemap elsewhere may list a.example's URLs.
    assert location_allows("http://cdn.example/b/s.xml", "http://a.example/p", "http://a.example")
    assert not location_allows("http://cdn.example/b/s.xml", "http://c.example/p",
                               "http://a.example")


# --- hostile files, read with flat memory -------------------------------------------------


def chunks(head: bytes, item: Iterator[bytes], tail: bytes, size: int = 256 * 1024
           ) -> Iterator[bytes]:
    """A document produced piece by piece, never whole."""
    yield head
    buffer: list[bytes] = []
    held = 0
    for piece in item:
        buffer.append(piece)
        held += len(piece)
        if held >= size:
            yield b"".join(buffer)
            buffer, held = [], 0
    yield b"".join(buffer) + tail


def read_streamed(pieces: Iterator[bytes], base: str) -> tuple[SitemapReader, int, int]:
    """Feed a reader; return it, the entries it gave, and the peak memory traced (bytes)."""
    reader = SitemapReader(base)
    count = 0
    tracemalloc.start()
    try:
        for piece in pieces:
            count += len(reader.feed(piece))
            if reader.done:
                break
        count += len(reader.close())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return reader, count, peak


@pytest.mark.timeout(120)
def test_a_sitemap_of_a_million_urls_is_cut_at_50000() -> None:
    urls = (b"<url><loc>http://a.example/p/%d</loc><lastmod>2024-01-01</lastmod></url>" % i
            for i in range(10**6))
    reader, count, peak = read_streamed(
        chunks(b'<?xml version="1.0"?><urlset>', urls, b"</urlset>"),
        "http://a.example/sitemap.xml")
    assert (reader.kind, reader.cut, count) == (URLSET, CUT_URLS, 50_000)
    # The entries themselves (50,000, each with a hint) are what is held; the tree is not.
    print(f"10^6 URLs: peak {peak / MiB:.1f} MiB")
    assert peak < 40 * MiB


@pytest.mark.timeout(120)
def test_a_feed_of_100000_entries_is_cut_at_50000() -> None:
    items = (b"<item><title>t</title><link>/e/%d</link>"
             b"<pubDate>Mon, 01 Jan 2024 12:00:00 GMT</pubDate></item>" % i
             for i in range(100_000))
    reader, count, peak = read_streamed(
        chunks(b'<rss version="2.0"><channel><title>x</title>', items, b"</channel></rss>"),
        "http://a.example/feed.xml")
    assert (reader.kind, reader.cut, count) == (RSS, CUT_URLS, 50_000)
    print(f"10^5 feed entries: peak {peak / MiB:.1f} MiB")
    assert peak < 40 * MiB


@pytest.mark.timeout(120)
def test_a_file_past_50_mb_is_cut_there_with_flat_memory() -> None:
    # 60 MB of white space between two entries: nothing is held for it.
    spaces = (b" " * MiB for _ in range(60))
    reader, count, peak = read_streamed(
        chunks(b"<urlset><url><loc>http://a.example/1</loc></url>", spaces, b"</urlset>"),
        "http://a.example/sitemap.xml")
    assert (reader.cut, count, reader.size) == (CUT_BYTES, 1, 50 * MiB)
    print(f"60 MB file: peak {peak / MiB:.1f} MiB")
    assert peak < 8 * MiB


def gzip_bomb(decompressed: int, head: bytes) -> bytes:
    """A gzip member whose deflate stream repeats one compressed MiB of spaces: built from one
    block, never by compressing the whole."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = compressor.compress(head) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(b" " * MiB) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(b" " * MiB) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert block == again  # after a full flush the same input gives the same bytes
    return first + block * (decompressed // MiB)


@pytest.mark.timeout(120)
def test_a_gzip_that_inflates_to_10_gb_is_cut_at_50_mb() -> None:
    body = gzip_bomb(10 * 1024 * MiB, b"<urlset><url><loc>http://a.example/1</loc></url>")
    assert len(body) < 20 * MiB
    found: list[str] = []
    tracemalloc.start()
    try:
        reader = read_body(body, "http://a.example/sitemap.xml.gz",
                           on_entries=lambda es: found.extend(e.url for e in es))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (reader.cut, found, reader.size) == (CUT_BYTES, ["http://a.example/1"], 50 * MiB)
    print(f"10 GB gzip bomb ({len(body) / MiB:.1f} MiB compressed): peak {peak / MiB:.1f} MiB")
    assert peak < 8 * MiB


# Files written by other software, copied unchanged (tests/data/sitemaps/README.md names the
# repository, path and commit of each): how many URLs each lists, how many of them carry a
# date, and the first date, in UTC.
@pytest.mark.parametrize(("name", "kind", "count", "dated", "first"), [
    # WordPress core (wp-sitemap.xml): an index, then a urlset without lastmod.
    ("wordpress-wp-sitemap.xml", INDEX, 5, 0, None),
    ("wordpress-wp-sitemap-posts-page-1.xml", URLSET, 15, 0, None),
    # Yoast SEO: a newline before the XML declaration, an XSL processing instruction, the
    # image extension, and a closing comment.
    ("yoast-sitemap_index.xml", INDEX, 3, 3, (LASTMOD, "2017-04-17T13:32:22+00:00")),
    ("yoast-page-sitemap.xml", URLSET, 7, 6, (LASTMOD, "2016-05-15T10:18:23+00:00")),
    # sphinx-sitemap: ElementTree's single-quoted declaration, no dates.
    ("sphinx-sitemap.xml", URLSET, 5, 0, None),
    # jekyll-sitemap and jekyll-feed (Atom), dates with a +01:00 offset.
    ("jekyll-sitemap.xml", URLSET, 5, 2, (LASTMOD, "2024-02-26T20:25:17+00:00")),
    ("jekyll-feed.xml", ATOM, 2, 2, (PUBLISHED, "2024-02-26T21:40:04+00:00")),
    # Hugo's default sitemap (xhtml namespace) and RSS templates.
    ("hugo-sitemap.xml", URLSET, 3, 1, (LASTMOD, "2026-01-25T15:50:52+00:00")),
    ("hugo-index.xml", RSS, 1, 1, (PUBLISHED, "2026-01-25T15:50:52+00:00")),
    # crawler-commons' test data: a prefixed sitemaps.org namespace, a text file with a BOM.
    ("crawler-commons-sitemap.ns.xml", URLSET, 2, 0, None),
    ("crawler-commons-sitemap-with-bom.txt", TEXT, 2, 0, None),
])
def test_sitemaps_and_feeds_written_by_other_software(
        name: str, kind: str, count: int, dated: int, first: tuple[str, str] | None) -> None:
    reader, entries = read_document((DATA / name).read_bytes(), BASE)
    assert (reader.kind, reader.cut, reader.error, reader.invalid) == (kind, None, None, 0)
    assert len(entries) == count == len({e.url for e in entries})
    assert sum(1 for e in entries if e.hints) == dated
    if first is not None:
        hint = next(e for e in entries if e.hints).hints[0]
        assert (hint.kind, datetime.fromtimestamp(hint.claimed, UTC).isoformat()) == first


def test_white_space_before_the_xml_declaration_in_any_chunking() -> None:
    # Yoast's index arrives in pieces: the leading newline alone, then the rest byte by byte.
    body = (DATA / "yoast-sitemap_index.xml").read_bytes()
    reader = SitemapReader(BASE)
    found = [e.url for i in range(len(body)) for e in reader.feed(body[i : i + 1])]
    found += [e.url for e in reader.close()]
    assert reader.error is None and len(found) == 3
