"""Issue 36.9: ``fit`` and ``reduce`` keep every importer note for per-step imported logs (Spec-Bench
``accept_lengths``, vLLM, SGLang): answers left out, drafts cut short, runs split, pseudo-prompts,
records ignored. ``policy``, ``report`` and the per-turn path kept them; ``fit`` printed only the
notes on runs, ``reduce`` none (they were stored in the reduction and never shown).

Each note the importer makes (``import_logs(...).notes``, the importer's own account of the file)
must appear, whole, in the output of ``fit``, ``fit --engine arrow``, ``reduce`` and ``fit`` on the
reduction ``reduce`` wrote."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from test_importers import prom_scrape
from test_importers_engines import response, sg

from glance_law.data.importers import import_logs

REALDATA = Path(__file__).parent / "data" / "realdata"
EAGLE = REALDATA / "spec_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz"    # a corrupt line
SSD = REALDATA / "llama2-7b-chat-ssd-float16-temperature-0.0.jsonl.gz"                   # runs appended, deeper
VANILLA = REALDATA / "multiclass_product_classification__vicuna-13b-v1.3-vanilla-float16-temp-0.0.jsonl.gz"
SPS = REALDATA / "sentiment_analysis__Qwen2.5-7B-Instruct-sps-68m-float16-temp-0.0.jsonl.gz"


def _main(module: str, args, stdout_only: bool = False) -> tuple[int, str]:
    import importlib
    main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue() + ("" if stdout_only else err.getvalue())


def _engines(tmp_path: Path) -> dict:
    vllm = tmp_path / "vllm.jsonl"
    vllm.write_text(json.dumps(response("r1", 4, [0, 1, 4, 2, 3, 0], [4] * 6)) + "\n"
                    + json.dumps({"id": "r2", "object": "chat.completion", "choices": [{"index": 0}]}) + "\n")
    prom = tmp_path / "metrics.prom"
    prom.write_text(prom_scrape(10, 30, 17, [8, 5, 4]) + "\n" + prom_scrape(14, 42, 29, [12, 9, 8]))
    sgl = tmp_path / "sglang.jsonl"
    settings = {"speculative_num_steps": 3, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}
    sgl.write_text(json.dumps(dict(sg("q", [4, 3, 2, 1], 7), server_info=settings)) + "\n")
    return {"vllm": [vllm], "prom": [prom], "sglang": [sgl]}


CASES = {"spec-bench": [EAGLE, SSD, VANILLA, SPS]}


@pytest.mark.parametrize("name", ["spec-bench", "vllm", "prom", "sglang"])
def test_fit_and_reduce_print_every_importer_note(tmp_path, name):
    paths = CASES.get(name) or _engines(tmp_path)[name]
    notes = list(import_logs(paths, skip_bad=True).notes)
    assert notes, "the fixture makes the importer say something"
    red = tmp_path / "red.parquet"
    runs = {"fit": _main("glance_law.cli.fit", [*paths, "--skip-bad"]),
            "fit --engine arrow": _main("glance_law.cli.fit", [*paths, "--skip-bad", "--engine", "arrow"]),
            "reduce": _main("glance_law.cli.reduce", [*paths, "--skip-bad", "--out", red])}
    runs["fit on the reduction"] = _main("glance_law.cli.fit", [red])
    for what, (rc, text) in runs.items():
        assert rc == 0, (what, text)
        flat = " ".join(text.split())
        missing = [n for n in notes if " ".join(n.split()) not in flat]
        assert not missing, f"{what} dropped {len(missing)} of {len(notes)} importer notes, e.g. {missing[0]!r}"


def test_fit_json_carries_the_notes_in_the_summary(tmp_path):
    notes = list(import_logs([VANILLA]).notes)
    rc, text = _main("glance_law.cli.fit", [VANILLA, EAGLE, "--skip-bad", "--format", "json"], stdout_only=True)
    assert rc == 0
    doc = json.loads(text)
    kept = [n for block in doc["summary"].values() for n in block["notes"]]
    assert all(n in kept for n in notes), (notes, kept)
