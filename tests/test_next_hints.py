"""Issue 24: every "Next:" suggestion of ``python -m glance_law.fit`` works on the input it was
printed for. The closing line is parsed (the flags of "add --a, --b or --c", and every spelled-out
``python -m glance_law.fit ...`` command, its placeholders filled with real paths) and each
suggestion is run: it must exit 0 (not exit 2 with a refusal), on a single-task and a multi-task
real file, with ``--by none``, on reductions with and without root entropy, on an autoregressive
baseline alone and on per-turn (idxs) answers."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_per_turn import per_turn_file, raw_records

from glance_law.cli import fit
from glance_law.cli import reduce as reduce_cli

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT.parent / "shared" / "realdata" / "spec-bench" / "bnukh"
ONE_TASK = REAL / "test_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz"      # task 'writing' only
MANY_TASKS = REAL / "mt_bench__vicuna-7b-v1.3-medusa-float16-temperature-0.0.jsonl.gz"
VANILLA = REAL / "test_bench__vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl.gz"
MEDUSA = REAL / "test_bench__vicuna-7b-v1.3-medusa-float16-temperature-0.0.jsonl.gz"
needs_real = pytest.mark.skipif(not ONE_TASK.exists(), reason="../shared/realdata not present")
#: Cheap settings of the suggested sections (the suggestion, not its default cost, is under test).
CHEAP = {"--tail": ["--tail-bootstrap", "0"], "--order": ["--order-bootstrap", "20"],
         "--timing": ["--timing-bootstrap", "20"]}
FLAG = re.compile(r"--[a-z][a-z-]*[a-z]")
COMMAND = re.compile(r"python -m glance_law\.fit ([^();]+)")


def next_line(argv: list[str], capsys) -> str:
    assert fit.main(argv) == 0
    out = capsys.readouterr().out
    line = [x for x in out.splitlines() if x.startswith("Next:")]
    assert len(line) == 1, out[-800:]
    return line[0]


def suggestions(line: str, argv: list[str], fill: dict[str, str]) -> list[list[str]]:
    """The commands a closing line suggests, as fit argv lists: each flag of an "add ..." clause
    appended to ``argv``; each spelled-out command with its placeholders (upper-case words) filled."""
    out = []
    for clause in line[len("Next:"):].split(";"):
        cmd = COMMAND.search(clause)
        if cmd:
            words = cmd.group(1).strip().rstrip(".").split()
            assert all(w in fill or not w.isupper() for w in words), (w for w in words)
            out.append([x for w in words for x in fill.get(w, w).split("\0")])
        elif clause.strip().startswith("add "):
            out += [argv + [f] for f in FLAG.findall(clause)]
    return out


def run_all(line: str, argv: list[str], fill: dict[str, str], capsys) -> int:
    cmds = suggestions(line, argv, fill)
    for cmd in cmds:
        extra = [x for f, opts in CHEAP.items() if f in cmd for x in opts]
        rc = fit.main(cmd + extra + ["--format", "json"])
        out, err = capsys.readouterr()
        assert rc == 0, (line, cmd, err[-600:])
        json.loads(out)
    return len(cmds)


@needs_real
@pytest.mark.parametrize("argv", [[str(ONE_TASK)], [str(MANY_TASKS)], [str(MANY_TASKS), "--by", "none"]],
                         ids=["one-task", "many-tasks", "by-none"])
def test_every_suggestion_on_round_logs_runs(argv, capsys):
    line = next_line(argv, capsys)
    assert run_all(line, argv, {}, capsys) >= 1
    if len(argv) > 1 or argv[0] == str(ONE_TASK):       # one task, or --by none: nothing to order
        assert "--order" not in line


@needs_real
def test_a_reduction_without_entropy_points_at_its_round_logs(tmp_path, capsys):
    red = tmp_path / "r.parquet"
    assert reduce_cli.main([str(ONE_TASK), "--out", str(red)]) == 0
    line = next_line([str(red)], capsys)
    assert "--tail" not in line.split("(")[0] and "ROUND_LOGS" in line      # refused on the reduction itself
    assert run_all(line, [str(red)], {"ROUND_LOGS": str(ONE_TASK)}, capsys) == 1


def test_a_reduction_with_entropy_suggests_its_tail(tmp_path, capsys):
    red = tmp_path / "r.parquet"
    assert reduce_cli.main([str(ROOT / "data" / "logs"), "--out", str(red)]) == 0
    capsys.readouterr()
    line = next_line([str(red)], capsys)
    assert run_all(line, [str(red)], {}, capsys) == 1
    assert fit.main([str(red), "--order"]) == 2          # what the line does not suggest is refused
    capsys.readouterr()


@needs_real
def test_a_baseline_alone_suggests_pairing_it(capsys):
    line = next_line([str(VANILLA)], capsys)
    assert run_all(line, [str(VANILLA)], {"SPECULATIVE_PATHS": str(ONE_TASK), "THESE_PATHS": str(VANILLA)},
                   capsys) == 1


@needs_real
def test_per_turn_answers_suggest_the_timing_ledger(tmp_path, capsys):
    f = per_turn_file(raw_records(MEDUSA), tmp_path / "medusa.jsonl")
    line = next_line([str(f)], capsys)
    cmds = suggestions(line, [str(f)], {})
    assert cmds == []          # the per-turn line names --timing BASELINE_GLOB inside a sentence, not an "add"
    assert "--timing BASELINE_GLOB" in line
    rc = fit.main([str(f), "--timing", str(VANILLA), "--timing-bootstrap", "20", "--format", "json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert fit.json_rows(json.loads(out), "timing")
