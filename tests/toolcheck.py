"""Tests that drive a system tool skip when it is missing, except in CI, where they fail.

CI installs every tool (``.ci/run``), so a missing one there is a broken set-up, not a reason
to skip silently.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest


def require_tool(name: str, package: str) -> str:
    """The tool's path; skip (or fail when CI=true) naming the Debian package that provides it."""
    path = shutil.which(name)
    if path is not None:
        return path
    missing(f"{name} not found", package)


def missing(what: str, package: str) -> NoReturn:
    """Skip (or fail when CI=true): ``what`` is missing, naming the Debian package with it."""
    message = f"{what}: install Debian's {package!r} (apt-get install {package})"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " [CI=true: missing tools fail]", pytrace=False)
    pytest.skip(message)
