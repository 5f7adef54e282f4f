"""The front door (issue 13): ``import glance_law as gl`` stays light and reaches every capability."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import glance_law as gl

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "data" / "example" / "rounds-example.parquet"
HEAVY = ("numpy", "pandas", "pyarrow", "scipy", "statsmodels", "sklearn", "matplotlib", "torch")


def _fresh(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_import_loads_no_heavy_library():
    out = _fresh("import json, sys\nimport glance_law\n"
                 f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert json.loads(out) == []


def test_front_door_fits_the_law_from_a_file_in_a_fresh_interpreter():
    out = _fresh("import glance_law as gl\n"
                 f"law = gl.fit_law(gl.read_rounds({str(EXAMPLE)!r}), by='task')\n"
                 "print(type(law).__name__, list(law.to_frame()['task']))")
    name, tasks = out.split(" ", 1)
    assert name == "LawFit" and "'pooled'" in tasks


def test_every_exported_name_resolves_to_its_defining_module():
    for name in gl.__all__:
        obj = getattr(gl, name)
        assert obj is not None, name
        if name != "__version__" and name != "replay":
            assert getattr(obj, "__name__", name) == name, name
    assert set(gl.__all__) <= set(dir(gl))


def test_unknown_name_raises_attribute_error():

    with pytest.raises(AttributeError, match="no_such_capability"):
        _ = gl.no_such_capability


def test_replay_is_callable_as_package_and_function():
    import glance_law.replay as package
    from glance_law.replay.chains import Replay

    frame = gl.simulate_tree_rounds(n_prompts=4, rounds_per_prompt=5, seed=3)
    a = gl.replay(frame, n_max=15)
    b = package.replay(frame, n_max=15)
    assert gl.replay is package and isinstance(a, Replay)
    assert a.to_frame().equals(b.to_frame())


ENTRY_POINTS = ("fit_law", "fit_tail", "fano_check", "replay", "width_allocation", "offset_law", "offset_hazards",
                "assumption2_test", "run_survival", "probe", "signal_effect", "task_order", "transfer", "audit",
                "timing_ledger", "round_cost", "reduce_logs", "reduce_frame", "fit_reduced", "tail_reduced",
                "simulate_rounds")


def test_entry_points_have_numpydoc_sections_and_their_examples_run():
    import doctest
    import inspect

    from glance_law.replay.chains import replay

    failed = []
    for name in ENTRY_POINTS:
        fn = replay if name == "replay" else getattr(gl, name)
        doc = inspect.getdoc(fn)
        for section in ("Parameters\n----------", "Returns\n-------", "Examples\n--------"):
            assert section in doc, f"{name}: no {section.splitlines()[0]} section"
        params = list(inspect.signature(fn).parameters)
        assert params[0] in doc.split("Returns")[0], name
        kinds = [p.kind for p in inspect.signature(fn).parameters.values()]
        assert inspect.Parameter.POSITIONAL_OR_KEYWORD not in kinds[3:], f"{name}: options must be keyword-only"
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        for test in doctest.DocTestFinder(recurse=False).find(fn, name, globs={}):
            runner.run(test)
        if runner.failures:
            failed.append(name)
    assert failed == [], f"Examples that failed: {failed}"
