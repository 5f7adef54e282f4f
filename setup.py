"""Package discovery only (metadata lives in pyproject.toml).

``glance_log`` is the folder ``logger/``; pyproject's ``packages.find`` cannot rename a folder,
so the package list is found here: every package under ``glance_law/`` and ``logger/``
(``glance_log.train``, ``glance_log.default``, ...), whatever subpackages they grow.
"""
from setuptools import find_packages, setup

setup(
    package_dir={"glance_law": "glance_law", "glance_log": "logger"},
    packages=(find_packages(include=["glance_law", "glance_law.*"])
              + ["glance_log"] + [f"glance_log.{p}" for p in find_packages("logger")]),
)
