"""Issue 24, item 5: on every real Spec-Bench file, the per-group tau of every path a user runs
(``python -m glance_law.fit``'s column projection, ``python -m glance_law.reduce`` and the fit of
that reduction) equals Spec-Bench's own mean accepted tokens per step, re-derived here from the
raw JSON: the mean of ``accept_lengths`` over every step (the last step of a turn too, also when
it accepted nothing), per ``category`` and pooled."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

from glance_law.cli import fit as fit_cli
from glance_law.data.io import LogError
from glance_law.evidence.summary import group_summary
from glance_law.scale.engines import reduce_logs

REAL = Path(__file__).resolve().parent.parent.parent / "shared" / "realdata" / "spec-bench"
FILES = sorted(p for p in REAL.glob("*/*.jsonl.gz") if "question" not in p.name) if REAL.exists() else []
SPECULATIVE = [p for p in FILES if "vanilla" not in p.name and "eagle3" not in p.name]
pytestmark = pytest.mark.skipif(not FILES, reason="../shared/realdata not present")


def raw_steps(path: Path) -> dict[str, list[int]]:
    """category -> every accept_lengths value of the file, as Spec-Bench averages them: corrupt
    lines skipped, and turns whose text is "ERROR" left out (eval.py logs the previous turn's
    numbers again there)."""
    out: dict[str, list[int]] = defaultdict(list)
    with gzip.open(path, "rt") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            for ch in rec["choices"]:
                al, ds, turns = list(ch.get("accept_lengths") or []), list(ch.get("decoding_steps") or []), ch["turns"]
                if sum(ds) == len(al) and len(turns) == len(ds):
                    k = 0
                    for text, d in zip(turns, ds):
                        if text.strip() != "ERROR":
                            out[rec["category"]] += al[k:k + d]
                        k += d
                else:
                    out[rec["category"]] += al
    return out


def check(per_task: dict[str, float], rounds: dict[str, int], raw: dict[str, list[int]]) -> None:
    every = [v for vs in raw.values() for v in vs]
    for task, vals in raw.items():
        assert rounds[task] == len(vals), task
        assert per_task[task] == pytest.approx(sum(vals) / len(vals), rel=1e-9), task
    assert rounds["pooled"] == len(every)
    assert per_task["pooled"] == pytest.approx(sum(every) / len(every), rel=1e-9)


@pytest.mark.parametrize("path", SPECULATIVE, ids=lambda p: f"{p.parent.name}/{p.name[:48]}")
def test_fit_cli_summary_tau_is_spec_benchs_own_mean(path):
    """The rounds as ``python -m glance_law.fit`` reads them (only the columns it asks for)."""
    args, mods = fit_cli.parse_args([str(path), "--skip-bad"])
    s = group_summary(fit_cli.load(args, [m for _, m in mods]), by=args.by).to_frame().set_index("task")
    check(s["tau"].to_dict(), s["rounds"].to_dict(), raw_steps(path))


@pytest.mark.parametrize("path", SPECULATIVE, ids=lambda p: f"{p.parent.name}/{p.name[:48]}")
def test_reduction_tau_is_spec_benchs_own_mean(path, tmp_path):
    red = reduce_logs([str(path)], skip_bad=True)
    f = red.to_frame().set_index("task")
    n = f["rounds"].to_dict()
    tau = f["tau"].to_dict()
    n["pooled"] = int(f["rounds"].sum())
    tau["pooled"] = float((f["tau"] * f["rounds"]).sum() / f["rounds"].sum())
    check(tau, n, raw_steps(path))


def test_a_reduction_of_answers_fits_to_its_table_and_says_why_no_law(tmp_path, capsys):
    """``reduce`` then ``fit``: the reduced table (tau per group) and one line on the law, exit 0."""
    path = next(p for p in SPECULATIVE if "spec_bench__vicuna-7b-v1.3-eagle" in p.name)
    out = tmp_path / "red.parquet"
    from glance_law.cli import reduce as reduce_cli
    assert reduce_cli.main([str(path), "--skip-bad", "--out", str(out)]) == 0
    capsys.readouterr()
    assert fit_cli.main([str(out)]) == 0
    text, err = capsys.readouterr()
    assert "not run: law needs column 'root_entropy'" in err
    raw = raw_steps(path)
    coding = raw["coding"]
    assert f"{sum(coding) / len(coding) - 1:.3f}" in text
    assert "output-ending round(s) that accepted 0" in text
    assert fit_cli.main([str(out), "--tail"]) == 2          # a section that needs entropy: one line
    assert "needs root_entropy" in capsys.readouterr().err


def test_a_file_with_empty_accept_lengths_is_refused_in_one_line():
    path = next((p for p in FILES if "eagle3" in p.name), None)
    if path is None:
        pytest.skip("no eagle3 file")
    with pytest.raises(LogError, match="no usable answers"):
        fit_cli.load(fit_cli.parse_args([str(path)])[0])


@pytest.mark.parametrize("cli", ["policy", "reduce"])
def test_per_turn_answers_are_refused_naming_what_they_are_and_allow(cli, tmp_path, capsys):
    """EAGLE/Medusa repositories' own answers (per-turn idxs, no per-step lengths), built from a
    real file's turns: the per-step commands refuse in one line that says what the input is and
    what it allows (fit and report compute that: tests/test_per_turn.py)."""
    import importlib
    src = next(p for p in SPECULATIVE if "mt_bench__vicuna-7b-v1.3-medusa" in p.name)
    recs = []
    with gzip.open(src, "rt") as fh:
        for line in list(fh)[:5]:
            r = json.loads(line)
            c = r["choices"][0]
            recs.append({"question_id": r["question_id"], "model_id": "llama-2-chat-70b-fp16-ea-in-temperature-0.0",
                         "choices": [{"index": 0, "turns": c["turns"], "idxs": [d - 1 for d in c["decoding_steps"]],
                                      "new_tokens": c["new_tokens"], "wall_time": c["wall_time"]}]})
    f = tmp_path / "ea.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    extra = {"report": ["--out", str(tmp_path / "rep")], "policy": ["--budget", "3"],
             "reduce": ["--out", str(tmp_path / "r.parquet")]}.get(cli, [])
    mod = importlib.import_module("glance_law.policy.cli" if cli == "policy" else f"glance_law.{cli}")
    assert mod.main([str(f), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "prompt-level rows only" in err and "idxs" in err
    assert "new_tokens / rounds" in err and "accept_lengths" in err


def test_horizon_is_declared_on_every_command_that_imports(tmp_path, capsys):
    """``--horizon`` on fit, reduce and policy (report shares fit's reader): the imported rounds
    take the declared L, and the per-group horizon says so."""
    path = next(p for p in SPECULATIVE if "test_bench__vicuna-7b-v1.3-eagle" in p.name)
    raw = [v for vs in raw_steps(path).values() for v in vs]
    L = max(raw) + 1                                  # deeper than any accepted run: valid for the data
    args, mods = fit_cli.parse_args([str(path), "--horizon", f"eagle={L}"])
    s = group_summary(fit_cli.load(args, [m for _, m in mods])).to_frame().set_index("task").loc["pooled"]
    assert s["horizon"] == L and s["p_full"] == 0.0 and s["rounds"] == len(raw)
    from glance_law.cli import reduce as reduce_cli
    assert reduce_cli.main([str(path), "--horizon", f"eagle={L}", "--out", str(tmp_path / "r.parquet")]) == 0
    assert f"horizon {L} from --horizon" in " ".join(reduce_logs([str(tmp_path / "r.parquet")]).info["imported"])
    from glance_law.policy import cli as policy_cli
    assert policy_cli.main([str(path), "--horizon", f"eagle={max(raw) - 2}", "--budget", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "more than the horizon" in err      # the data contradict a declared L


def test_by_none_gives_one_pooled_tail_row():
    """``--by none --tail``: one pooled row over every round (not one per task)."""
    from glance_law.tail.report import cli_section
    path = next(p for p in SPECULATIVE if "mt_bench__vicuna-7b-v1.3-medusa" in p.name)
    args, mods = fit_cli.parse_args([str(path), "--by", "none", "--tail", "--tail-bootstrap", "0"])
    table = cli_section(fit_cli.load(args, [m for _, m in mods]), args)[0].to_frame()
    assert len(raw_steps(path)) > 1                       # several tasks in the file
    args_t, _ = fit_cli.parse_args([str(path), "--tail", "--tail-bootstrap", "0"])
    per_task = cli_section(fit_cli.load(args_t, [m for _, m in mods]), args_t)[0].to_frame()
    assert len(per_task) > 1 and len(table) == 1 and table["task"].iloc[0] == "pooled"
    assert table["floor_rounds"].iloc[0] == per_task["floor_rounds"].sum()   # every task's rounds in one row
