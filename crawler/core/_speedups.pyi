"""C paths of the page fingerprint, the HTML depth bound and the change-rate estimator
(``_speedups.c``)."""

from collections.abc import Sequence
from typing import TypeVar

_Record = TypeVar("_Record")

def non_ascii_parts(data: bytes, /) -> list[bytes]: ...
def ascii_simhash(data: bytes, extra: list[bytes], /) -> int: ...
def depth_upper_bound(data: bytes, /) -> int: ...
def posterior_mode(
    changed: Sequence[float],
    shape: float,
    exposure_days: float,
    x: float,
    negligible_u: float,
    tolerance: float,
    max_steps: int,
    /,
) -> tuple[float, float]: ...
def log_detect_sums(
    node_rates: Sequence[float], changed: Sequence[float], floor: float, /
) -> list[float]: ...
def hermite_rates(x: float, spread: float, offsets: Sequence[float], /) -> list[float]: ...
def hermite_mean(
    x: float,
    spread: float,
    shape: float,
    exposure_days: float,
    node_rates: Sequence[float],
    detects: Sequence[float],
    offsets: Sequence[float],
    corrections: Sequence[float],
    /,
) -> float: ...
def fetch_rate(
    change_rate_per_day: float,
    weight: float,
    mu: float,
    objective: str,
    min_interval_days: float,
    max_interval_days: float,
    beta_days: float,
    newton_steps: int,
    /,
) -> float: ...
def replace_slots(record: _Record, /, **changes: object) -> _Record: ...
