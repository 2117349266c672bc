"""The order seeding writes URLs in: by host key, then URL."""

from __future__ import annotations

import random
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from crawler.core.hostid import url_host_id
from crawler.db.frontier import seed_order

hosts = st.sampled_from(["http://a.example", "https://a.example", "http://a.example:8080",
                         "http://b.example", "http://a.example.b", "https://xn--bcher-kva.ch"])
paths = st.text(alphabet="abc/.-_?=&0123456789", max_size=12)


@given(st.lists(st.tuples(hosts, paths), max_size=60))
def test_seed_order_sorts_by_host_key_then_url(parts: list[tuple[str, str]]) -> None:
    urls = [f"{host}/{path}" for host, path in parts]
    ordered = list(urls)
    seed_order(ordered)
    assert sorted(ordered) == sorted(urls)  # the same URLs, none lost or added
    assert ordered == sorted(urls, key=lambda u: (url_host_id(u), u))


def test_an_interleaved_list_comes_out_grouped_by_host() -> None:
    urls = [f"https://www.site{i % 50}.example/page-{i}" for i in range(1000)]
    random.Random(7).shuffle(urls)
    seed_order(urls)
    keys = [url_host_id(u) for u in urls]
    assert keys == sorted(keys)
    runs = sum(1 for a, b in pairwise(keys) if a != b) + 1
    assert runs == 50  # each host's URLs in one run
