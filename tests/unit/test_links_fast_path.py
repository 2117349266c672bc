"""The seed path's shortcut: a URL recognised as already normal must be exactly what the full
normalisation makes of it, and common seed lines must take the shortcut."""

from __future__ import annotations

import random

from crawler.core import links
from crawler.core.links import _already_normal, _normalize, normalize_url

# Pieces chosen to sit on every edge the shortcut decides: case, ports (default, leading zero,
# out of range), dot and empty segments, punycode, IP literals, percent-escapes, ;parameters,
# session ids, unsorted, blank and repeated query keys, fragments, whitespace, credentials.
SCHEMES = ["http", "https", "HTTP", "ftp", "Https"]
HOSTS = ["example.com", "www.site7.example", "Example.com", "a-b.c", "-a.com", "a-.com",
         "xn--bcher-kva.example", "ab--cd.example", "localhost", "127.0.0.1", "a..b",
         "a" * 63 + ".com", "a" * 64 + ".com", "h1.example.", "bücher.example", "[::1]",
         "user:pw@example.com", "1.example", "x.1com", "h.x-1"]
PORTS = ["", ":80", ":443", ":8080", ":0", ":08080", ":65535", ":65536", ":99999", ":"]
SEGMENTS = ["a", "B", ".", "..", "", "p-1.html", "~u", "%41", "%7e", "a;jsessionid=1", "x;y",
            "a b", ".well-known", "é", "a+b", "a:b", "a@b", "..a", "a.."]
QUERIES = ["", "?", "?a=1", "?b=1&a=1", "?a=1&b=2", "?a", "?a=", "?=1", "?a=1&a=0", "?a=0&a=1",
           "?a=z&a0=c", "?a0=c&a=z", "?sid=1", "?SID=1&a=2", "?aspsessionidxy=1", "?a=1&&b=2",
           "?a=b=c", "?id=7&page-x=~", "?a=%20", "?a=+", "?q=x y"]
TAILS = ["", "#frag", "#", " ", "\n"]


def random_url(rng: random.Random) -> str:
    if rng.random() < 0.5:  # mostly plain: one odd piece at most
        def pick(pieces: list[str]) -> str:
            return rng.choice(pieces) if rng.random() < 0.1 else pieces[0]
        plain = True
    else:
        def pick(pieces: list[str]) -> str:
            return rng.choice(pieces)
        plain = False
    segments = SEGMENTS if not plain or rng.random() < 0.3 else ["a", "B", "p-1.html", "~u"]
    path = "/".join(rng.choice(segments) for _ in range(rng.randint(0, 4)))
    host = rng.choice(HOSTS[:2] if plain else HOSTS)
    query = rng.choice(QUERIES[:3] if plain else QUERIES)
    return (pick(["", " "]) + pick(SCHEMES[:2] if plain else SCHEMES) + "://" + host
            + pick(PORTS) + pick(["/", ""]) + path + query + pick(TAILS))


def test_the_shortcut_agrees_with_the_full_normalisation() -> None:
    rng = random.Random(13)
    shortcut = 0
    for _ in range(40_000):
        url = random_url(rng)
        full = _normalize(url)
        assert normalize_url(url) == full, url
        if _already_normal(url):
            shortcut += 1
            assert full == url, url
    # The generator reaches both sides of the shortcut, many times.
    assert shortcut > 1_000


def test_plain_seed_lines_take_the_shortcut() -> None:
    for url in ["https://www.site5.example/a/page-5.html?id=5", "http://h1.example:8080/page/3",
                "http://example.com/", "https://a.example/x?a=1&b=2&b=3"]:
        assert _already_normal(url), url
        assert _normalize(url) == url
    for url in ["http://example.com", "HTTP://example.com/", "http://example.com:80/",
                "https://example.com/b?b=1&a=2", "http://example.com/a/../b",
                "http://example.com/?sid=1"]:
        assert not _already_normal(url), url
        assert normalize_url(url) == _normalize(url) != url


def test_shortcut_pattern_is_anchored() -> None:
    assert links._PLAIN_URL.fullmatch("http://example.com/ trailing") is None
