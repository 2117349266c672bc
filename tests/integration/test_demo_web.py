"""The demo web over real HTTP on loopback, with a hand-driven clock."""

from __future__ import annotations

import email.utils
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from multidict import CIMultiDict

from crawler.core.extract import text_features, visible_text
from crawler.core.fingerprint import hamming_distance, simhash64
from crawler.demo import (
    DemoWeb,
    Link,
    PageSpec,
    PoissonProcess,
    ScheduledProcess,
    SiteSpec,
    demo_sites,
    evolving_site,
)
from crawler.demo.web import http_date

pytestmark = pytest.mark.timeout(60)

START = 1_700_000_000.0


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def fingerprint(html: str) -> int:
    return simhash64(text_features(visible_text(html)))


def scheduled_site() -> SiteSpec:
    return SiteSpec(
        "scheduled",
        (
            PageSpec(
                "/",
                (Link("news.html"), Link("gone.html"), Link("{site:1}/")),
                real=ScheduledProcess((10.0, 20.0)),
                cosmetic=ScheduledProcess((15.0,)),
            ),
            PageSpec("/news.html", (Link("/"),), cosmetic_per_request=True),
            PageSpec("/gone.html", deleted_at_seconds=12.0),
        ),
        robots_txt="User-agent: *\nDisallow: /private/\n",
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
async def web(clock: FakeClock) -> AsyncIterator[DemoWeb]:
    sites = [scheduled_site(), *demo_sites(n_sites=3, pages_per_site=5, seed=1)]
    async with DemoWeb(sites, clock=clock, start_time=START) as demo:
        yield demo


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def get(
    session: aiohttp.ClientSession, url: str, **headers: str
) -> tuple[int, CIMultiDict[str], str]:
    async with session.get(url, headers=headers) as response:
        return response.status, CIMultiDict(response.headers), await response.text()


async def test_every_site_is_its_own_loopback_host(
    web: DemoWeb, session: aiohttp.ClientSession
) -> None:
    hosts = [urlsplit(origin) for origin in web.origins]
    assert [h.hostname for h in hosts] == [f"127.0.0.{2 + k}" for k in range(4)]
    assert len({h.port for h in hosts}) == 1 and hosts[0].port != 0
    for k, origin in enumerate(web.origins):
        status, _, body = await get(session, origin + "/__truth__")
        assert status == 200
        assert json.loads(body)["site"] == web.sites[k].name
    # The root links to the next site by its real origin.
    _, _, body = await get(session, web.origins[0] + "/")
    assert f'href="{web.origins[1]}/"' in body
    assert len(web.urls()) == 3 + 3 * 5
    assert all(url.startswith(tuple(web.origins)) for url in web.urls())


async def test_headers_and_conditional_requests(
    web: DemoWeb, session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    url = web.origins[0] + "/"
    clock.now = START + 11.0
    status, headers, body = await get(session, url)
    assert status == 200
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Last-Modified"] == http_date(START + 10.0)
    assert headers["Date"] == http_date(START + 11.0)
    etag = headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"')

    status, headers_304, body_304 = await get(session, url, **{"If-None-Match": etag})
    assert (status, body_304, headers_304["ETag"]) == (304, "", etag)
    status, _, _ = await get(session, url, **{"If-Modified-Since": headers["Last-Modified"]})
    assert status == 304
    status, _, _ = await get(session, url, **{"If-None-Match": '"other"'})
    assert status == 200

    # The link to gone.html disappears at 12 s: a real change; the new ETag no longer matches.
    clock.now = START + 12.5
    status, headers, new_body = await get(session, url, **{"If-None-Match": etag})
    assert status == 200 and headers["ETag"] != etag
    assert headers["Last-Modified"] == http_date(START + 12.0)
    assert hamming_distance(fingerprint(body), fingerprint(new_body)) >= 6
    assert "gone.html" in body and "gone.html" not in new_body


async def test_cosmetic_change_changes_bytes_not_simhash(
    web: DemoWeb, session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    url = web.origins[0] + "/"
    clock.now = START + 14.0
    _, before_headers, before = await get(session, url)
    clock.now = START + 16.0  # past the cosmetic change at 15 s
    _, after_headers, after = await get(session, url)
    assert before != after and before_headers["ETag"] != after_headers["ETag"]
    assert before_headers["Last-Modified"] == after_headers["Last-Modified"]
    assert hamming_distance(fingerprint(before), fingerprint(after)) < 6
    # A page with per-request text differs on every fetch, by a few bits at most.
    news = web.origins[0] + "/news.html"
    _, first_headers, first = await get(session, news)
    clock.now += 1.0
    _, second_headers, second = await get(session, news)
    assert first != second and first_headers["ETag"] == second_headers["ETag"]
    assert hamming_distance(fingerprint(first), fingerprint(second)) < 6


async def test_unknown_and_deleted_pages_are_404(
    web: DemoWeb, session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    gone = web.origins[0] + "/gone.html"
    assert (await get(session, gone))[0] == 200
    assert (await get(session, web.origins[0] + "/no-such-page"))[0] == 404
    clock.now = START + 12.0
    assert (await get(session, gone))[0] == 404
    assert gone not in web.urls()


async def test_robots_txt_is_per_site(web: DemoWeb, session: aiohttp.ClientSession) -> None:
    status, headers, body = await get(session, web.origins[0] + "/robots.txt")
    assert status == 200 and "Disallow: /private/" in body
    assert headers["Content-Type"].startswith("text/plain")
    _, _, default = await get(session, web.origins[1] + "/robots.txt")
    assert default == "User-agent: *\nAllow: /\n"


async def test_truth_matches_what_is_served(
    web: DemoWeb, session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    """Walk a Poisson site through time: the content changes exactly when the truth says."""
    site_index = 1
    origin = web.origins[site_index]
    fetched: dict[str, tuple[str, str]] = {}
    outcomes = {"changed": 0, "unchanged": 0}
    for step in range(8):
        clock.now = START + 7.0 * step
        status, _, body = await get(session, origin + "/__truth__")
        truth: dict[str, Any] = json.loads(body)
        assert status == 200 and truth["now"] == clock.now
        assert truth == web.site_truth(site_index)
        for page in truth["pages"]:
            assert all(t <= clock.now for t in page["real_change_times"])
            assert all(t <= clock.now for t in page["cosmetic_change_times"])
            assert page["version"] == len(page["real_change_times"])
            status, headers, html = await get(session, origin + page["path"])
            assert status == 200
            last_real = max(page["real_change_times"], default=page["created_at"])
            assert headers["Last-Modified"] == http_date(last_real)
            served_at = email.utils.parsedate_to_datetime(headers["Date"]).timestamp()
            assert served_at == pytest.approx(clock.now, abs=1.0)
            previous = fetched.get(page["path"])
            if previous is not None:
                previous_etag, previous_html = previous
                changed = page["real_change_times"] and page["real_change_times"][-1] > (
                    clock.now - 7.0
                )
                distance = hamming_distance(fingerprint(previous_html), fingerprint(html))
                if changed:
                    assert headers["ETag"] != previous_etag and distance >= 6
                else:
                    assert distance < 6
                outcomes["changed" if changed else "unchanged"] += 1
            fetched[page["path"]] = (headers["ETag"], html)
    assert outcomes["changed"] > 0 and outcomes["unchanged"] > 0
    kinds = {page["process"]["kind"] for page in truth["pages"]}
    assert kinds <= {"poisson", "periodic", "scheduled"}


async def test_page_changes_after_its_change_time(
    session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    """A fast Poisson page (one change per 3 s): content is stable until its first change."""
    site = SiteSpec("fast", (PageSpec("/", real=PoissonProcess(1 / 3)),))
    async with DemoWeb([site], clock=clock, start_time=START, host_base=40) as demo:
        first_change = site.real_change_times(site.pages[0], 100.0)[0]
        url = demo.origins[0] + "/"
        clock.now = START + first_change - 1e-3
        _, before_headers, before = await get(session, url)
        _, again_headers, again = await get(session, url)
        assert before == again and before_headers["ETag"] == again_headers["ETag"]
        clock.now = START + first_change
        _, after_headers, after = await get(session, url)
        assert after_headers["ETag"] != before_headers["ETag"]
        assert hamming_distance(fingerprint(before), fingerprint(after)) >= 6
        truth = demo.truth()[0]["pages"]
        assert isinstance(truth, list)
        assert truth[0]["real_change_times"] == [START + first_change]


async def test_evolving_site_window_over_http(
    session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    """Crawling the evolving site breadth first over HTTP finds the true page window."""
    site = evolving_site(n_initial=25, n_created=5, n_deleted=3, n_moved=3, seed=2)
    async with DemoWeb([site], clock=clock, start_time=START, host_base=50) as demo:
        origin = demo.origins[0]
        for t in (0.0, 60.0, 120.0):
            clock.now = START + t
            window = [origin + "/"]
            seen = set(window)
            for url in window:
                _, _, html = await get(session, url)
                for href in html.split('href="')[1:]:
                    target = origin + href.split('"', 1)[0]
                    if target not in seen:
                        seen.add(target)
                        window.append(target)
            assert window[:10] == demo.window(0, 10)
            assert sorted(window) == sorted(demo.urls())


async def test_fixed_port_in_use_is_an_error(web: DemoWeb) -> None:
    clash = DemoWeb([scheduled_site()], port=web.port)
    with pytest.raises(OSError):
        await clash.start()
