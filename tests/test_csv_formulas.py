"""CSV cells a spreadsheet would run as formulas (issue 26, item 4): a string cell starting with
``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading ``'`` in every CSV the
results layer writes; numbers, negative ones included, stay numbers."""
from __future__ import annotations

import csv
import io

import pandas as pd
import pytest

from glance_law.cli import fit as fit_cli
from glance_law.io import write_table
from glance_law.results import format as F
from glance_law.simulate import TaskSpec, simulate_rounds

ATTACKS = ["=cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0", "+1+1", "-2+3+cmd|' /C calc'!A0",
           "\t=1+1", "\r=1+1", "=HYPERLINK(\"http://evil.example\",\"x\")"]


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


@pytest.mark.parametrize("cell", ATTACKS)
def test_formula_cells_are_neutralised(cell):
    assert F.csv_cell(cell) == "'" + cell.replace("\r", "\n")


@pytest.mark.parametrize("cell", ["-0.25", "+3", "-1e-05", "-inf", "12", "plain", "it's", "'=already", "a=b",
                                  "", "-", "--"])
def test_other_cells_are_kept(cell):
    expected = "'" + cell if cell == "--" else cell        # "-" is the missing-value mark
    assert F.csv_cell(cell) == expected


def test_render_csv_neutralises_cells_and_header_and_keeps_numbers():
    frame = pd.DataFrame({"task": ATTACKS, "b1": [-0.5] * len(ATTACKS), "n": range(len(ATTACKS)),
                          "text_number": ["-1.5"] * len(ATTACKS), "=SUM(A1)": ["x"] * len(ATTACKS)})
    rows = _cells(F.render(frame, "csv"))
    assert rows[0] == ["task", "b1", "n", "text_number", "'=SUM(A1)"]
    assert len(rows) == 1 + len(ATTACKS)                # a carriage return starts no row
    for row, cell in zip(rows[1:], ATTACKS):
        assert row[0] == "'" + cell.replace("\r", "\n")
        assert row[1] == "-0.5" and row[3] == "-1.5"
    assert frame["task"].tolist() == ATTACKS            # the caller's frame is not changed


def test_fit_csv_output_is_neutralised(tmp_path, capsys):
    task = "=HYPERLINK(\"http://evil.example\",\"click\")"
    rounds = simulate_rounds([TaskSpec(task, 1.0, 0.8)], n_prompts=8, seed=0, vectors=False)
    f = write_table(rounds, tmp_path / "rounds-evil.parquet")
    assert fit_cli.main([str(f), "--format", "csv"]) == 0
    rows = _cells(capsys.readouterr().out)
    col = rows[0].index("task")
    tasks = [r[col] for r in rows[1:]]
    assert "'" + task in tasks and not any(t.startswith(("=", "+", "-", "@")) for t in tasks), tasks
    b0 = [float(r[rows[0].index("b0")]) for r in rows[1:]]          # numbers still parse as numbers
    assert all(x == x for x in b0)
