"""python -m glance_law.report: every section from rich simulated logs, skipped sections named with the
logger flag, determinism, the index and manifest, --only carry-over, errors, the analyses scripts, and
the committed example appendix (regenerated and compared byte for byte)."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _evidence_fixtures import EXAMPLE_TASKS, example_logs

from glance_law import appendix as A
from glance_law.cli import report
from glance_law.io import write_table
from glance_law.schema import SUPPLIED_BY
from glance_law.simulate import simulate_tree_rounds

ROOT = Path(__file__).resolve().parent.parent
FAST = ["--tail-bootstrap", "19", "--bootstrap", "200", "--timing-bootstrap", "400", "--width-bootstrap", "10"]


@pytest.fixture(scope="module")
def rich(tmp_path_factory) -> Path:
    """glance-log-shaped logs with every input: a block arm (rounds + audited prompts), a mismatched
    probe, an autoregressive baseline (rounds + prompts) and a second drafter with top-k marginals."""
    folder = tmp_path_factory.mktemp("rich")
    example_logs(folder, n_prompts=8, rounds=12)
    t = simulate_tree_rounds(list(EXAMPLE_TASKS), n_prompts=8, rounds_per_prompt=12, horizon=8, k=4, budget=31,
                             seed=3, run_id="tree", drafter="tree")
    write_table(t, folder / "rounds-tree.parquet", kind="rounds")
    return folder


@pytest.fixture(scope="module")
def rich_report(rich, tmp_path_factory):
    out = tmp_path_factory.mktemp("appendix") / "app"
    rc = report.main([str(rich), "--out", str(out), "--quiet", "--vocab-size", "32000", "--jobs", "2", *FAST])
    assert rc == 0
    return out


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_every_section_runs_on_complete_logs(rich_report):
    m = _manifest(rich_report)
    status = {e["name"]: (e["status"], e["reason"]) for e in m["sections"]}
    assert list(status) == A.names()
    assert all(s == "ok" for s, _ in status.values()), status
    # tables in three formats, figures in two, all listed with their hashes
    for e in m["sections"]:
        assert e["outputs"], e["name"]
        for art in e["artifacts"]:
            exts = ("md", "tex", "csv") if art["kind"] == "table" else ("png", "pdf")
            for ext in exts:
                rel = f"{'tables' if art['kind'] == 'table' else 'figures'}/{art['stem']}.{ext}"
                assert rel in e["outputs"]
                data = (rich_report / rel).read_bytes()
                assert data and hashlib.sha256(data).hexdigest() == m["outputs"][rel]
    # two drafters: one figure per drafter, and the law table keyed by drafter
    figs = {a["stem"] for e in m["sections"] for a in e["artifacts"] if a["kind"] == "figure"}
    assert {"figure3a_decile_curves-block", "figure3a_decile_curves-tree", "figure4_brackets-tree",
            "figure8_law_fits-block", "figure5_width_pareto", "figure_survival"} <= figs
    law_md = (rich_report / "tables/table12_law.md").read_text()
    assert "| drafter | task |" in law_md and "| tree | docvqa |" in law_md
    # grounding order, pooled last, per drafter
    rows = re.findall(r"^\| block \| (\w+) \|", law_md, re.M)
    assert rows == ["caption", "textvqa", "docvqa", "pooled"]


def test_tables_are_booktabs_latex_and_flat_csv(rich_report):
    tex = (rich_report / "tables/prop3_tail.tex").read_text()
    for tag in (r"\begin{tabular}", r"\toprule", r"\midrule", r"\bottomrule", r"\end{tabular}"):
        assert tag in tex
    assert "% note:" in tex
    csv = (rich_report / "tables/table12_law.csv").read_text().splitlines()
    assert csv[0].split(",")[:6] == ["drafter", "task", "rounds", "prompts", "b0", "b0_lo"]


def test_index_links_every_output_and_names_the_inputs(rich_report, rich):
    index = (rich_report / "index.md").read_text()
    m = _manifest(rich_report)
    links = set(re.findall(r"\]\(([^)#]+)\)", index))
    assert set(m["outputs"]) | {"manifest.json"} <= links
    assert all((rich_report / rel).exists() for rel in links)
    assert "--out DIR" in index and str(rich_report) not in index
    files = {Path(f["path"]).name: f for f in m["inputs"]}
    assert {"rounds-block.parquet", "prompts-block.parquet", "rounds-ar.parquet", "prompts-ar.parquet",
            "rounds-tree.parquet", "rounds-probe.parquet"} == set(files)
    for f in m["inputs"]:
        assert f["sha256"] == hashlib.sha256(Path(f["path"]).read_bytes()).hexdigest()
        assert f["rows"] > 0
    assert m["seed"] == 0 and m["options"]["tail_boot"] == 19
    assert {"numpy", "scipy", "pandas", "matplotlib", "glance-law", "python"} <= set(m["libraries"])
    assert m["command"].startswith("python -m glance_law.report ")
    # Figure 4's caption counts the decile means outside each bracket (none is claimed inside)
    cap = re.search(r"\*Task-level law fits \(tree\) drawn against[^*]*\*", index).group(0)
    total, below, above = (int(x) for x in re.search(
        r"of (\d+) decile means, (\d+) lie below the lower bracket and (\d+) above", cap).groups())
    assert total == 10 * len(EXAMPLE_TASKS) and below + above <= total and "inside" not in cap


def test_same_logs_and_seed_give_identical_bytes(rich, rich_report, tmp_path):
    """Rerun in this process with one job (the fixture ran the tail in a worker process): same bytes."""
    only = "law,decile-curves,tail,survival,width,probe,ordering,timing"
    out = tmp_path / "again"
    assert report.main([str(rich), "--out", str(out), "--quiet", "--vocab-size", "32000", "--only", only,
                        "--jobs", "1", *FAST]) == 0
    m = _manifest(out)
    ref = _manifest(rich_report)["outputs"]
    assert m["outputs"] and all(ref[rel] == h for rel, h in m["outputs"].items())
    # another seed moves the bootstrap numbers (and only those)
    out2 = tmp_path / "seed1"
    assert report.main([str(rich), "--out", str(out2), "--quiet", "--only", "tail,law", "--seed", "1",
                        *FAST]) == 0
    m2 = _manifest(out2)["outputs"]
    assert m2["tables/table12_law.md"] == ref["tables/table12_law.md"]          # no bootstrap in the law
    assert m2["tables/prop3_tail.md"] != ref["tables/prop3_tail.md"]            # the LRT bootstrap moved


def test_missing_inputs_are_skipped_with_the_logger_flag(tmp_path):
    src = ROOT / "data" / "example"
    out = tmp_path / "app"
    rc = report.main([str(src), "--out", str(out), "--quiet", "--only", "law,width,probe,audit,timing,"
                      "transfer-drafters,fano"])
    assert rc == 0
    m = _manifest(out)
    st = {e["name"]: e for e in m["sections"]}
    assert st["law"]["status"] == "ok"
    expect = {"width": SUPPLIED_BY["topk_logq"], "probe": SUPPLIED_BY["condition=mismatched"],
              "audit": SUPPLIED_BY["greedy_match"], "timing": SUPPLIED_BY["drafter=ar"],
              "transfer-drafters": "glance-log --drafter", "fano": "--vocab-size"}
    index = (out / "index.md").read_text()
    for name, flag in expect.items():
        assert st[name]["status"] == "skipped" and flag in st[name]["reason"], st[name]
        assert st[name]["outputs"] == []
        assert f"**{name}**" in index and flag in index


def test_only_keeps_sections_of_the_same_inputs_and_removes_stale_ones(rich, tmp_path):
    out = tmp_path / "app"
    assert report.main([str(ROOT / "data" / "example"), "--out", str(out), "--quiet", "--only", "law"]) == 0
    assert report.main([str(ROOT / "data" / "example"), "--out", str(out), "--quiet", "--only",
                        "decile-curves"]) == 0
    names = [e["name"] for e in _manifest(out)["sections"]]
    assert names == ["law", "decile-curves"]
    assert (out / "tables/table12_law.md").exists() and (out / "figures/figure3a_decile_curves.png").exists()
    # other logs: the law table made from data/example is stale and goes
    assert report.main([str(rich), "--out", str(out), "--quiet", "--only", "decile-curves"]) == 0
    assert [e["name"] for e in _manifest(out)["sections"]] == ["decile-curves"]
    assert not (out / "tables/table12_law.md").exists()
    assert not (out / "figures/figure3a_decile_curves.png").exists()        # now one figure per drafter
    assert (out / "figures/figure3a_decile_curves-block.png").exists()


def test_a_failing_section_is_reported_and_the_rest_written(tmp_path, monkeypatch, capsys):
    def boom(inp):
        raise RuntimeError("deliberate")
    sec = A.get("brackets")
    patched = [A.Section(s.name, s.paper, s.what, boom) if s is sec else s for s in A.SECTIONS]
    monkeypatch.setattr(A, "SECTIONS", patched)
    out = tmp_path / "app"
    rc = report.main([str(ROOT / "data" / "example"), "--out", str(out), "--only", "law,brackets"])
    assert rc == 1
    st = {e["name"]: e for e in _manifest(out)["sections"]}
    assert st["law"]["status"] == "ok" and st["brackets"]["status"] == "failed"
    assert "RuntimeError: deliberate" in (out / "index.md").read_text()
    assert "deliberate" in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["nope/*.parquet", "--out", "X"], "matches no files"),
    (["data/example", "--out", "X", "--only", "nosuch"], "unknown section 'nosuch'"),
    (["data/example"], "--out DIR is required"),
    (["data/example", "--out", "X", "--tail-bootstrap", "-1"], "--tail-bootstrap must be >= 0"),
    (["data/example", "--out", "X", "--budgets", "0,3"], "positive integers"),
    (["data/example", "--out", "X", "--frobnicate"], "unrecognized arguments"),
])
def test_user_errors_are_one_line_exit_2(argv, needle, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    argv = [str(tmp_path / "X") if a == "X" else a for a in argv]
    assert report.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_refuses_a_foreign_non_empty_folder(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert report.main([str(ROOT / "data" / "example"), "--out", str(tmp_path), "--only", "law"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_list_names_every_section(capsys):
    assert report.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == A.names()


# --------------------------------------------------------------------------- the reduced path (--engine)

REDUCED_OK = ["summary", "law", "decile-curves", "law-fits", "brackets", "tail", "survival"]


def test_engine_report_runs_the_sections_a_reduction_feeds(tmp_path, capsys):
    """--engine reduces the logs and runs the law, curves, brackets, tail and survival from the reduction:
    the law table is fit_reduced's, the same from a reduced file and with duckdb; the rest is skipped, saying why;
    the manifest names each rounds file by its footer fingerprint (nothing read on the driver)."""
    import pandas as pd

    from glance_law.cli import reduce as RC
    from glance_law.scale.engines import reduce_logs
    from glance_law.scale.law_reduced import fit_reduced
    from glance_law.scale.reduce import read_reduced
    logs = ROOT / "data" / "example"
    out = tmp_path / "arrow"
    assert report.main([str(logs), "--out", str(out), "--engine", "arrow", "--tail-bootstrap", "19", "--quiet"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    status = {e["name"]: e for e in m["sections"]}
    assert [n for n, e in status.items() if e["status"] == "ok"] == REDUCED_OK
    for n, e in status.items():
        if n not in REDUCED_OK:
            assert e["status"] == "skipped" and "reduction does not keep" in e["reason"] and "without --engine" in \
                e["reason"], n
    (f,) = m["inputs"]
    assert f["kind"] == "rounds" and f["rows"] == 4171 and "sha256" not in f and len(f["fingerprint"]) == 24
    table = pd.read_csv(out / "tables" / "table12_law.csv")
    want = fit_reduced(reduce_logs([str(logs)]), level=0.95).to_frame()
    for col in ("rounds", "b0", "b1", "b1_lo", "b1_hi", "mean_accepted"):
        assert list(table[col]) == pytest.approx(list(want.set_index("task").loc[table["task"], col]), rel=1e-9), col
    assert "reduced to 4033 cells" in (out / "index.md").read_text()
    assert "tau" in (out / "tables" / "summary_reduced.csv").read_text().splitlines()[0]
    red = tmp_path / "stats.parquet"                 # a reduction made earlier gives the same tables
    assert RC.main([str(logs), "--out", str(red)]) == 0
    capsys.readouterr()
    assert read_reduced([str(red)]).rounds == 4171
    again, duck = tmp_path / "from-reduced", tmp_path / "duckdb"
    assert report.main([str(red), "--out", str(again), "--only", "law,tail", "--tail-bootstrap", "19", "--quiet"]) == 0
    assert report.main([str(logs), "--out", str(duck), "--engine", "duckdb", "--only", "law", "--quiet"]) == 0
    for other in (again, duck):
        assert (other / "tables" / "table12_law.csv").read_bytes() == (out / "tables" / "table12_law.csv").read_bytes()
    assert (again / "tables" / "prop3_tail.csv").read_bytes() == (out / "tables" / "prop3_tail.csv").read_bytes()
    assert json.loads((again / "manifest.json").read_text())["inputs"][0]["kind"] == "reduced"


def test_engine_report_on_a_foreign_log_without_entropy(tmp_path):
    """Imported answers (no root_entropy) through --engine: the reduction's summary, the law and the tail
    skipped naming root_entropy, the import's oddities (a corrupt line under --skip-bad) in the index."""
    f = ROOT / "tests" / "data" / "realdata" / "spec_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz"
    out = tmp_path / "app"
    assert report.main([str(f), "--out", str(out), "--engine", "arrow", "--skip-bad", "--only", "summary,law,tail",
                        "--quiet"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    st = {e["name"]: e for e in m["sections"]}
    assert st["summary"]["status"] == "ok"
    assert st["law"]["status"] == st["tail"]["status"] == "skipped"
    assert all("root_entropy" in st[n]["reason"] for n in ("law", "tail"))
    assert m["inputs"][0]["kind"] == "foreign" and len(m["inputs"][0]["sha256"]) == 64
    index = (out / "index.md").read_text()
    assert "skipped corrupt line 4" in index and "1 foreign log(s)" in index


def test_spark_master_needs_the_spark_engine(tmp_path, capsys):
    for extra in ([], ["--engine", "arrow"]):
        out = tmp_path / f"x{len(extra)}"
        assert report.main([str(ROOT / "data" / "example"), "--out", str(out), "--spark-master", "local[1]", *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "add --engine spark" in err
        assert not out.exists()


# --------------------------------------------------------------------------- analyses/ scripts

def _scripts():
    return sorted(p for p in (ROOT / "analyses").glob("*.py")
                  if not p.name.startswith("make_example") and p.name not in ("make_appendix.py", "real_model.py", "real_dense.py",
                                                                   "entropy_pred_vs_root.py"))
    # real_model.py and real_dense.py decode with a real model and write docs/real-model-tables.md and
    # docs/real-model-study-tables.md, entropy_pred_vs_root.py
    # compares two entropies on the real model's logs for docs/policy.md: not appendix sections


def test_one_script_per_section():
    named = {}
    for p in _scripts():
        m = re.search(r'\["--only", "([\w-]+)"', p.read_text())
        assert m, p
        named[m.group(1)] = p.name
        assert "import glance_law" not in p.read_text() or "report" in p.read_text()
    assert sorted(named) == sorted(A.names())


def test_a_script_runs_standalone(tmp_path):
    out = tmp_path / "app"
    r = subprocess.run([sys.executable, str(ROOT / "analyses" / "table12_law.py"), str(ROOT / "data" / "example"),
                        "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "python analyses/table12_law.py" in (out / "index.md").read_text()
    assert (out / "tables/table12_law.tex").exists()


# --------------------------------------------------------------------------- the committed example

EXAMPLE = ROOT / "docs" / "example-appendix"


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _same_text_up_to_float(new: str, ref: str, rtol: float = 1e-3) -> str | None:
    """None when two rendered tables say the same: identical text around the numbers, and each
    number equal to the committed one within rtol or one unit of its last printed digit (the
    held-out tail fits converge to about 1e-5 relative, differently on another CPU's BLAS, and a
    rounded figure can flip its last digit). Else the first difference, for the message."""
    if _NUMBER.sub("#", new) != _NUMBER.sub("#", ref):
        return "the text around the numbers differs"
    for x, y in zip(_NUMBER.findall(new), _NUMBER.findall(ref)):
        mantissa = re.split("[eE]", y)[0]
        ulp = 10.0 ** -len(mantissa.split(".")[1]) if "." in mantissa else 1.0
        if abs(float(x) - float(y)) > max(rtol * abs(float(y)), ulp * 1.0001):
            return f"{x} against the committed {y}"
    return None


def _same_png(new: Path, ref: Path) -> bool:
    """Two renderings of a figure agree when under 1 % of their pixels differ visibly."""
    import numpy as np
    from matplotlib.image import imread

    a, b = imread(new), imread(ref)
    return a.shape == b.shape and float((np.abs(a - b).max(axis=-1) > 0.1).mean()) < 0.01


@pytest.mark.skipif(not (EXAMPLE / "manifest.json").exists(), reason="no committed example appendix yet")
def test_committed_example_is_current(tmp_path, monkeypatch):
    """Regenerate docs/example-appendix from its own command line: the index and every table say
    the same as the committed ones (the same text, numbers equal up to the optimisers' convergence
    on another machine), figures alike whenever matplotlib is the version that drew them."""
    monkeypatch.chdir(ROOT)
    ref = json.loads((EXAMPLE / "manifest.json").read_text())
    argv = ref["command"].split()[3:]
    i = argv.index("--out")
    argv[i + 1] = str(tmp_path / "app")
    assert report.main(argv + ["--quiet"]) == 0
    new = json.loads((tmp_path / "app" / "manifest.json").read_text())
    assert new["inputs"] == ref["inputs"], "the example logs changed: regenerate docs/example-appendix"
    same_mpl = new["libraries"]["matplotlib"] == ref["libraries"]["matplotlib"]
    assert set(new["outputs"]) == set(ref["outputs"])
    for rel in ["index.md", *ref["outputs"]]:
        old_path, new_path = EXAMPLE / rel, tmp_path / "app" / rel
        if rel in ref["outputs"]:
            assert hashlib.sha256(old_path.read_bytes()).hexdigest() == ref["outputs"][rel], f"{rel} edited by hand"
        if rel.endswith((".csv", ".md", ".tex")):
            diff = _same_text_up_to_float(new_path.read_text(), old_path.read_text())
            assert diff is None, f"{rel} differs from the committed example: {diff}"
        elif rel.endswith(".png") and same_mpl:
            assert _same_png(new_path, old_path), f"{rel} differs from the committed example"
