"""Importers of foreign decode logs into the round-log contract (no torch).

::

    from glance_law.data.importers import import_logs, detect_format
    imp = import_logs(["answers/"], horizon=None, skip_bad=False)
    imp.rounds, imp.prompts, imp.notes, imp.format, imp.sources

Formats (:data:`FORMATS`; the format is detected from the records, never the file name):
``spec-bench`` (:mod:`.spec_bench`), ``glance`` (:mod:`.glance`), ``vllm`` (:mod:`.vllm`),
``sglang`` (:mod:`.sglang`). ``docs/your-logs.md`` says what each carries and which
analyses it allows. The frames follow the contract (``docs/schema.md``); columns the
format does not carry are absent, ``root_entropy`` is null where the source did not
measure it, and each importer adds a few extra columns (``turn``, ``ends_output``,
``drafted_horizon``, ``extended``, ``aggregate``) that analyses may ask for by name.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import pandas as pd

from glance_law.data.importers.common import (
    FOREIGN_SUFFIXES,
    FORMATS,
    QUESTIONS,
    FileResult,
    concat,
    detect_format,
    is_foreign,
    open_bytes,
    parse_horizon_option,
    read_json_lines,
    realkey,
    supported_line,
)
from glance_law.data.inputs import check_regular, collector_paused
from glance_law.data.tables import LogError
from glance_law.data.tasks import NO_TASK
from glance_law.errors import GlanceError

__all__ = ["import_logs", "import_file", "clear_cache", "with_categories", "detect_format", "Imported", "FORMATS", "FOREIGN_SUFFIXES",
           "is_foreign", "foreign_files", "parse_horizon_option", "supported_line", "METHODS", "RUNS_NOTE"]

from glance_law.data.importers.spec_bench import METHODS  # noqa: E402  (the documented method table)


@dataclass(frozen=True)
class Imported:
    """What :func:`import_logs` made of foreign logs.

    ``rounds``: contract rounds as a pandas frame (no rows for prompt-level sources; strings as
    categoricals, a null ``root_entropy`` as NaN, as :func:`glance_law.io.read_logs` returns
    them); ``prompts``: contract prompt rows; ``rounds_table`` / ``prompts_table``: the same as
    contract-typed Arrow tables (nulls kept); ``notes``: one line per oddity and what was done
    with it; ``format``: the format(s) read (``"spec-bench"``, or several joined by ``+``);
    ``sources``: the files read; ``skipped``: (file, reason) of files refused under
    ``skip_bad``; ``parts``: per source file (path, format, rounds rows, prompt rows,
    glance.run document), in the order of the rows."""

    rounds_table: object
    prompts_table: object
    notes: tuple[str, ...]
    format: str
    sources: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    parts: tuple[tuple[str, str, int, int, Mapping], ...] = ()

    @cached_property
    def rounds(self) -> pd.DataFrame:
        return _frame(self.rounds_table)

    @cached_property
    def prompts(self) -> pd.DataFrame:
        return _frame(self.prompts_table)

    @property
    def entropy(self) -> bool:
        """Whether any round carries a measured root_entropy."""
        t = self.rounds_table
        return t is not None and "root_entropy" in t.column_names and t.column("root_entropy").null_count < t.num_rows


def _frame(table) -> pd.DataFrame:
    if table is None:
        return pd.DataFrame()
    return table.to_pandas()


_MODULES = {"spec-bench": "spec_bench", "glance": "glance", "vllm": "vllm", "sglang": "sglang"}
_CACHE: dict = {}
_CACHE_MAX = 64


def foreign_files(paths, problems: list | None = None) -> list:
    """Files, folders (every importable file below them, hidden ones excluded) and globs;
    local ones as :class:`pathlib.Path`, URIs (``s3://bucket/answers/``, a glob on one; see
    :mod:`glance_law.data.uri`) as the URI strings of the objects, read in place. A FIFO,
    device or dangling link raises :class:`LogError`, or, when ``problems`` is a list
    (``skip_bad``), is appended to it as ``(path, reason)`` and left out."""
    import glob as _glob

    from glance_law.data import uri
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]

    def regular(q) -> bool:
        try:
            check_regular(q)      # a FIFO, a device, a dangling link: one line naming it
        except LogError as exc:
            if problems is None:
                raise
            problems.append((str(q), str(exc)))
            return False
        return True

    out: list = []
    for p in paths:
        if uri.is_uri(p):
            try:
                out.extend(uri.expand([p], accept=is_foreign,
                                      what="importable files (" + ", ".join(FOREIGN_SUFFIXES) + ")"))
            except uri.StoreError as exc:
                raise LogError(exc.location, exc.problem, exc.fix) from None
            continue
        s = str(p)
        cand = [Path(h) for h in sorted(_glob.glob(s, recursive=True))] if set("*?[") & set(s) and not \
            Path(s).exists() else [Path(s)]
        if not cand:
            raise LogError(s, "the pattern matches no files", "check the path")
        for c in cand:
            if c.is_dir():
                found = sorted(q for q in c.rglob("*") if not q.name.startswith(".") and is_foreign(q)
                               and not q.is_dir())
                found = [q for q in found if regular(q)]    # a FIFO or device: refused or listed, never silent
                if not found and problems:
                    continue
                if not found:
                    raise LogError(c, "the folder holds no importable files (" + ", ".join(FOREIGN_SUFFIXES) + ")",
                                   supported_line())
                out.extend(found)
            elif c.is_file():
                out.append(c)
            elif os.path.lexists(c):
                regular(c)
            else:
                raise LogError(c, "no such file or folder", "check the path")
    seen, uniq = set(), []
    for p in out:
        k = p if isinstance(p, str) else os.path.realpath(p)
        if k not in seen:
            seen.add(k)
            uniq.append(p)
    return uniq


def _key(h):
    if isinstance(h, Mapping):
        return tuple(sorted((str(k), int(v)) for k, v in h.items()))
    return h


def import_file(path, *, format: str | None = None, horizon=None, skip_bad: bool = False,
                task: str | None = None, chain=None) -> FileResult:
    """One file through its importer (cached by path, size and mtime, and the options).
    ``chain``: a :class:`glance_law.data.importers.vllm.ScrapeChain` carrying the counters of
    the vLLM scrape files read before this one in the same import (they are one run)."""
    ck = (realkey(path), format, _key(horizon), bool(skip_bad), task, None if chain is None else chain.key())
    hit = _CACHE.get(ck)
    if hit is None and not skip_bad:
        # the same file imported earlier in this process with skip_bad (e.g. a CLI's --skip-bad
        # rounds read, then its prompt rows): reuse that import, whose notes list what was skipped
        hit = _CACHE.get(ck[:3] + (True,) + ck[4:])
    if hit is not None:
        res, after = hit
        if chain is not None and after is not None:
            chain.restore(after)
        return res
    try:
        res, after = _import_one(path, format, horizon, skip_bad, task, chain)
    except LogError as exc:
        raise exc if exc.path is not None else exc.at(path) from None
    except GlanceError as exc:
        raise LogError(path, str(exc)) from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, UnicodeError,
            RecursionError, ArithmeticError) as exc:
        # a shape no check above foresaw: still one line naming the file (skip_bad skips it), never a traceback
        msg = str(exc).splitlines()[0][:160] if str(exc) else ""
        raise LogError(path, f"cannot be imported ({type(exc).__name__}: {msg})",
                       "check the file against its format (docs/your-logs.md), or pass --skip-bad to leave it "
                       "out") from None
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[ck] = (res, after)
    return res


def clear_cache() -> None:
    """Forget every cached import (:func:`import_file` caches by path, size, mtime and options, and
    hands a lenient ``skip_bad`` import of a file to a later strict read of it, so that a command's
    ``--skip-bad`` covers its every read of the file). Call it to start over, as a fresh process would."""
    _CACHE.clear()


def _import_one(path, format, horizon, skip_bad, task, chain):
    with collector_paused():        # the file's records are dropped (on return) before it resumes
        return _import_records(path, format, horizon, skip_bad, task, chain)


def _import_records(path, format, horizon, skip_bad, task, chain):
    raw = open_bytes(path)
    fmt = format or detect_format(path, raw)
    if fmt not in FORMATS and fmt != QUESTIONS:
        raise LogError(None, f"unknown format {fmt!r}", supported_line())
    after = None
    if fmt == "vllm":
        from glance_law.data.importers import vllm as mod
        before = None if chain is None else chain.key()
        res = mod.import_file(path, horizon=horizon, skip_bad=skip_bad, task=task, raw=raw, chain=chain)
        after = None if chain is None or chain.key() == before else chain.copy()
    else:
        lines = read_json_lines(path, skip_bad, raw)
        if fmt == QUESTIONS:
            from glance_law.data.importers.spec_bench import questions_file
            res = questions_file(path, lines)
        elif fmt == "spec-bench":
            from glance_law.data.importers import spec_bench as mod
            res = mod.import_file(path, lines, horizon=horizon, task=task)
        elif fmt == "glance":
            from glance_law.data.importers import glance as mod
            res = mod.import_file(path, lines, horizon=horizon, task=task)
        else:
            from glance_law.data.importers import sglang as mod
            res = mod.import_file(path, lines, horizon=horizon, task=task)
    return res, after


def import_logs(paths, *, format: str | None = None, horizon=None, skip_bad: bool = False,
                task: str | None = None) -> Imported:
    """Import foreign logs (files, folders, globs) into contract frames.

    ``format``: one of :data:`FORMATS` (default: detected per file from its records).
    ``horizon``: the deepest draft offset L, overriding the method table (an int for every
    file, or a mapping from method / model_id / file name / stem to L). ``skip_bad``: skip
    corrupt lines and refused files, listing each in ``notes`` / ``skipped``; without it the
    first problem raises :class:`glance_law.io.LogError` (one line: file, line, fix).
    ``task``: the task of records that carry none (default ``unknown``).
    """
    if format is not None and format not in FORMATS:
        raise LogError(None, f"unknown format {format!r}", supported_line())
    results: list[FileResult] = []
    skipped: list[tuple[str, str]] = []
    files = foreign_files(paths, skipped if skip_bad else None) if not isinstance(paths, FileResult) else []
    from glance_law.data.importers.vllm import ScrapeChain
    chain = ScrapeChain()         # vLLM scrape files: one run, read in the order given
    for f in files:
        try:
            results.append(import_file(f, format=format, horizon=horizon, skip_bad=skip_bad, task=task,
                                       chain=chain))
        except LogError as exc:
            if not skip_bad:
                raise
            exc = exc if exc.path is not None else exc.at(f)
            skipped.append((str(f), str(exc)))
    return combine(results, skipped)


def combine(results: Iterable[FileResult], skipped=()) -> Imported:
    results = list(results)
    notes: list[str] = []
    for r in results:
        notes.extend(r.notes)
    for _path, why in skipped:
        notes.append(f"skipped {why}")
    data = [r for r in results if r.format != QUESTIONS]
    cats: dict = {}
    for r in results:
        if r.format == QUESTIONS:
            cats.update((r.run or {}).get("categories", {}))
    if cats:              # a question file among the inputs: categories of the answers that carry none
        data = [with_categories(r, cats, notes) for r in data]
    data = _separate_runs(data, notes)
    if not data:
        if skipped:
            raise LogError(None, f"every file was refused ({len(skipped)}); first: {skipped[0][1]}",
                           "fix the files or point at other logs")
        raise LogError(", ".join(r.path for r in results[:3]) or None, "no decode logs among the inputs "
                       "(only question files)", "pass the model_answer files too")
    R = concat([r.rounds for r in data])
    P = concat([r.prompts for r in data])
    fmts = "+".join(dict.fromkeys(r.format for r in data))
    parts = tuple((r.path, r.format, r.n_rounds, r.n_prompts, r.run) for r in data)
    return Imported(R, P, tuple(notes), fmts, tuple(r.path for r in results), tuple(skipped), parts)


def with_categories(res: FileResult, cats: Mapping, notes: list[str]) -> FileResult:
    """``res`` with the task of its rows that have none (task ``unknown``: the answers logged no
    category, and no question file lay beside them) taken from ``cats`` (question_id -> category,
    from a question file given in the same call) where it holds their question id; a note says
    how many answers did."""
    import pyarrow as pa

    def relabel(table):
        hit = _category_hits(table, cats)
        if hit is None:
            return table, 0
        values, pids = hit
        col = pa.array(values, type=pa.string())
        typ = table.schema.field("task").type
        col = col.dictionary_encode() if pa.types.is_dictionary(typ) else col.cast(typ)
        if pa.types.is_dictionary(typ) and col.type != typ:
            col = col.cast(typ)
        i = table.column_names.index("task")
        return table.set_column(i, table.schema.field("task").with_type(col.type), col), pids

    rounds, _ = relabel(res.rounds)
    prompts, n = relabel(res.prompts)
    if rounds is res.rounds and prompts is res.prompts:
        return res
    notes.append(f"{res.path}: {n} answer(s) without a category take it from the question file given among the "
                 "inputs (by question_id)")
    return replace(res, rounds=rounds, prompts=prompts)


def _codes(col):
    """(per-row dictionary codes, -1 for a null; the dictionary's values) of a text column."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    col = pa.table({"c": col}).unify_dictionaries().column("c")
    if not col.num_chunks:
        return np.zeros(0, np.int64), []
    codes = [pc.fill_null(c.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64) for c in col.chunks]
    return np.concatenate(codes), col.chunk(0).dictionary.to_pylist()


def _may_hold(col, test) -> bool:
    """Whether a value of the text column ``col`` may pass ``test`` (nulls never do): False only
    where the column is dictionary-encoded and no value of its dictionaries passes, so a caller
    that looks for such values can stop without a Python object or a code per row."""
    import pyarrow as pa
    if not pa.types.is_dictionary(col.type):
        return True
    return any(v is not None and test(v) for c in col.chunks for v in c.dictionary.to_pylist())


def _category_hits(table, cats: Mapping):
    """For :func:`with_categories`: None when no row of ``table`` has task ``unknown`` and a
    prompt_id that ``cats`` holds; else (every row's task with those taken from ``cats``, the
    number of distinct prompt ids taken). Decided on the columns' dictionaries, so a table with
    no such row costs no Python object per row."""
    import numpy as np
    if table is None or "task" not in table.column_names or "prompt_id" not in table.column_names:
        return None
    if not _may_hold(table.column("task"), lambda v: str(v) == NO_TASK):
        return None
    tcodes, tvals = _codes(table.column("task"))
    unknown = [i for i, v in enumerate(tvals) if v is not None and str(v) == NO_TASK]
    if not unknown:
        return None
    pcodes, pvals = _codes(table.column("prompt_id"))
    new = [None if v is None else cats.get(str(v)) for v in pvals]
    new = [None if x is None or (isinstance(x, float) and x != x) else x for x in new]
    known = np.array([x is not None for x in new] + [False], dtype=bool)      # [-1]: a null prompt_id
    hit = np.isin(tcodes, unknown) & known[pcodes]
    if not hit.any():
        return None
    values = np.array([None if v is None else str(v) for v in tvals] + [None], dtype=object)[tcodes]
    values[hit] = np.array(new + [None], dtype=object)[pcodes[hit]]
    return values.tolist(), len({str(pvals[c]) for c in np.unique(pcodes[hit]).tolist()})


#: Prefix of the notes that say which runs the analyses keep apart or pool (the CLIs print them).
RUNS_NOTE = "runs: "


def _distinct(table, names) -> set:
    """The distinct tuples of the columns ``names`` over the rows of an Arrow table (None for a
    null, or for a column the table lacks), from the columns' dictionary codes: no Python
    object per row."""
    import math

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    have = [n for n in names if n in table.column_names]
    out: set = set()
    for b in table.select(have).to_batches():
        if not b.num_rows:
            continue
        codes, values = [], []
        for n in names:
            if n not in have or pa.types.is_null(b.schema.field(n).type):
                codes.append(None)
                values.append([None])
                continue
            a = b.column(n)
            if not pa.types.is_dictionary(a.type):
                a = a.dictionary_encode()
            vals = a.dictionary.to_pylist() + [None]
            if len(vals) == 2 and not a.null_count:          # one value on every row (an importer's constant)
                codes.append(None)
                values.append(vals[:1])
                continue
            codes.append(pc.fill_null(a.indices, len(vals) - 1).to_numpy(zero_copy_only=False).astype(np.int64))
            values.append(vals)
        if all(c is None for c in codes):
            out.add(tuple(v[0] for v in values))
            continue
        codes = [np.zeros(b.num_rows, np.int64) if c is None else c for c in codes]
        sizes = [len(v) for v in values]
        if math.prod(sizes) < 1 << 62:        # one integer per row (mixed radix); counted where the span is small
            key = np.ravel_multi_index(codes, sizes)
            span = math.prod(sizes)
            found = np.flatnonzero(np.bincount(key, minlength=span)) if span <= 4 * b.num_rows + 4096 \
                else np.unique(key)
            rows = np.stack(np.unravel_index(found, sizes), axis=1)
        else:
            rows = np.unique(np.stack(codes, axis=1), axis=0)
        out.update(zip(*(map(v.__getitem__, col) for v, col in zip(values, rows.T.tolist()))))
    return out


def _arms(res: FileResult) -> set:
    """The (target, drafter) pairs of one file's rows (target None where not named)."""
    out: set = set()
    for t in (res.rounds, res.prompts):
        if t is None or "drafter" not in t.column_names:
            continue
        out |= _distinct(t, ("target", "drafter"))
    return out


def _relabel(table, old: str, new: str):
    """``table`` with drafter ``old`` renamed ``new`` (a new table; the cached import is not touched)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if table is None or "drafter" not in table.column_names:
        return table
    col = table.column("drafter")
    if col.num_chunks == 1 and pa.types.is_dictionary(col.type) and col.type.index_type == pa.int32() \
            and len(col) and not col.null_count and len(col.chunk(0).dictionary) == 1:
        # one drafter on every row (as an importer writes it): rename the dictionary's one entry
        # (what encoding the renamed strings would give), not each row
        (name,) = col.chunk(0).dictionary.to_pylist()
        col = pa.chunked_array([pa.DictionaryArray.from_arrays(
            col.chunk(0).indices, pa.array([new if name == old else name], pa.string()))])
    else:
        col = col.cast(pa.string())
        col = pc.if_else(pc.equal(col, old), pa.scalar(new, pa.string()), col).dictionary_encode()
    return table.set_column(table.column_names.index("drafter"), "drafter", col)


def _distinct_tails(stems: list) -> list:
    """The stems without their common leading '-'-separated words (``vicuna-7b-v1.3-ssd-OLD-70d9e9b``,
    ``vicuna-7b-v1.3-ssd-float16-temperature-0.0`` -> ``OLD-70d9e9b``, ``float16-temperature-0.0``);
    the whole stems where that would leave one empty or two equal."""
    words = [st.split("-") for st in stems]
    k = 0
    while all(len(w) > k + 1 for w in words) and len({w[k] for w in words}) == 1:
        k += 1
    tails = ["-".join(w[k:]) for w in words]
    return tails if all(tails) and len(set(tails)) == len(tails) else list(stems)


def _prompt_keys(res: FileResult, target, drafter: str) -> set:
    """The (task, prompt_id) pairs of one file's rows of one arm."""
    for t in (res.prompts, res.rounds):
        if t is None or not {"drafter", "prompt_id"} <= set(t.column_names):
            continue
        return {(str(a), str(b)) for a, b, x, y in _distinct(t, ("task", "prompt_id", "drafter", "target"))
                if x == drafter and y == target}
    return set()


def _separate_runs(data: list, notes: list) -> list:
    """Files that hold the same method on the same target *over shared questions* (two runs, e.g.
    a benchmark rerun at another commit) are kept apart: the drafter of each becomes
    ``"<drafter> [<file stem>]"``, said in a note. A file of the arm whose questions no other file
    holds (one benchmark split over files, or several benchmarks of one model) keeps the plain
    drafter: those are pooled as one run, noted.
    The autoregressive arm (``ar``) is the timing baseline: repeated baseline files of one target
    are pooled per prompt there (noted by the ledger), not relabelled."""

    from glance_law.data.importers.common import run_base
    for r in data:
        cols = [t.column("run_id") for t in (r.rounds, r.prompts) if t is not None and "run_id" in t.column_names]
        if not any(_may_hold(c, lambda v: "#run" in str(v) or "#choice" in str(v)) for c in cols):
            continue            # no run id names a repeat or a choice: the note below is not written
        runs = sorted({str(x) for c in cols for x in c.unique().to_pylist()})
        if len(runs) > 1 and any("#run" in x or "#choice" in x for x in runs):
            how = " and ".join(w for w, tag in (("appended in one file (question ids repeat)", "#run"),
                                                 ("of several choices per answer", "#choice"))
                               if any(tag in x for x in runs))
            notes.append(f"{RUNS_NOTE}{run_base(r.path)}: {len(runs)} runs {how} are pooled as repeated decodes of "
                         "the same questions: one cluster per question, the timing ledger takes total ms / total "
                         "tokens per question")
    owners: dict = {}
    for i, r in enumerate(data):
        for arm in _arms(r):
            owners.setdefault(arm, []).append(i)
    clash = {arm: idx for arm, idx in owners.items() if len(idx) > 1}
    if not clash:
        return data
    out = list(data)
    for (target, drafter), idx in sorted(clash.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        stems = [run_base(data[i].path).split("/")[-1] for i in idx]
        on = f" on target {target}" if target is not None else ""
        if drafter == "ar":
            notes.append(f"{RUNS_NOTE}{len(idx)} files hold the autoregressive (vanilla) arm{on} ({', '.join(stems)}): as a "
                         "timing baseline they are pooled per prompt (total ms / total tokens)")
            continue
        keys = [_prompt_keys(data[i], target, drafter) for i in idx]
        shared = [bool(k & set().union(*(keys[:j] + keys[j + 1:]))) for j, k in enumerate(keys)]
        alone = [st for st, sh in zip(stems, shared) if not sh]
        if alone:        # questions no other file of the arm holds: part of one run, pooled
            notes.append(f"{RUNS_NOTE}{len(alone)} file(s) hold drafter '{drafter}'{on} over questions no other file "
                         f"of it holds ({', '.join(alone)}): pooled as one run '{drafter}'")
        idx = [i for i, sh in zip(idx, shared) if sh]
        stems = [st for st, sh in zip(stems, shared) if sh]
        if not idx:
            continue
        labels = [f"{drafter} [{st}]" for st in _distinct_tails(stems)]
        if len(set(labels)) < len(labels):       # same stem in two folders: the run id
            labels = [f"{drafter} [{run_base(data[i].path)}]" for i in idx]
        for i, lab in zip(idx, labels):
            out[i] = replace(out[i], rounds=_relabel(out[i].rounds, drafter, lab),
                             prompts=_relabel(out[i].prompts, drafter, lab))
        notes.append(f"{RUNS_NOTE}{len(idx)} files hold drafter '{drafter}'{on} (different runs: "
                     f"{', '.join(stems)}): kept apart, never pooled, as " + ", ".join(f"'{x}'" for x in labels)
                     + " (pass one file to analyse one run alone)")
    return out
