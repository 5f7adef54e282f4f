"""Issue 36.12: labels say what happened.

* a turn-final round that accepted 0 (horizon cut to 0, drafted depth in ``drafted_horizon``) is not
  a round "in which drafter eagle proposed no draft";
* a vanilla file with per-step lengths is not titled "from per-turn counts";
* ``fit`` on a folder holding a baseline suggests ``--timing`` (and the suggestion runs);
* ``fit A --horizon sps=21 B`` reads B as an input (it was "unrecognized arguments: B")."""
from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_per_turn import per_turn_file, raw_records

from glance_law.data.selection import no_draft_causes
from glance_law.evidence.turns import TurnTau
from glance_law.io import read_logs, write_table
from glance_law.simulate import TaskSpec, simulate_rounds

REALDATA = Path(__file__).parent / "data" / "realdata"
VANILLA = REALDATA / "spec_bench__vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl.gz"
EAGLE = REALDATA / "spec_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz"


def _main(module: str, args) -> tuple[int, str, str]:
    import importlib
    main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def _ended_at_zero(folder: Path, k: int = 4) -> Path:
    """Simulated rounds with root entropy whose first ``k`` prompts end on a round that accepted 0:
    horizon cut to 0, the drafted depth kept in ``drafted_horizon`` (as the importers write them)."""
    f = simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=8, seed=0, vectors=False, run_id="r")
    last = (f.groupby("prompt_id", observed=True)["round"].transform("max") == f["round"]).to_numpy()
    idx = np.flatnonzero(last)[:k]
    f["drafted_horizon"] = np.where(np.isin(np.arange(len(f)), idx), f["horizon"], np.nan)
    f.loc[f.index[idx], ["horizon", "accepted"]] = 0
    f["ends_output"] = last
    return write_table(f, folder / "rounds-z.parquet")


def test_turn_final_zero_accept_rounds_are_not_called_no_draft(tmp_path):
    _ended_at_zero(tmp_path, 4)
    rc, out, err = _main("glance_law.cli.fit", [tmp_path])
    assert rc == 0, err
    assert "proposed no draft" not in out and "nothing drafted" not in out
    assert "4 output-ending round(s) of drafter sim that accepted 0 (drafted, horizon cut to 0)" in out


def test_no_draft_causes_tells_the_three_apart():
    frame = pd.DataFrame({"run_id": ["a"] * 3 + ["p"] * 3 + ["e"] * 3,
                          "drafter": ["ar"] * 3 + ["pld"] * 3 + ["eagle"] * 3,
                          "horizon": [0, 0, 0, 0, 5, 0, 5, 5, 0],
                          "drafted_horizon": [np.nan] * 8 + [5.0]})
    causes = no_draft_causes(frame, frame["horizon"].to_numpy() == 0)
    assert causes == ("3 autoregressive round(s) (drafter ar), 2 round(s) in which drafter pld proposed no draft, "
                      "1 output-ending round(s) of drafter eagle that accepted 0 (drafted, horizon cut to 0)")


def test_a_vanilla_file_with_per_step_lengths_is_not_from_per_turn_counts(tmp_path):
    rc, out, err = _main("glance_law.cli.fit", [VANILLA])
    assert rc == 0, err
    assert TurnTau.STEPS_TITLE in out and "from per-turn counts" not in out and "cannot be computed" not in out
    # the same answers without per-step lengths (per-turn idxs, as EAGLE's repository writes them): per-turn counts
    turns = per_turn_file(raw_records(VANILLA), tmp_path / "turns.jsonl")
    rc, out, err = _main("glance_law.cli.fit", [turns])
    assert rc == 0, err
    assert TurnTau.TURNS_TITLE in out and TurnTau.STEPS_TITLE not in out
    rc, _, err = _main("glance_law.cli.report", [VANILLA, "--only", "summary", "--out", tmp_path / "app", "--quiet"])
    assert rc == 0, err
    index = (tmp_path / "app" / "index.md").read_text()
    assert "from per-step lengths" in index and "from per-turn counts" not in index


def test_fit_on_a_folder_with_a_baseline_suggests_timing_and_the_suggestion_runs(tmp_path):
    fold = tmp_path / "answers"
    fold.mkdir()
    for f in (EAGLE, VANILLA):
        shutil.copy(f, fold / f.name)
    rc, out, err = _main("glance_law.cli.fit", [fold, "--skip-bad"])
    assert rc == 0, err
    line = out.strip().splitlines()[-1]
    assert line.startswith("Next: ") and f"(drafter ar; its file: {VANILLA.name}): add --timing BASELINE" in line, line
    # the suggestion, followed: the ledger runs
    rc, out, err = _main("glance_law.cli.fit", [fold, "--skip-bad", "--timing", fold / VANILLA.name,
                                                "--timing-bootstrap", "50"])
    assert rc == 0, err
    assert "Timing ledger" in out and "--timing" not in out.strip().splitlines()[-1]
    # glance-log's layout: the arm's rounds and prompts files share *-ar-*, and that glob works
    logs = Path(__file__).parents[1] / "data" / "logs"
    rc, out, _ = _main("glance_law.cli.fit", [logs])
    assert rc == 0 and "its 10 files match *-ar-*): add --timing BASELINE" in out.strip().splitlines()[-1]
    rc, out, err = _main("glance_law.cli.fit", [logs, "--timing", str(logs / "*-ar-*"), "--timing-bootstrap", "50"])
    assert rc == 0 and "Timing ledger" in out, err
    # no baseline among the inputs, or --timing given: no such suggestion
    rc, out, _ = _main("glance_law.cli.fit", [EAGLE, "--skip-bad"])
    assert rc == 0 and "--timing" not in out.strip().splitlines()[-1]


@pytest.mark.parametrize("module", ["glance_law.cli.fit", "glance_law.cli.reduce"])
def test_inputs_after_an_option_are_inputs(tmp_path, module):
    a = write_table(simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=4, seed=0, vectors=False, run_id="a"),
                    tmp_path / "a" / "rounds-a.parquet")
    b = write_table(simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=4, seed=1, vectors=False, run_id="b"),
                    tmp_path / "b" / "rounds-b.parquet")
    n = len(read_logs([a]).frame) + len(read_logs([b]).frame)
    extra = ["--out", tmp_path / "r.parquet"] if module.endswith("reduce") else []
    rc, out, err = _main(module, [a, "--horizon", "sps=21", b, *extra])
    assert rc == 0, err
    assert f"{n}" in out, (n, out[:600])
