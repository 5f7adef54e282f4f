"""Out-of-core sufficient statistics (issue 9): the grid and buckets, the engines, merging,
the fit from a reduction against the exact fit, the duplicate and value checks, the CLIs.

Engines are compared against each other and against independent brute-force reductions
(pure-Python dict counting with hashlib and exact rational bin arithmetic).
"""
from __future__ import annotations

import hashlib
import importlib.util
import math
import shutil
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from glance_law.cli import reduce as RC
from glance_law.errors import GlanceError
from glance_law.io import LogError, read_logs, write_table
from glance_law.law import fit_law
from glance_law.scale import law_reduced as LR
from glance_law.scale import reduce as R
from glance_law.scale.engines import reduce_logs, suspect_streams
from glance_law.scale.law_reduced import two_point
from glance_law.simulate import TaskSpec, simulate_rounds

COLS = ["run_id", "task", "prompt_id", "round", "root_entropy", "accepted", "horizon", "condition", "drafter"]
HAS_DUCKDB = importlib.util.find_spec("duckdb") is not None
ENGINES = ["arrow"] + (["duckdb"] if HAS_DUCKDB else [])


# --------------------------------------------------------------------------
# references computed independently of glance_law.reduce
# --------------------------------------------------------------------------

def ref_bin(h: float, S: int = 32, lo: int = -10, hi: int = -1) -> int:
    """The grid's definition in exact rational arithmetic."""
    x = Fraction(max(float(h), 0.0))
    if x < Fraction(2) ** lo:
        return math.floor(x * S / Fraction(2) ** lo)
    if x >= Fraction(2) ** hi:
        return S + (hi - lo) * S + math.floor((x - Fraction(2) ** hi) * S / Fraction(2) ** hi)
    k = lo
    while x >= Fraction(2) ** (k + 1):
        k += 1
    return S + (k - lo) * S + math.floor((x - Fraction(2) ** k) * S / Fraction(2) ** k)


def ref_bucket(task: str, prompt: str, B: int = 256) -> int:
    return int(hashlib.md5((task + "\x1f" + prompt).encode("utf-8")).hexdigest()[:8], 16) % B


def ref_reduce(frame: pd.DataFrame, B: int = 256, condition=("matched",)) -> dict:
    """Brute force: a dict cell -> [n, sum_h, sum_h2], looping over rounds in Python."""
    out = defaultdict(lambda: [0, 0.0, 0.0])
    for r in frame.itertuples(index=False):
        cond = getattr(r, "condition", "matched")
        cond = "matched" if cond is None or (isinstance(cond, float) and np.isnan(cond)) else cond
        if r.horizon == 0 or (condition is not None and cond not in condition):
            continue
        drafter = getattr(r, "drafter", "unknown")
        drafter = "unknown" if drafter is None or (isinstance(drafter, float) and np.isnan(drafter)) else drafter
        h = max(float(np.float32(r.root_entropy)), 0.0)
        key = (str(r.task), str(drafter), ref_bucket(str(r.task), str(r.prompt_id), B), ref_bin(h),
               int(r.horizon), int(r.accepted))
        c = out[key]
        c[0] += 1
        c[1] += h
        c[2] += h * h
    return dict(out)


def as_dict(red: R.Reduced) -> dict:
    c = red.cells
    return {(str(t), str(d), int(b), int(h), int(L), int(a)): [int(n), s, s2]
            for t, d, b, h, L, a, n, s, s2 in zip(c["task"], c["drafter"], c["bucket"], c["hbin"], c["horizon"],
                                                   c["accepted"], c["n"], c["sum_h"], c["sum_h2"])}


def same_cells(x: dict, y: dict, rtol: float = 1e-12) -> None:
    assert set(x) == set(y), f"cells differ: {sorted(set(x) ^ set(y))[:5]}"
    for k in x:
        assert x[k][0] == y[k][0], k
        assert x[k][1] == pytest.approx(y[k][1], rel=rtol, abs=1e-300)
        assert x[k][2] == pytest.approx(y[k][2], rel=rtol, abs=1e-300)


def logs(n_prompts=12, seed=0, **kw) -> pd.DataFrame:
    return simulate_rounds(n_prompts=n_prompts, rounds_per_prompt=(8, 20), vectors=False, seed=seed, **kw)


def write_parts(frame: pd.DataFrame, folder, parts: int = 3, cols=COLS) -> list:
    bounds = np.linspace(0, len(frame), parts + 1).astype(int)
    return [write_table(frame[[c for c in cols if c in frame.columns]].iloc[a:b].reset_index(drop=True),
                        folder / f"rounds-{i}.parquet") for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Logs with two drafters, a mismatched condition, autoregressive rounds, null and absent
    condition/drafter values, spread over files; and their frame."""
    folder = tmp_path_factory.mktemp("mixed")
    a = logs(10, seed=1, drafter="block", run_id="r1")
    b = logs(6, seed=2, drafter="pld", run_id="r2", condition="mismatched")
    c = logs(5, seed=3, drafter="pld", run_id="r3")
    c.loc[c.index[:40], "horizon"] = 0
    c.loc[c.index[:40], "accepted"] = 0
    a["drafter"] = a["drafter"].astype(object)
    a.loc[a.index[5:9], "drafter"] = None
    write_parts(a, folder / "a", 2)
    write_parts(b, folder / "b", 2)
    write_parts(c, folder / "c", 1, cols=[x for x in COLS if x not in ("condition", "drafter")])
    c2 = c.copy()
    c2["drafter"] = "unknown"
    c2["condition"] = "matched"
    return folder, pd.concat([a, b, c2], ignore_index=True)


# --------------------------------------------------------------------------
# the grid and the buckets
# --------------------------------------------------------------------------

def edge_values():
    ks = np.arange(-14, 6)
    p = np.ldexp(1.0, ks)
    rng = np.random.default_rng(0)
    vals = np.r_[0.0, -0.0, 1e-45, 1e-30, p, np.nextafter(p.astype(np.float32), np.float32(0)).astype(np.float64),
                 p * 1.5, rng.exponential(0.05, 300), rng.gamma(2.0, 0.7, 300), 12.0, 15.99]
    return np.maximum(vals.astype(np.float32).astype(np.float64), 0.0)


def test_grid_index_matches_exact_rational_definition():
    g = R.Grid()
    H = edge_values()
    idx = g.index(H)
    assert idx.tolist() == [ref_bin(h) for h in H]
    lo, hi = g.edges(idx)
    assert np.all(lo <= H) and np.all(H < hi)
    # the bins tile [0, 16) without gaps
    lo_all, hi_all = g.edges(np.arange(int(g.index([16.0])[0])))
    assert lo_all[0] == 0.0 and np.array_equal(lo_all[1:], hi_all[:-1])


@pytest.mark.skipif(not HAS_DUCKDB, reason="duckdb not installed")
def test_grid_sql_equals_numpy_in_duckdb():
    import duckdb
    for g in (R.Grid(), R.Grid(8, -6, 2), R.Grid(64, -12, -3)):
        H = edge_values()
        con = duckdb.connect()
        got = con.execute(f"SELECT {g.sql('h')} AS b FROM (SELECT unnest(?::DOUBLE[]) AS h)", [H.tolist()]).df()
        assert got["b"].tolist() == g.index(H).tolist()


def test_buckets_are_md5_of_task_and_prompt():
    pairs = [("docvqa", "doc-0001"), ("caption", "caption-0001"), ("t", "é-ünï-😀"), ("a\x1fb", "c"), ("a", "\x1fbc")]
    assert [R.bucket_of(t, p) for t, p in pairs] == [ref_bucket(t, p) for t, p in pairs]
    assert R.bucket_of("caption", "caption-0001") == 213        # int("c5caadd5", 16) % 256
    assert R.buckets_of([t for t, _ in pairs], [p for _, p in pairs], 7).tolist() == \
        [ref_bucket(t, p, 7) for t, p in pairs]
    # the separator keeps ("a\x1fb", "c") and ("a", "b\x1fc")-style pairs apart from plain concatenation
    assert ref_bucket("ab", "c", 2 ** 31 - 1) != ref_bucket("a", "bc", 2 ** 31 - 1)


@pytest.mark.skipif(not HAS_DUCKDB, reason="duckdb not installed")
def test_bucket_sql_equals_python_in_duckdb():
    import duckdb

    from glance_law.scale.engines.sql import DUCKDB
    pairs = [("docvqa", f"doc-{i}") for i in range(200)] + [("t", "é-ünï-😀"), ("x'y", "q\"z")]
    con = duckdb.connect()
    df = pd.DataFrame(pairs, columns=["task", "prompt_id"])  # noqa: F841 (read by DuckDB by name)
    for B in (256, 7, 2 ** 31 - 1):
        got = con.execute(f"SELECT {DUCKDB.bucket(B)} AS b FROM df").df()["b"].tolist()
        assert got == [ref_bucket(t, p, B) for t, p in pairs]


def test_grid_and_bucket_arguments_are_checked():
    with pytest.raises(GlanceError, match="power of two"):
        R.Grid(per_octave=24)
    with pytest.raises(GlanceError, match="lo_exp < hi_exp"):
        R.Grid(32, 0, -1)
    with pytest.raises(GlanceError, match="buckets"):
        R.check_buckets(0)


# --------------------------------------------------------------------------
# engines against brute force, and each other
# --------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
def test_engines_equal_brute_force(mixed, engine):
    folder, frame = mixed
    red = reduce_logs(folder, engine=engine)
    same_cells(as_dict(red), ref_reduce(frame))
    info = red.info
    assert info["rounds_read"] == len(frame)
    assert info["excluded_horizon0"] == 40
    assert info["excluded_conditions"] == {"mismatched": int((frame["condition"] == "mismatched").sum())}
    # as the reader: null drafters and the rows of files without the column (r3) read as 'unknown'
    assert info["filled"]["drafter"] == 4 + int((frame["run_id"] == "r3").sum())
    # prompts per (drafter, task) among the kept rounds
    kept = frame[(frame["horizon"] > 0) & (frame["condition"] == "matched")].copy()
    kept["drafter"] = kept["drafter"].fillna("unknown").astype(str)
    want = kept.groupby(["drafter", "task"], observed=True)["prompt_id"].nunique()
    for (d, t), k in want.items():
        assert red.prompts(d, t) == k
    notes = " ".join(red.notes)
    assert "excluded 40 autoregressive" in notes and "'mismatched'" in notes


def test_reduce_frame_equals_brute_force_and_engines(mixed):
    folder, frame = mixed
    pooled = R.reduce_frame(frame, condition=None)
    same_cells(as_dict(pooled), ref_reduce(frame, condition=None))
    same_cells(as_dict(R.reduce_frame(frame)), as_dict(reduce_logs(folder)))


@pytest.mark.skipif(not HAS_DUCKDB, reason="duckdb not installed")
def test_arrow_and_duckdb_reductions_are_identical(mixed, tmp_path):
    folder, _ = mixed
    for cond in ("matched", None, "mismatched,matched"):
        a = reduce_logs(folder, engine="arrow", condition=cond, buckets=17, grid=R.Grid(16))
        d = reduce_logs(folder, engine="duckdb", condition=cond, buckets=17, grid=R.Grid(16))
        same_cells(as_dict(a), as_dict(d))
        for k in ("rounds_read", "excluded_horizon0", "excluded_conditions", "prompts", "filled", "condition"):
            assert a.info[k] == d.info[k], k
    # the written files are byte-for-byte the same table
    R.write_reduced(reduce_logs(folder, engine="arrow"), tmp_path / "a.parquet")
    R.write_reduced(reduce_logs(folder, engine="duckdb"), tmp_path / "d.parquet")
    fa, fd = (read_logs(tmp_path / f, "reduced").frame for f in ("a.parquet", "d.parquet"))
    pd.testing.assert_frame_equal(fa.drop(columns=["sum_h", "sum_h2"]), fd.drop(columns=["sum_h", "sum_h2"]))
    np.testing.assert_allclose(fa["sum_h"], fd["sum_h"], rtol=1e-12)


def test_small_batches_and_threads_do_not_change_the_reduction(mixed):
    folder, _ = mixed
    base = as_dict(reduce_logs(folder))
    same_cells(as_dict(reduce_logs(folder, batch_rows=37, workers=3)), base)
    same_cells(as_dict(reduce_logs(folder, batch_rows=1000, workers=1)), base)


# --------------------------------------------------------------------------
# merging
# --------------------------------------------------------------------------

def test_merged_reductions_equal_the_reduction_of_the_merged_logs(tmp_path):
    frame = logs(16, seed=5)
    files = write_parts(frame, tmp_path / "all", 4)
    whole = reduce_logs(tmp_path / "all")
    parts = [reduce_logs(f) for f in files]
    merged = R.merge(parts)
    same_cells(as_dict(merged), as_dict(whole), rtol=1e-12)
    assert merged.info["rounds_read"] == whole.info["rounds_read"]
    # through files: reduce each part on its own "machine", then fit the merged files
    for i, r in enumerate(parts):
        R.write_reduced(r, tmp_path / "red" / f"part{i}.parquet")
    from_files = R.read_reduced(tmp_path / "red")
    same_cells(as_dict(from_files), as_dict(whole))
    assert len(from_files.info["sources"]) == 4 and any("merged from 4" in n for n in from_files.notes)
    # a reduction of some parts merged with rounds files of the others
    mixed = reduce_logs([tmp_path / "red" / "part0.parquet", tmp_path / "red" / "part1.parquet", files[2], files[3]])
    same_cells(as_dict(mixed), as_dict(whole))
    fa, fb = LR.fit_reduced(whole), LR.fit_reduced(from_files)
    np.testing.assert_allclose(fa.table["b1"], fb.table["b1"], rtol=1e-10)


def test_merge_refuses_different_grids_buckets_or_conditions(tmp_path):
    frame = logs(6, seed=6)
    a = R.reduce_frame(frame)
    with pytest.raises(GlanceError, match="different bins or buckets"):
        R.merge([a, R.reduce_frame(frame, grid=R.Grid(16))])
    with pytest.raises(GlanceError, match="different bins or buckets"):
        R.merge([a, R.reduce_frame(frame, buckets=128)])
    with pytest.raises(GlanceError, match="different conditions"):
        R.merge([a, R.reduce_frame(frame, condition=None)])


# --------------------------------------------------------------------------
# the fit from a reduction against the exact fit
# --------------------------------------------------------------------------

def test_two_point_quadrature_matches_mean_and_variance_inside_the_bin():
    rng = np.random.default_rng(1)
    for _ in range(200):
        lo = rng.uniform(0, 2)
        w = rng.uniform(1e-4, 0.2)
        k = int(rng.integers(1, 30))
        h = lo + w * rng.beta(rng.uniform(0.1, 3), rng.uniform(0.1, 3), size=k)
        h1, w1, h2, w2 = two_point(np.array([k]), np.array([h.sum()]), np.array([(h * h).sum()]),
                                   np.array([lo]), np.array([lo + w]))
        assert w1[0] + w2[0] == pytest.approx(k)
        assert lo - 1e-12 <= h1[0] <= lo + w + 1e-12 and lo - 1e-12 <= h2[0] <= lo + w + 1e-12
        assert w1[0] * h1[0] + w2[0] * h2[0] == pytest.approx(h.sum(), rel=1e-12)
        assert w1[0] * h1[0] ** 2 + w2[0] * h2[0] ** 2 == pytest.approx((h * h).sum(), rel=1e-9, abs=1e-15)


def test_reduced_fit_equals_exact_fit_on_a_golden_log():
    """Every cell holds rounds of one entropy value, so the reduction loses nothing: every
    point statistic equals the exact fit's (the clusters differ, so intervals are checked
    against a brute-force bucket-level CR1/CR3, stratified by task in the pooled row)."""
    rng = np.random.default_rng(3)
    H = rng.choice([0.0, 0.01, 0.2, 0.7, 1.3, 2.5], size=600).astype(np.float32)
    p = 1 / (1 + np.exp(-(1.2 - 0.9 * H.astype(np.float64))))
    a = np.minimum(rng.geometric(1 - p) - 1, 6)
    frame = pd.DataFrame({"run_id": "g", "task": np.where(np.arange(600) % 2, "t1", "t2"),
                          "prompt_id": [f"p{i % 40}" for i in range(600)], "round": np.arange(600) // 40,
                          "root_entropy": H, "accepted": a.astype(np.int16), "horizon": np.int16(6)})
    ex = fit_law(frame, cluster=("task", "prompt_id"))
    red = LR.fit_reduced(R.reduce_frame(frame), cov="cr1")
    cols = ["b0", "b1", "mean_entropy", "mean_accepted", "r2_round", "loglik", "cap", "p_ge8", "ceiling_model"]
    pd.testing.assert_frame_equal(red.table[cols], ex.table[cols], rtol=1e-8, atol=1e-10)
    # CR1 over buckets by brute force: group the rounds by bucket, sum the scores
    b = np.array([red.table["b0"].iloc[-1], red.table["b1"].iloc[-1]])
    bucket = np.array([ref_bucket(t, q) for t, q in zip(frame["task"], frame["prompt_id"])])
    cl = np.unique([f"{t}/{k}" for t, k in zip(frame["task"], bucket)], return_inverse=True)[1]
    Hd, ad = H.astype(np.float64), a.astype(np.float64)
    s, f = ad, (ad < 6).astype(float)
    pr = 1 / (1 + np.exp(-(b[0] - b[1] * Hd)))
    X = np.column_stack([np.ones_like(Hd), -Hd])
    u = np.zeros((cl.max() + 1, 2))
    np.add.at(u, cl, X * (s - (s + f) * pr)[:, None])
    info = (X * ((s + f) * pr * (1 - pr))[:, None]).T @ X
    G = cl.max() + 1
    # the pooled row spans two tasks, each with its own buckets: stratified by task (each
    # task's bucket scores centred on their task mean, G_t/(G_t-1) per task)
    task_of = np.array([k.split("/")[0] for k in np.unique([f"{t}/{k}" for t, k in zip(frame["task"], bucket)])])
    from scipy import stats
    Binv = np.linalg.inv(info)
    meat = np.zeros((2, 2))
    for t in np.unique(task_of):
        ut = u[task_of == t] - u[task_of == t].mean(axis=0)
        meat += len(ut) / (len(ut) - 1) * ut.T @ ut
    se = np.sqrt(np.diag(Binv @ meat @ Binv))
    half = stats.t.ppf(0.975, G - 1) * se
    assert red.table["b0_hi"].iloc[-1] == pytest.approx(b[0] + half[0], rel=1e-9)
    assert red.table["b1_lo"].iloc[-1] == pytest.approx(b[1] - half[1], rel=1e-9)
    assert red.table["buckets"].iloc[-1] == G and red.table["prompts"].tolist() == [20, 20, 40]
    # CR3 (the default): per deleted bucket one Newton step (info - info_g)^-1 u_g, by brute force
    w = (s + f) * pr * (1 - pr)
    deltas = []
    for k in range(G):
        m = cl == k
        info_k = (X[m] * w[m][:, None]).T @ X[m]
        deltas.append(np.linalg.solve(info - info_k, u[k]))
    deltas = np.array(deltas)
    v3 = np.zeros((2, 2))
    for t in np.unique(task_of):
        dt = deltas[task_of == t] - deltas[task_of == t].mean(axis=0)
        v3 += (len(dt) - 1) / len(dt) * dt.T @ dt
    se3 = np.sqrt(np.diag(v3))
    cr3 = LR.fit_reduced(R.reduce_frame(frame)).table.iloc[-1]
    assert cr3["interval"] == "cr3"
    assert cr3["b1_hi"] == pytest.approx(b[1] + stats.t.ppf(0.975, G - 1) * se3[1], rel=1e-9)
    assert cr3["b0_lo"] == pytest.approx(b[0] - stats.t.ppf(0.975, G - 1) * se3[0], rel=1e-9)


def test_reduced_fit_agrees_with_exact_fit_on_simulated_logs():
    frame = simulate_rounds(n_prompts=150, rounds_per_prompt=(20, 60), vectors=False, seed=11)
    ex = fit_law(frame)
    red = R.reduce_frame(frame)
    for quad, tol in ((True, 1e-6), (False, 1e-3)):
        fit = LR.fit_reduced(red, quadrature=quad)
        np.testing.assert_allclose(fit.table["b0"], ex.table["b0"], atol=tol)
        np.testing.assert_allclose(fit.table["b1"], ex.table["b1"], atol=tol)
    red = LR.fit_reduced(R.reduce_frame(frame))
    # documented tolerances (docs/scale.md) for the statistics that split rounds at atom granularity
    for col, tol in (("r2_round", 1e-6), ("sup", 1e-6), ("mean_accepted", 1e-12), ("mean_entropy", 1e-9),
                     ("floor_mean", 0.02), ("r2_curve", 0.01), ("r2_isotonic", 0.01), ("ceiling", 0.005),
                     ("rho", 0.002)):
        np.testing.assert_allclose(red.table[col], ex.table[col], atol=tol, err_msg=col)
    # intervals: prompt clusters vs bucket clusters estimate the same standard error
    w_ex = ex.table["b1_hi"] - ex.table["b1_lo"]
    w_red = red.table["b1_hi"] - red.table["b1_lo"]
    assert np.all(np.abs(w_red / w_ex - 1) < 0.35)
    for g in ex.groups:
        np.testing.assert_allclose(red.curve(g)["mean_accepted"], ex.curve(g)["mean_accepted"], atol=0.05)
        np.testing.assert_allclose(red.curve(g)["predicted"], ex.curve(g)["predicted"], atol=0.01)


@pytest.mark.parametrize("n_boot", [0, 99])
def test_recovery_truth_inside_bucket_clustered_intervals(n_boot):
    spec = TaskSpec("t", b0=1.1, b1=0.8, shape=2.0, scale=0.5, floor_weight=0.1)
    frame = simulate_rounds([spec], n_prompts=300, rounds_per_prompt=(10, 30), vectors=False, seed=21,
                            prompt_corr=0.5)
    fit = LR.fit_reduced(R.reduce_frame(frame), by=None, n_boot=n_boot, seed=1)
    r = fit.row()
    assert r["b0_lo"] < 1.1 < r["b0_hi"] and r["b1_lo"] < 0.8 < r["b1_hi"]
    assert r["mean_accepted_lo"] < r["mean_accepted"] < r["mean_accepted_hi"]
    assert r["interval"] == ("bootstrap" if n_boot else "cr3") and fit.holds().slope


@pytest.mark.slow
def test_bucket_clustered_intervals_cover_at_nominal_rate():
    spec = TaskSpec("t", b0=1.0, b1=0.7)
    hits = []
    for seed in range(120):
        frame = simulate_rounds([spec], n_prompts=120, rounds_per_prompt=(10, 30), vectors=False, seed=seed,
                                prompt_corr=0.5)
        r = LR.fit_reduced(R.reduce_frame(frame), by=None).row()
        hits.append(r["b1_lo"] < 0.7 < r["b1_hi"])
    print(f"coverage of b1: {np.mean(hits):.3f} over {len(hits)} data sets")
    assert 0.89 <= np.mean(hits) <= 0.99


def test_reduced_fit_rejects_groupings_it_cannot_make():
    red = R.reduce_frame(logs(5))
    with pytest.raises(GlanceError, match="cannot group by"):
        LR.fit_reduced(red, by="run_id")
    with pytest.raises(GlanceError, match="hold condition matched"):
        LR.fit_reduced(red, condition="mismatched")


def test_tail_from_reduction_equals_exact_tail_at_a_bin_edge_threshold():
    from glance_law.tail import fit_tail
    frame = simulate_rounds(n_prompts=60, rounds_per_prompt=(20, 40), vectors=False, seed=4)
    thr = 2.0 ** -4  # an edge of the grid, so the floor regime is the same set of rounds
    ex = fit_tail(frame, threshold=thr, n_boot=0, heldout=False)
    red = R.reduce_frame(frame)
    tail = LR.tail_reduced(red, LR.fit_reduced(red), threshold=thr, n_boot=0, heldout=False)
    cols = ["floor_rounds", "floor_mean", "ll_geometric", "ll_two_state", "lrt", "chi2_geometric", "chi2_two_state"]
    pd.testing.assert_frame_equal(tail.to_frame()[["task"] + cols], ex.to_frame()[["task"] + cols], rtol=1e-6,
                                  atol=1e-6)


# --------------------------------------------------------------------------
# bad input, duplicates
# --------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
def test_a_copied_part_file_is_a_duplicate_blamed_on_the_later_file(tmp_path, engine):
    frame = logs(8, seed=7)
    files = write_parts(frame, tmp_path, 2)
    shutil.copy(files[0], tmp_path / "rounds-9-copy.parquet")
    with pytest.raises(LogError, match=r"rounds-9-copy\.parquet.*duplicate rounds: keys already present in "
                                       r".*rounds-0\.parquet"):
        reduce_logs(tmp_path, engine=engine)
    red = reduce_logs(tmp_path, engine=engine, skip_bad=True)
    same_cells(as_dict(red), as_dict(reduce_logs(files, engine=engine)))
    assert any("rounds-9-copy" in n and "skipped" in n for n in red.notes)
    same_cells(as_dict(reduce_logs(tmp_path, engine=engine, check_keys=False)),
               ref_reduce(pd.concat([frame, frame.iloc[:len(frame) // 2]])))


@pytest.mark.parametrize("engine", ENGINES)
def test_duplicates_within_a_file_and_interleaved_rounds(tmp_path, engine):
    frame = logs(5, seed=8)[COLS]
    dup = pd.concat([frame, frame.iloc[[3]]], ignore_index=True)
    write_table(dup, tmp_path / "d" / "rounds-dup.parquet")
    with pytest.raises(LogError, match="rows share a key within this file"):
        reduce_logs(tmp_path / "d", engine=engine)
    # rounds of a prompt split over two files by parity: ranges overlap, yet nothing repeats
    odd = frame["round"] % 2 == 1
    write_table(frame[odd], tmp_path / "i" / "rounds-odd.parquet")
    write_table(frame[~odd], tmp_path / "i" / "rounds-even.parquet")
    same_cells(as_dict(reduce_logs(tmp_path / "i", engine=engine)), ref_reduce(frame))


def test_suspect_streams_finds_exactly_the_overlapping_ranges():
    s = np.array([1, 1, 2, 2, 3, 3, 3, 4], dtype=np.int64)
    lo = np.array([0, 5, 0, 3, 10, 0, 4, 0])
    hi = np.array([4, 9, 3, 8, 12, 5, 9, 100])
    assert suspect_streams(s, lo, hi).tolist() == [2, 3]
    rng = np.random.default_rng(0)
    for _ in range(50):
        k = 30
        s = rng.integers(0, 6, k)
        lo = rng.integers(0, 50, k)
        hi = lo + rng.integers(0, 10, k)
        brute = sorted({int(s[i]) for i in range(k) for j in range(k) if i != j and s[i] == s[j]
                        and lo[i] <= hi[j] and lo[j] <= hi[i]})
        assert suspect_streams(s, lo, hi).tolist() == brute


@pytest.mark.parametrize("engine", ENGINES)
def test_bad_values_name_the_file(tmp_path, engine):
    frame = logs(4, seed=9)[COLS]
    write_table(frame, tmp_path / "rounds-good.parquet")
    bad = frame.copy()
    bad["run_id"] = "other"
    bad.loc[bad.index[2], "root_entropy"] = np.nan
    write_table(bad, tmp_path / "rounds-nan.parquet")
    with pytest.raises(LogError, match=r"rounds-nan\.parquet.*root_entropy.*NaN"):
        reduce_logs(tmp_path, engine=engine)
    red = reduce_logs(tmp_path, engine=engine, skip_bad=True)
    same_cells(as_dict(red), ref_reduce(frame))
    assert [p for p, _ in red.info["skipped"]] == [str(tmp_path / "rounds-nan.parquet")]


def test_no_rounds_is_an_error(tmp_path):
    write_table(pd.DataFrame({"run_id": ["r"], "prompt_id": ["p"], "task": ["t"]}), tmp_path / "p.parquet",
                kind="prompts")
    with pytest.raises(LogError, match="no rounds or reduced files"):
        reduce_logs(tmp_path)


# --------------------------------------------------------------------------
# the command lines
# --------------------------------------------------------------------------

def test_reduce_cli_writes_a_file_that_fit_accepts(tmp_path, capsys):
    from glance_law.cli import fit as F
    frame = logs(20, seed=10)
    write_parts(frame, tmp_path / "logs", 2)
    out = tmp_path / "stats.parquet"
    assert RC.main([str(tmp_path / "logs"), "--out", str(out), "--format", "json"]) == 0
    assert '"buckets"' in capsys.readouterr().out
    assert F.main([str(out), "--format", "csv"]) == 0
    reduced_csv = capsys.readouterr().out
    assert F.main([str(tmp_path / "logs"), "--format", "csv"]) == 0
    exact_csv = capsys.readouterr().out
    red, ex = (pd.read_csv(__import__("io").StringIO(t)) for t in (reduced_csv, exact_csv))
    np.testing.assert_allclose(red["b1"], ex["b1"], atol=1e-6)
    for engine in ENGINES:
        assert F.main([str(tmp_path / "logs"), "--engine", engine, "--format", "csv", "--by", "none"]) == 0
        row = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
        assert row["b1"].iloc[0] == pytest.approx(ex["b1"].iloc[-1], abs=1e-6)


def test_cli_errors_are_one_line_exit_2(tmp_path, capsys):
    from glance_law.cli import fit as F
    frame = logs(4, seed=12)
    write_parts(frame, tmp_path / "logs", 1)
    cases = [
        (F.main, [str(tmp_path / "logs"), "--engine", "arrow", "--offsets"], "needs per-round columns"),
        (F.main, [str(tmp_path / "logs"), "--engine", "arrow", "--by", "run_id"], "cannot group by"),
        (F.main, [str(tmp_path / "logs"), "--engine", "nope"], "invalid choice"),
        (RC.main, [str(tmp_path / "logs"), "--out", str(tmp_path / "x.parquet"), "--per-octave", "5"],
         "power of two"),
        (RC.main, [str(tmp_path / "missing"), "--out", str(tmp_path / "x.parquet")], "no such file"),
        (RC.main, [str(tmp_path / "logs")], "required"),
    ]
    for main, argv, msg in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.filterwarnings("ignore")
def test_spark_reduction_equals_arrow_and_brute_force(mixed):
    folder, frame = mixed
    from glance_law.scale.engines.spark import session
    from glance_law.scale.engines.sql import SPARK
    spark = session("local[1]")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        red = reduce_logs(folder, engine="spark", spark=spark)
        same_cells(as_dict(red), ref_reduce(frame))
        same_cells(as_dict(red), as_dict(reduce_logs(folder, engine="arrow")))
        pairs = pd.DataFrame([("docvqa", f"doc-{i}") for i in range(50)] + [("t", "é-ünï-😀")],
                             columns=["task", "prompt_id"])
        spark.createDataFrame(pairs).createOrReplaceTempView("pairs")
        got = spark.sql(f"SELECT {SPARK.bucket(256)} AS b FROM pairs").toPandas()["b"].tolist()
        assert got == [ref_bucket(t, p) for t, p in zip(pairs["task"], pairs["prompt_id"])]
        grid = R.Grid()
        H = edge_values()
        spark.createDataFrame(pd.DataFrame({"h": H})).createOrReplaceTempView("hs")
        assert spark.sql(f"SELECT {grid.sql('h')} AS b FROM hs").toPandas()["b"].tolist() == grid.index(H).tolist()
    finally:
        spark.stop()


def test_reduced_file_without_sum_h2_fits_at_cell_means(tmp_path):
    frame = logs(30, seed=13)
    red = R.reduce_frame(frame)
    write_table(red.cells.drop(columns=["sum_h2"]), tmp_path / "old.parquet", kind="reduced",
                run={"reduction": red.metadata()})
    back = R.read_reduced(tmp_path / "old.parquet")
    assert back.cells["sum_h2"].isna().all()
    fit = LR.fit_reduced(back)
    ex = fit_law(frame)
    np.testing.assert_allclose(fit.table["b1"], ex.table["b1"], atol=1e-3)
    assert any("without sum_h2" in n for n in fit.notes)


def test_fit_cli_tail_section_from_a_reduction(tmp_path, capsys):
    from glance_law.cli import fit as F
    frame = logs(25, seed=14)
    write_parts(frame, tmp_path / "logs", 2)
    assert RC.main([str(tmp_path / "logs"), "--out", str(tmp_path / "s.parquet")]) == 0
    capsys.readouterr()
    assert F.main([str(tmp_path / "s.parquet"), "--tail", "--tail-bootstrap", "9", "--format", "json"]) == 0
    import json
    doc = json.loads(capsys.readouterr().out)
    rows = next(iter(doc["tail"].values()))["rows"]
    assert {r["task"] for r in rows} == set(frame["task"].astype(str))
    assert all(r["floor_rounds"] > 0 for r in rows)


@pytest.mark.parametrize("case", ["dense", "sort", "hash"])
def test_cell_aggregation_bincount_sort_and_hash_paths(case):
    """The arrow engine's aggregation (dense bincount, sort, or Arrow's hash for absurd key
    ranges) and its merges equal a pandas group-by."""
    from glance_law.scale.engines.arrow import GROUP, _aggregate, _Cells
    rng = np.random.default_rng(len(case))
    k = 5000
    step = {"dense": (1, 1, 1, 1), "sort": (2 ** 12, 2 ** 12, 1, 1), "hash": (2 ** 29, 2 ** 24, 10_000, 5_000)}[case]
    keys = [rng.integers(0, 3, k), rng.integers(0, 4, k) * step[0], rng.integers(0, 5, k) * step[1],
            1 + rng.integers(0, 3, k) * step[2], rng.integers(0, 2, k) * step[3]]
    H = rng.random(k)
    want = pd.DataFrame({**dict(zip(GROUP, keys)), "n": 1.0, "h": H, "h2": H * H}).groupby(GROUP).sum().reset_index()
    acc = _Cells(partitions=4, floor=10)
    for lo in range(0, k, 700):
        acc.add(_aggregate([x[lo:lo + 700] for x in keys], [np.ones(len(H[lo:lo + 700])), H[lo:lo + 700],
                                                              H[lo:lo + 700] ** 2]))
    parts = list(acc.partitions())
    got = pd.DataFrame({**{g: np.concatenate([p[g] for p in parts]).astype(np.int64) for g in GROUP},
                        **{s: np.concatenate([p["sums"][i] for p in parts]) for i, s in enumerate(("n", "h", "h2"))}})
    got = got.sort_values(GROUP).reset_index(drop=True)
    pd.testing.assert_frame_equal(got[GROUP], want[GROUP].astype(np.int64))
    np.testing.assert_allclose(got[["n", "h", "h2"]].to_numpy(), want[["n", "h", "h2"]].to_numpy(), rtol=1e-12)


def test_a_file_bad_after_its_first_batches_is_left_out_whole(tmp_path):
    frame = logs(6, seed=15)[COLS]
    write_table(frame, tmp_path / "rounds-good.parquet")
    bad = frame.copy()
    bad["run_id"] = "late"
    bad.loc[bad.index[-1], "accepted"] = 99  # beyond horizon, in the file's last batch
    write_table(bad, tmp_path / "rounds-late.parquet")
    red = reduce_logs(tmp_path, skip_bad=True, batch_rows=50, workers=2)
    same_cells(as_dict(red), ref_reduce(frame))
    assert [p for p, _ in red.info["skipped"]] == [str(tmp_path / "rounds-late.parquet")]
    assert red.info["rounds_read"] == len(frame)


def test_equal_count_parts_cut_at_exact_counts_by_brute_force():
    """Pieces sum to each cell's rounds, every bin holds W / B, and a cut inside a fine bin sits
    where the cells' linear densities (brute-force integrated) hold the bin's share."""
    from glance_law.scale.curve_reduced import equal_count_parts
    rng = np.random.default_rng(5)
    hbin = np.sort(rng.integers(0, 6, 40))
    n = rng.integers(1, 30, 40).astype(float)
    mu = rng.uniform(0, 1, 40)
    cell, b, w, u = equal_count_parts(hbin, n, mu, 7)
    np.testing.assert_allclose(np.bincount(cell, w, 40), n)
    np.testing.assert_allclose(np.bincount(b, w, 7), n.sum() / 7)
    k = np.clip(12 * (mu - 0.5), -2, 2)
    grid = np.linspace(0, 1, 200001)
    for j in np.unique(hbin):
        inside = np.flatnonzero(hbin == j)
        below = n[hbin < j].sum()
        for q in range(1, 7):
            need = q * n.sum() / 7 - below
            if not 0 < need < n[inside].sum():
                continue
            mass = sum(n[c] * np.cumsum(1 + k[c] * (grid - 0.5)) / grid.size for c in inside)
            ucut = grid[np.searchsorted(mass, need)]
            got = sum(w[(cell == c) & (b < q)].sum() for c in inside)   # rounds of the bin below cut q
            want = sum(n[c] * (ucut + k[c] * (ucut ** 2 - ucut) / 2) for c in inside)
            assert got == pytest.approx(want, rel=1e-3, abs=1e-3)
