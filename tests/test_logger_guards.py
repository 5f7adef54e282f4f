"""glance-log's guards: argument validation (one line, exit 2), the per-run lock on --out
(concurrent runs neither duplicate nor delete each other's rows), --audit on a folder that
already holds the run, the probe's summary line, --quiet, and no remote code without
--trust-remote-code."""
from __future__ import annotations

import json
import os
import threading

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from _logger_fixtures import PROMPTS, make_llama  # noqa: E402

from glance_law import io as gio  # noqa: E402
from glance_log.cli import main  # noqa: E402

torch.set_num_threads(1)
DEVICE = os.environ.get("GLANCE_TEST_DEVICE", "cpu")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("guards")
    tgt = make_llama(root / "target", seed=0, init=1.0)
    data = root / "data"
    data.mkdir()
    ctxs = ["invoice no 1187 total 42.00 tax 3.15", "revenue rising from 10 to 25 million",
            "a cat sits on a red mat", "annual report 2024 for acme corp"]
    with open(data / "items.jsonl", "w") as fh:
        for i, c in enumerate(ctxs):
            fh.write(json.dumps({"id": f"p{i}", "prompt": f"{c}\n{PROMPTS[i % 3]}", "context": c,
                                 "reference": c}) + "\n")
    return {"root": root, "target": tgt, "data": data}


def _args(env, out, *extra):
    return ["--task", "docvqa", "--model", str(env["target"]), "--data", str(env["data"]), "--out", str(out),
            "--max-new-tokens", "12", "--device", DEVICE, *extra]


@pytest.mark.parametrize("bad, says", [
    (["--n", "-1"], "--n -1"),
    (["--n", "0"], "--n 0"),
    (["--budget", "0"], "--drafter ar"),
    (["--temperature", "-1"], "--temperature -1"),
    (["--temperature", "nan"], "--temperature nan"),
    (["--draft-len", "0"], "--draft-len 0"),
])
def test_bad_arguments_are_one_line_exit_2_and_log_nothing(env, tmp_path, capsys, bad, says):
    out = tmp_path / "logs"
    assert main(_args(env, out, "--drafter", "pld", "--quiet", *bad)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err and "Traceback" not in err
    assert not list(out.glob("*.parquet")) if out.exists() else True


def test_budget_zero_is_fine_for_the_autoregressive_drafter(env, tmp_path, capsys):
    assert main(_args(env, tmp_path / "logs", "--drafter", "ar", "--budget", "0", "--n", "1", "--quiet")) == 0
    r = gio.read_logs(tmp_path / "logs").frame
    assert set(r["drafter"]) == {"ar"} and (r["accepted"] == 0).all()


def test_probe_summary_counts_the_probe(env, tmp_path, capsys):
    """The mismatched probe into a folder that already holds the matched run: the summary says
    how many prompts the probe logged and its tau, not "0 prompts logged ... tau nan"."""
    out = tmp_path / "logs"
    assert main(_args(env, out, "--drafter", "pld", "--n", "3", "--quiet")) == 0
    capsys.readouterr()
    assert main(_args(env, out, "--drafter", "pld", "--n", "3", "--quiet", "--probe", "mismatched")) == 0
    err = capsys.readouterr().err
    p = gio.read_logs(out, kind="prompts").frame
    assert (p["condition"] == "mismatched").sum() == 3
    assert "0 prompts logged (3 already there)" in err
    assert "mismatched probe: 3 prompts" in err and "nan" not in err


def test_quiet_hides_the_model_loading_bar(env, tmp_path, capsys):
    assert main(_args(env, tmp_path / "a", "--drafter", "pld", "--n", "1")) == 0
    loud = capsys.readouterr().err
    assert main(_args(env, tmp_path / "b", "--drafter", "pld", "--n", "1", "--quiet")) == 0
    quiet = capsys.readouterr().err
    assert "Loading" in loud or "%|" in loud            # the bar this test is about does show without --quiet
    assert "Loading" not in quiet and "%|" not in quiet and "prompts 1/1" not in quiet


def test_audit_on_a_folder_that_holds_the_run_unaudited(env, tmp_path, capsys):
    """A run logged without --audit, then rerun with --audit: resume would skip every prompt and
    report "0 audit mismatches"; it must say what to do instead. An audited run reruns fine and
    reports the audit of the prompts already there."""
    out = tmp_path / "logs"
    assert main(_args(env, out, "--drafter", "pld", "--n", "2", "--quiet")) == 0
    capsys.readouterr()
    assert main(_args(env, out, "--drafter", "pld", "--n", "2", "--quiet", "--audit")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "without the audit" in err and "--out" in err
    assert "0 audit mismatches" not in err
    fresh = tmp_path / "fresh"
    assert main(_args(env, fresh, "--drafter", "pld", "--n", "2", "--quiet", "--audit")) == 0
    assert "0 audit mismatches in 2 audited prompts" in capsys.readouterr().err
    assert main(_args(env, fresh, "--drafter", "pld", "--n", "2", "--quiet", "--audit")) == 0
    err = capsys.readouterr().err
    assert "0 prompts logged (2 already there)" in err and "in 2 audited prompts" in err


def test_concurrent_runs_into_one_out_neither_duplicate_nor_delete(env, tmp_path, capsys, monkeypatch):
    """Run A is paused after its first prompt (its rounds may be on disk, its prompt rows not
    yet); run B of the same configuration starts into the same --out. B must neither log A's
    prompts again nor remove A's rows; after both, every prompt is there once, and a rerun
    resumes (nothing left to do)."""
    import glance_log.run as R

    out = tmp_path / "logs"
    real = R.decode
    paused, go = threading.Event(), threading.Event()
    calls = {"a": 0}

    def slow_decode(*a, **kw):
        if threading.current_thread().name == "run-a":
            calls["a"] += 1
            if calls["a"] == 2:
                paused.set()
                go.wait(60)
        return real(*a, **kw)

    monkeypatch.setattr(R, "decode", slow_decode)
    argv = _args(env, out, "--drafter", "pld", "--n", "4", "--quiet")
    rc = {}
    a = threading.Thread(target=lambda: rc.__setitem__("a", main(argv)), name="run-a")
    a.start()
    assert paused.wait(120)
    try:
        rc["b"] = main(argv)                 # while A holds the run
    finally:
        go.set()
        a.join(120)
    err = capsys.readouterr().err
    prompts = gio.read_logs(out, kind="prompts").frame
    rounds = gio.read_logs(out).frame                     # the reader refuses duplicate round keys
    assert sorted(prompts["prompt_id"]) == ["p0", "p1", "p2", "p3"]
    assert not rounds.duplicated(["run_id", "condition", "prompt_id", "round"]).any()
    assert set(rounds["prompt_id"]) == {"p0", "p1", "p2", "p3"}
    assert rc["a"] == 0
    assert rc["b"] == 2 and "another glance-log" in err and "rerun" in err
    monkeypatch.setattr(R, "decode", real)
    assert main(argv) == 0                                # resume after both: nothing to do, lock free again
    assert "0 prompts logged (4 already there)" in capsys.readouterr().err
    assert len(gio.read_logs(out, kind="prompts").frame) == 4


# --------------------------------------------------------------------------- remote code

def _remote_code_folder(src, dst):
    """A copy of a tiny Llama whose config maps to classes in the folder's own Python files
    (what trust_remote_code runs). Importing those files writes a marker next to them."""
    import shutil

    shutil.copytree(src, dst)
    marker = dst / "REMOTE_CODE_RAN"
    code = ("from pathlib import Path\n"
            f"Path({str(marker)!r}).write_text('ran')\n"
            "from transformers import LlamaConfig, LlamaForCausalLM\n\n\n"
            "class RemoteLlamaConfig(LlamaConfig):\n    model_type = 'remote_llama'\n\n\n"
            "class RemoteLlamaForCausalLM(LlamaForCausalLM):\n    config_class = RemoteLlamaConfig\n")
    (dst / "remote_llama.py").write_text(code)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["model_type"] = "remote_llama"
    cfg["architectures"] = ["RemoteLlamaForCausalLM"]
    cfg["auto_map"] = {"AutoConfig": "remote_llama.RemoteLlamaConfig",
                       "AutoModelForCausalLM": "remote_llama.RemoteLlamaForCausalLM"}
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst, marker


@pytest.mark.parametrize("role", ["model", "block", "two_model"])
def test_remote_code_is_refused_without_the_flag(env, tmp_path, capsys, role):
    folder, marker = _remote_code_folder(env["target"], tmp_path / "remote")
    if role == "model":
        argv = ["--task", "docvqa", "--model", str(folder), "--drafter", "pld"]
    else:
        argv = ["--task", "docvqa", "--model", str(env["target"]), "--drafter", role, "--draft-model", str(folder)]
    argv += ["--data", str(env["data"]), "--out", str(tmp_path / "logs"), "--n", "1", "--quiet", "--device", DEVICE]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--trust-remote-code" in err and str(folder) in err
    assert not marker.exists()                                     # nothing from the folder ran
    assert not list((tmp_path / "logs").glob("*.parquet")) if (tmp_path / "logs").exists() else True


def test_remote_code_runs_only_with_the_flag(env, tmp_path, capsys, monkeypatch):
    import transformers.dynamic_module_utils as dmu

    monkeypatch.setattr(dmu, "HF_MODULES_CACHE", str(tmp_path / "hf_modules"))   # keep the copy in tmp
    folder, marker = _remote_code_folder(env["target"], tmp_path / "remote")
    from glance_log.drafters import make_drafter
    from glance_log.models import load_target

    with pytest.raises(Exception, match="--trust-remote-code"):
        load_target(folder, device=DEVICE)
    assert not marker.exists()
    t = load_target(folder, device=DEVICE, trust_remote_code=True)
    assert marker.exists() and type(t.model).__name__ == "RemoteLlamaForCausalLM"
    plain = load_target(env["target"], device=DEVICE)
    with pytest.raises(Exception, match="--trust-remote-code"):
        make_drafter("two_model", plain, draft_model=folder)
    assert make_drafter("two_model", plain, draft_model=folder, trust_remote_code=True).horizon == 5


def test_thread_default_is_one_for_the_embedded_default_only(env, tmp_path, capsys, monkeypatch):
    """benchmarks/bench_threads.py: on this shared 2-core machine one thread is the fastest
    for the embedded default (2 threads: 10 % faster when idle, 5.6x slower with one core busy)."""
    monkeypatch.setenv("GLANCE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GLANCE_MODELS", raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert main(_args(env, tmp_path / "a", "--drafter", "pld", "--n", "1", "--quiet")) == 0
        assert torch.get_num_threads() == 2                        # another --model: torch's choice
        assert main(["--task", "docvqa", "--n", "1", "--max-new-tokens", "4", "--out", str(tmp_path / "b"),
                     "--quiet", "--device", DEVICE]) == 0          # the embedded default
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        assert main(["--task", "docvqa", "--n", "1", "--max-new-tokens", "4", "--out", str(tmp_path / "c"),
                     "--quiet", "--device", DEVICE, "--threads", "0"]) == 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
