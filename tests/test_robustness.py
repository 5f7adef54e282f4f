"""Issue 15, Robustness: inputs that used to end in a traceback (or a misleading message, or a
silent drop) now give one line naming the file and what to do, with exit code 2, and --skip-bad
leaves them out and lists them in every engine."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from glance_law.cli import fit as fit_cli
from glance_law.cli import report
from glance_law.io import read_logs, write_table
from glance_law.scale.reduce import reduce_frame, write_reduced
from glance_law.simulate import TaskSpec, simulate_rounds, simulate_tree_rounds

ENGINES = [[], ["--engine", "arrow"], ["--engine", "duckdb"]]


def rounds(seed=0, task="t", n_prompts=8) -> pd.DataFrame:
    return simulate_rounds([TaskSpec(task, 1.0, 0.8)], n_prompts=n_prompts, seed=seed, vectors=False,
                           run_id=f"run{seed}")


def run(argv, capsys):
    rc = fit_cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(rc, err, *needles):
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture
def good(tmp_path) -> Path:
    return write_table(rounds(1), tmp_path / "good" / "rounds-good.parquet")


def _retyped(path: Path, table: pa.Table, meta=None) -> Path:
    if meta is not None:
        table = table.replace_schema_metadata(meta)
    pq.write_table(table, path)
    return path


# --------------------------------------------------------------------------- non-UTF-8 text

@pytest.fixture
def not_utf8(tmp_path) -> Path:
    src = write_table(rounds(2), tmp_path / "src.parquet")
    t = pq.read_table(src)
    i = t.schema.get_field_index("task")
    bad = pa.array([b"\xff\xfe caf\xe9"] * t.num_rows, pa.binary()).view(pa.string())
    path = tmp_path / "bad" / "rounds-latin1.parquet"
    path.parent.mkdir()
    return _retyped(path, t.set_column(i, "task", bad), t.schema.metadata)


@pytest.mark.parametrize("engine", ENGINES, ids=["reader", "arrow", "duckdb"])
def test_text_that_is_not_utf8(not_utf8, good, engine, capsys):
    rc, out, err = run([not_utf8, good, *engine], capsys)
    one_line_error(rc, err, str(not_utf8), "UTF-8")
    assert out == ""
    rc, out, err = run([not_utf8, good, "--skip-bad", "--format", "json", *engine], capsys)
    assert rc == 0, err
    assert f"skipped {not_utf8}" in err and "UTF-8" in err and "Traceback" not in err
    assert fit_cli.json_rows(json.loads(out))[-1]["rounds"] == len(rounds(1))


# --------------------------------------------------------------------------- deeply nested glance.run

@pytest.mark.parametrize("engine", ENGINES, ids=["reader", "arrow", "duckdb"])
def test_deeply_nested_run_metadata(tmp_path, engine, capsys):
    src = write_table(rounds(3), tmp_path / "src.parquet")
    t = pq.read_table(src)
    meta = dict(t.schema.metadata)
    meta[b"glance.run"] = ("[" * 200_000 + "]" * 200_000).encode()
    f = _retyped(tmp_path / "rounds-deep.parquet", t, meta)
    rc, out, err = run([f, "--format", "json", *engine], capsys)
    assert rc == 0 and "Traceback" not in err, err
    assert fit_cli.json_rows(json.loads(out))[-1]["rounds"] == len(rounds(3))
    assert read_logs(f).files[0].run["unparsed"].startswith("[[[")   # kept as provenance, never a reason to refuse


# --------------------------------------------------------------------------- reduction metadata

def _reduced_with(tmp_path, mutate) -> Path:
    path = Path(write_reduced(reduce_frame(rounds(4)), tmp_path / "reduced.parquet"))
    t = pq.read_table(path)
    meta = dict(t.schema.metadata)
    run_doc = json.loads(meta[b"glance.run"])
    raw = mutate(run_doc["reduction"])
    if isinstance(raw, bytes):
        meta[b"glance.run"] = raw
    else:
        run_doc["reduction"] = raw
        meta[b"glance.run"] = json.dumps(run_doc).encode()
    return _retyped(tmp_path / "reduced-bad.parquet", t, meta)


def _drop(key):
    return lambda m: {k: v for k, v in m.items() if k != key}


def _set(key, value):
    return lambda m: {**m, key: value}


REDUCTION_VARIANTS = {
    "missing buckets": _drop("buckets"),
    "missing grid": _drop("grid"),
    "missing format": _drop("format"),
    "grid not an object": _set("grid", "32/-10/-1"),
    "grid with an unknown key": lambda m: {**m, "grid": {**m["grid"], "bins": 3}},
    "grid value not an integer": lambda m: {**m, "grid": {**m["grid"], "per_octave": "32"}},
    "grid out of range": lambda m: {**m, "grid": {**m["grid"], "lo_exp": 5, "hi_exp": 1}},
    "buckets a string": _set("buckets", "64"),
    "buckets negative": _set("buckets", -3),
    "prompts a list": _set("prompts", [1, 2]),
    "prompts with a negative count": _set("prompts", {"unknown": {"t": -1}}),
    "prompts with a string count": _set("prompts", {"unknown": {"t": "8"}}),
    "excluded_horizon0 not a count": _set("excluded_horizon0", "x"),
    "excluded_conditions negative": _set("excluded_conditions", {"mismatched": -2}),
    "condition a number": _set("condition", 3),
    "skipped not pairs": _set("skipped", ["a.parquet"]),
    "sources not objects": _set("sources", [1]),
    "bad JSON": lambda m: b'{"reduction": {"format": 1, "grid": ',
    "reduction not an object": lambda m: [m],
}


@pytest.mark.parametrize("variant", list(REDUCTION_VARIANTS))
def test_malformed_reduction_metadata(tmp_path, variant, capsys):
    f = _reduced_with(tmp_path, REDUCTION_VARIANTS[variant])
    rc, out, err = run([f], capsys)
    one_line_error(rc, err, str(f))
    assert "reduc" in err and out == ""


# --------------------------------------------------------------------------- vocab_size in the run metadata

@pytest.mark.parametrize("value", ["large", None, -5, True, [32000], "nan"])
def test_report_fano_with_a_non_numeric_vocab_size(tmp_path, value, capsys):
    f = write_table(rounds(5), tmp_path / "logs" / "rounds-v.parquet", run={"vocab_size": value})
    out = tmp_path / "app"
    rc = report.main([str(f), "--out", str(out), "--quiet", "--only", "fano"])
    err = capsys.readouterr().err
    assert rc == 0 and "Traceback" not in err, err
    entry = json.loads((out / "manifest.json").read_text())["sections"][0]
    assert entry["status"] == "skipped" and "vocab_size" in entry["reason"] and "--vocab-size" in entry["reason"]
    assert str(f) in entry["reason"]


# --------------------------------------------------------------------------- --width beyond 62 bits

def test_width_beyond_the_node_code_limit(tmp_path, capsys):
    t = simulate_tree_rounds([TaskSpec("caption", 1.0, 0.8)], n_prompts=4, rounds_per_prompt=5, horizon=20, k=8,
                             budget=31, seed=3, run_id="tree", drafter="tree")
    extra = 2                                              # horizon 22 at k = 8: 66 bits > 62
    t["horizon"] = (t["horizon"] + extra).astype(np.int16)
    for c in ("match", "target_logq", "target_rank"):
        t[c] = [list(v) + [v[-1]] * extra for v in t[c]]
    t["topk_logq"] = [list(v) + list(v[-8:]) * extra for v in t["topk_logq"]]
    f = write_table(t, tmp_path / "rounds-wide.parquet")
    rc, out, err = run([f, "--width", "--width-boot", "5"], capsys)
    one_line_error(rc, err, "horizon", "62", "--branch-k")
    assert out == ""


# --------------------------------------------------------------------------- permissions

def _deny(monkeypatch, denied: set[str], listing: bool = False):
    """Permission denied on these paths, as a non-root user would see it (the tests run as root too,
    where chmod does not bite)."""
    if listing:
        real = os.scandir

        def scandir(p="."):
            if os.path.abspath(p) in denied:
                raise PermissionError(13, "Permission denied", str(p))
            return real(p)
        monkeypatch.setattr(os, "scandir", scandir)
    else:
        real_open = os.open

        def fake_open(p, flags, *a, **k):
            if os.path.abspath(p) in denied:
                raise PermissionError(13, "Permission denied", str(p))
            return real_open(p, flags, *a, **k)
        monkeypatch.setattr(os, "open", fake_open)


def test_unreadable_file_is_reported_as_a_permission_problem(tmp_path, good, monkeypatch, capsys):
    locked = write_table(rounds(6), tmp_path / "locked.parquet")
    _deny(monkeypatch, {str(locked)})
    rc, out, err = run([locked, good], capsys)
    one_line_error(rc, err, str(locked), "permission denied", "chmod")
    assert "not a Parquet file" not in err
    rc, out, err = run([locked, good, "--skip-bad", "--format", "json"], capsys)
    assert rc == 0 and "permission denied" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_real_chmod(tmp_path, good, capsys):
    locked = write_table(rounds(6), tmp_path / "locked.parquet")
    locked.chmod(0)
    rc, out, err = run([locked, good], capsys)
    one_line_error(rc, err, str(locked), "permission denied")


def test_unreadable_subfolder_is_reported_not_dropped(tmp_path, monkeypatch, capsys):
    top = tmp_path / "logs"
    write_table(rounds(7), top / "a" / "rounds-a.parquet")
    write_table(rounds(8), top / "b" / "rounds-b.parquet")
    _deny(monkeypatch, {str(top / "b")}, listing=True)
    rc, out, err = run([top], capsys)
    one_line_error(rc, err, str(top / "b"), "permission denied")
    rc, out, err = run([top, "--skip-bad", "--format", "json"], capsys)
    assert rc == 0 and f"skipped {top / 'b'}" in err
    assert fit_cli.json_rows(json.loads(out))[-1]["rounds"] == len(rounds(7))


# --------------------------------------------------------------------------- links: one rule for folders and globs

@pytest.mark.parametrize("kind", ["dangling", "loop"])
@pytest.mark.parametrize("how", ["folder", "glob"])
@pytest.mark.parametrize("engine", ENGINES, ids=["reader", "arrow", "duckdb"])
def test_broken_links_the_same_through_folders_and_globs(tmp_path, kind, how, engine, capsys):
    d = tmp_path / "logs"
    write_table(rounds(9), d / "rounds-a.parquet")
    link = d / "rounds-link.parquet"
    if kind == "dangling":
        link.symlink_to(tmp_path / "gone.parquet")
    else:
        link.symlink_to(link)
    target = d if how == "folder" else f"{d}/*.parquet"
    rc, out, err = run([target, *engine], capsys)
    one_line_error(rc, err, str(link), "symbolic link")
    rc, out, err = run([target, "--skip-bad", "--format", "json", *engine], capsys)
    assert rc == 0, err
    assert f"skipped {link}" in err and fit_cli.json_rows(json.loads(out))[-1]["rounds"] == len(rounds(9))
