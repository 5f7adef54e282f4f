"""Safety gaps of issue 26 closed on every path: page checksums verified by every reduction
engine (DuckDB and Spark do not verify Parquet CRCs themselves), the total size of one text
input capped, a writer lock on store prefixes, and command lines stored scrubbed. Commands run
in a child with memory capped (tests/_fuzz.py); each expects exit 0 with the right result or
exit 2 with one line."""
from __future__ import annotations

import importlib.util

import pyarrow.parquet as pq
import pytest
from _fuzz import run_cli

from glance_law.io import write_table
from glance_law.scale.engines import ENGINES, reduce_logs, scan, verify_pages
from glance_law.scale.reduce import read_reduced
from glance_law.simulate import TaskSpec, simulate_rounds

MEM = 1024


def _rounds(seed=0, n_prompts=20):
    return simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=n_prompts, seed=seed, vectors=False,
                           run_id=f"run{seed}")


def _flip(path, column: str = "accepted") -> None:
    """Flip one bit inside the first data page of ``column`` (after the page header)."""
    rg = pq.read_metadata(path).row_group(0)
    col = next(rg.column(i) for i in range(rg.num_columns) if rg.column(i).path_in_schema == column)
    start = col.data_page_offset
    end = (col.dictionary_page_offset or col.data_page_offset) + col.total_compressed_size
    data = bytearray(path.read_bytes())
    data[(start + end) // 2] ^= 0x01
    path.write_bytes(bytes(data))


# ----------------------------------------------------------------------- page checksums

@pytest.mark.parametrize("engine", ENGINES)
def test_flipped_byte_refused_by_every_engine(tmp_path, engine):
    good = write_table(_rounds(0), tmp_path / "logs" / "rounds-a.parquet")
    bad = write_table(_rounds(1), tmp_path / "logs" / "rounds-b.parquet")
    _flip(bad)
    out = tmp_path / "red.parquet"
    res = run_cli("glance_law.reduce", [tmp_path / "logs", "--engine", engine, "--out", out],
                  mem_mb=MEM if engine != "spark" else 4096, timeout=240)
    if engine == "spark":      # the check runs on Spark's executors: the JVM logs its own lines on stderr too
        mine = [ln for ln in res.stderr.splitlines() if ln.startswith("python -m glance_law")]
        assert res.returncode == 2 and "Traceback" not in res.stderr and len(mine) == 1, res.stderr[-2000:]
        line = mine[0]
        assert "rounds-b.parquet" in line
    else:
        line = res.expect_refusal("rounds-b.parquet")
    assert "checksum" in line.lower() or "crc" in line.lower(), line
    assert not out.exists()
    res = run_cli("glance_law.reduce", [tmp_path / "logs", "--engine", engine, "--out", out, "--skip-bad"],
                  mem_mb=MEM if engine != "spark" else 4096, timeout=240).expect_ok()
    assert "rounds-b.parquet" in res.stdout + res.stderr
    assert read_reduced([str(out)]).rounds == reduce_logs(good, engine="arrow").rounds      # the good file only


def test_verify_pages_names_the_bad_file_and_passes_good_ones(tmp_path):
    a = write_table(_rounds(0), tmp_path / "rounds-a.parquet")
    b = write_table(_rounds(1), tmp_path / "rounds-b.parquet")
    rounds = scan([a, b])[0]
    assert verify_pages(rounds) == []
    _flip(b, "root_entropy")
    bad = verify_pages(rounds, batch_rows=7)
    assert [p for p, _ in bad] == [str(b)] and "checksum" in bad[0][1]
    assert verify_pages(rounds, columns=("task",)) == []          # only the columns asked for are read
    if importlib.util.find_spec("duckdb") is not None:          # what the check is for: DuckDB reads it silently
        red = reduce_logs([a, b], engine="duckdb", page_check=False)
        assert red.rounds > reduce_logs(a, engine="duckdb").rounds


# ----------------------------------------------------------------------- stored command lines

SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCY"


def test_command_line_and_training_record_are_scrubbed(tmp_path):
    from glance_law.scrub import command_line
    from glance_log.train.record import write_training_record
    argv = ["--data", f"s3://AKIDEXAMPLE:{SECRET}@bucket/q.jsonl", "--out", f"https://h.example/x?sig={SECRET}",
            "--steps", "10"]
    line = command_line("python -m glance_log.train.block", argv)
    assert SECRET not in line and "REDACTED" in line and line.endswith("--steps 10"), line
    assert line.startswith("python -m glance_log.train.block --data s3://"), line
    path = write_training_record(tmp_path / "head", {"recipe": {"data": argv[1], "lr": 0.01}, "command": line,
                                                     f"gs://tok:{SECRET}@b/x": 1})
    text = path.read_text()
    assert SECRET not in text and '"lr": 0.01' in text, text


def _command_values(tree):
    """(line, value node) of every ``"command": value`` dict entry and ``command=value`` keyword."""
    import ast
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "command":
                    yield node.lineno, v
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "command":
                    yield node.lineno, kw.value


def test_every_stored_command_line_goes_through_the_scrubber():
    """A contract over the sources: wherever a record gets a "command" (metadata, manifests,
    training records, RunConfig), the value is built by glance_law.scrub (scrub or command_line),
    or is a config's ``.command`` (checked where the config is built)."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    found, bad = 0, []
    for f in sorted([*(root / "glance_law").rglob("*.py"), *(root / "logger").rglob("*.py")]):
        for line, v in _command_values(ast.parse(f.read_text())):
            found += 1
            name = v.func.id if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) else None
            if name not in ("scrub", "command_line") and not (isinstance(v, ast.Attribute) and v.attr == "command"):
                bad.append(f"{f.relative_to(root)}:{line}")
    assert found >= 7 and not bad, bad


# ----------------------------------------------------------------------- store prefix lock

def test_store_lock_without_conditional_create():
    """memory:// (an fsspec filesystem) has no conditional create through the store layer: the
    lock is checked, written and read back, so a second writer is still refused and the lock
    goes when the first finishes (tests/test_store.py covers S3's If-None-Match create)."""
    pytest.importorskip("fsspec")
    from glance_law.data import outputs as O
    from glance_law.data import uri
    prefix = "memory://glance-safety/out"
    assert uri.create_exclusive(prefix + "/x", b"") is None
    with O.store_lock(prefix, "first") as confirm:
        assert uri.read_small(prefix + "/.glance-write.lock") is not None
        with pytest.raises(O.OutputError, match="another command"):
            with O.store_lock(prefix, "second"):
                pass
        confirm()
    assert uri.read_small(prefix + "/.glance-write.lock") is None
