"""The configuration and metrics references in docs/ are exactly what the code generates.

Refresh them with ``python -m crawler.docs update``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crawler.docs import (
    FILES,
    GENERATORS,
    main,
    metrics_reference,
    replace_sections,
    settings_reference,
)
from crawler.metrics import Metrics
from crawler.settings import Settings, env_name

ROOT = Path(__file__).resolve().parents[2]
REFRESH = "run `python -m crawler.docs update`"


def section(text: str, name: str) -> str:
    match = re.search(f"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", text, re.DOTALL)
    assert match is not None, f"no {name} markers"
    return match.group(1)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_doc_section_is_generated(name: str) -> None:
    path = ROOT / FILES[name]
    assert section(path.read_text(), name) == GENERATORS[name](), f"{path} is stale: {REFRESH}"


def test_each_reference_is_in_one_file_only() -> None:
    """A generated table copied elsewhere would drift: only its file holds its markers."""
    holders = {
        name: sorted(
            str(p.relative_to(ROOT)) for p in [ROOT / "README.md", *ROOT.glob("docs/*.md")]
            if f"<!-- {name}:begin -->" in p.read_text()
        )
        for name in GENERATORS
    }
    assert holders == {name: [FILES[name]] for name in GENERATORS}


def test_every_setting_is_documented_with_variable_default_and_meaning() -> None:
    rows = settings_reference().splitlines()[2:]
    assert len(rows) == len(Settings.model_fields)
    for row, (field, info) in zip(rows, Settings.model_fields.items(), strict=True):
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[0] == f"`{env_name(field)}`"
        assert cells[2], field
        assert info.description and cells[3] == info.description.replace("|", "\\|")
    port = next(r for r in rows if "CRAWLER_METRICS_PORT" in r)
    assert "`9310`" in port
    assert "| unset |" in next(r for r in rows if "CRAWLER_DATABASE_URL" in r)


def test_every_metric_is_documented() -> None:
    text = metrics_reference()
    for family in Metrics().registry.collect():
        assert f"`{family.name}" in text, family.name
    assert "| `crawler_fetches_total` | counter | `kind`, `outcome`, `status_class` |" in text
    assert "| `crawler_urls` | gauge | `state` |" in text


def test_replace_sections_regenerates_stale_text() -> None:
    stale = (
        "intro\n<!-- settings:begin -->\nold table\n<!-- settings:end -->\nmiddle\n"
        "<!-- metrics:begin --><!-- metrics:end -->\nend\n"
    )
    fresh = replace_sections(stale)
    assert fresh.startswith("intro\n") and fresh.endswith("\nend\n") and "old table" not in fresh
    assert section(fresh, "settings") == settings_reference()
    assert section(fresh, "metrics") == metrics_reference()
    assert replace_sections(fresh) == fresh
    with pytest.raises(ValueError):
        replace_sections("no markers")
    with pytest.raises(ValueError):
        replace_sections("<!-- metrics:end --> <!-- metrics:begin -->")


def test_a_file_with_one_section_gets_that_one(tmp_path: Path) -> None:
    only = tmp_path / "METRICS.md"
    only.write_text("# Metrics\n<!-- metrics:begin -->\nold\n<!-- metrics:end -->\n")
    assert main(["update", str(only)]) == 0
    assert section(only.read_text(), "metrics") == metrics_reference()
    assert "settings" not in only.read_text()
