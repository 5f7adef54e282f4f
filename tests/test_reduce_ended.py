"""Issue 24, items 5-6: every reduction engine reads a turn-final round that accepted 0 (an
importer cut its horizon to 0; its drafted depth is in ``drafted_horizon``) as a verification
round, not an autoregressive one: the numpy reference (:func:`glance_law.scale.reduce.reduce_frame`),
the streaming pyarrow engine, DuckDB and Spark agree on the cells and on every count, and a
brute-force count over the rows says what those counts must be."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from glance_law.cli import ingest
from glance_law.io import read_logs, write_table
from glance_law.scale import reduce as R
from glance_law.scale.engines import reduce_logs
from glance_law.simulate import simulate_rounds

ENGINES = ["arrow", "duckdb", "spark"]
#: ../shared/realdata beside the checkout (or beside the folder of worktrees holding it)
REAL = next((p / "shared" / "realdata" / "spec-bench" for p in Path(__file__).resolve().parents[2:4]
             if (p / "shared" / "realdata" / "spec-bench").is_dir()), Path("../shared/realdata/spec-bench"))
#: Imported Spec-Bench answers: a tree drafter whose turns end in zero-accept rounds (Medusa), a chain
#: drafter of varying depth (sps-68m) and EAGLE.
SPEC = [REAL / "vase" / "vicuna-7b-v1.3-medusa.jsonl.gz",
        REAL / "bnukh" / "mt_bench__vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl.gz",
        REAL / "bnukh" / "test_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz"]
COLS = ["run_id", "task", "prompt_id", "round", "root_entropy", "accepted", "horizon", "condition", "drafter",
        "drafted_horizon"]


def _cut_last_rounds(frame: pd.DataFrame, every: int) -> pd.DataFrame:
    """Every ``every``-th prompt's last round becomes an output-ending round that accepted 0: horizon
    cut to 0, the drafted depth kept in drafted_horizon (as the Spec-Bench importer writes it)."""
    f = frame.copy()
    f["drafted_horizon"] = pd.array([pd.NA] * len(f), dtype="Int64")
    last = f.groupby(["run_id", "prompt_id", "condition"], observed=True)["round"].transform("max") == f["round"]
    ids = f["prompt_id"].astype(str)
    pick = last & ids.isin(sorted(ids.unique())[::every])
    f.loc[pick, "drafted_horizon"] = f.loc[pick, "horizon"].astype("int64")
    f.loc[pick, ["horizon", "accepted"]] = 0
    return f


@pytest.fixture(scope="module")
def ended(tmp_path_factory):
    """Two drafters, a mismatched condition, true autoregressive rounds (horizon 0, no drafted
    depth) and output-ending zero-accept rounds in both conditions, over three files (one without
    the drafted_horizon column)."""
    folder = tmp_path_factory.mktemp("ended")
    sim = dict(rounds_per_prompt=(6, 14), vectors=False)
    a = _cut_last_rounds(simulate_rounds(n_prompts=9, seed=11, drafter="block", run_id="r1", **sim), 2)
    b = _cut_last_rounds(simulate_rounds(n_prompts=5, seed=12, drafter="pld", run_id="r2", condition="mismatched",
                                         **sim), 1)
    c = simulate_rounds(n_prompts=4, seed=13, drafter="pld", run_id="r3", **sim)
    c.loc[c.index[:15], ["horizon", "accepted"]] = 0            # autoregressive: no drafted_horizon at all
    for name, f in (("a", a), ("b", b)):
        write_table(f[[x for x in COLS if x in f.columns]], folder / f"rounds-{name}.parquet")
    write_table(c[[x for x in COLS if x in c.columns and x != "drafted_horizon"]], folder / "rounds-c.parquet")
    c["drafted_horizon"] = pd.array([pd.NA] * len(c), dtype="Int64")
    return folder, pd.concat([a, b, c], ignore_index=True)


def brute(frame: pd.DataFrame, condition=("matched",)) -> dict:
    """The counts a reduction must report, from the rows one at a time."""
    out = {"rounds_read": 0, "excluded_horizon0": 0, "excluded_conditions": {}, "ended_at_zero": {}}
    for r in frame.itertuples(index=False):
        out["rounds_read"] += 1
        cut = r.horizon == 0 and not pd.isna(r.drafted_horizon) and r.drafted_horizon > 0
        if r.horizon == 0 and not cut:
            out["excluded_horizon0"] += 1
        elif condition is not None and r.condition not in condition:
            out["excluded_conditions"][r.condition] = out["excluded_conditions"].get(r.condition, 0) + 1
        elif cut:
            per = out["ended_at_zero"].setdefault(r.drafter, {})
            per[r.task] = per.get(r.task, 0) + 1
    return out


def tau_by_hand(frame: pd.DataFrame, drafter: str, task: str) -> tuple[int, float]:
    """Rounds and tau over every verification round of a (drafter, task) of the matched condition."""
    f = frame[(frame["drafter"] == drafter) & (frame["task"] == task) & (frame["condition"] == "matched")]
    f = f[(f["horizon"] > 0) | f["drafted_horizon"].notna()]
    return len(f), float(f["accepted"].mean()) + 1.0


def cells(red: R.Reduced) -> dict:
    c = red.cells
    return {(str(t), str(d), int(b), int(h), int(L), int(a)): (int(n), float(s))
            for t, d, b, h, L, a, n, s in zip(c["task"], c["drafter"], c["bucket"], c["hbin"], c["horizon"],
                                               c["accepted"], c["n"], c["sum_h"])}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("condition", ["matched", None])
def test_every_engine_reads_output_ending_zero_rounds_as_the_numpy_path(ended, engine, condition):
    folder, frame = ended
    want = brute(frame, None if condition is None else ("matched",))
    assert want["ended_at_zero"] and want["excluded_horizon0"] == 15          # the fixture has both kinds
    ref = R.reduce_frame(frame, condition=condition)
    red = reduce_logs(folder, engine=engine, condition=condition)
    for got in (ref, red):
        assert got.info["rounds_read"] == want["rounds_read"]
        assert got.info["excluded_horizon0"] == want["excluded_horizon0"]
        assert got.info["excluded_conditions"] == want["excluded_conditions"]
        assert got.info.get(R.ENDED_AT_ZERO, {}) == want["ended_at_zero"]
    a, b = cells(ref), cells(red)
    assert set(a) == set(b) and all(a[k][0] == b[k][0] and a[k][1] == pytest.approx(b[k][1], rel=1e-12) for k in a)
    assert red.info["prompts"] == ref.info["prompts"]
    pd.testing.assert_frame_equal(red.to_frame(), ref.to_frame())
    notes = " ".join(red.notes)
    assert "output-ending round(s) that accepted 0" in notes
    assert f"excluded {want['excluded_horizon0']} autoregressive" in notes


def test_the_reduced_tau_counts_output_ending_rounds_at_their_drafted_depth(ended):
    folder, frame = ended
    f = reduce_logs(folder).to_frame().set_index(["drafter", "task"])
    for (d, t), row in f.iterrows():
        n, tau = tau_by_hand(frame, d, t)
        assert row["rounds"] == n and row["tau"] == pytest.approx(tau, rel=1e-12)
    zero = frame["drafted_horizon"].notna() & (frame["condition"] == "matched")
    assert int(zero.sum()) > 0 and np.all(frame.loc[zero, "accepted"] == 0)
    red = reduce_logs(folder)
    in_cells = red.cells.groupby("drafter", observed=True)["n"].sum()
    assert int(f.loc["block", "rounds"].sum()) == int(in_cells["block"]) + int(zero.sum())   # none in a cell


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The :data:`SPEC` files imported as a user does (``python -m glance_law.ingest auto FILE --out D``)."""
    if not REAL.exists():
        pytest.skip("../shared/realdata not present")
    root = tmp_path_factory.mktemp("spec")
    out = []
    for src in SPEC:
        d = root / src.name.split(".")[0]
        assert ingest.main(["auto", str(src), "--out", str(d)]) == 0
        out.append(d)
    return out


def test_the_three_engines_read_imported_spec_bench_files_alike(imported):
    """On real imported answers, arrow, duckdb and spark give the in-memory reduction's cells and counts,
    turn-final zero-accept rounds counted at their drafted depth in every engine."""
    from glance_law.scale.engines.spark import session
    spark = session("local[1]")
    spark.sparkContext.setLogLevel("ERROR")
    seen_ended = 0
    try:
        for folder in imported:
            logs = read_logs(folder)
            frame = logs.frame
            ref = R.reduce_frame(logs)
            zero = (frame["horizon"] == 0) & frame["drafted_horizon"].notna() & (frame["drafted_horizon"] > 0)
            seen_ended += int(zero.sum())
            total = sum(int(k) for per in ref.info.get(R.ENDED_AT_ZERO, {}).values() for k in per.values())
            assert total == int(zero.sum()), folder.name
            for engine in ENGINES:
                red = reduce_logs(folder, engine=engine, **({"spark": spark} if engine == "spark" else {}))
                for key in ("rounds_read", "excluded_horizon0", "excluded_conditions", R.ENDED_AT_ZERO, "prompts"):
                    assert red.info.get(key) == ref.info.get(key), (folder.name, engine, key)
                a, b = cells(ref), cells(red)
                assert set(a) == set(b), (folder.name, engine)
                assert all(a[k][0] == b[k][0] for k in a), (folder.name, engine)
                pd.testing.assert_frame_equal(red.to_frame(), ref.to_frame())
    finally:
        spark.stop()
    assert seen_ended > 0          # the files hold the rounds this is about
