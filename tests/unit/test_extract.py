"""Decoding, visible text, features, and what the fingerprint calls a change."""

from __future__ import annotations

import codecs
import itertools
import random
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser
from toolcheck import missing

from crawler.core.extract import (
    INVISIBLE_TAGS,
    _raw_visible_text,
    decode_body,
    parse_page,
    parser_input,
    strip_invisible,
    text_features,
    visible_text,
)
from crawler.core.fingerprint import CHANGE_THRESHOLD_BITS, hamming_distance, simhash64
from crawler.core.links import Link

# --- decode_body -------------------------------------------------------------------------------


def test_charset_from_content_type() -> None:
    body = "café".encode("iso-8859-1")
    assert decode_body(body, "text/html; charset=ISO-8859-1") == "café"
    assert decode_body(body, 'text/html; charset="latin1"') == "café"


def test_latin1_label_means_windows_1252() -> None:
    # WHATWG: browsers decode "iso-8859-1" as windows-1252, where 0x93/0x94 are curly quotes.
    assert decode_body(b"\x93hi\x94", "text/html; charset=iso-8859-1") == "\u201chi\u201d"


def test_bom_wins() -> None:
    assert decode_body(codecs.BOM_UTF8 + "é".encode(), "text/html; charset=latin1") == "é"
    assert decode_body(codecs.BOM_UTF16_LE + "日本".encode("utf-16-le"), None) == "日本"
    assert decode_body(codecs.BOM_UTF16_BE + "日本".encode("utf-16-be"), None) == "日本"


def test_meta_charset() -> None:
    html = '<html><head><meta charset="windows-1251"></head><body>привет</body></html>'
    assert "привет" in decode_body(html.encode("cp1251"), "text/html")


def test_meta_http_equiv() -> None:
    html = '<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS"><p>日本語</p>'
    assert "日本語" in decode_body(html.encode("shift_jis"), None)


def test_meta_beyond_2_kib_is_ignored() -> None:
    html = "<!--" + "x" * 3000 + '--><meta charset="cp1251"><p>é</p>'
    assert "é" in decode_body(html.encode("utf-8"), None)


def test_unknown_or_non_text_charset_falls_back_to_utf8() -> None:
    body = "é".encode()
    assert decode_body(body, "text/html; charset=no-such-charset") == "é"
    assert decode_body(body, "text/html; charset=rot13") == "é"
    assert decode_body(b'<meta charset="base64">' + body, None).endswith("é")


def test_invalid_bytes_are_replaced() -> None:
    assert decode_body(b"ok\xff\xfe!", None) == "ok\ufffd\ufffd!"
    assert decode_body(b"\x81", "text/html; charset=shift_jis") == "\ufffd"


@given(body=st.binary(max_size=300), header=st.none() | st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_decode_never_raises(body: bytes, header: str | None) -> None:
    assert isinstance(decode_body(body, header), str)
    assert isinstance(decode_body(b"<meta charset=" + body[:20] + b">" + body, header), str)


# --- visible text and features -----------------------------------------------------------------


def test_visible_text_keeps_title_and_drops_hidden_parts() -> None:
    html = (
        "<html><head><title> My   Page </title><style>p{color:red}</style>"
        "<script>var secret = 1;</script></head><body>\n<h1>Hello</h1>\n\n<p>world  "
        "<!-- a comment --> again</p><noscript>enable js</noscript>"
        "<template><p>inert</p></template><script>more()</script><p>end</p></body></html>"
    )
    assert visible_text(html) == "My Page Hello world again end"


def test_features_are_log_weighted_lowercase_words() -> None:
    features = text_features("The cat, the CAT; the dog's bone. the_end 42 42")
    # the: 3 -> 1 + floor(log2 3) = 2; cat: 2 -> 2; 42: 2 -> 2; the rest once -> 1
    assert features == {
        "the": 2,
        "cat": 2,
        "dog": 1,
        "s": 1,
        "bone": 1,
        "the_end": 1,
        "42": 2,
    }


@given(st.text(max_size=400))
@settings(max_examples=300, deadline=None)
def test_features_equal_regex_word_counts(text: str) -> None:
    counts = Counter(re.findall(r"\w+", text.lower()))
    expected = {token: count.bit_length() for token, count in counts.items()}
    assert text_features(text) == expected


@pytest.mark.parametrize("text", [
    "ΟΔΟΣ.ΑΒ ΟΔΟΣ. ΟΔΟΣ", "ΑΣ:Β Σ", "\u212aelvin KELVIN İstanbul", "CAT Cat cat Straße",
])
def test_features_lower_case_as_str_lower_does(text: str) -> None:
    """The ASCII letters are lowered by the byte translate and the rest as str: a capital
    sigma (final or not by what follows, even past a full stop) and the Kelvin sign must come
    out as the whole text's str.lower() gives them."""
    counts = Counter(re.findall(r"\w+", text.lower()))
    assert text_features(text) == {token: n.bit_length() for token, n in counts.items()}


def test_parse_page_parses_once_for_everything() -> None:
    body = (
        "<html><head><title>Caf\xe9  News</title></head><body><p>Caf\xe9 caf\xe9</p>"
        '<a href="/next">next</a><noscript><a href="/ns">ns</a></noscript></body></html>'
    ).encode("cp1252")
    page = parse_page(body, "text/html; charset=windows-1252", page_url="http://example.com/")
    assert page.title == "Café News"
    assert page.text == "Café News Café café next"
    assert page.features == {"café": 2, "news": 1, "next": 1}
    assert page.links == [Link("http://example.com/next"), Link("http://example.com/ns")]
    assert parse_page(b"<p>x</p>", None).title is None
    assert parse_page(b"<p>x</p>", None).links == []
    assert parse_page(b"", None).features == {}


# --- what counts as a change (docs/MODEL.md section 1) -----------------------------------------

_STOPWORD_TEXT = "the of and to a in is that it for on with as was by at be this are from or"
STOPWORDS = _STOPWORD_TEXT.split()


def make_paragraphs(seed: int, count: int, words_per_paragraph: int = 80) -> list[str]:
    """English-like paragraphs: 40% stopwords, the rest from a Zipf (1/rank) vocabulary."""
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choices("etaoinshrdlucmfwyp", k=rng.randint(3, 9))) for _ in range(3000)
    ]
    cumulative = list(itertools.accumulate(1.0 / rank for rank in range(1, len(vocabulary) + 1)))
    paragraphs = []
    for _ in range(count):
        words = [
            rng.choice(STOPWORDS)
            if rng.random() < 0.4
            else rng.choices(vocabulary, cum_weights=cumulative)[0]
            for _ in range(words_per_paragraph)
        ]
        paragraphs.append(" ".join(words) + ".")
    return paragraphs


def fingerprint(header: str, paragraphs: list[str]) -> int:
    html = f"<html><body><p>{header}</p>" + "".join(f"<p>{p}</p>" for p in paragraphs)
    return simhash64(parse_page(html.encode(), None).features)


def test_timestamp_and_counter_changes_are_cosmetic_on_a_long_page() -> None:
    distances = []
    for seed in range(20):
        paragraphs = make_paragraphs(seed, count=25)  # 2,000 words
        before = fingerprint("Updated 2024-05-01 12:00:00, 1234 views", paragraphs)
        after = fingerprint("Updated 2024-05-02 08:17:43, 1301 views", paragraphs)
        distances.append(hamming_distance(before, after))
    assert max(distances) < CHANGE_THRESHOLD_BITS


def test_rewriting_a_paragraph_is_a_change() -> None:
    distances = []
    for seed in range(20):
        paragraphs = make_paragraphs(seed, count=5)  # a 400-word article
        rewritten = list(paragraphs)
        rewritten[2] = make_paragraphs(seed + 1000, count=1)[0]
        before = fingerprint("Updated 2024-05-01", paragraphs)
        distances.append(hamming_distance(before, fingerprint("Updated 2024-05-01", rewritten)))
    # A fifth of the text replaced: well past k = 6 bits in the typical case, and past it in
    # nearly every case (raw-count weights, for comparison, give median 6.5 and 11 of 20).
    assert statistics.median(distances) >= CHANGE_THRESHOLD_BITS + 2
    assert sum(d >= CHANGE_THRESHOLD_BITS for d in distances) >= 18


def test_identical_text_in_different_markup_has_the_same_fingerprint() -> None:
    plain = "<p>Breaking: the river rose two metres overnight.</p>"
    styled = '<div class="x"><p>Breaking: the <b>river</b> rose two metres overnight.</p></div>'
    assert simhash64(parse_page(plain.encode(), None).features) == simhash64(
        parse_page(styled.encode(), None).features
    )


# --- parser_input: the body itself when it is the decoded text's UTF-8 ------------------------

PYTHON_DOC = Path("/usr/share/doc/python3-doc/html")


def _same_parse(body: bytes, header: str | None) -> object:
    """``parser_input`` gives the parser what ``decode_body`` would, as bytes or as text."""
    given = parser_input(body, header)
    text = decode_body(body, header)
    if isinstance(given, bytes):
        assert given is body and text.encode("utf-8") == body
    else:
        assert given == text
    assert LexborHTMLParser(given).html == LexborHTMLParser(text).html
    page = parse_page(body, header, page_url="http://127.0.0.1/a/b.html")
    assert page.raw_text == _raw_visible_text(LexborHTMLParser(text))
    return given


@pytest.mark.parametrize(("body", "header", "as_bytes"), [
    ("<p>café ☕ 日本</p>".encode(), None, True),
    ("<p>café</p>".encode(), "text/html; charset=UTF-8", True),
    ('<meta charset="utf8"><p>café</p>'.encode(), None, True),
    (b"<p>plain ascii</p>", "text/html; charset=latin1", False),  # cp1252 by WHATWG
    (b"<p>ok\xff\xfe!</p>", None, False),  # invalid UTF-8: replaced in the text
    (b"<p>cut \xe2\x82</p>", None, False),  # a truncated sequence
    (b"<p>nul \x00 byte</p>", None, True),
    (codecs.BOM_UTF8 + "<p>é</p>".encode(), None, False),  # the BOM is not the text's
    (codecs.BOM_UTF16_LE + "<p>日本</p>".encode("utf-16-le"), None, False),
    ('<meta charset="windows-1251"><p>привет</p>'.encode("cp1251"), None, False),
    ("<p>é</p>".encode(), "text/html; charset=undefined", True),  # no such charset: UTF-8
    ("<p>é</p>".encode(), "text/html; charset=rot13", True),
])
def test_parser_input_is_the_body_only_when_the_text_is_its_utf8(
    body: bytes, header: str | None, as_bytes: bool
) -> None:
    assert isinstance(_same_parse(body, header), bytes) == as_bytes


@given(st.binary(max_size=300), st.sampled_from([None, "text/html", "text/html; charset=utf-8",
                                                   "text/html; charset=latin1"]))
def test_parser_input_parses_as_the_decoded_text(body: bytes, header: str | None) -> None:
    _same_parse(b"<html><body><p>" + body + b"</p></body></html>", header)


def test_parser_input_on_the_benchmark_corpus() -> None:
    """python3-doc's pages (the throughput bench's corpus) parse alike either way, and take
    the bytes path (else it saves nothing)."""
    pages = sorted(PYTHON_DOC.glob("**/*.html"))[:200]
    if not pages:
        missing(f"no HTML pages under {PYTHON_DOC}", "python3-doc")
    given = [_same_parse(p.read_bytes(), "text/html") for p in pages]
    assert sum(isinstance(g, bytes) for g in given) == len(pages)


# --- strip_invisible: strip_tags's tree, in one walk ------------------------------------------

_NESTING = [
    "<script>var a = '<p>x</p>';</script><p>after</p>",
    "<noscript><style>p{}</style><p>no js</p></noscript><p>text</p>",
    "<object><object><p>inner</p></object><p>outer</p></object><p>shown</p>",
    "<template><script>x</script><p>t</p></template><p>shown</p>",
    "<div><iframe><p>raw</p></iframe><noembed>e</noembed><noframes>f</noframes>ok</div>",
    "<table><tr><td><object>o<object>p</object></object></td></tr></table>",
    "<svg><style>s</style><script>t</script><text>vector</text></svg>",
    "<p>unclosed <style>p{}<p>still style",
]
_PIECES = [*(f"<{tag}>" for tag in INVISIBLE_TAGS), *(f"</{tag}>" for tag in INVISIBLE_TAGS),
           "<p>", "</p>", "<div>", "</div>", "<table>", "<td>", "<svg>", "</svg>", "word ", "é "]


def _both_ways(html: str | bytes) -> None:
    by_tag, in_one_walk = LexborHTMLParser(html), LexborHTMLParser(html)
    by_tag.strip_tags(list(INVISIBLE_TAGS))
    strip_invisible(in_one_walk)
    assert in_one_walk.html == by_tag.html
    assert _raw_visible_text(LexborHTMLParser(html)) == (
        by_tag.root.text(separator=" ") if by_tag.root is not None else ""
    )


@pytest.mark.parametrize("html", _NESTING)
def test_strip_invisible_leaves_strip_tags_tree(html: str) -> None:
    _both_ways(html)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=40))
def test_strip_invisible_on_any_nesting_of_the_tags(pieces: list[str]) -> None:
    _both_ways("".join(pieces))


def test_strip_invisible_on_the_benchmark_corpus() -> None:
    pages = sorted(PYTHON_DOC.glob("**/*.html"))[:200]
    if not pages:
        missing(f"no HTML pages under {PYTHON_DOC}", "python3-doc")
    for page in pages:
        _both_ways(page.read_bytes())
