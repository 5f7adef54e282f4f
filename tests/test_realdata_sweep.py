"""Issue 24, "Done when": on EVERY real Spec-Bench file in ../shared/realdata, the commands a user
runs - ``ingest``, then ``fit``, ``report``, ``reduce`` then ``fit``, and ``policy`` - either give
the right numbers, re-derived here from the raw JSON, or refuse with one line (exit 2) that names
the input and a command or flag that exists on the command it names.

* Speculative files: the summary's tau per category and pooled is Spec-Bench's own mean (every
  ``accept_lengths`` value over the steps, evaluation/speed.py), its rounds the count of steps; the
  reduction's pooled tau and rounds likewise.
* Autoregressive (vanilla) files: ``fit`` tabulates the baseline itself (tau = total new tokens /
  total steps per category, from the raw turns) and says the law needs drafted rounds; the report
  runs its summary and lists every other section as needing a speculative arm; ``reduce`` and
  ``policy`` refuse in one line naming ``--timing`` (where the baseline belongs).
* A file with no usable answer (empty ``accept_lengths``): every command refuses in one line.

The fast part runs two small representative files (a speculative and a vanilla one; the report's
summary and timing sections only, the policy search on the vanilla refusal only); the whole
sweep (every section, every file) is slow: ``pytest -m slow tests/test_realdata_sweep.py``."""
from __future__ import annotations

import json
import re
from collections import defaultdict
from functools import lru_cache

import pytest
from test_cli_flags import command_flags
from test_per_turn import raw_records, raw_turns
from test_real_tau import FILES, raw_steps

from glance_law.cli import fit, ingest, reduce, report
from glance_law.policy import cli as policy

pytestmark = pytest.mark.skipif(not FILES, reason="../shared/realdata not present")
#: Two small files that stand for the others in the fast suite: a speculative and a vanilla one.
FAST = [p for p in FILES if p.name.startswith("test_bench__vicuna-7b-v1.3-")
        and ("-eagle-" in p.name or "-vanilla-" in p.name)]
SLOW = [p for p in FILES if p not in FAST]
NAMED = re.compile(r"python -m glance_law\.(fit|report|reduce|ingest|policy)((?: [A-Z_]+| --[a-z][a-z-]*)*)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
REPORT_OPTS = ["--quiet", "--jobs", "1", "--tail-bootstrap", "0", "--probe-bootstrap", "0", "--order-bootstrap", "20",
               "--width-bootstrap", "0", "--timing-bootstrap", "20"]


@lru_cache(maxsize=1)
def _flags() -> dict[str, set[str]]:
    return command_flags(logger=False)


def refusal(rc: int, err: str, cmd: str, inputs: list[str]) -> str:
    """The one error line of an exit-2 refusal, checked: it names one of ``inputs`` and says what to run
    instead with a command or flag that exists (a flag after ``python -m glance_law.X`` on X, a bare
    flag on ``cmd`` itself)."""
    lines = [x for x in err.strip().splitlines() if ": error:" in x]
    assert rc == 2 and len(lines) == 1, (cmd, rc, err[-600:])
    line = lines[0]
    assert any(str(i) in line for i in inputs), (cmd, "names no input", line)
    named = NAMED.findall(line)
    for prog, rest in named:
        for f in FLAG.findall(rest):
            assert f in _flags()[prog], (cmd, f"{f} is not an option of {prog}", line)
    bare = FLAG.findall(NAMED.sub("", line))
    for f in bare:
        assert f in _flags()[cmd], (cmd, f"{f} is not an option of {cmd}", line)
    assert named or bare, (cmd, "names no command or flag to run instead", line)
    return line


def raw_turn_tau(path) -> dict[str, tuple[float, int]]:
    """category (and 'pooled') -> (total new tokens / total steps, steps) over the raw turns."""
    acc: dict = defaultdict(lambda: [0, 0])
    for cat, _q, tok, steps in raw_turns(raw_records(path)):
        for key in (cat, "pooled"):
            acc[key][0] += tok
            acc[key][1] += steps
    return {k: (t / s, s) for k, (t, s) in acc.items()}


def check_spec_bench_means(rows: list[dict], raw: dict[str, list[int]]) -> None:
    """Summary rows (task, rounds, tau) against the raw accept_lengths per category and pooled."""
    got = {r["task"]: r for r in rows}
    every = [v for vs in raw.values() for v in vs]
    for task, vals in [*raw.items(), ("pooled", every)]:
        assert got[task]["rounds"] == len(vals), task
        assert got[task]["tau"] == pytest.approx(sum(vals) / len(vals), rel=1e-9), task


def sweep(path, tmp_path, capsys, fast: bool = False) -> None:
    """Every command on ``path`` (see the module docstring). ``fast``: the report runs its summary and
    timing sections only and the policy search (seconds of CPU) runs on refusals only."""
    logs, red = tmp_path / "logs", tmp_path / "r.parquet"
    rc = ingest.main(["auto", str(path), "--out", str(logs), "--skip-bad"])
    if rc != 0:               # no usable answer (empty accept_lengths): every command refuses alike
        refusal(rc, capsys.readouterr().err, "ingest", [path])
        for cmd, argv in (("fit", [str(path)]), ("reduce", [str(path), "--out", str(red)]),
                          ("policy", [str(path), "--budget", "3"]),
                          ("report", [str(path), "--out", str(tmp_path / "rep"), "--quiet"])):
            mod = {"fit": fit, "reduce": reduce, "policy": policy, "report": report}[cmd]
            refusal(mod.main(argv), capsys.readouterr().err, cmd, [path])
        return
    capsys.readouterr()
    vanilla = "vanilla" in path.name
    # fit: per category and pooled
    rc = fit.main([str(logs), "--format", "json", "--seed", "1"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    rows = fit.json_rows(doc, "summary")
    if vanilla:               # the baseline's own tokens per step, from the raw turns
        want = raw_turn_tau(path)
        assert {r["drafter"] for r in rows} == {"ar"} and {r["task"] for r in rows} == set(want)
        for r in rows:
            assert r["tau"] == pytest.approx(want[r["task"]][0], rel=1e-9) and r["rounds"] == want[r["task"]][1]
        assert doc["law"] == {} and "needs drafted rounds" in err
    else:
        check_spec_bench_means(rows, raw_steps(path))
    # report: the sections the logs allow run, the others are listed with why
    only = ["--only", "summary,timing"] if fast else []
    assert report.main([str(logs), "--out", str(tmp_path / "rep"), *REPORT_OPTS, *only]) in (0, 1)
    capsys.readouterr()
    man = json.loads((tmp_path / "rep" / "manifest.json").read_text())
    status = {s["name"]: s for s in man["sections"]}
    assert not [s for s in man["sections"] if s["status"] == "failed"]
    assert status["summary"]["status"] == "ok"
    if vanilla:
        assert all("autoregressive baseline only" in s["reason"] for s in man["sections"] if s["status"] == "skipped")
    # reduce, then fit the reduction
    rc = reduce.main([str(logs), "--out", str(red)])
    out, err = capsys.readouterr()
    if vanilla:
        assert "--timing" in refusal(rc, err, "reduce", [logs])
    else:
        assert rc == 0, err
        rc = fit.main([str(red), "--by", "none", "--format", "json"])
        out, err = capsys.readouterr()
        assert rc == 0, err
        rows = fit.json_rows(json.loads(out), "reduced")
        every = [v for vs in raw_steps(path).values() for v in vs]
        assert len(rows) == 1 and rows[0]["task"] == "pooled" and rows[0]["rounds"] == len(every)
        assert rows[0]["tau"] == pytest.approx(sum(every) / len(every), rel=1e-9)
    # policy: a held-out table, or one line naming the input and what to run
    if fast and not vanilla:
        return
    rc = policy.main([str(logs), "--budget", "3", "--bootstrap", "20"])
    out, err = capsys.readouterr()
    if rc != 0 or vanilla:
        line = refusal(rc, err, "policy", [logs])
        assert not vanilla or "--timing" in line


@pytest.mark.parametrize("path", FAST, ids=lambda p: f"{p.parent.name}/{p.name[:48]}")
def test_every_command_on_a_representative_real_file(path, tmp_path, capsys):
    sweep(path, tmp_path, capsys, fast=True)


@pytest.mark.slow
@pytest.mark.parametrize("path", SLOW, ids=lambda p: f"{p.parent.name}/{p.name[:48]}")
def test_every_command_on_every_real_file(path, tmp_path, capsys):
    sweep(path, tmp_path, capsys)


def test_the_sweep_covers_every_real_file():
    assert len(FAST) == 2 and sorted(FAST + SLOW) == FILES
    assert any("vanilla" in p.name for p in FAST) and any("vanilla" not in p.name for p in FAST)
