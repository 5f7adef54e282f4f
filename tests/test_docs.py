"""Every code example in the docs runs, and the generated references are current.

* Every fenced ```python block of docs/*.md (and README.md) is executed; the blocks of one
  file share a namespace, in order, in a scratch folder where ``data/`` is the repository's.
  A block is skipped only when the line before its fence says ``<!-- skip-test: REASON -->``
  (a reason is required), or when it names a part of the embedded model (``logger/default/...``)
  that is absent.
* Shell examples (fenced blocks without a language, or bash/sh/console) that run
  ``python -m glance_law...`` or ``glance-log`` are executed in a scratch folder whose
  ``logs/`` holds the committed example logs. Synopsis lines (with ``[optional]``
  brackets or ``|`` alternatives) are not commands. In the default run, ``glance-log``
  lines (minutes of CPU decoding with the embedded model) are stood in by the example
  logs they would write, and the full ``python -m glance_law.report`` (tested in
  tests/test_report.py) is left to the slow run, which executes every line for real
  (``glance-log`` only when the embedded target and block head are present).
* docs/cli.md is exactly what ``python docs/make_reference.py`` generates from the parsers;
  every name docs/api.md lists exists, and every public name is listed.
"""
from __future__ import annotations
import __future__

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = sorted((ROOT / "docs").glob("*.md")) + ([ROOT / "README.md"] if (ROOT / "README.md").exists() else [])
GENERATED = {"cli.md", "api.md"}           # help text and signatures, not examples
SHELL_LANGS = {"", "bash", "sh", "shell", "console"}
MODELS = ROOT / "logger" / "default"


def _default_model() -> bool:
    """The embedded default glance-log runs without --model: the target and the block head."""
    return (MODELS / "target").is_dir() and (MODELS / "block").is_dir()


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    code: str
    skip: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    out, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2), i
        j = i + 1
        while j < len(lines) and not re.match(rf"^{indent}```\s*$", lines[j]):
            j += 1
        body = "\n".join(ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1:j])
        prev = lines[start - 1].strip() if start else ""
        skip = None
        sm = re.match(r"<!--\s*skip-test(?::\s*(.*?))?\s*-->", prev)
        if sm:
            skip = (sm.group(1) or "").strip()
            assert skip, f"{path.name}:{start + 1}: a skip-test marker needs a reason"
        out.append(Block(path, start + 1, lang, body + "\n", skip))
        i = j + 1
    return out


def _example_logs() -> Path:
    logs = ROOT / "data" / "logs"
    return logs if logs.is_dir() and any(logs.glob("*.parquet")) else ROOT / "data" / "example"


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    (tmp_path / "data").symlink_to(ROOT / "data", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return tmp_path


# --------------------------------------------------------------------------- python blocks

PY_FILES = [p for p in DOC_FILES if p.name not in GENERATED and any(b.lang == "python" for b in blocks(p))]


@pytest.mark.parametrize("path", PY_FILES, ids=lambda p: p.name)
def test_python_examples_run(path, scratch):
    ns: dict = {"__name__": "__docs__"}
    ran, skipped = 0, []
    flags = __future__.annotations.compiler_flag     # signature sketches may name types they do not import
    for b in blocks(path):
        if b.lang != "python":
            continue
        if b.skip:
            skipped.append(f"{b.where}: {b.skip}")
            continue
        code = re.sub(r"#[^\n]*", "", b.code)       # a path named in a comment is not needed
        absent = [m for m in re.findall(r"logger/default(?:/[\w.-]+)?", code) if not (ROOT / m).exists()]
        if absent:
            skipped.append(f"{b.where}: needs the embedded model ({', '.join(absent)}), which is absent")
            continue
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(b.code, b.where, "exec", flags=flags, dont_inherit=True), ns)
        except Exception as exc:  # noqa: BLE001 - report which block broke
            raise AssertionError(f"{b.where}: the example fails: {type(exc).__name__}: {exc}") from exc
        ran += 1
    if not ran:
        pytest.skip("; ".join(skipped))


def test_skip_markers_are_rare_and_explained():
    for p in DOC_FILES:
        for b in blocks(p):
            if b.skip is not None:
                assert len(b.skip) >= 20, f"{b.where}: say why the block cannot run"


# --------------------------------------------------------------------------- shell examples

def _commands(b: Block) -> list[str]:
    out = []
    for raw in b.code.splitlines():
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        line = re.sub(r"\s+#.*$", "", line)
        if not (line.startswith("glance-log") or line.startswith("python -m glance_law")):
            continue
        if re.search(r"\[|\]|\.\.\.|\s\|\s|\w\|\w", line):      # a synopsis, not a command
            continue
        out.append(line)
    return out


SHELL = [b for p in DOC_FILES if p.name not in GENERATED for b in blocks(p)
         if b.lang in SHELL_LANGS and not b.skip and _commands(b)]


def _slow_only(cmd: str) -> bool:
    return cmd.startswith("glance-log") or (cmd.startswith("python -m glance_law.report") and "--only" not in cmd)


def _run_block(b: Block, scratch: Path, slow: bool):
    logs = scratch / "logs"
    ran = 0
    for cmd in _commands(b):
        if cmd.startswith("glance-log"):
            if not slow or not _default_model():
                if not logs.exists():       # stand in the logs it would write
                    shutil.copytree(_example_logs(), logs)
                continue
        elif _slow_only(cmd) and not slow:
            continue
        if not logs.exists():
            shutil.copytree(_example_logs(), logs)
        shell_cmd = re.sub(r"^python ", f"{sys.executable} ", cmd)
        shell_cmd = re.sub(r"^glance-log ", f"{sys.executable} -m glance_log.cli ", shell_cmd)
        r = subprocess.run(["bash", "-c", shell_cmd], cwd=scratch, capture_output=True, text=True, timeout=900,
                           env={**os.environ, "MPLBACKEND": "Agg"})
        assert r.returncode == 0, f"{b.where}: `{cmd}` exited {r.returncode}: {r.stderr.strip()[-800:]}"
        ran += 1
    return ran


@pytest.mark.parametrize("b", SHELL, ids=lambda b: b.where)
def test_shell_examples_run(b, scratch):
    if not _run_block(b, scratch, slow=False):
        pytest.skip("only slow commands (glance-log, the full report): run with -m slow")


@pytest.mark.slow
@pytest.mark.parametrize("b", [b for b in SHELL if any(_slow_only(c) for c in _commands(b))], ids=lambda b: b.where)
def test_shell_examples_run_for_real(b, scratch):
    assert _run_block(b, scratch, slow=True)


# --------------------------------------------------------------------------- generated references

def _make_reference():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import make_reference
    finally:
        sys.path.remove(str(ROOT / "docs"))
    return make_reference


def test_cli_reference_is_generated_from_the_parsers():
    ref = _make_reference()
    assert (ROOT / "docs" / "cli.md").read_text() == ref.cli_md(), \
        "docs/cli.md is out of date: run python docs/make_reference.py"


def test_api_reference_names_exist_and_cover_the_public_api():
    import importlib
    ref = _make_reference()
    text = (ROOT / "docs" / "api.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    listed = {}
    for sec in sections:
        module = sec.splitlines()[0].strip()
        listed[module] = re.findall(r"^- `([A-Za-z_][A-Za-z0-9_]*)", sec, flags=re.M)
    assert set(listed) == {m for m, _, _ in ref.MODULES}
    for module, names in listed.items():
        mod = importlib.import_module(module)
        missing = [n for n in names if not hasattr(mod, n)]
        assert not missing, f"docs/api.md lists {module}.{', '.join(missing)}, which do not exist"
        public = ref.public_names(module, dict((m, n) for m, _, n in ref.MODULES)[module])
        unlisted = [n for n in public if n not in names]
        assert not unlisted, f"{module} exports {', '.join(unlisted)}: run python docs/make_reference.py"


def test_index_links_resolve():
    for p in DOC_FILES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", p.read_text()):
            if re.match(r"\w+://", target):
                continue
            assert (p.parent / target).exists(), f"{p.name}: broken link {target}"
