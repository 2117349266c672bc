"""Link extraction and URL normalisation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser

from crawler.core import links
from crawler.core.links import (
    MAX_URL_LENGTH,
    Link,
    extract_links,
    is_trap,
    normalize_url,
    site_of,
)

PAGE = "https://example.com/dir/page.html"


def urls(html: str, page_url: str = PAGE, **kwargs: object) -> list[str]:
    return [link.url for link in extract_links(html, page_url, **kwargs)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("HTTP://Example.COM/a", "http://example.com/a"),
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443", "https://example.com/"),
        ("https://example.com:8443/a", "https://example.com:8443/a"),
        ("http://example.com", "http://example.com/"),
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/a#frag", "http://example.com/a"),
        ("http://example.com/?b=2&a=1&a=0", "http://example.com/?a=0&a=1&b=2"),
        ("http://example.com/%7euser/a%2fb", "http://example.com/~user/a%2Fb"),
        ("http://bücher.example/ä", "http://xn--bcher-kva.example/%C3%A4"),
        ("http://user:secret@example.com/", "http://example.com/"),
        ("http://example.com/p?PHPSESSID=abc&x=1", "http://example.com/p?x=1"),
        ("http://example.com/p?sid=1&sessionid=2&jsessionid=3", "http://example.com/p"),
        ("http://example.com/p?ASPSESSIONIDQQGGGNCU=XYZ&q=a", "http://example.com/p?q=a"),
        ("http://example.com/p;jsessionid=0A1B2C?x=1", "http://example.com/p?x=1"),
        ("http://example.com/p?side=1", "http://example.com/p?side=1"),
        ("  http://example.com/a  ", "http://example.com/a"),
        ("http://[::1]:8080/a", "http://[::1]:8080/a"),
    ],
)
def test_normalize_url(raw: str, expected: str) -> None:
    assert normalize_url(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "ftp://example.com/a",
        "javascript:alert(1)",
        "mailto:someone@example.com",
        "tel:+123",
        "data:text/html,hi",
        "/relative/only",
        "http://",
        "http://example.com:99999/",
        "http://example.com/" + "a" * MAX_URL_LENGTH,
        "",
    ],
)
def test_normalize_url_rejects(raw: str) -> None:
    assert normalize_url(raw) is None


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_normalize_url_never_raises_on_text(raw: str) -> None:
    normalize_url(raw)
    normalize_url("http://example.com/" + raw)


@given(
    host=st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,10}\.(com|ORG|de)", fullmatch=True),
    path=st.lists(st.sampled_from(["a", "B", ".", "..", "%7e", "ä", "x y", ""]), max_size=5),
    query=st.lists(
        st.tuples(st.sampled_from(["a", "b", "sid", "Q"]), st.sampled_from(["1", "", "ü", "%2F"])),
        max_size=4,
    ),
    port=st.sampled_from(["", ":80", ":8080"]),
)
@settings(max_examples=200, deadline=None)
def test_normalize_url_is_idempotent(
    host: str, path: list[str], query: list[tuple[str, str]], port: str
) -> None:
    raw = f"http://{host}{port}/" + "/".join(path) + "?" + "&".join(f"{k}={v}" for k, v in query)
    once = normalize_url(raw)
    assert once is not None
    assert normalize_url(once) == once
    assert once.startswith(f"http://{host.lower()}")
    assert ":80/" not in once


def test_site_of() -> None:
    assert site_of("HTTPS://Example.com:443/a?b") == "https://example.com"
    assert site_of("http://example.com:8080/a") == "http://example.com:8080"
    assert site_of("http://example.com/a") == "http://example.com"


def test_is_trap() -> None:
    assert not is_trap("http://example.com/a/b/c")
    assert is_trap("http://example.com/cal/2024/cal/2024/cal/2024/cal/2024")
    assert not is_trap("http://example.com/cal/2024/cal/2024/cal/2024")
    assert is_trap("http://example.com/" + "/".join(f"d{i}" for i in range(13)))
    assert is_trap("http://example.com/" + "a" * MAX_URL_LENGTH)
    assert not is_trap("http://example.com/")


def test_relative_links_resolve_against_page() -> None:
    html = '<a href="other.html">o</a><a href="../up">u</a><a href="/root">r</a>'
    assert urls(html) == [
        "https://example.com/dir/other.html",
        "https://example.com/up",
        "https://example.com/root",
    ]


def test_base_href_is_used() -> None:
    html = (
        '<html><head><base href="https://cdn.example.org/base/"></head>'
        '<body><a href="x">x</a><a href="../y">y</a></body></html>'
    )
    assert urls(html) == ["https://cdn.example.org/base/x", "https://cdn.example.org/y"]


def test_relative_base_href_resolves_against_page() -> None:
    html = '<base href="/sub/"><a href="x">x</a>'
    assert urls(html) == ["https://example.com/sub/x"]


def test_fragments_dropped_and_fragment_only_links_skipped() -> None:
    html = '<a href="#top">t</a><a href="a.html#s1">1</a><a href="a.html#s2">2</a>'
    assert urls(html) == ["https://example.com/dir/a.html"]


def test_non_http_schemes_ignored() -> None:
    html = (
        '<a href="javascript:void(0)">j</a><a href="JavaScript:go()">j</a>'
        '<a href="mailto:x@example.com">m</a><a href="tel:123">t</a>'
        '<a href="data:text/plain,hi">d</a><a href="ftp://example.com/f">f</a>'
        '<a href="">empty</a><a>none</a><a href="ok">ok</a>'
    )
    assert urls(html) == ["https://example.com/dir/ok"]


def test_mixed_case_host_default_port_and_session_id_deduplicate() -> None:
    html = (
        '<a href="HTTPS://EXAMPLE.com:443/p?b=1&a=2">1</a>'
        '<a href="https://example.com/p?a=2&b=1&PHPSESSID=zz">2</a>'
        '<a href="/p;jsessionid=AB12?a=2&b=1">3</a>'
    )
    assert urls(html) == ["https://example.com/p?a=2&b=1"]


def test_nofollow_skipped_unless_asked() -> None:
    html = (
        '<a href="/a" rel="nofollow">a</a><a href="/b" rel="Noopener NOFOLLOW">b</a>'
        '<a href="/c">c</a>'
    )
    assert urls(html) == ["https://example.com/c"]
    links = extract_links(html, PAGE, follow_nofollow=True)
    assert links == [
        Link("https://example.com/a", nofollow=True),
        Link("https://example.com/b", nofollow=True),
        Link("https://example.com/c", nofollow=False),
    ]


def test_area_and_alternate_link_elements() -> None:
    html = (
        '<head><link rel="stylesheet" href="/s.css"><link rel="alternate" hreflang="fr" '
        'href="/fr/"><link rel="alternate stylesheet" href="/alt.css">'
        '<link rel="canonical" href="/canon"></head><body><map><area href="/area" shape="rect">'
        "</map></body>"
    )
    assert urls(html) == ["https://example.com/fr/", "https://example.com/area"]


def test_whitespace_inside_href_is_removed() -> None:
    assert urls('<a href="  /a\n/b\t ">x</a>') == ["https://example.com/a/b"]


def test_accepts_a_parsed_tree() -> None:
    tree = LexborHTMLParser('<a href="/x">x</a>')
    assert extract_links(tree, PAGE) == [Link("https://example.com/x")]


def test_max_links_bounds_the_result() -> None:
    html = "".join(f'<a href="/p{i}">{i}</a>' for i in range(50))
    assert urls(html, max_links=7) == [f"https://example.com/p{i}" for i in range(7)]
    assert urls(html, max_links=0) == []


def test_hundred_thousand_links_are_bounded() -> None:
    """The first 1,000 links of a page of 100,000, in order. Its time is a benchmark figure
    (bench/bench_fingerprint.py), not asserted here: a timed test fails on a busy machine."""
    html = "<html><body>" + "".join(f'<a href="/p/{i}">{i}</a>' for i in range(100_000))
    links = extract_links(html, PAGE, max_links=1000)
    assert len(links) == 1000
    assert links[-1].url == "https://example.com/p/999"


def test_junk_links_do_not_make_the_scan_unbounded() -> None:
    junk = "".join('<a href="javascript:void(0)">j</a>' for _ in range(5_000))
    html = junk + '<a href="/late">late</a>'
    # 10 candidates per wanted link: with max_links=100 the scan gives up before /late.
    assert urls(html, max_links=100) == []
    assert urls(html, max_links=1000) == ["https://example.com/late"]


# The shared cache keys of extract_links: every href must resolve as against the page's own
# base. Pieces sit on the edges of the shortcuts (dot segments, queries and fragments, ";"
# parameters, schemes relative or not, whitespace, percent-escapes, IP hosts, empty paths).
BASES = st.sampled_from([
    "https://example.com/dir/page.html", "https://example.com", "http://example.com/",
    "http://example.com/a/b/", "http://example.com/a/b?x=/y/z", "https://Ex.COM:443/a;p/b;q?x#f",
    "http://127.0.0.1:8080/a//b/c", "http://example.com/a/./b/../c", "mailto:x@example.com",
    "https://example.com/a/b;c", "http://[::1]/a/b", "javascript:void(0)", "http://example.com?q",
])
HREF_PIECES = ["a", "b.html", ".", "..", "", "/", "//", "?", "?x=1", "#", "#f", ";p", "%41",
               " ", "\t", ":", "http:", "https://example.com", "http://other.example:81",
               "~u", "+", "=", "&", "é", "mailto:y", "-"]


@settings(max_examples=2000, deadline=None)
@given(BASES, st.lists(st.sampled_from(HREF_PIECES), max_size=6))
def test_shared_cache_keys_resolve_as_the_page_base_does(base: str, pieces: list[str]) -> None:
    href = "".join(pieces)
    assert links._resolve_href(base, links._directory_of(base), href) == links._resolve(
        base, href
    )


def test_navigation_links_are_resolved_once_per_directory() -> None:
    links._resolve.cache_clear()
    page = '<a href="guide.html#intro">g</a><a href="https://example.org/x#y">x</a>'
    for n in range(20):
        assert urls(page, f"https://example.com/docs/p{n}.html?v={n}") == [
            "https://example.com/docs/guide.html", "https://example.org/x"
        ]
    assert links._resolve.cache_info().misses == 2
