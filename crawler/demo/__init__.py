"""A synthetic web on loopback whose pages change by known, seeded processes.

The crawler's tests and ``make run``'s demo crawl it; its ``/__truth__`` endpoint (and
``DemoWeb.truth()``) tells what the crawler should have seen.
"""

from crawler.demo.processes import ChangeProcess, PeriodicProcess, PoissonProcess, ScheduledProcess
from crawler.demo.sites import (
    Link,
    PageSpec,
    SiteSpec,
    bfs_window,
    demo_sites,
    evolving_site,
    poisson_site,
    static_site,
)
from crawler.demo.web import DemoWeb

__all__ = [
    "ChangeProcess",
    "DemoWeb",
    "Link",
    "PageSpec",
    "PeriodicProcess",
    "PoissonProcess",
    "ScheduledProcess",
    "SiteSpec",
    "bfs_window",
    "demo_sites",
    "evolving_site",
    "poisson_site",
    "static_site",
]
