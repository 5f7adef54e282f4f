"""GLANCE's ``generate(on_round=...)`` dictionaries as round rows (see docs/hooks.md).

Torch-free: the dictionaries' tensor values are read through ``.item()``.
"""
from __future__ import annotations

from pathlib import Path

from glance_law.data import schema as S
from glance_law.data.io import LogWriter, run_metadata
from glance_law.errors import GlanceError

__all__ = ["GlanceOnRound"]


class GlanceOnRound:
    """A callable for GLANCE's ``generate(on_round=...)``: each dictionary becomes a round row.

    GLANCE reports the root entropy, the accepted length and the tree size; keys are read
    with common aliases (``entropy``/``root_entropy``/``H``; ``accepted``/``accept_len``/
    ``acceptance_length``, or ``tau`` = accepted + 1; ``tree_size``/``budget``/``num_nodes``;
    ``horizon``/``depth``/``block_size`` - a block size B gives horizon B - 1). Rows carry
    only what the dictionaries carry: no per-offset vectors, no margins unless present.
    Call :meth:`next_prompt` between prompts (or pass ``prompt_id`` in the dictionary).
    ``pred_entropy`` (the entropy of the row that chose the round's root) is logged where the
    dictionary carries it; ``vocab_size=`` (the target's) goes into the run metadata."""

    ALIASES = {
        "root_entropy": ("root_entropy", "entropy", "H", "ent"),
        "accepted": ("accepted", "accept_len", "acceptance_length", "accepted_len", "n_accepted"),
        "budget": ("budget",),
        "tree_size": ("tree_size", "num_nodes", "n_nodes"),
        "horizon": ("horizon", "depth", "max_depth"),
        "prompt_id": ("prompt_id", "prompt", "sample_id", "id"),
        "round": ("round", "round_idx", "step"),
        "root_margin": ("root_margin", "margin"),
        "root_pmax": ("root_pmax", "pmax", "max_prob"),
        "round_ms": ("round_ms", "time_ms"),
        "pred_entropy": ("pred_entropy", "prev_entropy"),
    }

    def __init__(self, out_dir, *, task: str, run_id: str = "glance", horizon: int | None = None,
                 drafter: str = "block", run: dict | None = None, flush_rows: int = 4096,
                 vocab_size: int | None = None):
        self.task, self.run_id, self.horizon, self.drafter = task, run_id, horizon, drafter
        run = dict(run or run_metadata(run_id=run_id, source="glance"))
        if vocab_size is not None:
            run.setdefault("vocab_size", int(vocab_size))     # the Fano section reads it
        self.writer = LogWriter(out_dir, S.KIND_ROUNDS, run=run, stem=f"{run_id}-glance", flush_rows=flush_rows)
        self._prompt = 0
        self._round = 0
        self.skipped = 0

    def next_prompt(self, prompt_id=None) -> None:
        self._prompt = prompt_id if prompt_id is not None else (self._prompt + 1 if isinstance(self._prompt, int)
                                                                 else 0)
        self._round = 0

    def _get(self, d, name):
        for k in self.ALIASES[name]:
            if k in d and d[k] is not None:
                v = d[k]
                return v.item() if hasattr(v, "item") else v
        return None

    def __call__(self, d: dict) -> None:
        h = self._get(d, "root_entropy")
        a = self._get(d, "accepted")
        if a is None and d.get("tau") is not None:
            a = int(d["tau"]) - 1
        L = self._get(d, "horizon")
        if L is None and d.get("block_size") is not None:
            L = int(d["block_size"]) - 1
        L = L if L is not None else self.horizon
        if h is None or a is None or L is None:
            raise GlanceError("GLANCE on_round dictionary lacks entropy, accepted length or horizon "
                              f"(keys: {', '.join(sorted(d))}); pass horizon= to GlanceOnRound if the dict has none")
        pid = self._get(d, "prompt_id")
        rnd = self._get(d, "round")
        a, L = int(a), int(L)
        # GLANCE extends a fully accepted block: a round may accept past L; it is stored as a run of at
        # least `accepted` (horizon = accepted), as glance_law.data.importers.glance stores it
        row = {"run_id": self.run_id, "task": self.task, "prompt_id": str(pid if pid is not None else self._prompt),
               "round": int(rnd if rnd is not None else self._round), "root_entropy": float(h),
               "accepted": a, "horizon": max(a, L), "drafter": self.drafter, "extended": a > L,
               "drafted_horizon": L}
        size = self._get(d, "tree_size")
        if size is not None:
            row["budget"] = int(size) - 1          # GLANCE's tree size counts the root
        for name in ("budget", "root_margin", "root_pmax", "round_ms", "pred_entropy"):
            v = self._get(d, name)
            if v is not None:
                row[name] = v
        if self.writer._buffer and set(self.writer._buffer[-1]) != set(row):
            self.writer.flush()        # one part file per column set: optional columns are never half-null
        self.writer.append(row)
        self._round += 1
        self.writer.maybe_flush()

    @classmethod
    def convert_jsonl(cls, paths, out_dir, **kw) -> int:
        """Convert GLANCE ``--round-log`` JSONL files (each row the decoder's ``on_round``
        dictionary plus ``task`` and ``prompt``) into a rounds log in ``out_dir``; returns the
        rows written. A thin call into :mod:`glance_law.data.importers.glance`, which reads the
        ``prompt`` key, each row's ``task``, ``budget = tree_size - 1`` and extended rounds
        (docs/your-logs.md). ``task=``: the task of rows without one; ``horizon=``: L of rows
        without ``horizon``/``block_size``; ``run_id=`` / ``drafter=``, when given, name the
        run and drafter instead of the file's. Bad input raises :class:`glance_law.io.LogError`
        (one line: file, line, fix)."""
        import os

        from glance_law.data.importers import import_logs
        from glance_law.data.io import write_table

        many = [paths] if isinstance(paths, (str, bytes, os.PathLike)) else list(paths)
        imp = import_logs([os.fsdecode(p) for p in many], format="glance", horizon=kw.get("horizon"),
                          task=kw.get("task"))
        table = imp.rounds_table
        n = 0 if table is None else table.num_rows
        if not n:
            return 0
        import pyarrow as pa
        for name in ("run_id", "drafter"):
            if kw.get(name) is not None:
                i = table.column_names.index(name)
                table = table.set_column(i, name, pa.array([str(kw[name])] * n, pa.string()))
        keep = [c for c in table.column_names if c in S.required_names(S.KIND_ROUNDS) or table.column(c).null_count < n]
        run_id = str(kw.get("run_id") or imp.parts[0][4].get("run_id") or "glance").replace("/", "_")
        run = kw.get("run") or run_metadata(run_id=run_id, source="glance")
        write_table(table.select(keep), Path(out_dir) / f"{run_id}-glance.parquet", S.KIND_ROUNDS, run)
        return n

    def close(self) -> None:
        self.writer.close()
