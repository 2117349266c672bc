"""Ship the Alembic migrations inside the package, so a wheel can run `crawler db upgrade`.

The repository keeps them in ``migrations/`` (Alembic's layout); the build copies them to
``crawler/migrations`` in the wheel, where ``crawler.db.migrate`` looks first.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCE = Path(__file__).resolve().parent / "migrations"


class BuildWithMigrations(build_py):
    def run(self) -> None:
        super().run()
        if not SOURCE.is_dir():  # a stub build (the Dockerfile's dependency layer)
            return
        target = Path(self.build_lib) / "crawler" / "migrations"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(SOURCE, target,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithMigrations})
