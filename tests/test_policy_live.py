"""Draft policies in the live decoder: lossless (greedy equality) with the policy choosing every
round's shape, no host-device synchronisation beyond what a round already has, the chosen
shapes logged, and glance-log --policy end to end."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from _logger_fixtures import PROMPTS, make_block_head, make_llama  # noqa: E402

from glance_law.policy import (  # noqa: E402
    AcceptKeyedDepthPolicy,
    FixedPolicy,
    GatedDepthPolicy,
    HeuristicDepthPolicy,
    KeyedBudgetPolicy,
    KeyedDepthPolicy,
    policy_to_dict,
)
from glance_log.decode import decode, greedy_reference  # noqa: E402
from glance_log.drafters import make_drafter  # noqa: E402
from glance_log.models import load_target  # noqa: E402

torch.set_num_threads(1)
DEVICE = os.environ.get("GLANCE_TEST_DEVICE", "cpu")
MAX_NEW = 20


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    tgt = make_llama(root / "target", seed=0, init=1.0)
    head = make_block_head(root / "head", tgt, horizon=6)
    return {"target": load_target(tgt, device=DEVICE), "target_path": tgt, "head": head}


class Recorder:
    """A user policy: records what it saw and delegates."""

    def __init__(self, inner):
        self.inner, self.seen, self.shape = inner, [], inner.shape

    def __call__(self, stats):
        self.seen.append((float(stats.entropy[0]), stats.topk_logq.shape))
        out = self.inner(stats)
        self.seen[-1] += (int(out[0]),)
        return out


POLICIES = [
    KeyedBudgetPolicy(key="rescue", b0=2.0, b1=0.8, c0=1.0, c1=0.0, threshold=0.05, max_size=63),
    KeyedBudgetPolicy(key="paper", b0=2.0, b1=0.8, threshold=0.02, max_size=63),
    KeyedDepthPolicy(b0=2.0, b1=0.8, threshold=0.3, max_size=6),
    GatedDepthPolicy(mode="cumprob", threshold=0.2, max_size=6),
    # keyed on the previous round's acceptance (the decoder passes it: no extra sync)
    AcceptKeyedDepthPolicy(survival=((0.8, 0.6, 0.4, 0.3, 0.2, 0.1), (0.3, 0.1, 0.05, 0.0, 0.0, 0.0),
                                     (0.5, 0.3, 0.2, 0.1, 0.0, 0.0), (0.7, 0.5, 0.3, 0.2, 0.1, 0.0),
                                     (0.9, 0.8, 0.7, 0.6, 0.5, 0.4)), threshold=0.25, max_size=6),
    HeuristicDepthPolicy(start=2, max_size=6),
    FixedPolicy(size=0),
]


@pytest.mark.parametrize("pol", POLICIES, ids=lambda p: f"{p.family}-{getattr(p, 'key', getattr(p, 'mode', ''))}")
def test_policy_decode_is_lossless_and_shapes_vary(env, pol):
    t = env["target"]
    for q in PROMPTS:
        pr = t.encode(q)
        ref, _ = greedy_reference(t, pr, MAX_NEW)
        for name, dm in (("block", env["head"]), ("two_model", env["target_path"]), ("pld", None)):
            rec = Recorder(pol)
            dr = make_drafter(name, t, draft_model=dm, branch_k=4)
            r = decode(t, dr, pr, budget=63, branch_k=4, max_new_tokens=MAX_NEW, policy=rec)
            assert r.tokens == ref, (pol, name, q)
            assert rec.seen or name == "pld"
    if isinstance(pol, FixedPolicy):          # size 0: every round is autoregressive
        assert all(h == 0 for h in r.horizons)


def test_policy_shapes_vary_and_are_logged_as_budget(env):
    """The keyed policy's budgets vary with what it sees; each round's tree holds at most the
    chosen budget (fewer only when the proposal has fewer nodes), and the event's budget is it."""
    t = env["target"]
    pol = Recorder(KeyedBudgetPolicy(key="rescue", b0=2.0, b1=0.8, c0=1.0, c1=0.0, threshold=0.01, max_size=63))
    dr = make_drafter("block", t, draft_model=env["head"], branch_k=4)

    class Grab:
        def __init__(self):
            self.budgets = []

        def on_round(self, ev):
            self.budgets.append(ev.budget)

        def on_prompt_end(self, ev):
            pass

    g = Grab()
    budgets = []
    for q in PROMPTS:
        r = decode(t, dr, t.encode(q), budget=63, branch_k=4, max_new_tokens=MAX_NEW, policy=pol, callbacks=[g])
        budgets += [s[2] for s in pol.seen[-r.rounds:]]
    assert len(budgets) == len(g.budgets)
    assert all(b <= c for b, c in zip(g.budgets, budgets))
    assert len(set(budgets)) > 1                     # the policy is not a constant
    ent = [s[0] for s in pol.seen]
    assert np.all(np.isfinite(ent)) and min(ent) >= 0


def test_policy_adds_no_host_device_sync(env, monkeypatch):
    """Count .item/.tolist/.cpu/.numpy/__bool__/__int__/__float__ and cuda.synchronize between
    consecutive rounds (as the logger's zero-sync test does): with a policy every round syncs
    exactly as often as the same decoder's rounds without one."""
    calls = {"n": 0}

    def counting(orig):
        def f(*a, **kw):
            calls["n"] += 1
            return orig(*a, **kw)
        return f

    class Marks:
        def __init__(self):
            self.at = []

        def on_round(self, ev):
            self.at.append(calls["n"])

        def on_prompt_end(self, ev):
            pass

    t = env["target"]
    pr = t.encode(PROMPTS[0])
    dr = make_drafter("block", t, draft_model=env["head"], branch_k=4)
    for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, counting(getattr(torch.Tensor, name)))
    monkeypatch.setattr(torch.cuda, "synchronize", counting(torch.cuda.synchronize))
    # the counter can fail
    torch.ones(1).item()
    assert calls["n"] == 1
    per_round = {}
    for label, kw in (("fixed", {"budget": 15}),
                      ("policy", {"policy": KeyedBudgetPolicy(key="rescue", b0=2.0, b1=0.8, c0=1.0, c1=0.0,
                                                              threshold=0.01, max_size=63)})):
        m = Marks()
        r = decode(t, dr, pr, branch_k=4, max_new_tokens=MAX_NEW, callbacks=[m], **kw)
        assert r.rounds >= 3
        per_round[label] = set(np.diff(m.at).tolist())
    assert per_round["policy"] == per_round["fixed"] and len(per_round["fixed"]) == 1


def test_glance_log_policy_end_to_end(env, tmp_path, capsys):
    import pyarrow.parquet as pq

    from glance_law import read_logs
    from glance_law import schema as S
    from glance_log.cli import main

    pol = KeyedBudgetPolicy(key="rescue", b0=2.0, b1=0.8, c0=1.0, c1=0.0, threshold=0.01, max_size=63)
    pf = tmp_path / "policy.json"
    pf.write_text(json.dumps(policy_to_dict(pol, {"note": "test"})))
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "items.jsonl", "w") as fh:
        for i, c in enumerate(["invoice no 1187 total 42.00", "revenue rising from 10 to 25 million"]):
            fh.write(json.dumps({"id": f"p{i}", "prompt": f"{c}\n{PROMPTS[i]}", "context": c, "reference": c}) + "\n")
    args = ["--task", "docvqa", "--model", str(env["target_path"]), "--data", str(data), "--out",
            str(tmp_path / "logs"), "--max-new-tokens", str(MAX_NEW), "--quiet", "--device", DEVICE,
            "--drafter", "block", "--draft-model", str(env["head"]), "--branch-k", "4", "--n", "2", "--audit"]
    assert main(args + ["--policy", str(pf)]) == 0
    ls = read_logs(str(tmp_path / "logs"))
    f = ls.frame
    assert len(f) > 0 and (f["budget"] <= 63).all()
    part = next((tmp_path / "logs").glob("rounds-*.parquet"))
    run = json.loads(pq.read_schema(part).metadata[S.META_RUN].decode())
    assert run["policy"]["family"] == "keyed" and run["policy"]["params"]["threshold"] == 0.01
    err = capsys.readouterr().err
    assert "0 audit mismatches" in err
    # a bad policy file: one line, exit 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"family": "nope"}')
    assert main(args + ["--policy", str(bad), "--out", str(tmp_path / "logs2")]) == 2
    err = capsys.readouterr().err
    assert "unknown family" in err and len(err.strip().splitlines()) == 1


def test_logged_pred_entropy_is_what_the_live_policy_sees(env, tmp_path):
    """pred_entropy (the row that predicted the root) is the entropy the live policy reads, round
    by round; where the previous round accepted nothing, its verify row 0 predicted this root, so
    pred_entropy equals the previous round's root_entropy."""
    from glance_log.record import RoundLogger

    t = env["target"]
    dr = make_drafter("block", t, draft_model=env["head"], branch_k=4)
    lg = RoundLogger(tmp_path / "logs", run_id="t", task="docvqa", tokenizer=t.tokenizer, drafter="block")
    checked = 0
    for i, q in enumerate(PROMPTS):
        pol = Recorder(KeyedBudgetPolicy(key="rescue", b0=2.0, b1=0.8, c0=1.0, c1=0.0, threshold=0.01, max_size=63))
        lg.begin_prompt(f"p{i}")
        decode(t, dr, t.encode(q), branch_k=4, max_new_tokens=MAX_NEW, policy=pol, callbacks=[lg])
        rows = lg.last_rows
        seen = [s[0] for s in pol.seen]
        assert len(seen) == len(rows)
        assert np.allclose([r["pred_entropy"] for r in rows], seen, rtol=1e-5, atol=1e-6)
        for a, b in zip(rows[:-1], rows[1:]):
            if a["accepted"] == 0:
                assert b["pred_entropy"] == pytest.approx(a["root_entropy"], rel=1e-5, abs=1e-6)
                checked += 1
    lg.close()
    assert checked > 0


@pytest.mark.parametrize("pol", [FixedPolicy(size=0), GatedDepthPolicy(mode="cumprob", threshold=0.5, max_size=6),
                                 FixedPolicy(shape="depth", size=2)], ids=["zero", "gated", "depth2"])
def test_policy_rounds_are_valid_contract_rows(env, tmp_path, pol):
    """Rounds a policy shapes (including shape 0: no draft) are written as valid contract rows."""
    from glance_law import read_logs
    from glance_log.record import RoundLogger

    t = env["target"]
    dr = make_drafter("block", t, draft_model=env["head"], branch_k=4)
    lg = RoundLogger(tmp_path / "logs", run_id="t", task="docvqa", tokenizer=t.tokenizer, drafter="block")
    for i, q in enumerate(PROMPTS):
        lg.begin_prompt(f"p{i}")
        decode(t, dr, t.encode(q), branch_k=4, max_new_tokens=MAX_NEW, policy=pol, callbacks=[lg])
    lg.close()
    f = read_logs(str(tmp_path / "logs")).frame
    assert len(f) > 0
    if pol.shape == "depth":
        assert (f["budget"] <= f["horizon"]).all() and (f["budget"] <= pol.max_size if hasattr(pol, "max_size")
                                                        else f["budget"] <= pol.size).all()
    if isinstance(pol, FixedPolicy) and pol.size == 0:
        assert (f["horizon"] == 0).all() and (f["budget"] == 0).all()


@pytest.mark.parametrize("name", ["block", "pld", "two_model"])
def test_dense_log_replays_the_live_policy_run_exactly(env, tmp_path, name):
    """A dense log (decode(dense=True): autoregressive, the proposal logged at every position) gives the
    live run of any policy round by round: the trajectory replay's positions, shapes and accepted counts
    equal those of decoding live with the policy, and the dense output is the greedy one."""
    from glance_law import read_logs
    from glance_law.policy.trajectory import prepare_dense, simulate
    from glance_log.record import RoundLogger

    t = env["target"]
    dm = {"block": env["head"], "two_model": env["target_path"], "pld": None}[name]
    dr = make_drafter(name, t, draft_model=dm, branch_k=4)
    lg = RoundLogger(tmp_path / "dense", run_id="d", task="docvqa", tokenizer=t.tokenizer, drafter=name,
                     condition="dense")
    prompts = {}
    for i, q in enumerate(PROMPTS):
        pr = t.encode(q)
        prompts[f"p{i}"] = pr
        lg.begin_prompt(f"p{i}")
        r = decode(t, dr, pr, budget=0, branch_k=4, max_new_tokens=MAX_NEW, callbacks=[lg], dense=True)
        assert r.tokens == greedy_reference(t, pr, MAX_NEW)[0]
    lg.close()
    logs = read_logs(str(tmp_path / "dense"))
    assert set(logs.frame["condition"]) == {"dense"} and (logs.frame["accepted"] == 0).all()
    pols = [("depth", FixedPolicy(shape="depth", size=2)), ("budget", FixedPolicy(size=5))]
    if name != "pld":
        pols += [("depth", GatedDepthPolicy(mode="cumprob", threshold=0.3, max_size=6)),
                 ("budget", KeyedBudgetPolicy(key="paper", b0=2.0, b1=0.8, threshold=0.05, max_size=63))]
    for shape, pol in pols:
        d = prepare_dense(logs, shape=shape)
        tr = simulate(d, pol)
        for g, (_, pid) in enumerate(d.keys):
            live = decode(t, dr, prompts[pid], budget=63, branch_k=4, max_new_tokens=MAX_NEW, policy=pol)
            m = tr.prompt == g
            assert tr.position[m].tolist() == live.positions, (name, pol, pid)
            assert tr.accepted[m].tolist() == live.accepted, (name, pol, pid)
    with pytest.raises(ValueError, match="dense"):
        decode(t, dr, prompts["p0"], max_new_tokens=4, dense=True, policy=FixedPolicy(size=1))


def test_glance_log_dense_end_to_end(env, tmp_path, capsys):
    from glance_law import read_logs
    from glance_law.policy.search import prepare_for
    from glance_law.policy.trajectory import DenseData
    from glance_log.cli import main

    args = ["--task", "docvqa", "--model", str(env["target_path"]), "--out", str(tmp_path / "logs"),
            "--max-new-tokens", str(MAX_NEW), "--quiet", "--device", DEVICE, "--drafter", "block",
            "--draft-model", str(env["head"]), "--branch-k", "4", "--n", "2"]
    assert main(args + ["--dense"]) == 0
    f = read_logs(str(tmp_path / "logs")).frame
    assert set(f["condition"]) == {"dense"} and (f["budget"] == 0).all() and (f["horizon"] > 0).all()
    assert isinstance(prepare_for(f, shape="depth"), DenseData)
    assert main(args + ["--dense"]) == 0                      # resumes: nothing logged twice
    assert len(read_logs(str(tmp_path / "logs")).frame) == len(f)
    capsys.readouterr()
    assert main(args + ["--dense", "--temperature", "0.7", "--out", str(tmp_path / "l2")]) == 2
    err = capsys.readouterr().err
    assert "--dense" in err and len(err.strip().splitlines()) == 1
