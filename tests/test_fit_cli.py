"""``python -m glance_law.fit``: output formats, every bad input of the contract (message,
exit code, nothing on stdout, and --skip-bad fitting the valid files beside it), the
section protocol and user errors."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from glance_law.cli import fit as cli
from glance_law.io import write_table
from glance_law.law import LAW_COLUMNS
from glance_law.simulate import TaskSpec, simulate_rounds

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "data" / "example" / "rounds-example.parquet"


def run(argv, capsys):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def rounds(seed=0, n_prompts=8, task="t", **kw) -> pd.DataFrame:
    return simulate_rounds([TaskSpec(task, 1.0, 0.8)], n_prompts=n_prompts, seed=seed, vectors=False,
                           run_id=f"run{seed}", **kw)


@pytest.fixture
def good(tmp_path) -> Path:
    return write_table(rounds(1), tmp_path / "good.parquet")


def raw_parquet(path: Path, frame: pd.DataFrame, meta: dict) -> Path:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({k.encode(): v.encode() for k, v in meta.items()})
    pq.write_table(table, path)
    return path


VALID_META = {"glance.kind": "rounds", "glance.schema": "1", "glance.run": "{}"}


def _bad_value(column, value, row=3):
    def make(path):
        f = rounds(2).astype({"root_entropy": "float64", "accepted": "int64"})
        f.loc[row, column] = value
        return write_table(f, path)
    return make


BAD = {
    # name: (maker, words the one-line message must contain besides the file name)
    "wrong_kind": (lambda p: raw_parquet(p, rounds(2), {**VALID_META, "glance.kind": "spans"}), ["kind"]),
    "unknown_schema_version": (lambda p: raw_parquet(p, rounds(2), {**VALID_META, "glance.schema": "99"}),
                               ["schema version", "99"]),
    "missing_column": (lambda p: raw_parquet(p, rounds(2).drop(columns="accepted"), VALID_META),
                       ["accepted", "missing"]),
    "nan_entropy": (_bad_value("root_entropy", np.nan), ["root_entropy", "NaN"]),
    "inf_entropy": (_bad_value("root_entropy", np.inf), ["root_entropy", "inf"]),
    "accepted_negative": (_bad_value("accepted", -1), ["accepted", "horizon"]),
    "accepted_above_horizon": (_bad_value("accepted", 16), ["accepted", "horizon"]),
    "duplicate_key": (lambda p: write_table(pd.concat([rounds(2), rounds(2).iloc[:5]], ignore_index=True), p),
                      ["duplicate", "round"]),
    "empty_file": (lambda p: raw_parquet(p, rounds(2).iloc[:0], VALID_META), ["no rows"]),
    "not_parquet": (lambda p: (p.write_bytes(b"task,prompt_id\ncaption,1\n"), p)[1], ["not a Parquet"]),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_every_bad_input_stops_with_one_line_and_skip_bad_fits_the_rest(name, tmp_path, good, capsys):
    maker, words = BAD[name]
    bad = maker(tmp_path / f"bad_{name}.parquet")
    rc, out, err = run([good, bad], capsys)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(bad) in lines[0] and "error" in lines[0]
    for w in words:
        assert w.lower() in lines[0].lower(), (w, lines[0])
    if name in ("missing_column", "nan_entropy", "inf_entropy", "accepted_negative", "accepted_above_horizon"):
        assert "column '" in lines[0]  # names the column
    # --skip-bad: the valid file is fitted, the bad one listed with its reason, in every format
    for fmt in ("text", "json", "csv", "markdown"):
        rc, out, err = run([good, bad, "--skip-bad", "--format", fmt], capsys)
        assert rc == 0, err
        assert f"skipped {bad}" in err
        if fmt == "json":
            doc = json.loads(out)
            rows = cli.json_rows(doc)
            assert doc["version"] == cli.JSON_VERSION and [r["task"] for r in rows] == ["t", "pooled"]
            assert rows[0]["rounds"] == len(rounds(1))
        elif fmt == "csv":
            table = pd.read_csv(io.StringIO(out))
            assert list(table["task"]) == ["t", "pooled"]
        else:
            assert f"skipped {bad}" in out  # a note under the table
            assert "pooled" in out


def test_only_bad_files_is_an_error_even_with_skip_bad(tmp_path, capsys):
    bad = BAD["nan_entropy"][0](tmp_path / "b.parquet")
    rc, out, err = run([bad, "--skip-bad"], capsys)
    assert rc == 2 and out == "" and "every rounds file was bad" in err and len(err.strip().splitlines()) == 1


def test_prompt_files_alone_are_the_wrong_kind(tmp_path, capsys):
    p = write_table(pd.DataFrame({"run_id": ["r"], "prompt_id": ["p"], "task": ["t"]}), tmp_path / "prompts.parquet",
                    kind="prompts")
    rc, out, err = run([p], capsys)
    assert rc == 2 and out == "" and "no per-round rows" in err and "prompts" in err and len(err.strip().splitlines()) == 1


def test_example_log_text_and_all_formats(capsys):
    rc, out, err = run([EXAMPLE], capsys)
    assert rc == 0, err
    for task in ("caption", "textvqa", "infovqa", "docvqa", "chartqa", "pooled"):
        assert task in out
    assert "b1" in out and "note: intervals" in out
    for fmt in ("markdown", "latex", "html"):
        rc, out2, _ = run([EXAMPLE, "--format", fmt], capsys)
        assert rc == 0 and "chartqa" in out2
    rc, out, _ = run([EXAMPLE, "--format", "json"], capsys)
    rows = cli.json_rows(json.loads(out))
    assert [r["task"] for r in rows] == ["caption", "chartqa", "docvqa", "infovqa", "textvqa", "pooled"]
    for r in rows:
        assert list(r)[:len(LAW_COLUMNS)] == list(LAW_COLUMNS)
        assert r["b1_lo"] < r["b1"] < r["b1_hi"] and isinstance(r["holds"], bool)
    assert rows[-1]["rounds"] == sum(r["rounds"] for r in rows[:-1])
    rc, out, _ = run([EXAMPLE, "--format", "csv"], capsys)
    table = pd.read_csv(io.StringIO(out))
    assert tuple(table.columns[:len(LAW_COLUMNS)]) == LAW_COLUMNS and len(table) == 6


def test_options_method_bootstrap_seed_by_level_out(tmp_path, capsys):
    f = write_table(rounds(3, n_prompts=15), tmp_path / "r.parquet")
    rc, out, _ = run([f, "--method", "nls", "--format", "json"], capsys)
    assert rc == 0 and cli.json_rows(json.loads(out))[0]["method"] == "nls"
    args = [f, "--bootstrap", "60", "--seed", "5", "--format", "json"]
    rc, a, _ = run(args, capsys)
    rc2, b, _ = run(args, capsys)
    assert rc == rc2 == 0 and a == b and cli.json_rows(json.loads(a))[0]["interval"] == "bootstrap"
    rc, c, _ = run([f, "--bootstrap", "60", "--seed", "6", "--format", "json"], capsys)
    assert cli.json_rows(json.loads(c))[0]["b1_lo"] != cli.json_rows(json.loads(a))[0]["b1_lo"]
    rc, out, _ = run([f, "--by", "none", "--format", "json"], capsys)
    assert [r["task"] for r in cli.json_rows(json.loads(out))] == ["pooled"]
    rc, out, _ = run([f, "--level", "0.9", "--format", "json"], capsys)
    r90 = cli.json_rows(json.loads(out))[0]
    rc, out, _ = run([f, "--format", "json"], capsys)
    r95 = cli.json_rows(json.loads(out))[0]
    assert r90["level"] == 0.9 and (r90["b1_hi"] - r90["b1_lo"]) < (r95["b1_hi"] - r95["b1_lo"])
    target = tmp_path / "law.md"
    rc, out, err = run([f, "--format", "markdown", "--out", target], capsys)
    assert rc == 0 and out == "" and "**draftability law" in target.read_text()
    rc, out, err = run([f, "--out", tmp_path / "no" / "such" / "dir.txt"], capsys)   # folders made, as every writer
    assert rc == 0 and (tmp_path / "no" / "such" / "dir.txt").exists()
    rc, out, err = run([f, "--out", target / "x.txt"], capsys)                       # a file in the way
    assert rc == 2 and "not a folder" in err and len(err.strip().splitlines()) == 1


def test_folders_globs_and_exclusions(tmp_path, capsys):
    d = tmp_path / "logs"
    write_table(rounds(1, task="a"), d / "rounds-a.parquet")
    write_table(rounds(2, task="b"), d / "rounds-b.parquet")
    ar = rounds(3, task="a").assign(horizon=0, accepted=0, drafter="ar")
    write_table(ar, d / "rounds-ar.parquet")
    for target in ([d], [str(d / "*.parquet")]):
        rc, out, err = run(target + ["--format", "text"], capsys)
        assert rc == 0, err
        assert f"excluded {len(ar)} autoregressive round(s)" in out
    rc, out, _ = run([d, "--format", "json"], capsys)
    rows = cli.json_rows(json.loads(out))
    assert [(r["drafter"], r["task"]) for r in rows] == [("sim", "a"), ("sim", "b"), ("sim", "pooled")]


def test_several_drafters_get_their_own_rows(tmp_path, capsys):
    write_table(rounds(1), tmp_path / "a.parquet")
    write_table(rounds(2, drafter="pld"), tmp_path / "b.parquet")
    rc, out, _ = run([tmp_path, "--format", "json"], capsys)
    rows = cli.json_rows(json.loads(out))
    assert [(r["drafter"], r["task"]) for r in rows] == [("pld", "t"), ("pld", "pooled"), ("sim", "t"),
                                                         ("sim", "pooled")]
    rc, out, _ = run([tmp_path], capsys)
    assert "drafter" in out and "2 drafters fitted separately" in out


@pytest.mark.parametrize("argv,words", [
    (["--bogus"], ["unrecognized", "--bogus"]),
    (["--method", "ols"], ["invalid choice", "ols"]),
    (["--format", "xml"], ["invalid choice"]),
    (["--bootstrap", "-3"], ["--bootstrap"]),
    (["--bootstrap", "x"], ["invalid int"]),
    (["--level", "95"], ["--level"]),
    (["--by", "nonesuch"], ["nonesuch"]),
])
def test_user_errors_are_one_line_exit_2(argv, words, capsys):
    rc, out, err = run([EXAMPLE] + argv, capsys)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    for w in words:
        assert w in err


def test_missing_paths_and_no_arguments(tmp_path, capsys):
    rc, out, err = run([tmp_path / "nope.parquet"], capsys)
    assert rc == 2 and "no such file" in err and out == ""
    rc, out, err = run([str(tmp_path / "*.parquet")], capsys)
    assert rc == 2 and "matches no files" in err
    rc, out, err = run([], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------
# the section protocol
# --------------------------------------------------------------------------

SECTION_MODULE = '''
import argparse
from dataclasses import dataclass
from typing import ClassVar
import pandas as pd
from glance_law.results import Result

CALLS = []


@dataclass(frozen=True, eq=False)
class Count(Result):
    title: ClassVar[str] = "round count"
    n: int = 0

    def to_frame(self):
        return pd.DataFrame({"rounds": [self.n]})


def add_cli_arguments(parser):
    parser.add_argument("--fake-scale", type=int, default=1)


def cli_section(logs, args):
    CALLS.append((type(logs).__name__, list(logs.frame.columns)))
    return [Count(n=len(logs.frame) * args.fake_scale)]
'''


@pytest.fixture
def fake_section(tmp_path, monkeypatch):
    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    (mod_dir / "glance_fake_section.py").write_text(textwrap.dedent(SECTION_MODULE))
    monkeypatch.syspath_prepend(str(mod_dir))
    sections = list(cli.SECTIONS) + [("--fake", "glance_fake_section", "a test section"),
                                     ("--ghost", "glance_law.no_such_module_yet", "not built yet"),
                                     ("--valued ARG", "glance_fake_section", "a section taking a value")]
    monkeypatch.setattr(cli, "SECTIONS", sections)
    sys.modules.pop("glance_fake_section", None)
    yield
    sys.modules.pop("glance_fake_section", None)


def test_sections_are_called_with_the_logset_and_their_options(fake_section, capsys):
    rc, out, err = run([EXAMPLE, "--fake", "--fake-scale", "3"], capsys)
    assert rc == 0, err
    import glance_fake_section as m
    kind, columns = m.CALLS[-1]
    assert kind == "LogSet" and "match" in columns  # no CLI_COLUMNS: every column is read
    n = len(pd.read_parquet(EXAMPLE))
    assert "round count" in out and str(3 * n) in out and "draftability law" in out
    rc, out, _ = run([EXAMPLE, "--fake", "--format", "json"], capsys)
    doc = json.loads(out)
    assert list(doc) == ["version", "summary", "law", "fake", "skipped"]
    assert doc["fake"] == {"round count": {"rows": [{"rounds": n}], "notes": []}}
    assert doc["skipped"] == {"sections not run": {"rows": [], "notes": []}}
    assert cli.json_rows(doc, "summary")[-1]["task"] == "pooled"
    assert cli.json_rows(doc)[-1]["task"] == "pooled"
    rc, out, _ = run([EXAMPLE, "--fake", "--format", "csv"], capsys)
    assert "# fake: round count" in out and out.startswith("# law:")


def test_a_section_flag_with_a_value(fake_section, capsys):
    rc, out, err = run([EXAMPLE, "--valued", "x:y"], capsys)
    assert rc == 0, err
    assert "round count" in out


def test_sections_of_missing_modules_do_not_break_the_cli(fake_section, capsys):
    rc, out, err = run([EXAMPLE, "--format", "json"], capsys)  # --ghost listed but not used
    assert rc == 0 and cli.json_rows(json.loads(out))[-1]["task"] == "pooled"
    rc, out, err = run([EXAMPLE, "--ghost"], capsys)
    assert rc == 2 and out == "" and "glance_law.no_such_module_yet" in err
    assert len(err.strip().splitlines()) == 1
    rc, out, err = run([EXAMPLE, "--fake-scale", "2"], capsys)  # a section's option without its flag
    assert rc == 2 and "--fake-scale" in err


def test_law_only_reads_the_columns_it_needs(tmp_path, monkeypatch):
    seen = {}
    real = cli.read_logs

    def spy(paths, kind, columns=None, skip_bad=False, **kw):
        seen["columns"] = columns
        return real(paths, kind, columns=columns, skip_bad=skip_bad, **kw)

    monkeypatch.setattr(cli, "read_logs", spy)
    assert cli.main([str(EXAMPLE), "--format", "csv", "--out", str(tmp_path / "o.csv")]) == 0
    assert set(seen["columns"]) <= {"root_entropy", "accepted", "horizon", "task", "prompt_id", "condition",
                                    "drafter", "run_id", "round"}   # run_id, round: output-ending rounds


def test_help_lists_sections(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for spec, _module, _ in cli.SECTIONS:
        assert spec.split()[0] in out


def test_module_entry_point_runs_in_a_fresh_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "glance_law.fit", str(EXAMPLE), "--format", "json"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert cli.json_rows(json.loads(proc.stdout))[-1]["task"] == "pooled"
    proc = subprocess.run([sys.executable, "-m", "glance_law.fit", str(tmp_path / "missing.parquet")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr


def test_example_log_is_reproducible_and_small(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_example_log", ROOT / "analyses" / "make_example_log.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.make(tmp_path / "again.parquet")
    assert out.read_bytes() == EXAMPLE.read_bytes()
    assert EXAMPLE.stat().st_size < 1_000_000
    frame = pd.read_parquet(EXAMPLE)
    assert frame["task"].nunique() == 5 and 2000 <= len(frame) <= 10_000
