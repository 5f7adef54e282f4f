"""Rows to contract-typed Arrow tables, and the error every contract violation raises (no I/O).

The bottom of the data layer: the reader and writer (:mod:`glance_law.data.io`) and the
importers of foreign logs (:mod:`glance_law.data.importers`) both build on it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from glance_law.errors import GlanceError

from . import schema as S


class LogError(GlanceError):
    """A log file violates the contract. ``str()`` is one line: file, column, problem, fix."""

    def __init__(self, path, problem: str, fix: str = "", column: str | Sequence[str] | None = None):
        self.path = str(path) if path is not None else None
        self.column = column
        self.problem = problem
        self.fix = fix
        where = f"{self.path}: " if self.path else ""
        if column is None:
            col = ""
        elif isinstance(column, str):
            col = f"column '{column}': "
        else:
            col = f"columns ({', '.join(column)}): "
        tail = f"; {fix}" if fix else ""
        super().__init__(f"{where}{col}{problem}{tail}")

    def at(self, path) -> LogError:
        """The same error attributed to ``path``."""
        return LogError(path, self.problem, self.fix, self.column)


def _column_array(name: str, values, col: S.Column | None) -> pa.Array | pa.ChunkedArray:
    """One column as Arrow: contract columns get the contract type, others an inferred one.

    NaN stays NaN in float columns (NaN is data: "unknown" in nullable columns, an
    error in root_entropy); None / pd.NA become null.
    """
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values if col is None else values.cast(col.type)
    if col is None:
        if isinstance(values, np.ndarray) and values.ndim == 2:
            values = list(values)
        return pa.array(values, from_pandas=True)
    floats = col.family in (S.FLOAT, S.LIST_FLOAT)
    if isinstance(values, np.ndarray) and values.ndim == 2 and col.family in (S.LIST_INT, S.LIST_FLOAT):
        n, width = values.shape  # fast path: a (rows, width) matrix -> one list per row
        flat = pa.array(values.reshape(-1), type=col.type.value_type, from_pandas=not floats)
        offsets = pa.array(np.arange(0, n * width + 1, width, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, flat, type=col.type)
    if col.family == S.STRING and isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
        values = values.astype(object)
    if col.family in (S.LIST_INT, S.LIST_FLOAT) and not isinstance(values, pd.Series):
        values = [None if v is None else (v.tolist() if isinstance(v, np.ndarray) else v) for v in values]
    return pa.array(values, type=col.type, from_pandas=not floats)


def to_arrow(rows, kind: str) -> pa.Table:
    """Convert rows (a DataFrame, an Arrow table, a list of dicts, or a dict of columns,
    where list columns may be 2-D numpy arrays) to an Arrow table typed by the contract.

    Columns outside the contract are kept with inferred types. Raises :class:`LogError`
    when a required column is missing or null, or values do not fit the contract type.
    Values are not range-checked here (the reader does that), so a logger never loses
    rows to a value check in the middle of a run.
    """
    if isinstance(rows, pa.Table):
        data = {n: rows.column(n) for n in rows.column_names}
    elif isinstance(rows, pd.DataFrame):
        data = {n: rows[n] for n in rows.columns}
    elif isinstance(rows, Mapping):
        data = dict(rows)
    else:
        rows = list(rows)
        names: list[str] = []
        for r in rows:
            for k in r:
                if k not in names:
                    names.append(k)
        data = {n: [r.get(n) for r in rows] for n in names}
    known = {c.name: c for c in S.columns(kind)}
    missing = [n for n in S.required_names(kind) if n not in data]
    if missing:
        raise LogError(None, f"rows lack required column(s) {', '.join(missing)}",
                       f"every {kind} row needs {', '.join(S.required_names(kind))}")
    arrays, fields = [], []
    for name in [c.name for c in S.columns(kind) if c.name in data] + [n for n in data if n not in known]:
        col = known.get(name)
        try:
            arr = _column_array(name, data[name], col)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError,
                TypeError, ValueError) as exc:
            want = f"as {col.type}" if col is not None else "in Arrow"
            raise LogError(None, f"cannot store the values {want} ({str(exc).splitlines()[0][:120]})",
                           "check the values the logger produces for this column", column=name) from None
        if col is not None and col.required and not col.nullable and arr.null_count:
            raise LogError(None, f"{arr.null_count} row(s) have no value for a required column",
                           f"every {kind} row needs {name} (see docs/schema.md)", column=name)
        arrays.append(arr)
        fields.append(pa.field(name, arr.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
