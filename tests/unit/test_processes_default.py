"""How many fetch processes `crawler run` starts by default."""

from __future__ import annotations

import os

from crawler.daemon.processes import cpu_quota, default_processes


def test_cgroup_quota_rounds_up_and_unlimited_is_none() -> None:
    assert cpu_quota("200000 100000\n") == 2
    assert cpu_quota("150000 100000") == 2
    assert cpu_quota("50000 100000") == 1
    assert cpu_quota("max 100000") is None
    assert cpu_quota("") is None
    assert cpu_quota("garbage here") is None


def test_default_is_at_most_the_cpus_this_process_may_use() -> None:
    assert 1 <= default_processes() <= len(os.sched_getaffinity(0))
