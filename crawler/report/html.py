"""The change report: one self-contained HTML page, with copies of its PNGs beside it.

The page carries its images as ``data:`` URIs and loads nothing else (inline style, one inline
script that marks each image as loaded or not), so index.html alone can be mailed, copied or
served anywhere; each ``<img>`` names its PNG file in ``data-file``. An empty database gives
the same page with a message in place of each plot that has no data.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from crawler.core import capacity
from crawler.report import figures
from crawler.report.data import (
    LifetimeModel,
    ReportData,
    change_times_seconds,
    choose_lifetime_model,
    page_observations,
)

EMPTY_DATABASE_MESSAGE = (
    "The database has no observations yet: nothing has been fetched. Seed some URLs and run "
    "the crawler (crawler seed …; crawler run), then build this report again. The capacity "
    "plots below use Brewington & Cybenko's published lifetime fit meanwhile."
)
NO_DATA = "No data yet for this plot."
HOST_TABLE_NOTE = (
    "Every figure of a row comes from the host's own fetches: fetches of any outcome, changes "
    "detected, and days watched (each URL's first to last successful fetch, summed). Changes "
    "per day watched is their quotient, – when no URL was fetched successfully twice. A fetch "
    "sees at most one change since the previous one, so pages that change faster than they "
    "are fetched are undercounted."
)


@dataclass(frozen=True, slots=True)
class Section:
    """One plot of the page: its image file (relative), or the reason there is none."""

    key: str
    title: str
    description: str
    image: str | None  # the PNG's file name beside index.html
    message: str | None = None
    src: str | None = None  # the PNG as a data: URI (the page embeds it)


@dataclass(frozen=True, slots=True)
class Headline:
    """The capacity figures of the model at the requested (α, β)."""

    alpha: float
    beta_days: float
    uniform_period_days: float
    optimal_period_days: float


@dataclass(frozen=True, slots=True)
class Report:
    index: Path
    images: tuple[Path, ...]
    model: LifetimeModel
    headline: Headline


def _format_days(days: float) -> str:
    unit = figures.time_unit_for(days)
    return f"{float(unit.of(days)):.3g} {unit.name}"


def _count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 host``, ``2 hosts``."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def _section(
    key: str, title: str, description: str, written: Path | None, missing: str = NO_DATA
) -> Section:
    if written is None:
        return Section(key, title, description, None, missing)
    return Section(key, title, description, written.name, src=data_uri(written))


def data_uri(png: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def equal_note(values: Sequence[float], unit: str, scale: float = 1.0) -> str:
    """' All N estimates are equal: V unit.' when they are (the plot is one bar), else ''."""
    shown = figures.positive_finite(values)
    value = figures.equal_value(shown)
    if value is None or shown.size < 2:
        return ""
    return f" All {shown.size} estimates are equal: {value / scale:.3g} {unit}."


def _model_paragraph(model: LifetimeModel, headline: Headline) -> str:
    parts = [
        f"<p>Mean lifetimes t = 1/λ ~ Weibull(shape <b>{model.shape:.3g}</b>, scale "
        f"<b>{html.escape(_format_days(model.scale_days))}</b>): "
        f"{html.escape(model.reason)}.</p>"
    ]
    if model.misfit is not None:
        parts.append(f'<p class="message" id="misfit">{html.escape(model.misfit)}.</p>')
    if model.fit is not None:
        fit = model.fit
        parts.append(
            f"<p>Fit: mean lifetime {html.escape(_format_days(fit.mean_lifetime_days))}, "
            f"log-likelihood {fit.log_likelihood:.1f}, χ² of change counts {fit.chi_square:.1f} "
            f"on {fit.chi_square_dof} df (p = {fit.chi_square_p_value:.3g}). Changes are "
            "counted from fetches, which see at most one change per interval, so pages "
            "faster than their fetches are undercounted and the fit leans slow.</p>"
        )
    parts.append(
        f"<p>For ({headline.alpha:g}, {html.escape(_format_days(headline.beta_days))})-currency "
        f"a uniform schedule must re-fetch every page every "
        f"<b>{html.escape(_format_days(headline.uniform_period_days))}</b>; the optimal "
        f"per-page schedule reaches it with a mean period of "
        f"<b>{html.escape(_format_days(headline.optimal_period_days))}</b> "
        "(Brewington &amp; Cybenko eq. 24; see <code>crawler plan</code>).</p>"
    )
    return "\n".join(parts)


def _host_table(data: ReportData) -> str:
    if not data.hosts:
        return f'<p class="message">{html.escape("No hosts with URLs yet.")}</p>'
    rows = []
    for host in data.hosts:
        rate = host.changes_per_day
        rows.append(
            f"<tr><td>{html.escape(host.origin)}</td><td>{host.urls}</td>"
            f"<td>{host.fetches}</td><td>{host.changes}</td>"
            f"<td>{host.watched_days:.4g}</td>"
            f"<td>{'–' if rate is None else f'{rate:.4g}'}</td></tr>"
        )
    more = (
        f"<p>The {len(data.hosts)} busiest of {_count(data.host_count, 'host')}.</p>"
        if data.host_count > len(data.hosts) else ""
    )
    return (
        "<table><thead><tr><th>host</th><th>URLs</th><th>fetches</th><th>changes</th>"
        "<th>days watched</th><th>changes per day watched</th></tr></thead><tbody>"
        + "".join(rows) + "</tbody></table>" + more
        + f"<p>{html.escape(HOST_TABLE_NOTE)}</p>"
    )


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; }
.message { background: #fff4d6; border-left: 4px solid #e0a800; padding: 0.6rem 0.9rem; }
table { border-collapse: collapse; } td, th { padding: 0.2rem 0.7rem; text-align: right; }
td:first-child, th:first-child { text-align: left; } tr:nth-child(even) { background: #f4f4f4; }
.totals { color: #555; }
"""

# Marks every image data-loaded="yes"/"no" once the page has loaded, and the body with the
# count of loaded images: a broken image is then visible to a browser-driven check.
_SCRIPT = """
window.addEventListener("load", function () {
  var images = document.getElementsByTagName("img"), loaded = 0;
  for (var i = 0; i < images.length; i++) {
    var ok = images[i].complete && images[i].naturalWidth > 0;
    images[i].setAttribute("data-loaded", ok ? "yes" : "no");
    if (ok) { loaded++; }
  }
  document.body.setAttribute("data-images", String(images.length));
  document.body.setAttribute("data-images-loaded", String(loaded));
});
"""


def render_page(
    data: ReportData, model: LifetimeModel, headline: Headline, sections: Sequence[Section]
) -> str:
    """The HTML text: pure, from what has been computed and drawn."""
    generated = data.generated_at.isoformat(timespec="seconds")
    body = [
        "<h1>Change report</h1>",
        f'<p class="totals">Generated {html.escape(generated)}'
        f": {_count(data.host_count, 'host')}, {_count(data.url_count, 'URL')}, "
        f"{_count(data.observation_count, 'fetch', 'fetches')}, "
        f"{_count(data.change_total, 'change')} detected.</p>",
    ]
    if data.empty:
        body.append(f'<p class="message" id="empty">{html.escape(EMPTY_DATABASE_MESSAGE)}</p>')
    body.append("<h2>Lifetime model and capacity</h2>")
    body.append(_model_paragraph(model, headline))
    for section in sections:
        body.append(f'<h2 id="{section.key}">{html.escape(section.title)}</h2>')
        body.append(f"<p>{html.escape(section.description)}</p>")
        if section.image is not None:
            body.append(
                f'<img src="{html.escape(section.src or section.image)}" '
                f'data-file="{html.escape(section.image)}" alt="{html.escape(section.title)}">'
            )
        else:
            body.append(f'<p class="message">{html.escape(section.message or NO_DATA)}</p>')
    body.append('<h2 id="hosts">Hosts</h2>')
    body.append(_host_table(data))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<title>crawler: change report</title>\n"
        f"<style>{_STYLE}</style>\n<script>{_SCRIPT}</script>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def _interval_note(intervals_days: Sequence[float]) -> str:
    shown = figures.positive_finite(intervals_days)
    if shown.size == 0:
        return ""
    unit = figures.time_unit_for(float(np.median(shown)))
    return equal_note(intervals_days, unit.name, unit.days)


def write_report(
    data: ReportData, out_dir: Path, *, alpha: float = 0.95, beta_days: float = 1.0
) -> Report:
    """Fit, draw every plot that has data, and write out_dir/index.html."""
    out_dir.mkdir(parents=True, exist_ok=True)
    observations = page_observations(data.histories)
    model = choose_lifetime_model(observations)
    headline = Headline(
        alpha=alpha,
        beta_days=beta_days,
        uniform_period_days=capacity.required_period(
            alpha, beta_days, model.shape, model.scale_days
        ),
        optimal_period_days=capacity.optimal_required_period(
            alpha, beta_days, model.shape, model.scale_days
        ),
    )
    fitted = model.fit is not None
    source = "fitted" if fitted else "published (shape 1.4, scale 152.2 d)"
    naive_lifetimes = [o.span_days / o.change_count for o in observations if o.change_count > 0]
    sections = [
        _section(
            "lifetime-cdf",
            "Lifetime CDF: observed and fitted",
            "Intervals between consecutive detected changes of each URL (pooled), against "
            "the intervals the fitted model predicts for pages watched over the same spans "
            "(Brewington & Cybenko Fig. 13). A fetch sees at most one change since the "
            "previous fetch, so intervals shorter than the revisit interval go unseen and the "
            "observed curve starts later than the model's."
            + ("" if fitted else " No fit yet: the observed curve is shown alone.")
            + ("" if model.misfit is None else " " + model.misfit + "."),
            figures.lifetime_cdf_figure(
                observations,
                out_dir / "lifetime_cdf.png",
                shape=model.shape if fitted else None,
                scale_days=model.scale_days if fitted else None,
            ),
            "No URL has shown two changes yet, so there are no intervals between changes.",
        ),
        _section(
            "mean-lifetimes",
            "Distribution of mean lifetimes",
            f"The {source} Weibull density of mean lifetimes t = 1/λ, over the naive per-page "
            "estimates span / changes of the pages that changed.",
            figures.mean_lifetime_figure(
                model.shape,
                model.scale_days,
                out_dir / "mean_lifetimes.png",
                per_page_estimates_days=naive_lifetimes if fitted else (),
            ),
        ),
        _section(
            "level-set",
            f"Re-fetch period against grace period at α = {alpha:g}",
            f"The (α, β) level set of Brewington & Cybenko's Fig. 19 for the {source} "
            "model: the longest re-fetch period T that keeps a fraction α of the pages "
            "β-current, for a uniform schedule and (mean period) for the optimal one.",
            figures.level_set_figure(
                model.shape, model.scale_days, out_dir / "level_set.png", alpha=alpha
            ),
        ),
        _section(
            "change-arrivals",
            "Change arrivals by hour of week",
            "When pages change (UTC): each detected change is placed at its Last-Modified "
            "time when that falls between the two fetches, else at their midpoint.",
            figures.change_arrivals_figure(
                change_times_seconds(data.histories), out_dir / "change_arrivals.png"
            ),
            "No change has been detected yet.",
        ),
        _section(
            "change-rates",
            "Estimated change rates",
            "The estimator's working change rate of each URL (urls.change_rate_per_day)."
            + equal_note(data.change_rates_per_day, "changes per day"),
            figures.change_rate_figure(data.change_rates_per_day, out_dir / "change_rates.png"),
            "No URL has an estimated change rate yet.",
        ),
        _section(
            "revisit-intervals",
            "Revisit intervals chosen by the planner",
            "1 / fetch_rate_per_day of each URL the planner has scheduled."
            + _interval_note(data.revisit_intervals_days),
            figures.revisit_interval_figure(
                data.revisit_intervals_days, out_dir / "revisit_intervals.png"
            ),
            "The planner has not chosen a fetch rate for any URL yet.",
        ),
    ]
    index = out_dir / "index.html"
    index.write_text(render_page(data, model, headline, sections), encoding="utf-8")
    images = tuple(out_dir / s.image for s in sections if s.image is not None)
    return Report(index=index, images=images, model=model, headline=headline)
