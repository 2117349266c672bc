"""Hostile pages: the parser and the fingerprint stay within bounds, and a page that makes
them fail is recorded as an error.

Each hostile page is parsed and fingerprinted in a child process under a CPU-time limit
(``RLIMIT_CPU``), and its peak memory is read from the kernel's accounting (``ru_maxrss``);
nothing here is timed. Unbounded, the nested document alone would take lexbor about an hour
(its tree builder is quadratic in depth).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap

import pytest

from crawler.core import bounds
from crawler.core.bounds import (
    BINARY_TYPE,
    MAX_TREE_DEPTH,
    flatten_deep_html,
    looks_binary,
    parse_bounded,
    tag_depths,
)
from crawler.core.extract import parse_page
from crawler.core.model import OK, ErrorKind, FetchResult, UrlRecord
from crawler.core.observe import observe

CPU_LIMIT_SECONDS = 20  # per page, generous for a loaded machine; unbounded is ~an hour
MEMORY_LIMIT_MB = 600  # peak RSS of the child, interpreter and libraries included
MAX_BODY_BYTES = 10 * 1024 * 1024  # what fetch() caps a body at by default

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys
    from crawler.core.bounds import parse_bounded
    from crawler.core.model import FetchResult, UrlRecord
    from crawler.core.observe import observe

    case, cap = sys.argv[1], int(sys.argv[2])
    content_type = "text/html"
    if case == "nested":
        n = 10**6
        body = (b"<html><body>" + b"<div>" * n + b"deep" + b"</div>" * n)[:cap]
    elif case == "one_word":
        body = b"<html><body><p>" + b"w" * (5 * 1024 * 1024) + b"</p></body></html>"
    elif case == "rare_encoding":
        text = "<html><head><title>日本語</title></head><body><p>日本語のテキスト</p></body></html>"
        body = text.encode("iso-2022-jp") * 2000
        content_type = "text/html; charset=iso-2022-jp"
    elif case == "binary":
        body = os.urandom(cap)
    result = FetchResult(fetched_at=0.0, duration_seconds=0.0, outcome="ok", status=200,
                         body=body, content_type=content_type)
    record = UrlRecord(url_id=1, url="http://hostile.test/")
    recorded, page = parse_bounded(result, page_url="http://hostile.test/", max_links=1000)
    obs = observe(record, recorded, 6, page)
    print(json.dumps({
        "size": len(body),
        "error_kind": obs.error_kind,
        "simhash": obs.simhash,
        "hashed": obs.content_hash is not None,
        "content_type": recorded.content_type,
        "title": page.title if page else None,
        "text": page.text[:40] if page else None,
        "words": len(page.features) if page else None,
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))
    """
)


def _limit_cpu() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_SECONDS, CPU_LIMIT_SECONDS))


def run_case(case: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, case, str(MAX_BODY_BYTES)],
        capture_output=True, text=True, preexec_fn=_limit_cpu, timeout=600, check=False,
    )
    # SIGXCPU (-24) is the CPU limit: the page was not bounded.
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    figures: dict[str, object] = json.loads(done.stdout)
    maxrss = figures["maxrss_mb"]
    assert isinstance(maxrss, float) and maxrss < MEMORY_LIMIT_MB, figures
    assert figures["hashed"] is True, figures
    return figures


def test_ten_megabytes_of_a_million_nested_elements() -> None:
    figures = run_case("nested")
    assert figures["size"] == MAX_BODY_BYTES
    assert figures["error_kind"] is None and figures["simhash"] is not None
    assert figures["text"] == "deep"  # flattened, not dropped: the text survives


def test_a_page_of_one_five_megabyte_word() -> None:
    figures = run_case("one_word")
    assert figures["error_kind"] is None and figures["simhash"] is not None
    assert figures["words"] == 1


def test_a_page_in_a_rare_encoding() -> None:
    figures = run_case("rare_encoding")
    assert figures["title"] == "日本語"
    assert figures["text"] == ("日本語 日本語のテキスト " * 4)[:40]


def test_a_binary_body_that_claims_html() -> None:
    figures = run_case("binary")
    # Recorded as what it is: the exact hash, no parse, no simhash.
    assert figures["content_type"] == BINARY_TYPE
    assert figures["simhash"] is None and figures["words"] is None


# --- the bounds themselves ---------------------------------------------------------------


def test_flattening_caps_the_depth_and_keeps_the_text() -> None:
    body = b"<html><body>" + b"<div><span>" * 2000 + b"core" + b"</span></div>" * 2000
    flat = flatten_deep_html(body)
    assert int(tag_depths(flat)[1].max()) == MAX_TREE_DEPTH
    assert parse_page(flat, "text/html").text == "core"


def test_ordinary_pages_are_left_alone() -> None:
    # Thousands of void and end-tag-optional elements are not nesting.
    items = b"<ul>" + b"<li>item<br><img src=x>" * 3000 + b"</ul>"
    body = b"<html><body>" + b"<div>" * 100 + items + b"</div>" * 100 + b"</body></html>"
    assert flatten_deep_html(body) is body
    assert int(tag_depths(body)[1].max()) == 101


def test_binary_sniffing_follows_the_mime_sniffing_standard() -> None:
    assert looks_binary(b"<html>\x00\x01")
    assert not looks_binary("<p>é</p>".encode("utf-16"))  # a BOM says text
    assert not looks_binary("<p>é</p>\t\r\n".encode())
    assert looks_binary(b"%PDF-1.7\n\x00\x00")


def test_a_page_the_parser_fails_on_is_recorded_as_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_parser(*args: object, **kwargs: object) -> None:
        raise RuntimeError("parser bug")

    monkeypatch.setattr(bounds, "parse_result", broken_parser)
    body = b"<html><body><p>fine</p></body></html>"
    result = FetchResult(fetched_at=0.0, duration_seconds=0.0, outcome=OK, status=200,
                         body=body, content_type="text/html")
    recorded, page = parse_bounded(result)
    assert page is None
    assert (recorded.outcome, recorded.error_kind) == (OK, ErrorKind.PARSE_ERROR)
    obs = observe(UrlRecord(url_id=1, url="http://a.test/"), recorded, 6, page)
    assert obs.error_kind == ErrorKind.PARSE_ERROR
    assert (obs.simhash, obs.content_hash is not None) == (None, True)
