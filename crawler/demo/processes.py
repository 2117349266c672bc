"""Change processes of the demo web: when a page changes, as a pure function of a seed.

Times are seconds since the demo web's start (offset 0). Every process answers
``event_times(seed, until_seconds)`` with the sorted event times in ``(0, until_seconds]``;
the answer is a pure function of the process parameters and the seed, and the list for a
later horizon always extends the list for an earlier one, so the server can be asked at
any time, in any order, and tells one consistent story.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Protocol, runtime_checkable

# A Poisson process is generated in fixed blocks of this many expected events, each block
# seeded on its own, so that the events up to any horizon are computed in O(horizon) work
# without keeping state.
_EVENTS_PER_BLOCK = 64.0


@runtime_checkable
class ChangeProcess(Protocol):
    """When a page changes. Pure: the same seed always gives the same times."""

    def event_times(self, seed: str, until_seconds: float) -> list[float]:
        """Sorted event times in ``(0, until_seconds]``."""
        ...

    def describe(self) -> dict[str, object]:
        """The process kind and parameters, as JSON-ready data for the truth endpoint."""
        ...


@lru_cache(maxsize=65536)
def _poisson_block(seed: str, rate_per_second: float, block_index: int) -> tuple[float, ...]:
    """Events of one block: a Poisson count, placed uniformly (the conditional law of a
    Poisson process given its count), so consecutive blocks form one Poisson process."""
    block_seconds = _EVENTS_PER_BLOCK / rate_per_second
    rng = random.Random(f"poisson:{seed}:{rate_per_second!r}:{block_index}")
    count = _poisson_count(rng, _EVENTS_PER_BLOCK)
    start = block_index * block_seconds
    return tuple(sorted(start + rng.random() * block_seconds for _ in range(count)))


def _poisson_count(rng: random.Random, mean: float) -> int:
    """A Poisson(mean) draw by counting exponential gaps (mean is small: 64)."""
    count = 0
    elapsed = rng.expovariate(1.0)
    while elapsed <= mean:
        count += 1
        elapsed += rng.expovariate(1.0)
    return count


@dataclass(frozen=True)
class PoissonProcess:
    """Changes arrive as a Poisson process (Cho & Garcia-Molina 2003, the model the
    estimators assume)."""

    rate_per_second: float

    def __post_init__(self) -> None:
        if not (self.rate_per_second > 0 and math.isfinite(self.rate_per_second)):
            raise ValueError("rate_per_second must be positive and finite")

    def event_times(self, seed: str, until_seconds: float) -> list[float]:
        if until_seconds <= 0:
            return []
        block_seconds = _EVENTS_PER_BLOCK / self.rate_per_second
        last_block = int(until_seconds // block_seconds)
        times: list[float] = []
        for block_index in range(last_block + 1):
            times.extend(_poisson_block(seed, self.rate_per_second, block_index))
        return [t for t in times if 0 < t <= until_seconds]

    def describe(self) -> dict[str, object]:
        return {"kind": "poisson", "rate_per_second": self.rate_per_second}


@dataclass(frozen=True)
class PeriodicProcess:
    """Quasi-deterministic updates (Wolf et al. 2002; Grimes & O'Brien's hourly pages): the
    k-th change is at ``phase + k * period`` (every integer k with a positive time) plus a
    seeded uniform jitter in ``[0, jitter_seconds]``: late, never early, like a publish job
    that runs after its slot."""

    period_seconds: float
    phase_seconds: float = 0.0
    jitter_seconds: float = 0.0

    def __post_init__(self) -> None:
        if not self.period_seconds > 0:
            raise ValueError("period_seconds must be positive")
        if not 0 <= self.jitter_seconds < self.period_seconds:
            raise ValueError("jitter_seconds must be in [0, period_seconds)")

    def event_times(self, seed: str, until_seconds: float) -> list[float]:
        if until_seconds <= 0:
            return []
        times: list[float] = []
        first_k = math.floor(-self.phase_seconds / self.period_seconds)  # k may be < 0
        last_k = math.floor((until_seconds - self.phase_seconds) / self.period_seconds)
        for k in range(first_k, last_k + 1):
            jitter = 0.0
            if self.jitter_seconds > 0:
                jitter = random.Random(f"periodic:{seed}:{k}").random() * self.jitter_seconds
            t = self.phase_seconds + k * self.period_seconds + jitter
            if 0 < t <= until_seconds:
                times.append(t)
        return times  # jitter < period keeps them sorted

    def describe(self) -> dict[str, object]:
        return {"kind": "periodic", **asdict(self)}


@dataclass(frozen=True)
class ScheduledProcess:
    """Changes at exactly the given times; ``ScheduledProcess(())`` never changes."""

    times: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "times", tuple(sorted(float(t) for t in self.times)))

    def event_times(self, seed: str, until_seconds: float) -> list[float]:
        return [t for t in self.times if 0 < t <= until_seconds]

    def describe(self) -> dict[str, object]:
        return {"kind": "scheduled", "times": list(self.times)}


NEVER = ScheduledProcess(())
