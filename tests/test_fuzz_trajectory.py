"""Fuzz cases for the trajectory replay's CLI path (python -m glance_law.policy on dense logs):
odd dense logs get one line and exit 2, never a traceback, a hang or a memory blow-up."""
from __future__ import annotations

import pandas as pd
from _fuzz import run_cli
from test_policy_trajectory import dense_frame

from glance_law.data.io import LogWriter


def _write(frame: pd.DataFrame, folder):
    w = LogWriter(folder, "rounds", run={"run_id": "dense"}, stem="dense")
    w.extend(frame.to_dict("records"))
    w.flush()
    return str(folder)


def test_two_dense_runs_of_the_same_prompts_are_refused(tmp_path):
    f = dense_frame(n_prompts=4)
    logs = _write(pd.concat([f, f.assign(run_id="again")]), tmp_path / "logs")
    run_cli("glance_law.policy", [logs, "--budget", "2", "--shape", "depth"]).expect_refusal("two rounds at one position")


def test_dense_rounds_without_a_position_are_refused(tmp_path):
    logs = _write(dense_frame(n_prompts=4).drop(columns=["position"]), tmp_path / "logs")
    run_cli("glance_law.policy", [logs, "--budget", "2", "--shape", "depth"]).expect_refusal("position")


def test_dense_rounds_with_huge_positions_stay_bounded(tmp_path):
    f = dense_frame(n_prompts=3)
    f.loc[f.index[0], "position"] = 2_000_000_000       # one absurd position: refused, not a 2e9-wide table
    logs = _write(f, tmp_path / "logs")
    res = run_cli("glance_law.policy", [logs, "--budget", "2", "--shape", "depth"])
    res.expect_refusal("position")
