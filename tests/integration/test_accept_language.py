"""CRAWLER_ACCEPT_LANGUAGE: the header goes with every request, redirects included."""

from __future__ import annotations

import pytest
from aiohttp import web
from inprocess import serve_loopback

from crawler.core.model import Outcome, UrlRecord
from crawler.net.fetch import fetch, new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import Settings, default_settings

pytestmark = pytest.mark.timeout(60)


async def fetched_languages(settings: Settings) -> list[str | None]:
    """What each hop of a fetch of /start (redirected to /page) said it accepts."""
    asked: list[str | None] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        asked.append(request.headers.get("Accept-Language"))
        if request.path == "/start":
            raise web.HTTPFound("/page")
        return web.Response(text="<p>bonjour</p>", content_type="text/html")

    async with serve_loopback(handle) as origin:
        session = new_session("testbot/1.0", address_policy=AddressPolicy(["127.0.0.0/8"]))
        async with session:
            result = await fetch(session, UrlRecord(url_id=1, url=origin + "/start"), settings)
    assert result.outcome == Outcome.OK
    return asked


async def test_every_hop_asks_for_the_language_set() -> None:
    settings = default_settings(accept_language="fr-CH, fr;q=0.9")
    assert await fetched_languages(settings) == ["fr-CH, fr;q=0.9", "fr-CH, fr;q=0.9"]


async def test_no_language_is_asked_for_by_default() -> None:
    assert await fetched_languages(default_settings()) == [None, None]


def test_a_header_value_that_would_split_the_request_is_refused() -> None:
    with pytest.raises(ValueError, match="accept_language"):
        Settings(accept_language="en\r\nX-Injected: 1")
