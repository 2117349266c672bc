"""The Scrapy side of bench_throughput.py: the same URLs, the same politeness, the same
per-page fingerprint (parse_page, which computes the simhash, + content_hash), nothing stored.

Run by bench_throughput.py as ``python bench/scrapy_spider.py URLS_FILE CONCURRENCY``; prints
one JSON line: pages parsed and the times of the first and last response.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import scrapy
from scrapy.crawler import CrawlerProcess

from crawler.core.extract import parse_page
from crawler.core.fingerprint import content_hash


class FingerprintSpider(scrapy.Spider):  # type: ignore[misc]
    name = "fingerprint"

    def __init__(self, urls: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls = urls
        self.pages = 0
        self.first: float | None = None
        self.last = 0.0

    async def start(self) -> AsyncIterator[scrapy.Request]:
        for url in self.urls:
            yield scrapy.Request(url, callback=self.parse, dont_filter=True)

    def parse(self, response: Any) -> None:
        now = time.time()
        self.first = now if self.first is None else self.first
        content_type = response.headers.get(b"Content-Type", b"").decode("latin-1") or None
        parse_page(response.body, content_type)  # the simhash is part of the parse
        content_hash(response.body)
        self.pages += 1
        self.last = time.time()


def main() -> None:
    urls_file, concurrency = sys.argv[1], int(sys.argv[2])
    with open(urls_file) as handle:
        urls = handle.read().split()
    process = CrawlerProcess(settings={
        "CONCURRENT_REQUESTS": concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "ROBOTSTXT_OBEY": True,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "RETRY_ENABLED": False,
        "LOG_LEVEL": "ERROR",
        "USER_AGENT": "bench-scrapy",
        # Scrapy's advice for broad crawls (many domains at once): a per-slot-aware queue.
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
        "REACTOR_THREADPOOL_MAXSIZE": 20,
    })
    crawler = process.create_crawler(FingerprintSpider)
    process.crawl(crawler, urls=urls)
    process.start()
    spider = crawler.spider
    print(json.dumps({"pages": spider.pages, "first": spider.first, "last": spider.last}))


if __name__ == "__main__":
    main()
