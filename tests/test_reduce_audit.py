"""Reduction edge cases found by the independent audit: tiny groups in the reduced fit,
--skip-bad with DuckDB when the skipped file alone had an optional column, the 32-bit
entropy-bin limit of the grid, the 2^20-nat entropy limit in the exact reader, copies of
one reduction under two names, and the "no decile curve" note counting rounds.
"""
from __future__ import annotations

import importlib.util
import shutil
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from glance_law.cli import fit as F
from glance_law.cli import reduce as RC
from glance_law.errors import GlanceError
from glance_law.io import LogError, read_logs, write_table
from glance_law.law import fit_law
from glance_law.scale import reduce as R
from glance_law.scale.engines import reduce_logs
from glance_law.scale.law_reduced import fit_reduced
from glance_law.simulate import simulate_rounds

ENGINES = ["arrow"] + (["duckdb"] if importlib.util.find_spec("duckdb") is not None else [])
BASE = ["run_id", "task", "prompt_id", "round", "root_entropy", "accepted", "horizon"]


def sim(n_prompts=6, seed=0, **kw) -> pd.DataFrame:
    return simulate_rounds(n_prompts=n_prompts, rounds_per_prompt=(8, 20), vectors=False, seed=seed, **kw)


def small_group(task: str, H, a, L=5, prompts=2) -> pd.DataFrame:
    n = len(H)
    return pd.DataFrame({"run_id": "small", "task": task, "prompt_id": [f"{task}-{i % prompts}" for i in range(n)],
                         "round": (np.arange(n) // prompts).astype(np.int32),
                         "root_entropy": np.asarray(H, dtype=np.float32), "accepted": np.asarray(a, dtype=np.int16),
                         "horizon": np.int16(L)})


def one_line_error(capsys, argv) -> str:
    assert F.main([str(x) for x in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


# 1. a group with fewer rounds than curve bins fits as on the exact path (floor_rounds NaN)

@pytest.mark.parametrize("engine", ENGINES)
def test_group_smaller_than_the_curve_bins_fits_like_the_exact_path(tmp_path, engine, capsys):
    write_table(sim(seed=1)[BASE], tmp_path / "rounds-a.parquet")
    tiny = small_group("tiny", [0.1, 0.4, 0.9, 1.3, 0.2, 2.0, 0.05, 3.0], [5, 3, 2, 1, 4, 0, 5, 0])
    write_table(tiny, tmp_path / "rounds-b.parquet")
    ex = fit_law(read_logs(tmp_path)).table.set_index("task")
    red = fit_reduced(reduce_logs([tmp_path], engine=engine)).table.set_index("task")
    # golden: 8 rounds < 10 curve bins -> no floor; ceiling bins min(50, 8 // 2) = 4
    assert np.isnan(ex.loc["tiny", "floor_rounds"]) and np.isnan(red.loc["tiny", "floor_rounds"])
    assert red.loc["tiny", "ceiling_bins"] == ex.loc["tiny", "ceiling_bins"] == 4
    assert red.loc["tiny", "rounds"] == 8
    others = [t for t in ex.index if t != "tiny"]
    np.testing.assert_array_equal(red.loc[others, "floor_rounds"], ex.loc[others, "floor_rounds"])
    assert F.main([str(tmp_path), "--engine", engine, "--format", "csv"]) == 0
    assert "tiny" in capsys.readouterr().out


# 2. --skip-bad drops the only file that had an optional column

@pytest.mark.parametrize("engine", ENGINES)
def test_skip_bad_when_the_skipped_file_alone_had_the_condition_column(tmp_path, engine):
    good = write_table(sim(seed=2)[BASE], tmp_path / "rounds-nocond.parquet")
    bad = sim(seed=3)
    bad["condition"] = "matched"
    bad.loc[5, "accepted"] = bad.loc[5, "horizon"] + 1
    bad = write_table(bad[BASE + ["condition"]], tmp_path / "rounds-bad.parquet")
    red = reduce_logs([good, bad], engine=engine, skip_bad=True)
    ref = reduce_logs([good], engine="arrow")
    assert [p for p, _ in red.info["skipped"]] == [str(bad)]
    key = list(R.KEY)
    a = red.cells.astype({"task": str, "drafter": str}).sort_values(key).reset_index(drop=True)
    b = ref.cells.astype({"task": str, "drafter": str}).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[key + ["n"]], b[key + ["n"]], check_dtype=False)
    np.testing.assert_allclose(a["sum_h"], b["sum_h"], rtol=1e-12)


# 3. the grid refuses bins that overflow the 32-bit hbin

def _top_bin(S: int, lo: int, hi: int) -> int:
    """The bin of a 2^20-nat entropy, from the grid's definition in exact arithmetic."""
    return (hi - lo) * S + int(Fraction(2) ** 20 * S / Fraction(2) ** hi)


def test_grid_accepts_exactly_the_grids_whose_bins_fit_int32():
    for S in (2 ** k for k in range(13)):
        for lo, hi in [(-10, -1), (-10, 0), (-12, 1), (-40, 2), (0, 20), (-5, 19)]:
            fits = _top_bin(S, lo, hi) <= 2 ** 31 - 1
            if fits:
                g = R.Grid(per_octave=S, lo_exp=lo, hi_exp=hi)
                assert int(g.index(2.0 ** 20)) == _top_bin(S, lo, hi)
            else:
                with pytest.raises(GlanceError, match="overflow the 32-bit hbin"):
                    R.Grid(per_octave=S, lo_exp=lo, hi_exp=hi)
    with pytest.raises(GlanceError, match="between 1 and 512 here"):
        R.Grid(per_octave=1024)   # the auditor's case: H = 2^19 and 2^20 landed in one bin (S = 4096)
    with pytest.raises(GlanceError, match="between 1 and 512 here"):
        R.Grid(per_octave=4096)


def test_reduce_cli_refuses_an_overflowing_per_octave(tmp_path, capsys):
    write_table(sim(2)[BASE], tmp_path / "rounds.parquet")
    assert RC.main([str(tmp_path / "rounds.parquet"), "--out", str(tmp_path / "x.parquet"), "--per-octave", "1024"]) == 2
    err = capsys.readouterr().err
    assert "per_octave must be a power of two between 1 and 512" in err and err.count("\n") == 1
    assert not (tmp_path / "x.parquet").exists()


# 4. the exact reader refuses an entropy above 2^20 nats, as the engines do

def test_reader_refuses_an_absurd_entropy_like_the_engines(tmp_path, capsys):
    f = sim(3, seed=4)[BASE]
    f.loc[7, "root_entropy"] = 2.0 ** 21
    path = write_table(f, tmp_path / "rounds-absurd.parquet")
    with pytest.raises(LogError, match="root_entropy"):
        read_logs(path)
    for extra in ([], ["--engine", "arrow"]):
        err = one_line_error(capsys, [path, *extra])
        assert "rounds-absurd.parquet" in err and "column 'root_entropy'" in err
        assert "1 value(s) above 1048576 (first at row 7: 2097152)" in err
    f.loc[7, "root_entropy"] = 2.0 ** 20   # the limit itself is allowed
    ok = write_table(f, tmp_path / "ok" / "rounds.parquet")
    assert read_logs(ok).frame["root_entropy"].max() == 2.0 ** 20


# 5. one reduction under two names is refused (merging would double every count)

def test_copy_of_a_reduction_under_another_name_is_refused(tmp_path, capsys):
    frame = sim(8, seed=5)[BASE]
    write_table(frame.iloc[:300], tmp_path / "logs" / "rounds-0.parquet")
    write_table(frame.iloc[300:], tmp_path / "logs" / "rounds-1.parquet")
    stats = tmp_path / "stats.parquet"
    assert RC.main([str(tmp_path / "logs"), "--out", str(stats)]) == 0
    capsys.readouterr()
    copy = tmp_path / "copy.parquet"
    shutil.copy(stats, copy)
    err = one_line_error(capsys, [stats, copy])
    # refused by the reductions' record of the rounds files they reduce (data/outputs.from_files)
    assert "copy.parquet" in err and "stats.parquet" in err and "counted twice" in err
    # the same path twice is one file; a different reduction merges
    assert R.read_reduced([stats, stats]).cells["n"].sum() == len(frame)
    parts = [tmp_path / f"part{i}.parquet" for i in range(2)]
    for i, p in enumerate(parts):
        assert RC.main([str(tmp_path / "logs" / f"rounds-{i}.parquet"), "--out", str(p)]) == 0
    assert R.read_reduced(parts).cells["n"].sum() == len(frame)


def test_cells_digest_ignores_row_order_and_sees_any_count(tmp_path):
    cells = reduce_logs([write_table(sim(3, seed=6)[BASE], tmp_path / "rounds.parquet")], engine="arrow").cells
    d = R.cells_digest(cells)
    assert R.cells_digest(cells.iloc[::-1]) == d
    bumped = cells.copy()
    bumped.loc[bumped.index[0], "n"] += 1
    assert R.cells_digest(bumped) != d


# 6. the reduced fit's "no decile curve" note counts rounds, not atoms

def test_constant_entropy_group_gets_a_curve_and_no_atom_count_note(tmp_path):
    write_table(sim(seed=7)[BASE], tmp_path / "rounds-a.parquet")
    # 30 rounds at one entropy, 4 accepted values: 4 marginal cells, 4 atoms, but 30 rounds >= 10 bins
    write_table(small_group("const", [0.7] * 30, [0, 1, 2, 3, 1, 2] * 5, prompts=6), tmp_path / "rounds-b.parquet")
    # 8 rounds at 2 entropies: 8 rounds < 10 bins, so no curve; the note counts the 8 rounds
    write_table(small_group("few", [0.3, 0.3, 0.3, 0.3, 1.5, 1.5, 1.5, 1.5], [4, 4, 3, 3, 1, 1, 0, 0]),
                tmp_path / "rounds-c.parquet")
    res = fit_reduced(reduce_logs([tmp_path], engine="arrow"))
    ex = fit_law(read_logs(tmp_path))
    notes = [s for s in res.note_lines if "than curve bins" in s]
    assert notes == ["few: fewer rounds (8) than curve bins (10); no decile curve"]
    assert [s for s in ex.note_lines if "than curve bins" in s] == notes
    assert len(res.curves[("unknown", "const")]) == 10 and len(res.curves[("unknown", "few")]) == 0
    t = res.table.set_index("task")
    assert t.loc["const", "rounds"] == 30 and t.loc["const", "floor_rounds"] == ex.table.set_index("task").loc[
        "const", "floor_rounds"] == 3
