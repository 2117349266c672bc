"""Tests that drive a system tool skip when it is missing, except in CI, where they fail.

CI installs every tool (``.ci/run``), so a missing one there is a broken set-up, not a reason
to skip silently.
"""

from __future__ import annotations

import os
import shutil

import pytest


def require_tool(name: str, package: str) -> str:
    """The tool's path; skip (or fail when CI=true) naming the Debian package that provides it."""
    path = shutil.which(name)
    if path is not None:
        return path
    message = f"{name} not found: install Debian's {package!r} (apt-get install {package})"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " [CI=true: missing tools fail]", pytrace=False)
    pytest.skip(message)
