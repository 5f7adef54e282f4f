"""Fuzz suite of the input path (issue 26, item 2): every foreign or JSON input goes through
the bounded reader (glance_law.data.inputs). Each case runs the real command in a child with
its address space capped at 1 GB (tests/_fuzz.py) and a timeout, and expects exit 0 with the
right result or exit 2 with one line. A table of classes (bombs, devices, JSON bounds, gzip
damage, counters, policies, Parquet, manifests, metadata, stores, mixed formats, --skip-bad),
plus generated hostile field values (hypothesis) checked in process: a result or one LogError
line, never another exception."""
from __future__ import annotations

import gzip
import json
import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _fuzz import run_cli
from test_importers import answer, prom_scrape, write_jsonl

from glance_law.data import inputs
from glance_law.data.importers import import_logs
from glance_law.data.tables import LogError
from glance_law.errors import GlanceError

MEM = 1024            # every case, the bombs included, stays under 1 GB


def _glance(i: int = 0, **kw) -> dict:
    return {"task": "t", "prompt": f"p{i % 4}", "root_entropy": 0.5 + (i % 3) / 3, "accepted": i % 4,
            "horizon": 4, **kw}


def _glance_file(path, n: int = 40):
    return write_jsonl(path, [_glance(i) for i in range(n)])


def _members(block: bytes, times: int) -> bytes:
    """``times`` gzip members of ``block``: ``block * times`` once decompressed, ~1 KB per MiB."""
    return gzip.compress(block) * times


def ingest(*args, tmp, mem=MEM, timeout=90):
    return run_cli("glance_law.ingest", ["auto", *map(str, args), "--out", str(tmp / "out")], mem_mb=mem,
                   timeout=timeout, cwd=tmp)


# ----------------------------------------------------------------------- bombs and devices

def test_gzip_of_a_gibibyte_of_newlines_around_one_record(tmp_path):
    """A 1 MB .jsonl.gz holding 1 GiB of newlines around one record: a bomb (issue 36.5: every byte read
    counts against the caps, blank lines included), refused in one line after reading the expansion
    cap, not after a pass over the gibibyte; under the cap the record's line number is the file's."""
    f = tmp_path / "bomb.jsonl.gz"
    mib = b"\n" * (1 << 20)
    f.write_bytes(_members(mib, 512) + gzip.compress(json.dumps(_glance(1, accepted=3)).encode() + b"\n")
                  + _members(mib, 512))
    assert f.stat().st_size < 2 << 20
    ingest(f, tmp=tmp_path).expect_refusal("bomb.jsonl.gz", "blank lines included", "GLANCE_MAX_EXPANSION")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*.parquet"))
    ok = tmp_path / "under.jsonl.gz"           # 12 MiB of newlines around it: under the 16 MiB floor, read
    ok.write_bytes(_members(mib, 6) + gzip.compress(json.dumps(_glance(1, accepted=3)).encode() + b"\n")
                   + _members(mib, 6))
    res = ingest(ok, tmp=tmp_path).expect_ok()
    assert "1 rounds" in res.stderr + res.stdout
    bad = tmp_path / "late.jsonl.gz"           # the line number after 8 MiB of newlines is still exact
    bad.write_bytes(_members(mib, 8) + gzip.compress(b'{"task": "t", "accepted": "x", "horizon": 4, "H": 1}\n'))
    ingest(bad, tmp=tmp_path).expect_refusal(f"line {8 * (1 << 20) + 1}", "accepted")


def test_one_gibibyte_line_is_refused(tmp_path):
    """1 GiB in one line of a 1 MB gzip: the expansion cap refuses it first (32x its size); with that
    cap raised, the line cap (64 MiB) does, at line 1 - never a 1 GiB line in memory."""
    f = tmp_path / "line.jsonl.gz"
    f.write_bytes(gzip.compress(b'{"a": "') + _members(b" " * (1 << 20), 1024) + gzip.compress(b'"}\n'))
    ingest(f, tmp=tmp_path).expect_refusal("line.jsonl.gz", "line 1", "GLANCE_MAX_EXPANSION")
    run_cli("glance_law.ingest", ["auto", f, "--out", tmp_path / "o2"], mem_mb=MEM, timeout=90,
            env={"GLANCE_MAX_EXPANSION": "2000"}).expect_refusal("line.jsonl.gz", "line 1", "64 MiB")


def test_gzip_bomb_of_many_short_valid_lines(tmp_path):
    """A 3 MB .jsonl.gz of 512 MiB of short valid records (6 million rounds, gigabytes once
    parsed): refused in one line after reading the expansion cap (32x its size), not expanded; a
    plain file over the total cap (GLANCE_MAX_INPUT_BYTES) too."""
    recs = b"".join(json.dumps(_glance(i)).encode() + b"\n" for i in range(12))
    block = recs * ((1 << 20) // len(recs))                     # about 1 MiB of whole records
    f = tmp_path / "bomb.jsonl.gz"
    f.write_bytes(_members(block, 512))
    assert f.stat().st_size < 4 << 20
    ingest(f, tmp=tmp_path, timeout=60).expect_refusal("bomb.jsonl.gz", "of text", "GLANCE_MAX_EXPANSION")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*.parquet"))
    plain = tmp_path / "big.jsonl"
    plain.write_bytes(block * 3)
    res = run_cli("glance_law.ingest", ["auto", plain, "--out", tmp_path / "o2"], mem_mb=MEM, timeout=60,
                  env={"GLANCE_MAX_INPUT_BYTES": "2M"})
    res.expect_refusal("big.jsonl", "2 MiB of text", "GLANCE_MAX_INPUT_BYTES")


def test_input_caps_in_process(tmp_path, monkeypatch):
    """Under the caps a file reads whole; raising a cap admits it; a bad setting is one line."""
    block = b'{"task": "t", "accepted": 1, "horizon": 4, "root_entropy": 0.5}\n' * 300_000   # 19 MiB, ~1000x
    f = tmp_path / "a.jsonl.gz"
    f.write_bytes(gzip.compress(block, 9))
    with pytest.raises(LogError, match=r"line 2\d{5}: holds more than 16 MiB of text, blank lines included .*GLANCE_MAX_EXPANSION"):
        inputs.read_text(f)
    monkeypatch.setenv("GLANCE_MAX_EXPANSION", "5000")
    assert len(inputs.read_text(f)) == len(block) - 1
    monkeypatch.setenv("GLANCE_MAX_INPUT_BYTES", "1M")
    with pytest.raises(LogError, match="1 MiB of text.*GLANCE_MAX_INPUT_BYTES"):
        inputs.read_text(f)
    monkeypatch.setenv("GLANCE_MAX_INPUT_BYTES", "lots")
    with pytest.raises(GlanceError, match="GLANCE_MAX_INPUT_BYTES='lots' is not a size"):
        inputs.read_text(f)
    monkeypatch.delenv("GLANCE_MAX_INPUT_BYTES")
    assert inputs.input_limit(None) == (inputs.MAX_INPUT_BYTES, "GLANCE_MAX_INPUT_BYTES")


@pytest.mark.parametrize("kind", ["fifo", "devzero"])
def test_pipes_and_devices_refused_up_front(tmp_path, kind):
    f = tmp_path / "pipe.jsonl"
    if kind == "fifo":
        os.mkfifo(f)
    else:
        f.symlink_to("/dev/zero")
    word = "FIFO" if kind == "fifo" else "/dev/zero"
    run_cli("glance_law.fit", [f], mem_mb=MEM, timeout=60).expect_refusal(word, "not a regular file")
    _glance_file(tmp_path / "good.jsonl")
    ingest(tmp_path, tmp=tmp_path).expect_refusal(word)          # inside a folder: said, not skipped silently


def test_logger_inputs_bounded(tmp_path):
    """glance-log's --policy and --data and a model folder's config: /dev/zero, a size of 1e9, deep JSON,
    auto_map null: one line each, before anything loads (deep policy JSON goes through the same
    read_json_document as the manifests below)."""
    pol = tmp_path / "size.json"
    pol.write_text('{"family":"fixed","params":{"size":1000000000}}')
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "gemma3_text", "auto_map": null}')
    q = tmp_path / "q.jsonl"
    q.write_text('{"question_id": 1, "category": "c", "turns": ' + "[" * 5000 + "]" * 5000 + "}\n")
    out = tmp_path / "logs"
    for args, words in (
            (["--policy", "/dev/zero"], ("/dev/zero", "character device")),
            (["--policy", pol], ("size", "0..4096", "1000000000")),
            (["--data", q], ("q.jsonl:1", "nested deeper than 64")),
            (["--model", model], ("auto_map is null",))):
        res = run_cli("glance_log.cli", ["--task", "caption", "--n", "1", "--out", out, *args], mem_mb=MEM,
                      timeout=120, cwd=tmp_path)
        res.expect_refusal(*words)
        assert not out.exists()


# ----------------------------------------------------------------------- JSON and gzip damage

def _corrupt_gzip(raw: bytes) -> bytes:
    return raw[:20] + bytes(b ^ 0x55 for b in raw[20:40]) + raw[40:]


@pytest.mark.parametrize("case", ["deep", "surrogate", "surrogate-bytes", "deflate", "truncated"])
def test_json_and_gzip_damage(tmp_path, case):
    body = "".join(json.dumps(_glance(i)) + "\n" for i in range(200)).encode()
    f = tmp_path / "x.jsonl"
    if case == "deep":
        f.write_bytes(body + b"[" * 100000 + b"]" * 100000 + b"\n")
        words = ("line 201", "nested deeper than 64")
    elif case == "surrogate":
        f.write_bytes(body + b'{"task": "\\ud800", "H": 1, "accepted": 1, "horizon": 2}\n')
        words = ("line 201", "surrogate")
    elif case == "surrogate-bytes":          # CESU-8 bytes of a lone surrogate: not UTF-8
        f.write_bytes(body + b'{"task": "\xed\xa0\x80", "H": 1, "accepted": 1, "horizon": 2}\n')
        words = ("line 201",)
    elif case == "deflate":
        f = tmp_path / "x.jsonl.gz"
        f.write_bytes(_corrupt_gzip(gzip.compress(body)))
        words = ("corrupt",)
    else:
        f = tmp_path / "x.jsonl.gz"
        f.write_bytes(gzip.compress(body)[:-30])
        words = ("truncated",)
    ingest(f, tmp=tmp_path).expect_refusal("x.jsonl", *words)
    if case not in ("deflate", "truncated"):      # a bad line is skipped and listed under --skip-bad
        res = run_cli("glance_law.ingest", ["auto", f, "--out", tmp_path / "o2", "--skip-bad"], mem_mb=MEM,
                      timeout=60).expect_ok()
        assert "skipped corrupt line 201" in res.stderr and "200 rounds" in res.stderr


# ----------------------------------------------------------------------- counters and histograms

@pytest.mark.parametrize("case,words", [
    ("drafts-2e7", ("2e+07 rounds", "2,000,000")),
    ("count-1e12", ("1e+12 rounds",)),
    ("position-1e9", ("line", "position", "1000000000")),
    ("count-inf", ("line", "inf", "finite")),
    ("count-nan", ("line", "nan", "finite")),
    ("count-negative", ("line", "-5", ">= 0")),
])
def test_vllm_counters_bounded(tmp_path, case, words):
    """A 536-byte scrape never expands into one row per counted draft above the stated bound."""
    text = {"drafts-2e7": prom_scrape(2e7, 4e7, 0, [0, 0]),
            "count-1e12": prom_scrape(1e12, 2e12, 0, [0, 0]),
            "position-1e9": prom_scrape(10, 20, 0, [0, 0]).replace('position="1"', 'position="1000000000"'),
            "count-inf": prom_scrape(10, 20, 0, [0, 0]).replace(" 10.0", " inf"),
            "count-nan": prom_scrape(10, 20, 0, [0, 0]).replace(" 10.0", " NaN"),
            "count-negative": prom_scrape(10, 20, 0, [0, 0]).replace(" 20.0", " -5")}[case]
    f = tmp_path / "metrics.prom"
    f.write_text(text)
    assert f.stat().st_size < 1024
    ingest(f, tmp=tmp_path).expect_refusal("metrics.prom", *words)


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_histograms_bounded(tmp_path, fmt):
    if fmt == "vllm":
        rec = {"id": "r", "metrics": {"speculative_decoding": {"num_spec_tokens": 3,
                                                               "acceptance_histogram": {"1000000000": 1}}}}
        big = {"id": "r", "metrics": {"speculative_decoding": {"num_spec_tokens": 3,
                                                               "acceptance_histogram": [0, 1e12, 0, 0]}}}
    else:
        rec = {"meta_info": {"id": "r", "spec_verify_ct": 3, "speculative_num_steps": 3,
                             "spec_correct_drafts_histogram": {"1000000000": 1}}}
        big = {"meta_info": {"id": "r", "spec_verify_ct": 3, "speculative_num_steps": 3,
                             "spec_correct_drafts_histogram": [3000000, 0, 0, 0]}}
    ingest(write_jsonl(tmp_path / "a.jsonl", [rec]), tmp=tmp_path).expect_refusal("line 1", "index", "1000000000")
    ingest(write_jsonl(tmp_path / "b.jsonl", [big]), tmp=tmp_path).expect_refusal("line 1")


# ----------------------------------------------------------------------- Parquet, manifests, metadata, stores

def _logs(tmp_path):
    from glance_law.data.io import write_table
    folder = tmp_path / "logs"
    folder.mkdir()
    rows = [dict(_glance(i), prompt_id=f"p{i % 6}", round=i // 6, drafter="d", run_id="r") for i in range(120)]
    for r in rows:
        r.pop("prompt")
    write_table(rows, folder / "rounds-a.parquet", kind="rounds")
    return folder


def test_duplicate_parquet_columns_every_engine(tmp_path):
    folder = _logs(tmp_path)
    t = pq.read_table(folder / "rounds-a.parquet")
    dup = pa.Table.from_arrays(t.columns + [t.column("accepted")], names=t.column_names + ["accepted"])
    pq.write_table(dup.replace_schema_metadata(t.schema.metadata), folder / "rounds-a.parquet")
    run_cli("glance_law.fit", [folder], mem_mb=MEM).expect_refusal("column 'accepted'", "same name")
    for engine in ("arrow", "duckdb"):
        run_cli("glance_law.reduce", [folder, "--engine", engine, "--out", tmp_path / f"{engine}.parquet"],
                mem_mb=MEM).expect_refusal("column 'accepted'", "same name")


@pytest.mark.parametrize("manifest", ["deep", "fifo", "bad-outputs"])
def test_malformed_previous_manifest(tmp_path, manifest):
    folder = _logs(tmp_path)
    out = tmp_path / "report"
    out.mkdir()
    m = out / "manifest.json"
    if manifest == "deep":
        m.write_text("[" * 100000 + "]" * 100000)
    elif manifest == "fifo":
        os.mkfifo(m)
    else:
        m.write_text(json.dumps({"tool": "glance-law", "outputs": {}, "sections": [{"outputs": [1, None]}]}))
    run_cli("glance_law.report", [folder, "--out", out], mem_mb=MEM, timeout=120).expect_refusal("manifest.json")


@pytest.mark.parametrize("change", ["grid-key", "prompts-1e30"])
def test_reduction_metadata_checked(tmp_path, change):
    folder = _logs(tmp_path)
    red = tmp_path / "red.parquet"
    run_cli("glance_law.reduce", [folder, "--out", red], mem_mb=MEM).expect_ok()
    t = pq.read_table(red)
    md = dict(t.schema.metadata)
    run = json.loads(md[b"glance.run"])
    if change == "grid-key":
        del run["reduction"]["grid"]["lo_exp"]
        word = "grid"
    else:
        run["reduction"]["prompts"] = {"d": {"t": 10 ** 30}}
        word = "prompts"
    md[b"glance.run"] = json.dumps(run).encode()
    pq.write_table(t.replace_schema_metadata(md), red)
    run_cli("glance_law.fit", [red], mem_mb=MEM).expect_refusal(word)


def test_azure_without_credentials(tmp_path):
    env = {k: "" for k in inputs_azure_vars()}
    res = run_cli("glance_law.fit", ["abfs://box@acct.dfs.core.windows.net/logs/"], mem_mb=MEM, env=env)
    res.expect_refusal("abfs://", "no Azure credentials")


def inputs_azure_vars():
    from glance_law.data.uri import AZURE_CREDENTIAL_VARS
    return AZURE_CREDENTIAL_VARS


# ----------------------------------------------------------------------- mixed formats, --skip-bad

def test_mixed_formats_and_skip_bad(tmp_path):
    """Spec-Bench with glance, vLLM and SGLang files in one call; --skip-bad skips every bad file and
    lists it, whatever its failure."""
    sb = write_jsonl(tmp_path / "m-eagle.jsonl", [answer(i, "writing", [3, 2], [3, 1, 2, 6, 1], [6, 7], [0.5, 0.25])
                                                  for i in range(3)])
    g = _glance_file(tmp_path / "g.jsonl")
    v = tmp_path / "v.prom"
    v.write_text(prom_scrape(10, 30, 17, [8, 5, 4]))
    s = write_jsonl(tmp_path / "s.jsonl", [{"meta_info": {"id": "r", "spec_verify_ct": 4, "speculative_num_steps": 3,
                                                          "spec_correct_drafts_histogram": [1, 1, 1, 1]}}])
    res = ingest(sb, g, v, s, tmp=tmp_path).expect_ok()
    assert "spec-bench+glance+vllm+sglang" in res.stdout + res.stderr
    from glance_law.data.io import read_rounds
    r = read_rounds(tmp_path / "out")       # every file's rounds, none lost: 3 x 5 + 40 + 10 + 4
    assert len(r) == 69 and set(r["drafter"]) == {"eagle", "glance", "vllm", "sglang"}
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "deep.jsonl").write_text("[" * 5000 + "]" * 5000 + "\n")
    (bad / "types.jsonl").write_text(json.dumps(_glance(0, accepted=[1])) + "\n")
    (bad / "z.jsonl.gz").write_bytes(_corrupt_gzip(gzip.compress(b"".join(json.dumps(_glance(i)).encode() + b"\n"
                                                                            for i in range(100)))))
    (bad / "c.prom").write_text(prom_scrape(2e7, 4e7, 0, [0, 0]))
    os.mkfifo(bad / "pipe.jsonl")
    _glance_file(bad / "good.jsonl")
    res = run_cli("glance_law.ingest", ["auto", bad, "--out", tmp_path / "o3", "--skip-bad"], mem_mb=MEM).expect_ok()
    out = res.stdout + res.stderr
    for name in ("deep.jsonl", "types.jsonl", "z.jsonl.gz", "c.prom", "pipe.jsonl"):
        assert f"skipped {bad / name}" in out, name
    assert "5 file(s) refused and skipped" in out
    assert len(read_rounds(tmp_path / "o3")) == 40      # good.jsonl's rounds, all of them


# ----------------------------------------------------------------------- generated field values

HOSTILE = ["x", "", [], {}, [1], {"a": 1}, True, None, -1, -7.5, 2.5, 1e300, -1e300, math.inf, -math.inf, math.nan,
           2 ** 70, "1e12", "\u00e9", 10 ** 30]


def _records(fmt: str, field: str, value):
    if fmt == "glance":
        return [_glance(i) for i in range(5)] + [_glance(5, **{field: value})]
    if fmt == "vllm":
        sd = {"num_spec_tokens": 3, "num_spec_steps": 4, "acceptance_histogram": [1, 1, 1, 1],
              "num_draft_tokens": 12}
        rec = {"id": "r", "usage": {"completion_tokens": 10, "prompt_tokens": 5},
               "metrics": {"generation_time_ms": 12.0, "speculative_decoding": sd}}
        (sd if field in sd or field.startswith("per_") else rec["usage"] if field in rec["usage"]
         else rec["metrics"])[field] = value
        if field == "per_step_accepted":
            sd["per_step_drafted"] = [3] * (len(value) if isinstance(value, list) else 1)
        return [rec]
    if fmt == "spec-bench":
        rec = answer(1, "writing", [3, 2], [3, 1, 2, 6, 1], [6, 7], [0.5, 0.25])
        (rec["choices"][0] if field in rec["choices"][0] else rec)[field] = value
        return [answer(2, "math", [2], [2, 4], [6], [0.1]), rec]
    meta = {"id": "r", "spec_verify_ct": 4, "speculative_num_steps": 3, "completion_tokens": 10,
            "spec_correct_drafts_histogram": [1, 1, 1, 1], "e2e_latency": 0.5}
    meta[field] = value
    return [{"meta_info": meta}]


FIELDS = {"glance": ("accepted", "horizon", "root_entropy", "round", "tree_size", "tau", "root_pmax", "task"),
          "vllm": ("num_spec_tokens", "acceptance_histogram", "num_spec_steps", "completion_tokens",
                   "generation_time_ms", "per_step_accepted"),
          "spec-bench": ("accept_lengths", "new_tokens", "wall_time", "decoding_steps", "question_id", "model_id"),
          "sglang": ("spec_verify_ct", "spec_correct_drafts_histogram", "completion_tokens", "e2e_latency",
                     "speculative_num_steps")}


def _one(tmp_path, fmt, field, value):
    f = tmp_path / f"{fmt}-{field}.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in _records(fmt, field, value)))
    try:
        imp = import_logs(f)
    except LogError as exc:
        assert "\n" not in str(exc) and str(f) in str(exc), str(exc)
        assert "cannot be imported (" not in str(exc), str(exc)     # a named check, not the importers' backstop
        return
    t = imp.rounds_table
    if t is not None:          # what was accepted is in range: a result, not a silent corruption
        acc = t.column("accepted").to_pylist()
        hor = t.column("horizon").to_pylist()
        assert all(0 <= a <= h for a, h in zip(acc, hor))


def test_generated_field_values(tmp_path):
    """Every hostile value in every checked field of the three formats: the import succeeds with
    in-range rows or raises one LogError line naming the file - never another exception."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    cases = [(fmt, fld) for fmt, fields in FIELDS.items() for fld in fields]

    @hypothesis.settings(max_examples=150, deadline=None, database=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(st.sampled_from(cases), st.one_of(st.sampled_from(HOSTILE), st.integers(-2 ** 70, 2 ** 70),
                                                        st.floats(), st.text(max_size=8),
                                                        st.lists(st.integers(-3, 10 ** 7), max_size=6)))
    def check(case, value):
        _one(tmp_path, case[0], case[1], value)

    check()
    for (fmt, fld) in cases:           # the table of classes, each field once with each hostile value
        for v in HOSTILE:
            _one(tmp_path, fmt, fld, v)


def test_reader_bounds_in_process(tmp_path):
    """The reader's own contract: blank runs dropped with line numbers kept, depth counted iteratively."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"\n\n  \n" + b'{"a": 1}\n' + b"\n" * 5 + b'{"b": "[[[["}')
    text = inputs.read_text(f)
    assert text.split(b"\n") == [b'{"a": 1}', b'{"b": "[[[["}'] and (text.lineno(1), text.lineno(2)) == (4, 10)
    rng = np.random.default_rng(4)
    lines = [b"\n" * int(rng.integers(0, 3)) + b'{"i": %d}' % i for i in range(40)]
    f.write_bytes(b"\n".join(lines))
    text = inputs.read_text(f)
    assert text.linenos(40) == [text.lineno(i) for i in range(1, 41)]
    assert text.lineno(40) > 40            # blank lines dropped: the numbers shift
    assert inputs.json_depth(b'[{"a": "]]]]"}, [[1]]]') == 3
    with pytest.raises(inputs.JSONLimitError):
        inputs.loads("[" * 65 + "]" * 65)
    assert inputs.loads("[" * 64 + "]" * 64) is not None
