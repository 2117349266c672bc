"""The watched region in the pure core: which text counts, checked selectors, and a new region
taken as a baseline rather than a change."""

from __future__ import annotations

import pytest

from crawler.core.extract import parse_page, visible_text
from crawler.core.fingerprint import content_hash
from crawler.core.model import OK, FetchResult, UrlRecord
from crawler.core.observe import observe, parse_result, updated_record
from crawler.core.region import Region, SelectorError, checked_selector, effective_region
from crawler.core.textdiff import text_lines

PAGE = (
    "<html><head><title>Title</title><script>var x = 1;</script></head><body>"
    "<nav class='ad'>buy <b class='ad'>now</b></nav>"
    "<div id='main'><p class='x'>alpha <span class='x'>beta</span></p><p>gamma</p></div>"
    "<div id='foot'>delta</div></body></html>"
)


def test_no_region_is_the_whole_visible_text() -> None:
    whole = visible_text(PAGE)
    assert whole == visible_text(PAGE, Region()) == "Title buy now alpha beta gamma delta"
    assert parse_page(PAGE.encode(), "text/html").text == whole


def test_watch_keeps_outermost_matches_once_in_document_order() -> None:
    assert visible_text(PAGE, Region(watch=".x")) == "alpha beta"  # the nested span not twice
    assert visible_text(PAGE, Region(watch="#foot, #main")) == "alpha beta gamma delta"
    assert visible_text(PAGE, Region(watch="#missing")) == ""


def test_ignore_removes_matches_even_nested_ones() -> None:
    assert visible_text(PAGE, Region(ignore=".ad")) == "Title alpha beta gamma delta"
    assert visible_text(PAGE, Region(watch="body", ignore="span, #foot")) == (
        "buy now alpha gamma"
    )


def test_region_leaves_title_and_links_of_the_whole_page() -> None:
    page = parse_page(
        b"<title>T</title><nav><a href='/a'>A</a></nav><main>text</main>", "text/html",
        page_url="http://h.test/", region=Region(watch="main"),
    )
    assert page.text == "text" and page.title == "T"
    assert [link.url for link in page.links] == ["http://h.test/a"]


def test_diff_lines_use_the_region() -> None:
    assert text_lines(PAGE.encode(), "text/html", Region(ignore="nav, #foot")) == [
        "Title alpha beta gamma"
    ]


@pytest.mark.parametrize("selector", ["div[", "p >> a", "#", ":nope("])
def test_a_bad_selector_is_named(selector: str) -> None:
    with pytest.raises(SelectorError, match="--watch: not a valid CSS selector"):
        checked_selector(selector, "--watch")


def test_good_and_empty_selectors() -> None:
    assert checked_selector("  div.content > p ", "--ignore") == "div.content > p"
    assert checked_selector("", "--ignore") is None
    assert checked_selector(None, "--ignore") is None


def test_a_urls_own_region_wins_over_its_windows() -> None:
    assert effective_region(None, "nav", "main", None) == Region(None, "nav")
    assert effective_region(None, None, "main", None) == Region("main", None)
    assert Region().key == "" and Region("main").key != Region(None, "main").key


def fetched(body: str, at: float) -> FetchResult:
    return FetchResult(fetched_at=at, duration_seconds=0.1, outcome=OK, status=200,
                       body=body.encode(), content_type="text/html")


def record_after(record: UrlRecord, result: FetchResult) -> UrlRecord:
    page = parse_result(result, region=record.region)
    return updated_record(record, result, observe(record, result, 6, page))


def test_a_new_region_is_a_baseline_never_a_change() -> None:
    words = " ".join(f"word{i}" for i in range(60))
    other = " ".join(f"other{i}" for i in range(60))
    body = f"<main>{words}</main><aside>{other}</aside>"
    record = record_after(UrlRecord(url_id=1, url="http://h.test/"), fetched(body, 1000.0))
    assert record.fingerprint_region == ""
    watched = UrlRecord(**{**{f: getattr(record, f) for f in record.__slots__},
                           "region": Region(watch="aside")})
    same_bytes = observe(watched, fetched(body, 2000.0), 6)
    assert same_bytes.changed is False and same_bytes.simhash_distance is None
    moved = observe(watched, fetched(body.replace("word1 ", "x "), 2000.0), 6)
    assert moved.changed is None  # bytes moved under a new region: unknown, not a change
    after = record_after(watched, fetched(body, 2000.0))
    assert after.fingerprint_region == Region(watch="aside").key
    assert after.change_count == 0 and after.last_content_hash == content_hash(body.encode())
    # From then on the region's own text decides.
    outside = observe(after, fetched(f"<main>{other}</main><aside>{other}</aside>", 3000.0), 6)
    assert outside.changed is False and outside.simhash_distance == 0
    inside = observe(after, fetched(f"<main>{words}</main><aside>{words}</aside>", 3000.0), 6)
    assert inside.changed is True
