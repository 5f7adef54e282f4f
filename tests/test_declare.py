"""Issue 24, item 6: ``--chain`` and ``--horizon`` declare what the method table cannot know, on
fit, report, reduce and policy alike: applied when the logs are read, recorded in the notes
("declared by --chain"), refused in one line when the logs contradict them."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from glance_law.cli import fit as fit_cli
from glance_law.data.declare import declare_chain
from glance_law.errors import GlanceError
from glance_law.simulate import simulate_rounds

REAL = Path(__file__).resolve().parent.parent.parent / "shared" / "realdata" / "spec-bench" / "bnukh"
EAGLE = REAL / "test_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz"
needs_real = pytest.mark.skipif(not EAGLE.exists(), reason="../shared/realdata not present")


@pytest.mark.parametrize("cli", ["fit", "report", "reduce", "policy"])
def test_every_reading_command_takes_both_declarations(cli):
    import importlib
    mod = importlib.import_module("glance_law.policy.cli" if cli == "policy" else f"glance_law.cli.{cli}")
    flags = {s for a in mod.build_parser()._actions for s in a.option_strings}
    assert {"--horizon", "--chain"} <= flags


def test_declare_chain_sets_the_budget_of_the_named_drafters_only():
    f = simulate_rounds(n_prompts=3, rounds_per_prompt=(4, 6), vectors=False, seed=0)
    f = f.drop(columns=[c for c in ("budget",) if c in f.columns])
    f["drafter"] = np.where(np.arange(len(f)) % 2 == 0, "eagle2", "medusa")
    out, notes = declare_chain(f, ("eagle2",))
    e = out["drafter"] == "eagle2"
    assert (out.loc[e, "budget"] == out.loc[e, "horizon"]).all() and out.loc[~e, "budget"].isna().all()
    assert notes and notes[0].startswith("declared by --chain: eagle2") and f"{int(e.sum())} round(s)" in notes[0]
    with pytest.raises(GlanceError, match="no drafter of that name.*eagle2, medusa"):
        declare_chain(f, ("eagle3",))
    tree = f.assign(budget=f["horizon"] * 3)
    with pytest.raises(GlanceError, match="record a tree"):
        declare_chain(tree, ("medusa",))


@needs_real
def test_chain_lets_the_per_offset_analysis_run_on_an_imported_chain(capsys):
    """Without --chain the EAGLE answers' hazards are not made (the method table calls it a tree)
    and the note names --chain; with it they are, equal to the counts of the imported rounds."""
    assert fit_cli.main([str(EAGLE), "--offsets", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not any("Conditional hazard" in t for t in doc["offsets"])
    assert "--chain DRAFTER" in json.dumps(doc["offsets"])
    argv = [str(EAGLE), "--offsets", "--chain", "eagle", "--horizon", "eagle=6", "--by", "none"]
    assert fit_cli.main([*argv, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    haz = next(v for t, v in doc["offsets"].items() if "Conditional hazard" in t)["rows"]
    assert "declared by --chain: eagle" in " ".join(next(iter(doc["summary"].values()))["notes"])
    args, mods = fit_cli.parse_args(argv)
    r = fit_cli.load(args, [m for _, m in mods]).frame
    r = r[r["horizon"] > 0]
    a, L = r["accepted"].to_numpy(), r["horizon"].to_numpy()
    first = next(h for h in haz if h["offset"] == 1)
    assert first["at_risk"] == len(a) and first["hazard"] == pytest.approx((a >= 1).mean(), abs=1e-12)
    second = next(h for h in haz if h["offset"] == 2)
    risk = (a >= 1) & (L >= 2)          # offset 2 is unknown in a round cut at horizon 1
    assert second["at_risk"] == int(risk.sum())
    assert second["hazard"] == pytest.approx((risk & (a >= 2)).sum() / risk.sum(), abs=1e-12)


@needs_real
def test_reduce_records_the_declaration_and_policy_reads_it(tmp_path, capsys):
    from glance_law.cli import reduce as reduce_cli
    from glance_law.scale.engines import reduce_logs
    out = tmp_path / "r.parquet"
    assert reduce_cli.main([str(EAGLE), "--chain", "--out", str(out)]) == 0
    assert "declared by --chain: eagle" in " ".join(reduce_logs([str(out)]).notes)
    assert reduce_cli.main([str(EAGLE), "--chain", "medusa", "--out", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--chain medusa: no drafter of that name" in err
    from glance_law.policy import cli as policy_cli
    assert policy_cli.main([str(EAGLE), "--chain", "medusa", "--budget", "3"]) == 2
    assert "--chain medusa" in capsys.readouterr().err
