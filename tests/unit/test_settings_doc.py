"""The README's configuration and metrics references are exactly what the code generates.

Refresh them with ``python -m crawler.docs update README.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crawler.docs import GENERATORS, metrics_reference, replace_sections, settings_reference
from crawler.metrics import Metrics
from crawler.settings import Settings, env_name

README = Path(__file__).resolve().parents[2] / "README.md"
REFRESH = "run `python -m crawler.docs update README.md`"


def section(text: str, name: str) -> str:
    match = re.search(f"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", text, re.DOTALL)
    assert match is not None, f"README has no {name} markers"
    return match.group(1)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_readme_section_is_generated(name: str) -> None:
    assert section(README.read_text(), name) == GENERATORS[name](), f"README is stale: {REFRESH}"


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
    assert "| `crawler_fetches_total` | counter | `outcome`, `status_class` |" in text
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
