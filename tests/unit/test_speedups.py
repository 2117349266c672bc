"""The C paths of ``crawler.core._speedups`` give exactly what the Python versions give: the
stored fingerprints, the depth bound, the change-rate estimates (to the bit: the simulator's
results and every schedule depend on them) and the records must not depend on whether the
module was built."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser
from test_features_equivalence import TEXTS, previous_text_features
from toolcheck import missing

from crawler.core import bounds, estimate, extract, model, plan
from crawler.core.estimate import ChangeHistory, GammaPrior
from crawler.core.fingerprint import simhash64
from crawler.core.model import UrlRecord, UrlState

try:
    from crawler.core import _speedups
except ImportError:
    _speedups = None  # type: ignore[assignment]

PYTHON_DOC = Path("/usr/share/doc/python3-doc/html")


@pytest.fixture(autouse=True)
def built() -> None:
    """These tests compare the two paths, so they need the C one. ``make test`` builds it; in
    CI a missing module is a broken build (the fetch path would run 12% slower unnoticed)."""
    if _speedups is None:
        missing("crawler.core._speedups was not built (no C compiler at install)", "gcc")


def test_the_fetch_path_uses_the_c_module() -> None:
    assert extract._speedups is not None and bounds._speedups is not None
    assert estimate._speedups is not None and plan._speedups is not None
    assert model.replace_record is _speedups.replace_slots


@given(TEXTS)
@settings(max_examples=500, deadline=None)
def test_text_simhash_in_c_equals_python(text: str) -> None:
    assert extract.text_simhash(text) == extract.text_simhash_python(text)
    assert extract.text_simhash(text) == simhash64(previous_text_features(text))


# Token lengths around the 8-byte words the C hash reads, counts around powers of two (the
# weight is count.bit_length()), and text that is nothing but separators.
@pytest.mark.parametrize("text", [
    "", " ", "   \t\n ", "¶", "— « »", "a", "abcdefg", "abcdefgh", "abcdefghi",
    "abcdefghijklmnop", "abcdefghijklmnopq", "x" * 1000,
    " ".join(["word"] * 1023 + ["other"] * 1024 + ["third"] * 1025),
    " ".join(f"token{k}" for k in range(5000)),  # the table grows several times
    "ΟΔΟΣ ΑΣ Σ'Α plain words",
    "café cafe CAFÉ café¶ x¶y ¶¶ naïve\u00a0text",
    "\udcff lone surrogate \ud800 words",
])
def test_text_simhash_in_c_equals_python_on_edges(text: str) -> None:
    assert extract.text_simhash(text) == extract.text_simhash_python(text)


def test_text_simhash_in_c_equals_python_on_random_words() -> None:
    rng = random.Random(14)
    alphabet = "abcXYZ_09é日¶ -.,"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 400)))
        assert extract.text_simhash(text) == extract.text_simhash_python(text)


def corpus() -> list[bytes]:
    """The throughput bench's pages (python3-doc), the first 200."""
    pages = sorted(PYTHON_DOC.glob("**/*.html"))[:200]
    if not pages:
        missing(f"no HTML pages under {PYTHON_DOC}", "python3-doc")
    return [page.read_bytes() for page in pages]


def test_text_simhash_in_c_equals_python_on_the_benchmark_corpus() -> None:
    for body in corpus():
        text = extract._raw_visible_text(LexborHTMLParser(body))
        assert extract.text_simhash(text) == extract.text_simhash_python(text)


MARKUP = st.lists(
    st.sampled_from([b"<", b"</", b"<a", b"<A>", b"<z", b"<Z", b"</z", b"</a>", b"<br>",
                     b"<!--", b"-->", b"<1", b"< ", b"/", b">", b"x", b"<<", b"</<", b"\x00",
                     b"\xff"]),
    max_size=200,
).map(b"".join)


@given(MARKUP)
@settings(max_examples=500, deadline=None)
def test_depth_bound_in_c_equals_numpy(body: bytes) -> None:
    assert bounds._depth_upper_bound(body) == bounds._depth_upper_bound_numpy(body)


@pytest.mark.parametrize("body", [
    b"", b"<", b"<a", b"a<", b"</a></b><c>", b"<z><Z><@><[><`><{>", b"<div>" * 600,
    b"</div>" * 5 + b"<p><q>" * 3, b"<" * 10 + b"a",
])
def test_depth_bound_in_c_equals_numpy_on_edges(body: bytes) -> None:
    assert bounds._depth_upper_bound(body) == bounds._depth_upper_bound_numpy(body)


def test_depth_bound_in_c_equals_numpy_on_the_benchmark_corpus() -> None:
    for body in corpus():
        assert bounds._depth_upper_bound(body) == bounds._depth_upper_bound_numpy(body)


# --- the change-rate estimator's scalar loops -------------------------------------------------

# Intervals from seconds to years, rates and priors far beyond what pages show: the C loops
# must round exactly as the Python ones wherever the Python ones run.
INTERVALS = st.lists(
    st.floats(min_value=1e-9, max_value=1e4, allow_nan=False, allow_infinity=False),
    min_size=1, max_size=40,
).map(tuple)
SHAPES = st.floats(min_value=1e-3, max_value=100.0)
EXPOSURES = st.floats(min_value=1e-4, max_value=1e5)
LOG_RATES = st.floats(min_value=-40.0, max_value=40.0)


def _outcome(call: object, *args: object) -> object:
    """The call's value, or the type of what it raised (both paths must raise alike)."""
    assert callable(call)
    try:
        return call(*args)
    except ArithmeticError as error:
        return type(error)


@given(INTERVALS, SHAPES, EXPOSURES, LOG_RATES)
@settings(max_examples=200, deadline=None)
def test_posterior_mode_in_c_equals_python(
    changed: tuple[float, ...], shape: float, exposure_days: float, x: float
) -> None:
    in_c = _outcome(
        _speedups.posterior_mode, changed, shape, exposure_days, x,
        estimate._NEWTON_NEGLIGIBLE_U, estimate._NEWTON_TOLERANCE, estimate._NEWTON_MAX_STEPS,
    )
    assert in_c == _outcome(estimate._mode_in_floats, changed, shape, exposure_days, x)


@given(INTERVALS, st.lists(st.floats(min_value=-750.0, max_value=40.0), min_size=5, max_size=5))
@settings(max_examples=200, deadline=None)
def test_log_detect_sums_in_c_equal_python(
    changed: tuple[float, ...], log_rates: list[float]
) -> None:
    # Rates down to e^-750 (0.0): products under the floor take the floored branch.
    node_rates = [math.exp(value) for value in log_rates]
    in_c = _outcome(_speedups.log_detect_sums, node_rates, changed, estimate._DETECT_FLOOR)
    assert in_c == _outcome(estimate._log_detect_sums_in_floats, node_rates, changed)


@given(INTERVALS, SHAPES, EXPOSURES, LOG_RATES, st.floats(min_value=1e-4, max_value=10.0))
@settings(max_examples=200, deadline=None)
def test_gauss_hermite_nodes_in_c_equal_python(
    changed: tuple[float, ...], shape: float, exposure_days: float, x: float, spread: float
) -> None:
    rates = _speedups.hermite_rates(x, spread, estimate._HERMITE_OFFSET_LIST)
    assert rates == estimate._node_rates_in_floats(x, spread)
    detects = estimate._log_detect_sums_in_floats(rates, changed)
    in_c = _speedups.hermite_mean(
        x, spread, shape, exposure_days, rates, detects, estimate._HERMITE_OFFSET_LIST,
        estimate._HERMITE_CORRECTION_LIST,
    )
    in_python = estimate._kernel_mean_in_floats(x, spread, shape, exposure_days, rates, detects)
    assert in_c == in_python or (math.isnan(in_c) and math.isnan(in_python))


def test_math_errors_are_raised_as_the_math_module_raises_them() -> None:
    # e^800 overflows in the first Newton step; an interval of 0 makes log(1 - e^0) a log of
    # zero (past the floor's test, which a negative one passes).
    args = (estimate._NEWTON_NEGLIGIBLE_U, estimate._NEWTON_TOLERANCE, 40)
    with pytest.raises(OverflowError):
        _speedups.posterior_mode((1.0,), 1.0, 1.0, 800.0, *args)
    with pytest.raises(OverflowError):
        estimate._mode_in_floats((1.0,), 1.0, 1.0, 800.0)
    with pytest.raises(ValueError, match="math domain error"):
        _speedups.log_detect_sums([-1.0], (0.0, -5.0), estimate._DETECT_FLOOR)
    with pytest.raises(ValueError, match="math domain error"):
        estimate._log_detect_sums_in_floats([-1.0], (0.0, -5.0))


def test_fast_posterior_rate_with_c_equals_python_on_simulated_pages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Histories as a crawl builds them (fetches at irregular intervals around the page's
    rate), short and long, so every path of fast_posterior_rate runs: floats, numpy, both."""
    rng = random.Random(21)
    cases = []
    for _ in range(400):
        rate = math.exp(rng.uniform(-5.0, 4.0))
        history = ChangeHistory()
        for _ in range(rng.randrange(1, 160)):
            interval = rng.uniform(0.05, 3.0) / rate
            history = history.observe(interval, rng.random() < 1.0 - math.exp(-rate * interval))
        prior = GammaPrior(rng.uniform(0.1, 5.0), rng.uniform(0.5, 200.0))
        guess = None if rng.random() < 0.2 else rate * rng.uniform(0.3, 3.0)
        cases.append((history, prior, guess))
    assert {min(h.changes, 9) for h, _, _ in cases} >= {0, 1, 8, 9}
    assert any(h.changes > estimate._SCALAR_MODE_MAX_INTERVALS for h, _, _ in cases)
    in_c = [estimate.fast_posterior_rate(h, p, g) for h, p, g in cases]
    monkeypatch.setattr(estimate, "_speedups", None)
    in_python = [estimate.fast_posterior_rate(h, p, g) for h, p, g in cases]
    assert in_c == in_python


# --- the planner's fetch rate for one URL -------------------------------------------------

POSITIVE_OR_NOT = st.one_of(
    st.just(0.0), st.just(-1.0), st.floats(min_value=1e-8, max_value=1e5)
)


@given(
    st.sampled_from(["freshness", "beta_currency", "harmonic"]), POSITIVE_OR_NOT,
    POSITIVE_OR_NOT, POSITIVE_OR_NOT, st.one_of(st.just(0.0), st.floats(1e-5, 1.0)),
    st.one_of(st.just(0.0), st.floats(0.1, 1000.0)), st.floats(1e-3, 10.0),
)
@settings(max_examples=200, deadline=None)
def test_fetch_rate_in_c_equals_python(
    objective: plan.Objective, change_rate: float, weight: float, mu: float,
    min_interval_days: float, max_interval_days: float, beta_days: float,
) -> None:
    in_c = _speedups.fetch_rate(
        change_rate, weight, mu, objective, min_interval_days, max_interval_days, beta_days,
        plan._NEWTON_STEPS,
    )
    unbounded = plan._scalar_unbounded_rate(change_rate, weight, mu, objective, beta_days)
    low = 1.0 / max_interval_days if max_interval_days > 0.0 else math.inf
    high = 1.0 / min_interval_days if min_interval_days > 0.0 else math.inf
    assert in_c == min(max(unbounded, low), high)


def test_the_age_objective_stays_in_numpy() -> None:
    with pytest.raises(ValueError, match="age"):
        _speedups.fetch_rate(1.0, 1.0, 1.0, "age", 0.001, 365.0, 1.0, plan._NEWTON_STEPS)
    assert plan.fetch_rate_for(1.0, 1.0, 0.01, "age") > 0.0


# --- records ------------------------------------------------------------------------------

FIELD_VALUES: dict[str, object] = {
    "state": UrlState.ACTIVE, "last_fetched_at": 12.5, "last_status": 304,
    "last_simhash": 2**63 + 1, "last_content_hash": b"hash", "fetch_count": 7,
    "history": ChangeHistory((1.0,), 2.0, 3), "change_rate_per_day": None,
    "change_brackets_days": (1.0, 2.0), "out_links_read": True, "hinted": None,
}


@given(st.sets(st.sampled_from(sorted(FIELD_VALUES))))
@settings(max_examples=100, deadline=None)
def test_replace_slots_equals_dataclasses_replace(names: set[str]) -> None:
    record = UrlRecord(url_id=3, url="https://example.com/", importance=0.5, etag="e")
    changes = {name: FIELD_VALUES[name] for name in names}
    replaced = _speedups.replace_slots(record, **changes)
    expected = dataclasses.replace(record, **changes)
    assert type(replaced) is UrlRecord
    assert replaced == expected
    assert all(
        getattr(replaced, f.name) is getattr(expected, f.name)
        for f in dataclasses.fields(UrlRecord)
    )
    assert replaced is not record and record == UrlRecord(
        url_id=3, url="https://example.com/", importance=0.5, etag="e"
    )


def test_replace_slots_refuses_what_replace_would_not_copy() -> None:
    record = UrlRecord(url_id=1, url="https://example.com/")
    with pytest.raises(TypeError, match="no field 'colour'"):
        _speedups.replace_slots(record, colour="red")
    with pytest.raises(TypeError, match="slots only"):
        _speedups.replace_slots(object())
    with pytest.raises(TypeError, match="slots only"):
        _speedups.replace_slots(ChecksOnInit(1))


@dataclasses.dataclass(frozen=True)
class ChecksOnInit:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("negative")


@dataclasses.dataclass(frozen=True, slots=True)
class Derived:
    value: int
    twice: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "twice", 2 * self.value)


def test_replace_slots_copies_a_fetch_result() -> None:
    answer = model.FetchResult(
        fetched_at=0.0, duration_seconds=0.0, outcome=model.OK, status=200, headers=(("a", "b"),)
    )
    changes: dict[str, object] = {"fetched_at": 5.0, "body": b"x", "last_modified": None}
    assert _speedups.replace_slots(answer, **changes) == dataclasses.replace(answer, **changes)


def test_only_plain_slotted_dataclasses_are_copied_by_slots() -> None:
    assert model.copies_by_slots(UrlRecord) and model.copies_by_slots(model.FetchResult)
    assert not model.copies_by_slots(ChecksOnInit)
    assert not model.copies_by_slots(Derived)
    assert not model.copies_by_slots(int)
