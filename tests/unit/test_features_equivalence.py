"""The byte-level feature extraction gives the same features, so the same stored simhash, as
the implementation it replaced (kept here verbatim as the reference) on varied pages."""

from __future__ import annotations

import re
from collections import Counter
from itertools import filterfalse

from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.core.extract import parse_page, text_features, text_simhash
from crawler.core.fingerprint import simhash64

_WORD = re.compile(r"\w+")


def previous_text_features(text: str) -> dict[str, int]:
    """text_features before issue 14: str.split, Counter, the regex for non-alphanumeric parts."""
    counts = Counter(text.lower().split())
    impure_keys = list(filterfalse(str.isalnum, counts))
    if impure_keys:
        impure_text = "".join([(key + " ") * counts.pop(key) for key in impure_keys])
        counts.update(_WORD.findall(impure_text))
    weights = dict(counts)
    weights.update({token: count.bit_length() for token, count in counts.items() if count > 1})
    return weights


# Words that exercise every path: ASCII, underscores and digits, ASCII punctuation inside words,
# accented and non-Latin letters, Unicode punctuation and spaces (no-break, ideographic, thin),
# combining marks, and letters whose lower case changes length (U+0130).
PIECES = st.sampled_from([
    "the", "Cat", "CAT", "dog's", "the_end", "42", "3.14", "a-b", "x/y", "(call)", "foo()",
    "café", "Straße", "İstanbul", "naïve", "日本語", "слово", "«quote»", "em—dash", "a\u00a0b",
    "wide\u3000space", "thin\u2009gap", "e\u0301", "₂", "Ⅻ", "٣", "tab\there", "line\nbreak",
    "\x1cunit\x1fsep", "\u2028", "&amp;", "<b>", "'", "_", "__init__", "ÆØÅ", "ǅ", "ﬁ",
    # Capital sigma lowers by its context, across ASCII punctuation too; Kelvin sign to ASCII.
    "ΟΔΟΣ", "ΟΔΟΣ.ΑΒ", "Σ'Α", "ΑΣ", "\u212aelvin", "KELVIN",
])
TEXTS = st.lists(PIECES | st.text(max_size=12), max_size=120).map(" ".join)


@given(TEXTS)
@settings(max_examples=400, deadline=None)
def test_features_equal_the_previous_implementation(text: str) -> None:
    assert text_features(text) == previous_text_features(text)


@given(TEXTS)
@settings(max_examples=400, deadline=None)
def test_the_fused_simhash_equals_the_simhash_of_the_features(text: str) -> None:
    """The fetch path hashes byte tokens with numpy weights: the same value as the features'."""
    assert text_simhash(text) == simhash64(previous_text_features(text))


def test_the_fused_simhash_weighs_repeated_words_like_the_features() -> None:
    text = " ".join(["word"] * 1000 + ["Straße"] * 3 + ["rare", "em—dash", "dash"] * 2)
    assert text_features(text)["word"] == 10  # 1 + floor(log2(1000))
    assert text_simhash(text) == simhash64(previous_text_features(text)) != 0
    assert text_simhash("") == 0 == text_simhash(" \u3000 ")


@given(st.lists(st.tuples(st.sampled_from(["p", "h1", "li", "td", "span", "a", "script"]),
                          TEXTS), min_size=1, max_size=30),
       st.sampled_from(["utf-8", "windows-1252", "utf-16"]))
@settings(max_examples=150, deadline=None)
def test_page_fingerprints_are_unchanged(blocks: list[tuple[str, str]], charset: str) -> None:
    html = "<html><head><title>t</title></head><body>" + "".join(
        f"<{tag}>{text}</{tag}>" for tag, text in blocks
    ) + "</body></html>"
    body = html.encode(charset, errors="replace")
    page = parse_page(body, f"text/html; charset={charset}")
    assert page.features == previous_text_features(page.raw_text)
    assert page.simhash == simhash64(previous_text_features(page.raw_text))
