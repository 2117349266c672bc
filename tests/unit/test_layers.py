"""The layering a newcomer can rely on (issue 36), checked on the source text.

SQL lives in ``crawler/db``: outside it (and the collection's index module, which is the
store's own view of its table), no module names a statement of ``QUERIES``; it calls a
function of a ``crawler.db`` module instead. And a module imports the crawler's modules at
its top, where the import graph (and import-linter's layers, pyproject.toml) sees them: an
import inside a function is kept only where a comment on its line says why, that it defers
a heavy dependency (numpy, matplotlib, aiohttp, ...) or is the lazy command load.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "crawler"

# Where a statement of QUERIES may be named: the database layer, and the collection's index.
SQL_HOMES = ("db/", "store/index.py")

# Where an import inside a function needs a reason on its line (issue 36's list); the rest of
# the package follows as its modules are reworked.
IMPORT_CHECKED = (
    "cli.py", "commands/", "entry.py", "status.py", "settings.py", "logs.py", "metrics.py",
    "demo/run.py", "daemon/", "store/", "core/", "db/estimates.py", "db/hints.py",
)
# Words on the line of an import that say why it is inside a function.
REASONS = ("heavy", "lazy command load")


def modules() -> list[tuple[str, Path]]:
    return sorted((path.relative_to(PACKAGE).as_posix(), path)
                  for path in PACKAGE.rglob("*.py"))


def test_no_module_outside_the_database_layer_names_a_statement() -> None:
    offenders = [
        f"crawler/{name}:{number}: {line.strip()}"
        for name, path in modules() if not name.startswith(SQL_HOMES)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if "QUERIES[" in line
    ]
    assert not offenders, "SQL outside crawler/db (call a crawler.db function):\n" + "\n".join(
        offenders)


def _names_crawler(node: ast.AST) -> bool:
    """Whether ``node`` imports a module of the crawler."""
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] == "crawler"
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == "crawler" for alias in node.names)
    return False


def _function_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Imports of crawler modules inside a function body (at any depth)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if in_function and isinstance(child, ast.Import | ast.ImportFrom) and (
                    _names_crawler(child)):
                found.append(child)
            visit(child, inner)

    visit(tree, False)
    return found


def test_crawler_modules_are_imported_at_the_top() -> None:
    offenders = []
    for name, path in modules():
        if not name.startswith(IMPORT_CHECKED):
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in _function_imports(ast.parse(text)):
            line = lines[node.lineno - 1]
            comment = line.partition("#")[2]
            if not any(reason in comment for reason in REASONS):
                offenders.append(f"crawler/{name}:{node.lineno}: {line.strip()}")
    assert not offenders, ("imports inside functions (move them to the top, or say on the line "
                           "which heavy dependency they defer):\n" + "\n".join(offenders))
