"""Issue 15, Security: nothing is written or removed outside the folder the user named, temporary
files cannot be redirected by planted links, and strings from logs are escaped in every format.

Each test plants what an attacker could plant (a manifest listing paths outside --out, links in
figures/ or tables/, a link at a temporary file's name, HTML and newlines in a task name) and
checks the victim file outside the output folder is untouched."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from glance_law.cli import fit as fit_cli
from glance_law.cli import report
from glance_law.data.outputs import check_output_path, remove_file, write_file
from glance_law.io import write_table
from glance_law.law import fit_law
from glance_law.results import format as F
from glance_law.simulate import TaskSpec, simulate_rounds

EVIL = "x<img src=x onerror=alert(1)>\n| fake | row |"


def rounds(task="t", seed=0, n_prompts=8) -> pd.DataFrame:
    return simulate_rounds([TaskSpec(task, 1.0, 0.8)], n_prompts=n_prompts, seed=seed, vectors=False,
                           run_id=f"run{seed}")


@pytest.fixture
def logs(tmp_path) -> Path:
    return write_table(rounds(), tmp_path / "logs" / "rounds-a.parquet")


@pytest.fixture
def victim(tmp_path) -> Path:
    v = tmp_path / "victim.txt"
    v.write_text("precious\n")
    return v


def _report(logs, out, *extra):
    return report.main([str(logs), "--out", str(out), "--quiet", "--only", "law,decile-curves", *extra])


# --------------------------------------------------------------------------- the report's manifest

@pytest.mark.parametrize("entry", ["../victim.txt", "ABS", "tables/../../victim.txt", "notes.txt",
                                   "tables/sub/x.md", 7])
def test_report_refuses_a_manifest_listing_foreign_outputs(tmp_path, logs, victim, entry, capsys):
    out = tmp_path / "app"
    out.mkdir()
    rel = str(victim) if entry == "ABS" else entry
    (out / "notes.txt").write_text("mine\n")
    (out / "manifest.json").write_text(json.dumps({
        "tool": "glance-law", "inputs": [], "outputs": {},
        "sections": [{"name": "law", "outputs": [rel]}, {"name": "decile-curves", "outputs": []}]}))
    assert _report(logs, out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "manifest.json" in err[0] and "refusing" in err[0], err
    assert victim.read_text() == "precious\n" and (out / "notes.txt").read_text() == "mine\n"
    assert not (out / "index.md").exists()


def test_report_outputs_listing_checks():
    assert check_output_path("tables/table12_law.md") is None
    assert check_output_path("figures/figure3a_decile_curves-block.png") is None
    for bad in ("../x.md", "/etc/passwd", "tables/../x.md", "tables/.hidden.md", "index.md", "tables\\x.md",
                "figures/x.md", "tables/a/b.md", None):
        assert check_output_path(bad) is not None, bad


def test_report_rerun_removes_only_its_own_files(tmp_path, logs, victim):
    out = tmp_path / "app"
    assert _report(logs, out) == 0
    m = json.loads((out / "manifest.json").read_text())
    ours = sorted(m["outputs"])
    assert ours and all(check_output_path(r) is None for r in ours)
    # a user edit of a listed file is kept (changed since the report wrote it), a link at a listed
    # name is removed as a link and its target left alone
    table = out / ours[0]
    table.write_text("edited by hand\n")
    fig = next(out / r for r in ours if r.startswith("figures/"))
    fig.unlink()
    fig.symlink_to(victim)
    assert _report(logs, out, "--skip", "decile-curves") == 0
    assert victim.read_text() == "precious\n"


# --------------------------------------------------------------------------- links in figures/, tables/

@pytest.mark.parametrize("sub", ["figures", "tables"])
def test_report_refuses_a_linked_subfolder(tmp_path, logs, sub, capsys):
    out = tmp_path / "app"
    assert _report(logs, out) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for f in (out / sub).iterdir():
        f.unlink()
    (out / sub).rmdir()
    (out / sub).symlink_to(elsewhere, target_is_directory=True)
    capsys.readouterr()
    rc = _report(logs, out)
    err = capsys.readouterr().err
    assert list(elsewhere.iterdir()) == [], "the report wrote through a planted link"
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and "symbolic link" in err and sub in err, err


def test_report_replaces_a_linked_file_instead_of_writing_through_it(tmp_path, logs, victim):
    out = tmp_path / "app"
    assert _report(logs, out) == 0
    (out / "index.md").unlink()
    (out / "index.md").symlink_to(victim)
    t = out / "tables" / "table12_law.md"
    t.unlink()
    t.symlink_to(victim)
    assert _report(logs, out) == 0
    assert victim.read_text() == "precious\n"
    assert not (out / "index.md").is_symlink() and not t.is_symlink()
    assert "Theory appendix" in (out / "index.md").read_text()


# --------------------------------------------------------------------------- temporary files

def test_report_temporary_names_cannot_be_planted(tmp_path, logs, victim):
    out = tmp_path / "app"
    assert _report(logs, out) == 0
    pid = os.getpid()
    for name in ("index.md", "manifest.json"):               # the names the old writer used
        (out / f".{name}.tmp{pid}").symlink_to(victim)
    (out / "tables" / f".table12_law.md.tmp{pid}").symlink_to(victim)
    assert _report(logs, out) == 0
    assert victim.read_text() == "precious\n"


def test_fit_out_temporary_name_cannot_be_planted(tmp_path, logs, victim, capsys):
    target = tmp_path / "law.md"
    Path(f"{target}.tmp{os.getpid()}").symlink_to(victim)    # the name the old writer used
    assert fit_cli.main([str(logs), "--format", "markdown", "--out", str(target)]) == 0
    assert victim.read_text() == "precious\n"
    assert "**draftability law" in target.read_text() and not target.is_symlink()   # (the first-run sentences come first)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".law.md.")]   # no temp left behind


def test_write_file_helpers(tmp_path, victim):
    root = tmp_path / "root"
    root.mkdir()
    write_file(root / "a" / "b.txt", "x", root=root)
    assert (root / "a" / "b.txt").read_text() == "x"
    (root / "link").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(Exception, match="symbolic link"):
        write_file(root / "link" / "c.txt", "x", root=root)
    assert not (tmp_path / "c.txt").exists()
    (root / "tables").mkdir()
    (root / "tables" / "x.md").symlink_to(victim)
    assert remove_file(root, "tables/x.md") and victim.exists()
    with pytest.raises(Exception, match="refusing"):
        remove_file(root, "../victim.txt")
    assert victim.exists()


# --------------------------------------------------------------------------- escaping

def _frame():
    return pd.DataFrame({"task": [EVIL, "[x](javascript:alert(1))", "ok"], "b1": [1.0, 2.0, 3.0],
                         "b1_lo": [0.5, 1.0, 2.0], "b1_hi": [1.5, 3.0, 4.0]})


def test_every_format_escapes_log_strings():
    notes = [f"task {EVIL}"]
    md = F.render(_frame(), "markdown", f"title {EVIL}", notes)
    assert "<img" not in md and re.search(r"(?<!\\)\]\(", md) is None      # no raw HTML, no link
    lines = md.splitlines()
    assert sum(line.startswith("|") for line in lines) == 2 + 3      # header, rule, three rows
    assert "1.0 [0.5, 1.5]" in md                                   # numbers and intervals untouched
    text = F.render(_frame(), "text", f"title {EVIL}", notes)
    assert not any(line.startswith("| fake") for line in text.splitlines())
    assert len(text.splitlines()) == 2 + 2 + 3 + 2                   # title, blank, header, rule, rows, blank, note
    html = F.render(_frame(), "html", f"title {EVIL}", notes)
    assert "<img" not in html and "&lt;img" in html
    tex = F.render(_frame(), "latex", f"title {EVIL}", notes)
    assert all(line.startswith(("%", "\\")) or " & " in line for line in tex.splitlines())
    assert not any(line.startswith("| fake") for line in tex.splitlines())


def test_results_escape_in_markdown_html_latex(tmp_path):
    res = fit_law(rounds(task=EVIL), by="task")
    for out in (res.summary("markdown"), res._repr_html_()):
        assert "<img" not in out
    for out in (res.summary("markdown"), res._repr_html_(), res.to_latex(), str(res)):
        assert not any(line.startswith("| fake") for line in out.splitlines())
    assert "\\textbackslash{}n" in res.to_latex()


def test_fit_markdown_and_report_index_escape_task_names(tmp_path, capsys):
    f = write_table(rounds(task=EVIL), tmp_path / "logs" / "rounds-evil.parquet")
    assert fit_cli.main([str(f), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "<img" not in md and not any(line.startswith("| fake") for line in md.splitlines())
    out = tmp_path / "app"
    assert report.main([str(f), "--out", str(out), "--quiet", "--only", "law"]) == 0
    for p in [out / "index.md", *sorted((out / "tables").glob("*.md"))]:
        text = p.read_text()
        assert "<img" not in text and not any(line.startswith("| fake") for line in text.splitlines()), p
