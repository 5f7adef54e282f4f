"""The measured round-cost model (glance_law.policy.cost): recovery of known terms with
prompt-clustered intervals, the policy arm's passes and host work, and the JSON record."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from glance_law.errors import GlanceError, MissingColumnError
from glance_law.policy.cost import CostModel, cost_model, fit_cost, policy_runs

TRUTH = {"constant_ms": 20.0, "ms_per_draft_pass": 3.0, "ms_per_tree_node": 0.5, "tree_round_ms": 4.0,
         "policy_host_ms": 1.5, "first_round_ms": 6.0}


def _rounds(seed: int, prompts: int = 40, per: int = 30):
    """Timed rounds of a chain drafter (passes = depth) at several depths, half the runs policy-shaped,
    with a per-prompt random effect (clustered noise) and per-round noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(prompts):
        u = rng.normal(0, 2.0)
        pol = g % 2 == 1
        for r in range(per):
            depth = int(rng.integers(0, 8))
            passes = 8 if pol else depth          # a policy round pays the full proposal
            ms = (TRUTH["constant_ms"] + TRUTH["ms_per_draft_pass"] * passes + TRUTH["ms_per_tree_node"] * depth
                  + TRUTH["tree_round_ms"] * (depth > 0) + TRUTH["policy_host_ms"] * pol + TRUTH["first_round_ms"] * (r == 0)
                  + u + rng.normal(0, 1.0))
            rows.append({"task": "t", "prompt_id": str(g), "round": r, "drafter": "chain", "condition": "matched",
                         "run_id": "pol" if pol else "fix", "round_ms": ms, "draft_passes": passes,
                         "budget": depth, "accepted": int(rng.integers(0, depth + 1))})
    frame = pd.DataFrame(rows)
    files = (SimpleNamespace(run={"run_id": "pol", "policy": {"family": "gated"}}),
             SimpleNamespace(run={"run_id": "fix"}))
    return SimpleNamespace(frame=frame, files=files)


def test_fit_recovers_every_term_inside_its_interval():
    logs = _rounds(0)
    assert policy_runs(logs) == {"pol"}
    fit = fit_cost(logs, n_boot=200)
    for term, true in TRUTH.items():
        est, lo, hi = fit.coefficient(term)
        assert lo <= true <= hi, (term, est, lo, hi)
        assert hi - lo < 4.0          # informative (the host term varies between prompts only)
    m = fit.model
    assert m.policy_passes == 8 and m.host_ms == pytest.approx(fit.coefficient("policy_host_ms")[0])
    # a policy round pays the full proposal and its host work at every shape, a fixed one does not
    assert m.ms(0, policy=True) - m.ms(0) == pytest.approx(m.pass_ms * 8 + m.host_ms)
    assert m.ms(1) - m.ms(0) == pytest.approx(m.pass_ms + m.node_ms + m.tree_ms)
    p = fit.predictions
    row = p[(p["quantity"] == "ms_per_round") & (p["arm"] == "fixed") & (p["shape"] == 4)].iloc[0]
    true4 = TRUTH["constant_ms"] + TRUTH["tree_round_ms"] + 4 * (TRUTH["ms_per_draft_pass"] + TRUTH["ms_per_tree_node"])
    assert row["estimate_lo"] <= true4 <= row["estimate_hi"]
    tok = p[p["quantity"] == "ms_per_token"]
    assert len(tok) == 8 and (tok["estimate_lo"] <= tok["estimate"]).all() and (tok["estimate"] <= tok["estimate_hi"]).all()
    assert {"coefficient", "ms_per_round", "ms_per_token"} == set(fit.to_frame()["quantity"])


@pytest.mark.slow
def test_coefficient_intervals_cover_near_nominal():
    hits = {t: 0 for t in TRUTH}
    n = 200
    for s in range(n):
        fit = fit_cost(_rounds(100 + s, prompts=30, per=20), n_boot=0)
        for t, true in TRUTH.items():
            _, lo, hi = fit.coefficient(t)
            hits[t] += lo <= true <= hi
    for t in TRUTH:
        assert 0.90 <= hits[t] / n <= 0.99, (t, hits[t] / n)


def test_a_given_node_cost_identifies_a_chain_pass():
    """A chain drafted one pass per offset: passes = nodes, so only their sum is identified by the
    fit; a node cost known from elsewhere identifies the pass."""
    f = _rounds(5).frame                 # (coverage of this interval: 98 of 100 seeds)
    f = f.loc[f["run_id"] == "fix"]
    fit = fit_cost(f, node_ms=TRUTH["ms_per_tree_node"], n_boot=0)
    est, lo, hi = fit.coefficient("ms_per_draft_pass")
    assert lo <= TRUTH["ms_per_draft_pass"] <= hi and fit.model.node_ms == TRUTH["ms_per_tree_node"]
    assert np.isnan(fit.coefficient("ms_per_tree_node")[0]) and any("given" in n for n in fit.notes)


def test_terms_that_do_not_vary_are_not_identified_and_noted():
    logs = _rounds(1)
    f = logs.frame.assign(budget=5, draft_passes=1)
    fit = fit_cost(f, n_boot=0)
    assert np.isnan(fit.coefficient("ms_per_tree_node")[0])
    assert any("does not vary" in n for n in fit.notes)
    assert any("assumed 0" in n for n in fit.notes)          # no policy runs in a bare frame: host work assumed
    c = cost_model(f, "chain", notes=[])
    assert not c.identified
    c2 = cost_model(f, "chain", node_ms=0.2, host_ms=0.7, notes=[])
    assert c2.identified and c2.node_ms == 0.2 and c2.host_ms == 0.7


def test_record_is_json_and_names_its_assumptions():
    fit = fit_cost(_rounds(2), n_boot=0)
    d = fit.model.to_dict()
    json.dumps(d, allow_nan=False)
    assert set(d["intervals"]) == set(TRUTH)
    assert any("full draft passes" in a for a in d["assumptions"])
    assert CostModel().to_dict()["node_ms"] is None


def test_bad_input_is_one_clear_error():
    f = _rounds(3).frame
    with pytest.raises(MissingColumnError):
        fit_cost(f.drop(columns=["round_ms"]))
    with pytest.raises(GlanceError, match="at least 3"):
        fit_cost(f.head(2))
    with pytest.raises(GlanceError, match="speculative drafters"):
        fit_cost(pd.concat([f, f.assign(drafter="other")]))


def test_cost_draws_refit_every_term_and_cover_the_truth():
    """The prompt-bootstrap refits (what a prediction's interval propagates): over 40 simulated log
    sets each term's 95 % percentile interval holds the simulated truth in most of them (a
    percentile bootstrap over 40 prompts covers a little below nominal: 0.83-1.0 here, the CR1
    intervals 0.90-1.0), and the host term's spread agrees with its clustered standard error."""
    from glance_law.policy.cost import cost_draws

    field = {"constant_ms": "constant", "ms_per_draft_pass": "pass_ms", "ms_per_tree_node": "node_ms",
             "tree_round_ms": "tree_ms", "policy_host_ms": "host_ms", "first_round_ms": "first_ms"}
    hits = {t: 0 for t in TRUTH}
    for seed in range(40):
        fit, draws = cost_draws(_rounds(seed), n_boot=200, seed=seed)
        assert len(draws) == 200
        for term, true in TRUTH.items():
            lo, hi = np.percentile([getattr(m, field[term]) for m in draws], [2.5, 97.5])
            hits[term] += bool(lo <= true <= hi)
    assert min(hits.values()) >= 30 and hits["policy_host_ms"] >= 36, hits
    se = float(fit.terms.loc[fit.terms["term"] == "policy_host_ms", "se"].iloc[0])
    assert 0.6 * se < np.std([m.host_ms for m in draws]) < 1.6 * se
    assert fit.model.host_ms == pytest.approx(fit.coefficient("policy_host_ms")[0])
    # the other fields (the passes model, the assumptions) are the point fit's
    assert {m.policy_passes for m in draws} == {8} and all(m.passes_per_node for m in draws)


def test_cost_draws_keep_a_given_term():
    from glance_law.policy.cost import cost_draws

    logs = _rounds(4)
    logs.frame["round_ms"] -= TRUTH["policy_host_ms"] * (logs.frame["run_id"] == "pol")
    plain = SimpleNamespace(frame=logs.frame, files=())                 # no policy run: host term given
    fit, draws = cost_draws(plain, host_ms=0.7, n_boot=50)
    assert fit.model.host_ms == 0.7 and {m.host_ms for m in draws} == {0.7}
    assert len({m.constant for m in draws}) > 1


#: a verify pass that does not cost linearly in its rows (Gemma 3 270M on one CPU thread: 1-3 rows
#: about alike, a fourth ~100 ms more; docs/policy.md section 5)
SHAPE_MS = {0: 400.0, 1: 410.0, 2: 420.0, 3: 520.0}
HOST, FIRST = 6.0, 900.0


def _calibration(seed: int, prompts: int = 12, per: int = 25):
    """Timed rounds of a calibration: every prompt decoded once with a depth policy (shapes 0-3) and
    once at the fixed depth 2, an early-exit-like drafter (3 passes a round, 4 in the first)."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(prompts):
        u = rng.normal(0, 10.0)
        for run in ("pol", "fix"):
            for r in range(per):
                s = int(rng.integers(0, 4)) if run == "pol" else 2
                ms = SHAPE_MS[s] + HOST * (run == "pol") + FIRST * (r == 0) + u + rng.normal(0, 15.0)
                rows.append({"task": "t", "prompt_id": str(g), "round": r, "drafter": "ee", "condition": "matched",
                             "run_id": run, "round_ms": ms, "draft_passes": 3 + (r == 0), "budget": s,
                             "accepted": int(rng.integers(0, s + 1))})
    files = (SimpleNamespace(run={"run_id": "pol", "policy": {"family": "gated"}}), SimpleNamespace(run={"run_id": "fix"}))
    return SimpleNamespace(frame=pd.DataFrame(rows), files=files)


def test_one_term_per_shape_where_the_verify_cost_is_not_linear():
    """Four logged shapes, passes that do not track the shape: one term per shape (auto), each
    shape's cost, the host work and the first round's cost inside their intervals; the line through
    the shapes instead puts the misfit into the host term (its interval misses the truth)."""
    logs = _calibration(0)
    fit = fit_cost(logs, n_boot=0)
    assert [t for t in fit.terms["term"] if t.startswith("ms_at_shape_")] == [f"ms_at_shape_{s}" for s in range(4)]
    assert any("one cost term per logged shape" in n for n in fit.notes)
    truth = {**{f"ms_at_shape_{s}": v for s, v in SHAPE_MS.items()}, "policy_host_ms": HOST, "first_round_ms": FIRST}
    for term, true in truth.items():
        est, lo, hi = fit.coefficient(term)
        assert lo <= true <= hi, (term, est, lo, hi)
    m = fit.model
    assert dict(m.shape_ms) == pytest.approx({float(s): fit.coefficient(f"ms_at_shape_{s}")[0] for s in range(4)})
    # the table between and beyond its shapes; a policy round adds the host work, a first round first_ms
    assert m.ms(2.5) == pytest.approx((m.ms(2) + m.ms(3)) / 2)
    assert m.ms(5) == pytest.approx(m.ms(3) + 2 * m.node_ms)
    assert m.ms(1, policy=True) - m.ms(1) == pytest.approx(m.host_ms)
    assert m.round_ms([1, 1], first=[True, False]) == pytest.approx([m.ms(1) + m.first_ms, m.ms(1)])
    json.dumps(m.to_dict(), allow_nan=False)
    line = fit_cost(logs, n_boot=0, per_shape=False)
    assert "ms_per_tree_node" in set(line.terms["term"])
    _, lo, hi = line.coefficient("policy_host_ms")
    assert not lo <= HOST <= hi, (lo, hi)


def test_a_line_where_the_shapes_are_few_or_track_the_passes():
    """Two logged shapes, or passes equal to the depth (a chain drafted one pass per offset): the line."""
    two = _calibration(1)
    two.frame = two.frame.loc[two.frame["budget"].isin([0, 2])]
    assert "ms_per_tree_node" in set(fit_cost(two, n_boot=0).terms["term"])
    assert not any(t.startswith("ms_at_shape_") for t in fit_cost(_rounds(1), n_boot=0).terms["term"])


@pytest.mark.slow
def test_studentized_draws_cover_near_nominal_with_six_prompts():
    """A calibration of six prompts: the host term's 95 % percentile interval over the prompt-bootstrap
    refits covers the truth near nominally once each refit's deviation is scaled by t(G-1)/z x
    sqrt(G/(G-1)); the plain percentile bootstrap covers below nominal."""
    from glance_law.policy.cost import cost_draws

    n, hits = 300, {True: 0, False: 0}
    for seed in range(n):
        logs = _calibration(1000 + seed, prompts=6, per=20)
        for stud in (True, False):
            _, draws = cost_draws(logs, n_boot=200, seed=seed, studentize=stud)
            lo, hi = np.percentile([d.host_ms for d in draws], [2.5, 97.5])
            hits[stud] += bool(lo <= HOST <= hi)
    assert 0.92 <= hits[True] / n <= 0.99, hits
    assert hits[False] / n < hits[True] / n - 0.03, hits


def test_the_formula_line_names_every_term_the_model_holds():
    """The note's one-line formula carries the tree term, the host work and the first round whenever
    the model has them (a note that shows constant + nodes alone misstates the model the table used)."""
    m = CostModel(constant=1.5, node_ms=0.1, pass_ms=2.0, tree_ms=0.7, first_ms=0.25, host_ms=0.05)
    line = m.formula()
    for text in ("1.500", "0.1000 x nodes", "0.700 when any node", "2.000 x passes", "0.050 host", "0.250 ms at"):
        assert text in line, (text, line)
    assert "priced like the others" in m.formula(first=False)
    bare = CostModel(constant=1.5, node_ms=0.1).formula()
    assert "node is drafted" not in bare and "first" not in bare and "host" not in bare
    table = CostModel(constant=1.5, node_ms=0.1, shape_ms=((0, 1.0), (4, 2.0))).formula()
    assert "0: 1.000" in table and "4: 2.000" in table
