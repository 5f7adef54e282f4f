"""What the wheel ships: every package under glance_law/ and logger/ (= glance_log), the
embedded default model as package data found through importlib.resources (never through the
current directory; $GLANCE_MODELS overrides), the license. .ci/run builds the real wheel,
installs it into a fresh venv and runs glance-log and the fit from outside the checkout."""
from __future__ import annotations

import fnmatch
import runpy
from importlib.resources import files
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")    # Python >= 3.11
ROOT = Path(__file__).resolve().parent.parent


def _setup_kwargs(monkeypatch) -> dict:
    import setuptools

    got = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: got.update(kw))
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(ROOT / "setup.py"))
    return got


def test_every_package_on_disk_is_in_the_wheel(monkeypatch):
    kw = _setup_kwargs(monkeypatch)
    want = set()
    for top, name in (("glance_law", "glance_law"), ("logger", "glance_log")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            want.add(".".join((name, *rel.parts)))
    assert {"glance_log.train", "glance_log.default", "glance_law"} <= want
    assert want == set(kw["packages"])
    assert kw["package_dir"] == {"glance_law": "glance_law", "glance_log": "logger"}


def test_every_file_of_the_embedded_default_is_package_data():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = cfg["tool"]["setuptools"]["package-data"]["glance_log.default"]
    base = ROOT / "logger" / "default"
    data = [p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file() and p.suffix != ".py"
            and "__pycache__" not in p.parts]
    assert any(d.startswith("target/") for d in data) and any(d.startswith("block/") for d in data)
    missing = [d for d in data if not any(fnmatch.fnmatch(d, g) and d.count("/") == g.count("/") for g in globs)]
    assert not missing, f"not shipped: {missing}"
    assert cfg["project"]["license"] == "Apache-2.0"
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()


def test_default_models_come_from_the_package_not_the_current_directory(tmp_path, monkeypatch):
    from glance_log.default import block_path, target_path

    monkeypatch.delenv("GLANCE_MODELS", raising=False)
    fake = tmp_path / "data" / "models"                 # what the old lookup would have picked up
    (fake / "target").mkdir(parents=True)
    (fake / "block").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    pkg = Path(str(files("glance_log.default")))
    assert target_path() == pkg / "target" and block_path() == pkg / "block"
    assert (target_path() / "config.json").is_file() and (target_path() / "model.safetensors").is_file()
    assert (block_path() / "config.json").is_file() and (block_path() / "model.safetensors").is_file()
    assert tmp_path not in target_path().parents


def test_glance_models_overrides(tmp_path, monkeypatch):
    from glance_log.default import block_path, target_path

    monkeypatch.setenv("GLANCE_MODELS", str(tmp_path / "mine"))
    assert target_path() == tmp_path / "mine" / "target" and block_path() == tmp_path / "mine" / "block"


def test_notebook_extra_brings_a_kernel():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = " ".join(cfg["project"]["optional-dependencies"]["notebook"])
    assert "ipykernel" in extra and "nbclient" in extra
