"""Generate the configuration and metrics references from the code, so they cannot drift.

``python -m crawler.docs settings`` and ``python -m crawler.docs metrics`` print the markdown;
``python -m crawler.docs update`` rewrites the text between the markers of the files that hold
them (``<!-- settings:begin -->`` … ``<!-- settings:end -->`` in ``docs/CONFIGURATION.md``, the
same for ``metrics`` in ``docs/METRICS.md``); ``update FILE ...`` rewrites the marked sections
of the files named.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from crawler.metrics import Metrics
from crawler.settings import Settings, env_name

# The file each generated section lives in, relative to the repository root.
FILES: dict[str, str] = {"settings": "docs/CONFIGURATION.md", "metrics": "docs/METRICS.md"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{v}`" for v in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):  # X | None
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "unset"
    return getattr(annotation, "__name__", str(annotation))


def _default(info: FieldInfo) -> str:
    """The default as an operator would write it; a computed default names its function."""
    factory: Callable[[], Any] | None = info.default_factory  # type: ignore[assignment]
    if factory is not None:
        value = factory()
        if isinstance(value, list | dict | tuple) and not value:
            return f"`{json.dumps(value if not isinstance(value, tuple) else [])}`"
        return f"computed by `{factory.__name__}()`"
    value = info.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if isinstance(value, list | dict):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def settings_reference() -> str:
    """A markdown table: every setting's variable, type, default and meaning."""
    lines = ["| Variable | Type | Default | Meaning |", "|---|---|---|---|"]
    for name, info in Settings.model_fields.items():
        lines.append(
            f"| `{env_name(name)}` | {_type_name(info.annotation)} | {_cell(_default(info))} "
            f"| {_cell(info.description or '')} |"
        )
    return "\n".join(lines) + "\n"


def metrics_reference() -> str:
    """A markdown table: every metric the daemon exports, its type, labels and meaning."""
    metrics = Metrics()
    # A labelled family with no children yet has no samples: read the declared label names.
    declared = {
        getattr(m, "_name", None): tuple(getattr(m, "_labelnames", ()))
        for m in [*vars(metrics).values(), *vars(metrics.collection).values(),
                  *vars(metrics.pings).values()]
    }
    suffix = {"counter": "_total", "info": "_info"}
    lines = ["| Metric | Type | Labels | Meaning |", "|---|---|---|---|"]
    for family in metrics.registry.collect():
        labels = () if family.type == "info" else declared.get(family.name, ())
        label_text = ", ".join(f"`{label}`" for label in labels) or "–"
        lines.append(
            f"| `{family.name}{suffix.get(family.type, '')}` | {family.type} | {label_text} "
            f"| {_cell(family.documentation)} |"
        )
    return "\n".join(lines) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {"settings": settings_reference,
                                             "metrics": metrics_reference}


def replace_sections(text: str) -> str:
    """``text`` with every marked section it holds regenerated; no markers, or markers out
    of order, are an error."""
    found = False
    for section in GENERATORS:
        begin, end = f"<!-- {section}:begin -->", f"<!-- {section}:end -->"
        start, stop = text.find(begin), text.find(end)
        if start < 0 and stop < 0:
            continue
        if start < 0 or stop < start:
            raise ValueError(f"markers {begin} … {end} not found in order")
        text = text[: start + len(begin)] + "\n" + GENERATORS[section]() + text[stop:]
        found = True
    if not found:
        raise ValueError("no <!-- SECTION:begin --> … <!-- SECTION:end --> markers found")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crawler.docs", description=__doc__)
    sub = parser.add_subparsers(dest="what", required=True)
    for section in GENERATORS:
        sub.add_parser(section, help=f"Print the {section} reference (markdown).")
    update = sub.add_parser("update", help="Regenerate the marked sections of files in place.")
    update.add_argument("paths", nargs="*", metavar="FILE",
                        help=f"default: {' and '.join(sorted(set(FILES.values())))}")
    args = parser.parse_args(argv)
    if args.what == "update":
        for name in args.paths or sorted(set(FILES.values())):
            path = Path(name)
            path.write_text(replace_sections(path.read_text()))
            print(f"updated {path}", file=sys.stderr)
    else:
        sys.stdout.write(GENERATORS[args.what]())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
