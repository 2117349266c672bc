"""The C paths of ``crawler.core._speedups`` give exactly what the Python versions give: the
stored fingerprints and the depth bound must not depend on whether the module was built."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser
from test_features_equivalence import TEXTS, previous_text_features
from toolcheck import missing

from crawler.core import bounds, extract
from crawler.core.fingerprint import simhash64

try:
    from crawler.core import _speedups
except ImportError:
    _speedups = None  # type: ignore[assignment]

PYTHON_DOC = Path("/usr/share/doc/python3-doc/html")


@pytest.fixture(autouse=True)
def built() -> None:
    """These tests compare the two paths, so they need the C one. ``make test`` builds it; in
    CI a missing module is a broken build (the fetch path would run 12% slower unnoticed)."""
    if _speedups is None:
        missing("crawler.core._speedups was not built (no C compiler at install)", "gcc")


def test_the_fetch_path_uses_the_c_module() -> None:
    assert extract._speedups is not None and bounds._speedups is not None


@given(TEXTS)
@settings(max_examples=500, deadline=None)
def test_text_simhash_in_c_equals_python(text: str) -> None:
    assert extract.text_simhash(text) == extract.text_simhash_python(text)
    assert extract.text_simhash(text) == simhash64(previous_text_features(text))


# Token lengths around the 8-byte words the C hash reads, counts around powers of two (the
# weight is count.bit_length()), and text that is nothing but separators.
@pytest.mark.parametrize("text", [
    "", " ", "   \t\n ", "¶", "— « »", "a", "abcdefg", "abcdefgh", "abcdefghi",
    "abcdefghijklmnop", "abcdefghijklmnopq", "x" * 1000,
    " ".join(["word"] * 1023 + ["other"] * 1024 + ["third"] * 1025),
    " ".join(f"token{k}" for k in range(5000)),  # the table grows several times
    "ΟΔΟΣ ΑΣ Σ'Α plain words",
    "café cafe CAFÉ café¶ x¶y ¶¶ naïve\u00a0text",
    "\udcff lone surrogate \ud800 words",
])
def test_text_simhash_in_c_equals_python_on_edges(text: str) -> None:
    assert extract.text_simhash(text) == extract.text_simhash_python(text)


def test_text_simhash_in_c_equals_python_on_random_words() -> None:
    rng = random.Random(14)
    alphabet = "abcXYZ_09é日¶ -.,"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 400)))
        assert extract.text_simhash(text) == extract.text_simhash_python(text)


def corpus() -> list[bytes]:
    """The throughput bench's pages (python3-doc), the first 200."""
    pages = sorted(PYTHON_DOC.glob("**/*.html"))[:200]
    if not pages:
        missing(f"no HTML pages under {PYTHON_DOC}", "python3-doc")
    return [page.read_bytes() for page in pages]


def test_text_simhash_in_c_equals_python_on_the_benchmark_corpus() -> None:
    for body in corpus():
        text = extract._raw_visible_text(LexborHTMLParser(body))
        assert extract.text_simhash(text) == extract.text_simhash_python(text)


MARKUP = st.lists(
    st.sampled_from([b"<", b"</", b"<a", b"<A>", b"<z", b"<Z", b"</z", b"</a>", b"<br>",
                     b"<!--", b"-->", b"<1", b"< ", b"/", b">", b"x", b"<<", b"</<", b"\x00",
                     b"\xff"]),
    max_size=200,
).map(b"".join)


@given(MARKUP)
@settings(max_examples=500, deadline=None)
def test_depth_bound_in_c_equals_numpy(body: bytes) -> None:
    assert bounds._depth_upper_bound(body) == bounds._depth_upper_bound_numpy(body)


@pytest.mark.parametrize("body", [
    b"", b"<", b"<a", b"a<", b"</a></b><c>", b"<z><Z><@><[><`><{>", b"<div>" * 600,
    b"</div>" * 5 + b"<p><q>" * 3, b"<" * 10 + b"a",
])
def test_depth_bound_in_c_equals_numpy_on_edges(body: bytes) -> None:
    assert bounds._depth_upper_bound(body) == bounds._depth_upper_bound_numpy(body)


def test_depth_bound_in_c_equals_numpy_on_the_benchmark_corpus() -> None:
    for body in corpus():
        assert bounds._depth_upper_bound(body) == bounds._depth_upper_bound_numpy(body)
