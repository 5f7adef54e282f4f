"""One CLI layer (issue 13): section options declared once by their module, the same flag names
and meanings in ``fit`` and ``report``, one error handler (one line, exit 2) for every command."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from glance_law.cli import fit as F
from glance_law.cli import reduce as RC
from glance_law.cli import report as RP

ROOT = Path(__file__).resolve().parents[1]


def _options(parser) -> dict:
    """dest -> (visible option strings, default, type) of a parser's options."""
    out = {}
    for a in parser._actions:
        if a.help == "==SUPPRESS==" or not a.option_strings:
            continue
        out[a.dest] = (tuple(a.option_strings), a.default, a.type)
    return out


def test_report_section_options_are_the_section_modules_own():
    report = _options(RP.build_parser())
    for module, dests in RP.SECTION_OPTIONS:
        mod = importlib.import_module(module)
        fit = _options(F.build_parser([mod]))
        for dest in dests:
            assert dest in fit, f"{module} does not declare {dest}"
            assert report[dest] == fit[dest], f"--{dest}: fit and report differ"


def test_one_meaning_per_flag_across_commands():
    report = _options(RP.build_parser())
    fit_all = _options(F.build_parser([importlib.import_module(m) for m, _ in RP.SECTION_OPTIONS]))
    flags_fit = {s: d for d, (strings, _, _) in fit_all.items() for s in strings}
    flags_report = {s: d for d, (strings, _, _) in report.items() for s in strings}
    for flag in set(flags_fit) & set(flags_report):
        assert flags_fit[flag] == flags_report[flag], flag
    assert "--width-bootstrap" in flags_fit and "--width-boot" not in flags_fit      # one spelling shown
    assert "--bootstrap" in flags_fit and "--bootstrap" not in flags_report          # the law's, in fit only


def test_old_spellings_still_work():
    import glance_law.replay.width as W
    args = F.build_parser([W]).parse_args(["x", "--width", "--width-boot", "7"])
    assert args.width_bootstrap == 7
    args = RP.build_parser().parse_args(["x", "--bootstrap", "9"])
    assert args.probe_bootstrap == 9 and args.order_bootstrap == 9


@pytest.mark.parametrize("main", [F.main, RP.main, RC.main], ids=["fit", "report", "reduce"])
def test_every_command_reports_bad_input_in_one_line(main, tmp_path, capsys):
    argv = [str(tmp_path / "missing.parquet")]
    if main is RC.main:
        argv += ["--out", str(tmp_path / "out.parquet")]
    if main is RP.main:
        argv += ["--out", str(tmp_path / "report")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "error:" in err and "Traceback" not in err
    assert main(["--no-such-flag"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--help" in err
