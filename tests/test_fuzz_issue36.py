"""Fuzz cases of issue 36 (items 7-12), run the way the issue's reproductions ran them: each is the
real command in a child process with its memory and CPU capped (tests/_fuzz.py), and each must give
the right result, checked against the input (rows lost: 0), or exit 2 with one line. Classes:
``file://`` folder outputs, renamed files (format from the records), question files, importer notes
of per-step imports, ``--horizon`` on the rereads, labels and argument order.

With ``GLANCE_FUZZ_TABLE=FILE`` the run writes the table class, cases, handled, rows lost to FILE."""
from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
from _fuzz import run_cli
from test_importers_engines import response, sg

from glance_law.data.importers import import_logs
from glance_law.io import read_logs, write_table

REALDATA = Path(__file__).parent / "data" / "realdata"
SPEC = REALDATA / "spec_bench__vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl.gz"          # 2381 rounds
MEDUSA = REALDATA / "vicuna-7b-v1.3-medusa.jsonl.gz"                                       # 958 rounds
EAGLE = REALDATA / "spec_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz"    # a corrupt line
MULTI = REALDATA / "multiclass_product_classification__vicuna-13b-v1.3-vanilla-float16-temp-0.0.jsonl.gz"
CPU = 20            # CPU seconds per case for glance-law commands (imports included; inputs under 1 MB)
TABLE: dict = defaultdict(lambda: [0, 0, 0])


@pytest.fixture(scope="module", autouse=True)
def _table():
    yield
    dest = os.environ.get("GLANCE_FUZZ_TABLE")
    if dest and TABLE:
        lines = ["| class | cases | handled | rows lost |", "|---|---|---|---|"]
        lines += [f"| {c} | {n} | {h} | {lost} |" for c, (n, h, lost) in sorted(TABLE.items())]
        Path(dest).write_text("\n".join(lines) + "\n")


def _case(cls: str, res, check=None, *words, rows_expected: int | None = None, rows_got=None, cpu: float = CPU):
    """Run the checks of one case and count it in the table: handled = the right result or one line."""
    TABLE[cls][0] += 1
    res.expect_handled(check, *words).expect_cpu_below(cpu)
    lost = 0
    if rows_expected is not None:
        lost = rows_expected - rows_got(res)
        assert lost == 0, (rows_expected, lost)
    TABLE[cls][1] += 1
    TABLE[cls][2] += lost


def _refused(res) -> None:
    raise AssertionError(f"expected a refusal, got exit 0\n{res.stderr[-800:]}")


def _rounds_in(folder: Path) -> int:
    return len(read_logs([folder]).frame)


def _pooled(res) -> dict:
    doc = json.loads(res.stdout)
    return next(r for t in doc["summary"].values() for r in t["rows"] if r["task"] == "pooled")


# ------------------------------------------------------------------------------- file:// outputs

def test_file_uri_folder_outputs(tmp_path):
    uri = lambda p: "file://" + str(p)                          # noqa: E731
    new = tmp_path / "no" / "such" / "dir"
    res = run_cli("glance_law.ingest", ["auto", SPEC, "--out", uri(new)], cpu_s=CPU)
    _case("file:// folder outputs", res, lambda r: None, rows_expected=2381, rows_got=lambda r: _rounds_in(new))
    assert sorted(p.name.split("-")[0] for p in new.iterdir()) == ["prompts", "rounds"]
    app = tmp_path / "app"
    res = run_cli("glance_law.report", [MEDUSA, "--only", "summary", "--out", uri(app), "--quiet"], cpu_s=CPU)

    def summary_table(r):
        t = pd.read_csv(app / "tables" / "summary_accepted.csv").set_index("task")
        assert t.loc["pooled", "rounds"] == 958 and not (app / ".glance-write.lock").exists()
    _case("file:// folder outputs", res, summary_table)
    if not os.access("/sys", os.W_OK) or not _can_mkdir("/sys"):
        res = run_cli("glance_law.ingest", ["auto", SPEC, "--out", "file:///sys/glance-fuzz/dir"], cpu_s=CPU)
        _case("file:// folder outputs", res, _refused, "/sys")


def _can_mkdir(folder) -> bool:
    try:
        os.mkdir(os.path.join(folder, "glance-probe"))
    except OSError:
        return False
    os.rmdir(os.path.join(folder, "glance-probe"))
    return True


# ------------------------------------------------------------------------------- renamed files

ACC = [[3, 0, 2, 3], [1, 1, 3, 0, 2], [0, 0, 1]]


def _sse(path: Path) -> Path:
    lines = []
    for i, acc in enumerate(ACC):
        last = {**response(f"c{i}", 3, acc, gen_ms=20.0, ttft_ms=5.0), "object": "chat.completion.chunk",
                "choices": []}
        lines += [f"data: {json.dumps(last)}", "", "data: [DONE]", ""]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("case", ["sse-as-txt", "jsonl-as-parquet", "answers-as-txt", "notes-as-txt", "empty-txt"])
def test_renamed_files(tmp_path, case):
    if case == "sse-as-txt":
        f, n = _sse(tmp_path / "capture.txt"), sum(map(len, ACC))
    elif case == "jsonl-as-parquet":
        f, n = tmp_path / "answers.parquet", 958
        shutil.copy(MEDUSA, f)
    elif case == "answers-as-txt":
        f, n = tmp_path / "answers.txt", 958
        shutil.copy(MEDUSA, f)
    else:
        f, n = tmp_path / "x.txt", None
        f.write_text("" if case == "empty-txt" else "my notes, not a log\n")
    res = run_cli("glance_law.fit", [f, "--format", "json"], cpu_s=CPU)
    if n is None:
        _case("renamed files", res, _refused, f.name)
    else:
        _case("renamed files", res, lambda r: None, rows_expected=n, rows_got=lambda r: _pooled(r)["rounds"])


def test_text_renamed_gguf(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_text("hello, this is text\n")
    res = run_cli("glance_log.cli", ["--task", "docvqa", "--model", fake, "--n", "1", "--out", tmp_path / "o"],
                  mem_mb=4096, cpu_s=60, timeout=180, cwd=tmp_path,
                  env={"GLANCE_CACHE": str(tmp_path / "cache")})
    _case("renamed files", res, _refused, "is not a GGUF file", cpu=60)
    assert res.stderr.count(str(fake)) == 1 and not (tmp_path / "cache" / "gguf").exists()


# ------------------------------------------------------------------------------- question files

@pytest.mark.parametrize("text,words", [
    ('{"question_id": 1, "category": "writing", "prompt": "a"}\n', ("q.jsonl:1", "'turns'")),
    ("", ("q.jsonl", "holds no records")),
    ("{oops\n", ("q.jsonl:1", "malformed JSON")),
], ids=["no-turns", "empty", "malformed"])
def test_question_files(tmp_path, text, words):
    q = tmp_path / "q.jsonl"
    q.write_text(text)
    res = run_cli("glance_log.cli", ["--task", "all", "--data", q, "--n", "1", "--out", tmp_path / "o"],
                  mem_mb=4096, cpu_s=60, timeout=180, cwd=tmp_path, env={"GLANCE_CACHE": str(tmp_path / "c")})
    _case("question files", res, _refused, *words, cpu=60)
    assert "unknown task" not in res.stderr and not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------- importer notes

@pytest.mark.parametrize("command", ["fit", "reduce"])
def test_importer_notes_of_per_step_imports(tmp_path, command):
    files = [EAGLE, MULTI]
    imp = import_logs(files, skip_bad=True)
    args = [*files, "--skip-bad"] + (["--out", tmp_path / "r.parquet"] if command == "reduce" else [])
    res = run_cli(f"glance_law.{command}", args, cpu_s=CPU)

    def every_note(r):
        flat = " ".join((r.stdout + r.stderr).split())
        missing = [n for n in imp.notes if " ".join(n.split()) not in flat]
        assert not missing, missing
    # the answers: the rounds shown plus those of the answers named as left out are the file's
    _case("importer notes", res, every_note)
    text = res.stdout + res.stderr
    assert "skipped corrupt line 4" in text and "left out: question_id 4" in text


# ------------------------------------------------------------------------------- --horizon rereads

def _tree(tmp_path: Path) -> tuple[Path, Path]:
    cap = tmp_path / "sglang-tree.jsonl"
    cap.write_text("".join(json.dumps(sg(f"q{i}", [4 + i, 3, 2, 1], 7)) + "\n" for i in range(6)))
    base = pd.DataFrame({"run_id": "base", "prompt_id": [f"q{i}" for i in range(6)], "task": "unknown",
                         "drafter": "ar", "new_tokens": 20, "decode_ms": 600.0, "prompt_tokens": 9, "rounds": 20})
    write_table(base, tmp_path / "base" / "prompts-base.parquet", kind="prompts")
    return cap, tmp_path / "base"


def test_horizon_on_rereads(tmp_path):
    cap, base = _tree(tmp_path)
    n = sum(4 + i + 6 for i in range(6))
    res = run_cli("glance_law.fit", [cap, "--horizon", "3", "--timing", base, "--format", "json",
                                     "--timing-bootstrap", "50"], cpu_s=CPU)

    def ledger(r):
        doc = json.loads(r.stdout)
        rows = [x for t in doc["timing"].values() for x in t["rows"]]
        assert rows and rows[0]["prompts"] == 6
    _case("--horizon rereads", res, ledger, rows_expected=n, rows_got=lambda r: _pooled(r)["rounds"])
    app = tmp_path / "app"
    res = run_cli("glance_law.report", [cap, "--horizon", "3", "--only", "summary", "--out", app], cpu_s=CPU)
    _case("--horizon rereads", res, lambda r: None, rows_expected=n,
          rows_got=lambda r: int(pd.read_csv(app / "tables" / "summary_accepted.csv").set_index("task")
                                 .loc["pooled", "rounds"]))


# ------------------------------------------------------------------------------- labels, argument order

def test_labels_and_argument_order(tmp_path):
    res = run_cli("glance_law.fit", [SPEC], cpu_s=CPU)

    def steps_title(r):
        assert "from per-step lengths" in r.stdout and "from per-turn counts" not in r.stdout
    _case("labels", res, steps_title)
    fold = tmp_path / "answers"
    fold.mkdir()
    for f in (EAGLE, SPEC):
        shutil.copy(f, fold / f.name)
    res = run_cli("glance_law.fit", [fold, "--skip-bad"], cpu_s=CPU)

    def suggests_timing(r):
        assert f"its file: {SPEC.name}): add --timing BASELINE" in r.stdout.strip().splitlines()[-1]
    _case("labels", res, suggests_timing)
    res = run_cli("glance_law.fit", [MEDUSA, "--horizon", "sps=21", EAGLE, "--skip-bad", "--format", "json"],
                  cpu_s=CPU)          # an input after an option is an input: both drafters' rounds
    _case("labels", res, lambda r: None, rows_expected=958 + 658,
          rows_got=lambda r: sum(x["rounds"] for t in json.loads(r.stdout)["summary"].values() for x in t["rows"]
                                 if x["task"] == "pooled"))
