"""docs/schema.md and glance_law/schema.py cannot drift; the docs' code examples run.

Also the contract's internal consistency (required columns, keys, value rules) and
check_values on valid and invalid Arrow tables.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from glance_law import io as gio
from glance_law import schema as S
from glance_law.simulate import simulate_rounds

DOC = Path(__file__).resolve().parents[1] / "docs" / "schema.md"
SECTION = {S.KIND_ROUNDS: "## `rounds`", S.KIND_PROMPTS: "## `prompts`", S.KIND_REDUCED: "## `reduced`"}


def friendly(t: pa.DataType) -> str:
    """The type name the docs use: float32/float64 for Arrow's float/double, list<T>."""
    if pa.types.is_list(t):
        return f"list<{friendly(t.value_type)}>"
    return {"float": "float32", "double": "float64"}.get(str(t), str(t))


def doc_tables() -> dict[str, list[dict]]:
    text = DOC.read_text(encoding="utf-8")
    out = {}
    for kind, heading in SECTION.items():
        start = text.index(heading)
        nxt = text.find("\n## ", start + 1)
        body = text[start:nxt if nxt > 0 else None]
        rows = []
        for line in body.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 5 and cells[0].startswith("`"):
                rows.append({"name": cells[0].strip("`"), "type": cells[1].strip("`"), "unit": cells[2],
                             "required": cells[3], "meaning": cells[4]})
        out[kind] = rows
    return out


@pytest.mark.parametrize("kind", S.KINDS)
def test_docs_list_every_column_with_its_type(kind):
    rows = doc_tables()[kind]
    documented = {r["name"]: r for r in rows}
    assert len(documented) == len(rows), "a column is documented twice"
    code = {c.name: c for c in S.columns(kind)}
    assert set(documented) == set(code), (
        f"docs/schema.md {kind}: missing {sorted(set(code) - set(documented))}, "
        f"unknown {sorted(set(documented) - set(code))}")
    for name, col in code.items():
        r = documented[name]
        assert r["type"] == friendly(col.type), f"{kind}.{name}: docs say {r['type']}, code {col.type}"
        assert r["required"] == ("required" if col.required else "optional"), f"{kind}.{name}"
        assert r["unit"] == col.unit, f"{kind}.{name}: unit docs {r['unit']!r}, code {col.unit!r}"
        assert r["meaning"], f"{kind}.{name} has no meaning in the docs"
    # contract order: required first, as in the code
    assert [r["name"] for r in rows] == [c.name for c in S.columns(kind)]


def test_docs_name_metadata_keys_and_keys():
    text = DOC.read_text(encoding="utf-8")
    for key in (S.META_KIND, S.META_SCHEMA, S.META_RUN):
        assert f"`{key.decode()}`" in text
    assert f'`"{S.SCHEMA_VERSION}"`' in text
    for field in gio.run_metadata():
        assert f"`{field}`" in text, f"glance.run field {field} undocumented"
    for lib in gio.library_versions():
        assert f"`{lib}`" in text, f"library {lib} undocumented"
    assert "(" + ", ".join(f"`{k}`" for k in S.ROUND_KEY) + ")" in text
    assert "(" + ", ".join(f"`{k}`" for k in S.PROMPT_KEY) + ")" in text
    for _name, default in S.FILLED_WHEN_NULL.items():
        assert f"`{default}`" in text


def test_docs_code_examples_run(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "docs_schema_example"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/schema.md[python block {i}]", "exec"), ns)
    out = capsys.readouterr().out
    assert "12 rounds from 1 file(s); other kinds: ['prompts']" in out
    assert "top-k matrix of round 0: (8, 4)" in out
    logs = gio.read_logs(tmp_path / "logs" / "my-run")
    f = logs.frame
    assert len(f) == 12 and not logs.skipped
    assert (f["accepted"] <= f["horizon"]).all()
    assert logs.files[0].run["drafter"] == {"kind": "block", "block_length": 8}
    # the example's entropy helper agrees with a float64 reference
    rng = np.random.default_rng(3)
    z = rng.standard_normal(50) * 3
    p = np.exp(z - z.max())
    p /= p.sum()
    assert ns["entropy_nats"](z) == pytest.approx(-(p * np.log(p)).sum(), rel=1e-5)


# --------------------------------------------------------------------------
# the contract itself
# --------------------------------------------------------------------------

@pytest.mark.parametrize("kind", S.KINDS)
def test_contract_is_consistent(kind):
    cols = S.columns(kind)
    names = [c.name for c in cols]
    assert len(set(names)) == len(names)
    for c in cols:
        assert S.family_of(c.type) == c.family, c.name
        assert S.compatible(c, c.type)
        # a required column is present in every file; only root_entropy (contract version 2) may hold
        # nulls there (not measured by the source), and it still refuses NaN
        assert not (c.required and c.nullable) or (c.name == "root_entropy" and not c.nan_ok), c.name
        if c.length:
            assert c.family in (S.LIST_INT, S.LIST_FLOAT), c.name
        if c.neg_inf:
            assert c.family in (S.FLOAT, S.LIST_FLOAT), c.name
        if c.lo is not None and c.hi is not None:
            assert c.lo <= c.hi
    seen_req = False
    for c in reversed(cols):  # required columns come first
        seen_req |= c.required
        assert c.required or not seen_req, f"{c.name}: optional column before a required one"
    if kind != S.KIND_REDUCED:
        key = S.ROUND_KEY if kind == S.KIND_ROUNDS else S.PROMPT_KEY
        assert set(key) <= set(names)
    for name in S.FILLED_WHEN_NULL:
        if kind != S.KIND_REDUCED:
            assert S.column(kind, name).family == S.STRING and not S.column(kind, name).required
    assert S.arrow_schema(kind).names == names
    with pytest.raises(ValueError):
        S.columns("bogus")


def test_check_type_accepts_family_widths_and_refuses_families():
    assert S.check_type("rounds", "accepted", pa.int64()) is None
    assert S.check_type("rounds", "accepted", pa.uint8()) is None
    assert S.check_type("rounds", "root_entropy", pa.float64()) is None
    assert S.check_type("rounds", "task", pa.dictionary(pa.int32(), pa.large_string())) is None
    assert S.check_type("rounds", "match", pa.large_list(pa.int64())) is None
    p = S.check_type("rounds", "accepted", pa.float32())
    assert p.column == "accepted" and "expected int16" in p.problem and "fractional" in p.problem
    assert S.check_type("rounds", "match", pa.list_(pa.float32())) is not None
    assert S.check_type("rounds", "task", pa.int32()) is not None


def test_check_values_on_valid_and_boundary_tables():
    df = simulate_rounds(n_prompts=3, rounds_per_prompt=4, horizon=4, k=3, seed=2)
    t = gio.to_arrow(df, "rounds")
    assert S.check_values("rounds", t) is None
    # boundaries that are valid: entropy 0 and a tiny negative round-off, accepted = horizon,
    # horizon 0 with empty lists, -inf log-probabilities, rank >= k, pmax exactly 1
    edge = {
        "run_id": ["r"] * 3, "task": ["t"] * 3, "prompt_id": ["p"] * 3, "round": [0, 1, 2],
        "root_entropy": [0.0, -3e-7, 1.0], "accepted": [2, 0, 0], "horizon": [2, 0, 1],
        "root_pmax": [1.0, 1.0, None],
        "match": [[1, 1], [], [-1]], "target_rank": [[0, 0], [], [40]],
        "target_logq": [[-np.inf, 0.0], [], [float("nan")]],
        "topk_logq": [[0.0, -1.0, -np.inf, -np.inf], [], [-0.1, -0.1]],
        "committed": [[5, 6, 7], [9], []],
    }
    assert S.check_values("rounds", gio.to_arrow(edge, "rounds")) is None
    bad = dict(edge, topk_logq=[[0.0, -1.0, -np.inf, -np.inf], [-1.0], [-0.1, -0.1]])
    p = S.check_values("rounds", gio.to_arrow(bad, "rounds"))
    assert p.column == "topk_logq" and "first at row 1" in p.problem
    bad = dict(edge, target_logq=[[np.inf, 0.0], [], [float("nan")]])
    assert S.check_values("rounds", gio.to_arrow(bad, "rounds")).column == "target_logq"
    bad = dict(edge, root_entropy=[0.0, -0.01, 1.0])
    p = S.check_values("rounds", gio.to_arrow(bad, "rounds"))
    assert p.column == "root_entropy" and "first at row 1" in p.problem


def test_check_values_reports_the_first_bad_row_and_count():
    edge = {"run_id": ["r"] * 5, "task": ["t"] * 5, "prompt_id": ["p"] * 5, "round": list(range(5)),
            "root_entropy": [0.1] * 5, "accepted": [0, 3, 1, 4, 0], "horizon": [2, 2, 2, 2, 2]}
    p = S.check_values("rounds", gio.to_arrow(edge, "rounds"))
    assert p.column == "accepted"
    assert p.problem.startswith("2 row(s) with accepted > horizon (first at row 1: accepted=3, horizon=2)")


def test_prompts_and_reduced_value_rules():
    ok = {"run_id": ["r"], "prompt_id": ["p"], "task": ["t"], "first_divergence": [-1], "rounds": [3]}
    assert S.check_values("prompts", gio.to_arrow(ok, "prompts")) is None
    p = S.check_values("prompts", gio.to_arrow(dict(ok, first_divergence=[-2]), "prompts"))
    assert p.column == "first_divergence"
    red = {"task": ["t"], "drafter": ["d"], "bucket": [0], "hbin": [-3], "horizon": [4], "accepted": [5],
           "n": [10], "sum_h": [1.5]}
    p = S.check_values("reduced", gio.to_arrow(red, "reduced"))
    assert p.column == "accepted" and "accepted > horizon" in p.problem
    assert S.check_values("reduced", gio.to_arrow(dict(red, accepted=[4]), "reduced")) is None
