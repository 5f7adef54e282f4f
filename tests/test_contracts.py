"""Contract checks every Result must pass (in the spirit of scikit-learn's estimator checks), and
the import contract of every module (issue 13).

Every Result subclass is built from the committed real-format logs (data/logs) or from the
simulator: flat ``x, x_lo, x_hi`` columns, byte-identical rendering across repeated calls in
every format, and a pickle that loads and renders identically in a fresh interpreter. Every
module imports first in a fresh interpreter, and in several orders.
"""
from __future__ import annotations

import importlib
import json
import pickle
import pkgutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

import glance_law as gl
from glance_law.policy import evaluate_policies
from glance_law.results.base import Result
from glance_law.results.format import FORMATS

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "data" / "logs"


@cache
def _instances() -> dict[str, Result]:
    """One instance (or more) of every Result subclass, keyed by a readable id."""
    from glance_law.evidence.summary import group_summary
    from glance_law.policy.cost import fit_cost
    rounds = gl.read_logs(LOGS)
    frame = rounds.frame
    prompts = gl.read_logs(LOGS, "prompts").frame
    sim = gl.simulate_rounds(seed=0, n_prompts=12)
    tree = gl.simulate_tree_rounds(n_prompts=6, rounds_per_prompt=10, seed=0)
    law = gl.fit_law(rounds)
    tail = gl.fit_tail(sim, n_boot=0, folds=2)
    width = gl.width_allocation(tree, budgets=(7, 15), n_boot=10)
    order = gl.task_order(sim, ["caption", "textvqa", "docvqa"], n_boot=20)
    trans = gl.transfer(sim, ["caption"], ["docvqa"])
    aud = gl.audit(prompts, frame)
    arm = prompts["drafter"].astype(str)
    timing = gl.timing_ledger(prompts.loc[arm == "ar"], prompts.loc[arm != "ar"], n_boot=50)
    out = {
        "LawFit": law,
        "LawChecks": next(iter(law.checks.values())),
        "TailFit": tail, "TailModels": tail.models(), "TailHeldout": tail.heldout_table(),
        "FanoCheck": gl.fano_check(sim, vocab_size=32000),
        "Replay": gl.replay(tree, n_max=15),
        "WidthAllocation": width, "RescueFit": width.rescue, "WidthRegret": width.regret,
        "OffsetLaw": gl.offset_law(sim), "OffsetHazards": gl.offset_hazards(sim),
        "Assumption2Test": gl.assumption2_test(sim), "RunSurvival": gl.run_survival(sim, two_state=False),
        "ProbeResult": gl.probe(rounds, n_boot=20), "SignalResult": gl.signal_effect(sim, "position"),
        "OrderResult": order, "OrderGaps": order.gap_table(), "OrderVerdict": order.verdict_table(),
        "TransferResult": trans, "TransferCalibration": trans.calibration(),
        "AuditResult": aud, "AuditDivergences": aud.divergences(),
        "TimingResult": timing, "RoundCostResult": gl.round_cost(sim),
        "Reduced": gl.reduce_frame(sim), "LawFit(reduced)": gl.fit_reduced(gl.reduce_frame(sim)),
        "PolicyTable": evaluate_policies(tree, 7, n_max=15, n_boot=10, folds=2),
        "CostFit": fit_cost(sim, n_boot=20),
        "GroupSummary": group_summary(rounds),
        "TurnTau": gl.turn_tau(prompts),
    }
    return out


def _subclasses(cls):
    for s in cls.__subclasses__():
        yield s
        yield from _subclasses(s)


def _all_modules() -> list[str]:
    import glance_law
    import glance_log
    names = ["glance_law", "glance_log"]
    for pkg in (glance_law, glance_log):
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
    return sorted(names)


IDS = ["LawFit", "LawChecks", "TailFit", "TailModels", "TailHeldout", "FanoCheck", "Replay", "WidthAllocation",
       "RescueFit", "WidthRegret", "OffsetLaw", "OffsetHazards", "Assumption2Test", "RunSurvival", "ProbeResult",
       "SignalResult", "OrderResult", "OrderGaps", "OrderVerdict", "TransferResult", "TransferCalibration",
       "AuditResult", "AuditDivergences", "TimingResult", "RoundCostResult", "Reduced", "LawFit(reduced)", "PolicyTable",
       "GroupSummary", "TurnTau", "CostFit"]


def test_every_result_subclass_is_checked():
    for m in _all_modules():
        if m.startswith("glance_law"):
            importlib.import_module(m)
    concrete = {c.__name__ for c in _subclasses(Result)   # the library's own (tests define some of theirs)
                if c.__name__ != "TableResult" and c.__module__.startswith("glance_law")}
    assert concrete <= {type(r).__name__ for r in _instances().values()}
    assert set(IDS) == set(_instances())


@pytest.mark.parametrize("name", IDS)
def test_result_frame_is_flat_with_x_lo_hi_triples(name):
    res = _instances()[name]
    frame = res.to_frame()
    assert isinstance(frame, pd.DataFrame)
    assert not isinstance(frame.columns, pd.MultiIndex)
    cols = [str(c) for c in frame.columns]
    assert all(isinstance(c, str) for c in frame.columns) and len(set(cols)) == len(cols)
    for c in cols:
        for lo, hi in (("_lo", "_hi"), ("_hi", "_lo")):
            if c.endswith(lo):
                base = c[: -len(lo)]
                assert base + hi in cols, f"{name}: {c} without {base + hi}"
                if base not in cols:  # not an interval around an estimate: a range (e.g. a bin's edges)
                    lo_v, hi_v = frame[base + "_lo"].to_numpy(float), frame[base + "_hi"].to_numpy(float)
                    ok = ~(lo_v > hi_v)
                    assert ok.all(), f"{name}: {c} without the estimate {base} and not a range"
    for c in cols:
        assert not any(isinstance(v, (list, dict, tuple, set, pd.DataFrame)) for v in frame[c]), \
            f"{name}: column {c} holds nested values"


@pytest.mark.parametrize("name", IDS)
def test_result_renders_byte_identically_in_every_format(name):
    res = _instances()[name]
    for fmt in FORMATS:
        a, b = res.summary(fmt), res.summary(fmt)
        assert isinstance(a, str) and a == b and a, (name, fmt)
    assert res.to_latex() == res.to_latex() and res._repr_html_() == res._repr_html_()
    assert res.to_frame().equals(res.to_frame())


def test_results_pickle_and_render_identically_in_a_fresh_interpreter(tmp_path):
    inst = _instances()
    rendered = {k: {fmt: r.summary(fmt) for fmt in FORMATS} for k, r in inst.items()}
    path = tmp_path / "results.pkl"
    path.write_bytes(pickle.dumps(inst))
    code = ("import json, pickle, sys\n"
            f"inst = pickle.loads(open({str(path)!r}, 'rb').read())\n"
            f"print(json.dumps({{k: {{f: r.summary(f) for f in {tuple(FORMATS)!r}}} for k, r in inst.items()}}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == rendered


_IMPORT_ORDERS = """
import importlib, json, sys
names = json.loads(sys.argv[1])

def purge():
    for m in list(sys.modules):
        if m.split(".")[0] in ("glance_law", "glance_log"):
            del sys.modules[m]

failed = []
for m in names:                      # each module first, with no other module of the project loaded
    purge()
    try:
        importlib.import_module(m)
    except Exception as exc:
        failed.append(f"{m} first: {type(exc).__name__}: {exc}")
for order in (names, names[::-1]):   # every module, forward and reversed
    purge()
    for m in order:
        try:
            importlib.import_module(m)
        except Exception as exc:
            failed.append(f"{m} in order: {type(exc).__name__}: {exc}")
print(json.dumps(failed))
"""


def test_every_module_imports_first_and_in_any_order():
    names = _all_modules()
    assert "glance_law.tail.report" in names and "glance_log.items" in names
    proc = subprocess.run([sys.executable, "-c", _IMPORT_ORDERS, json.dumps(names)], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
