"""The committed Spec-Bench study on Gemma 3 270M (data/real/spec-bench, docs/real-model.md; issue 33):
the dense logs, the rounds made from them, and the live --audit sample beside them. No torch: the
rounds are remade from the committed dense logs with glance_log.rounds and compared with the
committed ones, and the live rounds are compared with them where greedy decoding's prefix
causality makes them comparable (analyses/real_dense.py's rule)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import glance_law as gl

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "data" / "real" / "spec-bench"
LIVE = ROOT / "data" / "real" / "spec-bench-live"
pytestmark = pytest.mark.skipif(not (STUDY / "dense").exists(), reason="data/real/spec-bench holds no study")
sys.path.insert(0, str(ROOT / "analyses"))


def _questions(arm: str) -> set:
    p = gl.read_prompts([str(STUDY / arm)])
    return {str(x).rsplit("-t", 1)[0] for x in p["prompt_id"]}


def test_four_hundred_questions_for_pld_and_two_other_drafters():
    counts = {arm: len(_questions(arm)) for arm in ("pld", "early_exit-6", "early_exit-12")}
    assert all(n >= 400 for n in counts.values()), counts


def test_the_pld_law_is_identified_pooled_and_has_an_interval_in_every_category():
    law = gl.fit_law(gl.read_rounds([str(STUDY / "pld")]), by="task").to_frame().set_index("task")
    pooled = law.loc["pooled"]
    assert pooled["b1_hi"] - pooled["b1_lo"] < 0.25, (pooled["b1_lo"], pooled["b1_hi"])
    assert len(law) == 14                                      # 13 categories and the pooled row
    assert np.isfinite(law[["b1_lo", "b1_hi"]].to_numpy()).all()


@pytest.mark.parametrize("arm", ["pld", "early_exit-12"])
def test_committed_rounds_are_glance_log_rounds_of_the_committed_dense_logs(arm, tmp_path):
    from real_dense import ARMS

    from glance_log import rounds as RD

    opts = dict(ARMS)[arm]
    kw = {"draft_len": int(opts[opts.index("--draft-len") + 1]), "budget": int(opts[opts.index("--budget") + 1]),
          "branch_k": int(opts[opts.index("--branch-k") + 1])}
    RD.convert(STUDY / "dense", opts[opts.index("--drafter") + 1], tmp_path, **kw)
    cols = ["prompt_id", "round", "position", "accepted", "horizon", "root_entropy"]
    got = gl.read_rounds([str(tmp_path)])[cols].sort_values(["prompt_id", "round"]).reset_index(drop=True)
    want = gl.read_rounds([str(STUDY / arm)])[cols].sort_values(["prompt_id", "round"]).reset_index(drop=True)
    assert got.equals(want)


@pytest.mark.skipif(not LIVE.exists(), reason="no live sample committed")
def test_live_sample_equals_the_rounds_from_dense_logs():
    """Every live prompt is its model.generate output (audited), shares its prefix with the study's
    output, and every comparable round is equal (accepted, horizon, committed, match)."""
    import argparse

    import real_dense as R

    args = argparse.Namespace(live=LIVE, out=STUDY, questions=R.QUESTIONS)
    table = R.live_vs_dense(args).splitlines()[2:]
    assert table
    for row in table:
        cells = [c.strip() for c in row.strip("|").split("|")]
        arm, n_live, audited, inside, prefix, compared, equal, match = cells[:8]
        a, of = audited.split(" of ")
        assert a == of == n_live, row
        assert int(inside) >= 1 and prefix == inside, row
        assert int(compared) > 0 and equal == compared and match == compared, row
