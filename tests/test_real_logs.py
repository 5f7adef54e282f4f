"""The committed real-model logs (data/real, Gemma 3 270M on Spec-Bench; docs/real-model.md):
every drafter's output equals the plain greedy arm's (``ar``: the same tree decoder drafting
nothing) token for token on the same question, the check docs/real-model.md's Finding 1 quotes.
The early-exit arms decode 32 tokens where ``ar`` decodes 64: their outputs equal ``ar``'s first
tokens. (That ``ar`` itself equals the model's own ``generate`` is tests/test_real_model.py's.)"""
from __future__ import annotations

from pathlib import Path

import pytest

import glance_law as gl

REAL = Path(__file__).resolve().parent.parent / "data" / "real"
pytestmark = pytest.mark.skipif(not any(REAL.glob("prompts-*.parquet")), reason="data/real holds no logs")


def _outputs():
    p = gl.read_prompts([str(REAL / "*.parquet")])     # the first live runs (the study is in subfolders)
    out: dict[str, dict[str, tuple[list, str]]] = {}
    for r in p.itertuples():
        out.setdefault(str(r.drafter), {})[str(r.prompt_id)] = ([int(t) for t in r.tokens], str(r.stop_reason))
    return out


def test_every_drafter_emits_the_greedy_arm_output():
    out = _outputs()
    ar = out.pop("ar")
    assert len(ar) == 39 and {"pld", "early_exit-6-chain", "early_exit-6-tree16"} <= set(out)
    for drafter, rows in out.items():
        assert set(rows) <= set(ar), drafter
        for pid, (tokens, reason) in rows.items():
            ref, ref_reason = ar[pid]
            assert tokens, (drafter, pid)
            assert tokens == ref[:len(tokens)], (drafter, pid)
            if reason == "eos" or (ref_reason == "eos" and len(tokens) == len(ref)):
                assert (reason, tokens) == (ref_reason, ref), (drafter, pid)
    assert all(len(out["pld"][pid][0]) == len(ar[pid][0]) for pid in out["pld"])     # same max_new_tokens
    assert len(out["pld"]) == 39 and len(out["early_exit-6-chain"]) == len(out["early_exit-6-tree16"]) == 13
