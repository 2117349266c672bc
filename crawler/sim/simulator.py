"""Virtual-time simulation: a population, a budget, a policy; exact time-averaged metrics.

No network, no database, no clock. Fetch slot k happens at k / budget days and goes to the page
with the earliest next fetch time, due or not (a heap), so every policy spends exactly the same
fetches. Freshness, age and β-currency are integrated exactly from the change instants between
consecutive fetches of each page, over [warm-up, end].
"""

from __future__ import annotations

import functools
import gc
import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

import numpy as np

from crawler.sim.hint_policies import HINT_POLICIES, HintPolicy
from crawler.sim.hints import NO_HINTS, Announcement, HintSpec, build_hint_world
from crawler.sim.policies import POLICIES, Policy, PolicyFactory
from crawler.sim.populations import POPULATIONS, Population

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class SimulationResult:
    population: str
    policy: str
    pages: int
    days: float
    fetches: int
    freshness: float
    age_days: float
    beta_currency: float


def simulate(
    population: Population,
    policy_name: str,
    *,
    days: float,
    budget_per_day: float,
    warmup_days: float = 0.0,
    beta_days: float = 1.0,
    seed: int = 0,
    last_modified_share: float = 0.0,
    work_conserving: bool = True,
    hints: Sequence[HintSpec] = (),
) -> SimulationResult:
    """One policy's time-averaged metrics over [warmup_days, days].

    A random `last_modified_share` of the pages send a truthful Last-Modified (the time of
    their latest change); the others send none. ``hints`` are change-hint sources
    (crawler.sim.hints), heard by the policies of ``HINT_POLICIES``.
    """
    if not 0.0 <= warmup_days < days:
        raise ValueError("warm-up must be shorter than the run")
    return simulate_windows(
        population, policy_name, days=days, budget_per_day=budget_per_day,
        windows=((warmup_days, days),), beta_days=beta_days, seed=seed,
        last_modified_share=last_modified_share, work_conserving=work_conserving, hints=hints,
    )[0]


def _gc_paused(function: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(function)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        collecting = gc.isenabled()
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            if collecting:
                gc.enable()

    return paused


@_gc_paused
def simulate_windows(
    population: Population,
    policy_name: str,
    *,
    days: float,
    budget_per_day: float,
    windows: Sequence[tuple[float, float]],
    beta_days: float = 1.0,
    seed: int = 0,
    last_modified_share: float = 0.0,
    work_conserving: bool = True,
    replan_days: float = 1.0,
    factory: PolicyFactory | None = None,
    hints: Sequence[HintSpec] = (),
) -> list[SimulationResult]:
    """One run of a policy, measured over each of several windows (start, end) in days.

    The run is causal (a fetch decision sees only the past), so a window [w, w + d] of a
    longer run measures exactly what a run of w + d days with a warm-up of w would, on the
    same change instants: one 31-day run answers both "15-day warm-up" and "30-day warm-up".
    Each result's metrics are its window's; its ``fetches`` are the whole run's.

    The policy re-plans every ``replan_days`` (a day by default; a live daemon's planner
    interval to mirror it). ``factory`` builds the policy instead of the named one (a policy
    configured as a particular daemon is), ``policy_name`` then only labels the results.
    A policy of ``HINT_POLICIES`` hears the announcements of the ``hints`` sources (``optimal``
    is then the hint-aware one, which without hints runs exactly as ``POLICIES["optimal"]``);
    the others ignore them.

    The cyclic garbage collector is paused for the run: every fetch replaces a record made of
    small immutable values (no reference cycles), yet each collection walks them all.
    """
    if not windows:
        raise ValueError("at least one measuring window is needed")
    for start, end in windows:
        if not 0.0 <= start < end <= days:
            raise ValueError(f"window ({start}, {end}) must lie inside the run's [0, {days}]")
    if not 0.0 <= last_modified_share <= 1.0:
        raise ValueError("last_modified_share must be in [0, 1]")
    if not replan_days > 0.0:
        raise ValueError("replan_days must be positive")
    hint_factory = HINT_POLICIES.get(policy_name) if factory is None and hints else None
    if factory is None and hint_factory is None:
        factory = POLICIES.get(policy_name)
        hint_factory = HINT_POLICIES[policy_name] if factory is None else None
    world = build_hint_world(population, hints, days, seed) if hints else NO_HINTS
    dated = (
        np.random.default_rng([seed, 2]).random(population.pages) < last_modified_share
    ).tolist()
    rng = np.random.default_rng(seed)
    hinted: HintPolicy | None = None
    policy: Policy
    if hint_factory is not None:
        policy = hinted = hint_factory(population, budget_per_day, rng, world)
    else:
        assert factory is not None
        policy = factory(population, budget_per_day, rng)
    times = population.change_times_days.tolist()
    offsets = population.offsets.tolist()
    pages = population.pages
    # Every page starts with a fresh copy fetched at time 0.
    last_fetch = [0.0] * pages
    next_change = [offsets[page] for page in range(pages)]  # index of first change > last fetch
    # One live heap entry per page, the one equal to its due time; a hint that moves a page
    # leaves the old entry behind, skipped when it reaches the top.
    due_at = [float(t) for t in policy.initial_fetch_times().tolist()]
    heap = [(t, page) for page, t in enumerate(due_at)]
    heapq.heapify(heap)
    announcements = world.events
    next_announcement = 0
    provoked: list[tuple[float, int, float]] = []  # announcements a fetch made (lying-now)

    def move(page: int, due: float) -> None:
        if due != due_at[page]:
            due_at[page] = due
            heapq.heappush(heap, (due, page))

    def hear(now: float) -> None:
        """Hand the policy every announcement that has arrived by ``now``, in order."""
        nonlocal next_announcement
        assert hinted is not None
        while True:
            drawn = (
                announcements[next_announcement]
                if next_announcement < len(announcements) else None
            )
            if provoked and (drawn is None or provoked[0][0] < drawn.at_days):
                if provoked[0][0] > now:
                    break
                at, page, claimed = heapq.heappop(provoked)
                event = Announcement(at, page, claimed)
            elif drawn is not None and drawn.at_days <= now:
                event = drawn
                next_announcement += 1
            else:
                break
            due = hinted.on_hint(event.page, event.at_days, event.claimed_days)
            if due is not None:
                move(event.page, due)
        for page, due in hinted.take_rescheduled():
            move(page, due)

    fresh_total, age_total, current_total = ([0.0] * len(windows) for _ in range(3))
    slot_days = 1.0 / budget_per_day
    slots = math.floor(days * budget_per_day)
    next_day = replan_days
    fetched = 0

    numbered_windows = tuple(enumerate(windows))

    def account(page: int, now: float) -> bool:
        """Integrate the metrics over (last fetch, now]; True if the page changed in it.

        The overlaps of (start, end] with a window are written out, choosing as ``min`` and
        ``max`` would, ties and all: a function call for each cost more than the arithmetic.
        A span that does not overlap is not added (the totals are sums of positive spans, so
        adding its 0.0 would change no bit)."""
        start = last_fetch[page]
        index = next_change[page]
        end_index = offsets[page + 1]
        change = times[index] if index < end_index else math.inf
        changed = change < now
        fresh_end = change if changed else now
        current_end = change + beta_days
        if now < current_end:
            current_end = now
        for window, (window_start, window_end) in numbered_windows:
            if now <= window_start or start >= window_end:
                continue
            low = window_start if window_start > start else start
            span = (window_end if window_end < fresh_end else fresh_end) - low
            if span > 0.0:
                fresh_total[window] += span
            span = (window_end if window_end < current_end else current_end) - low
            if span > 0.0:
                current_total[window] += span
            if changed:
                low = window_start if window_start > change else change
                high = window_end if window_end < now else now
                if high > low:
                    age_total[window] += ((high - change) ** 2 - (low - change) ** 2) / 2.0
        if not changed:
            return False
        next_change[page] = bisect_right(times, now, index, end_index)
        return True

    for slot in range(1, slots + 1):
        now = slot * slot_days
        while now >= next_day:
            rescheduled = policy.on_day(next_day)
            if rescheduled:
                for page, due in rescheduled:
                    due_at[page] = due
                heap = [(due, page) for page, due in enumerate(due_at)]
                heapq.heapify(heap)
            next_day += replan_days
        if hinted is not None:
            hear(now)
        while heap[0][0] != due_at[heap[0][1]]:
            heapq.heappop(heap)
        due, page = heap[0]
        if due > now and not work_conserving:
            continue  # nothing is due: the slot goes unused, as in the daemon
        fetched += 1
        changed = account(page, now)
        interval = now - last_fetch[page]
        last_fetch[page] = now
        # A dated page's server sends its latest change on every response, changed or not
        # (the page's creation, time 0, before its first change).
        last_change = None
        if dated[page]:
            last_change = times[next_change[page] - 1] if next_change[page] > offsets[page] else 0.0
        next_time = (
            policy.after_fetch(page, now, changed, last_change) if interval > 0.0 else now
        )
        due_at[page] = next_time
        heapq.heapreplace(heap, (next_time, page))
        if hinted is not None:
            announcement = world.after_fetch(page, now)
            if announcement is not None:
                heapq.heappush(
                    provoked, (announcement.at_days, page, announcement.claimed_days)
                )
            for moved_page, due in hinted.take_rescheduled():
                move(moved_page, due)
    for page in range(pages):
        account(page, days)

    results = []
    for window, (window_start, window_end) in enumerate(windows):
        measured = pages * (window_end - window_start)
        results.append(SimulationResult(
            population=population.name, policy=policy_name, pages=pages, days=days,
            fetches=fetched, freshness=fresh_total[window] / measured,
            age_days=age_total[window] / measured, beta_currency=current_total[window] / measured,
        ))
    return results


def build_population(name: str, pages: int, days: float, seed: int) -> Population:
    """The named population, from its own random stream (the same for every policy)."""
    return POPULATIONS[name](pages, days, np.random.default_rng([seed, 1]))
