"""What a command loads before it does anything: scipy only when a function needs it."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import crawler.cli
crawler.cli.build_parser()
import crawler.db.frontier, crawler.core.transition, crawler.core.extract
assert "scipy" not in sys.modules, sorted(m for m in sys.modules if m.startswith("scipy"))[:5]
from crawler.core.estimate import mle_rate_irregular
assert mle_rate_irregular([1.0, 2.0], 3.0) is not None  # the import on first use works
assert "scipy.optimize" in sys.modules
"""


def test_the_cli_and_the_fetch_path_start_without_scipy() -> None:
    """Building every command's parser and importing the fetch path's modules leaves scipy
    unimported (it cost every command about half a second); the first estimate loads it."""
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
