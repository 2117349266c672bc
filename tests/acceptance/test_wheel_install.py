"""A plain wheel install can migrate and run from any directory (issue 15).

Builds the wheel (pip fetches the build backend from PyPI, as any install does), installs it
into a fresh virtual environment without the source tree, and runs `crawler db upgrade` and
`crawler status` from a directory outside the checkout. The fresh environment borrows the
dependencies of the test's own environment through a .pth line, so nothing else is downloaded;
the crawler package itself comes only from the wheel.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_migrates_and_runs_outside_the_checkout(tmp_path: Path, empty_db_url: str) -> None:
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        capture_output=True, text=True, timeout=500,
    )
    if build.returncode != 0 and "NewConnectionError" in build.stderr + build.stdout \
            and os.environ.get("CI") != "true":
        pytest.skip("building the wheel needs PyPI for the build backend (setuptools)")
    assert build.returncode == 0, build.stderr
    assert "License classifiers are deprecated" not in build.stderr
    assert "project.license` as a TOML table is deprecated" not in build.stderr
    wheel = next(dist.glob("crawler-*.whl"))

    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
         str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    fresh_site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    (fresh_site / "zz_test_dependencies.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CRAWLER_") and k != "PYTHONPATH"}
    env["CRAWLER_DATABASE_URL"] = empty_db_url
    where = subprocess.run([str(python), "-c", "import crawler; print(crawler.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(venv)), where.stdout  # not the checkout
    crawler = str(venv / "bin" / "crawler")
    upgrade = subprocess.run([crawler, "db", "upgrade"], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=120)
    assert upgrade.returncode == 0, upgrade.stderr
    assert "at revision" in upgrade.stdout
    status = subprocess.run([crawler, "status", "--json"], cwd=elsewhere, env=env,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert '"urls": 0' in status.stdout
