"""The streaming pyarrow reduction (the embedded default engine).

Each rounds file is read one record batch at a time (``batch_rows`` rows, string
columns dictionary-decoded), value-checked with :func:`glance_law.schema.check_values`
and reduced to partial cells (a dense ``bincount`` over the batch's key ranges, or a sort);
files are processed in parallel threads (``workers``) that add their partial cells to one
accumulator partitioned by bucket, where they are merged as they arrive, so memory is
bounded by a few batches plus the cells. (A file that turns out bad after some of its
batches were added is left out by a second pass when ``skip_bad``.) Float sums may differ
in the last bits between runs with several workers (the order of additions); counts never. String work happens on
dictionaries, never per row: the prompt bucket (md5) is computed once per distinct
(task, prompt_id) of a batch, and the stream of a round (run_id, prompt_id, condition)
is identified by a 64-bit hash of its strings.

Duplicate keys: every batch is cut into runs of one stream with strictly increasing
rounds; runs of a stream whose round ranges overlap are the only possible duplicates
(:func:`glance_law.scale.engines.suspect_streams`) and are confirmed by re-reading just those
streams from the files that hold them. Distinct prompts per (drafter, task) are counted
by 64-bit hashes of (task, prompt_id).
"""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from glance_law.data import schema as S
from glance_law.errors import GlanceError
from glance_law.scale.reduce import ENDED_AT_ZERO, Grid

from .sources import READ_COLUMNS, BadFiles, Source, blame, default_workers, suspect_streams

GROUP = ["td", "bucket", "hbin", "horizon", "accepted"]
STRINGS = ("run_id", "task", "prompt_id", "condition", "drafter")


@dataclass
class _Shared:
    """State shared by the worker threads: the global (task, drafter) codes."""

    grid: Grid
    buckets: int
    allowed: set | None
    td: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    cells: _Cells | None = None
    cells_lock: threading.Lock = field(default_factory=threading.Lock)
    #: files whose batches reached the cells (a file that fails after that forces a rerun without it)
    touched: set = field(default_factory=set)

    def td_code(self, task: str, drafter: str) -> int:
        with self.lock:
            return self.td.setdefault((task, drafter), len(self.td))

    def add_cells(self, cells: dict) -> None:
        with self.cells_lock:
            self.cells.add(cells)


@dataclass
class _Part:
    """What one file contributes."""

    rows: int = 0
    segments: list = field(default_factory=list)       # (stream hash, first round, last round) arrays
    prompts: list = field(default_factory=list)        # (td code, prompt hash) arrays
    horizon0: int = 0
    ended_at_zero: dict = field(default_factory=dict)   # (task, drafter) -> output-ending rounds cut to 0
    conditions: dict = field(default_factory=dict)
    filled: dict = field(default_factory=dict)


def _strings(table: pa.Table, name: str, default: str | None):
    """(int64 codes, values, nulls) of a string column; nulls get the code len(values) -> default."""
    n = table.num_rows
    if name not in table.column_names:
        return np.zeros(n, dtype=np.int64), [default], n
    arr = table.column(name).combine_chunks()
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    values = arr.dictionary.to_pylist()
    idx = arr.indices
    nulls = idx.null_count
    if nulls:
        idx = idx.fill_null(len(values))
        values = values + [default]
    return idx.to_numpy(zero_copy_only=False).astype(np.int64), values, nulls


def _unique(codes: np.ndarray, space: int):
    """(unique codes, inverse) of non-negative int codes below ``space``: a bitmap when it is small."""
    if space <= 4 * codes.size + (1 << 20):
        seen = np.zeros(space, dtype=bool)
        seen[codes] = True
        u = np.flatnonzero(seen)
        lut = np.cumsum(seen) - 1
        return u, lut[codes]
    u, inv = np.unique(codes, return_inverse=True)
    return u, inv.ravel()


def _stream_hash(run, rv, prompt, pv, cond, cv) -> np.ndarray:
    """64-bit hash of (run_id, prompt_id, condition) per row (hashing each distinct triple once)."""
    P, C = len(pv), len(cv)
    u, inv = _unique((run * P + prompt) * C + cond, len(rv) * P * C)
    h = np.fromiter((hash((rv[x // (P * C)], pv[(x // C) % P], cv[x % C])) for x in u.tolist()),
                    dtype=np.int64, count=u.size)
    return h[inv]


DRAFTED = "drafted_horizon"


def _ended_at_zero(table: pa.Table, L: np.ndarray) -> np.ndarray:
    """Rounds whose horizon an importer cut to 0 at the end of an output (accepted 0) while the
    drafter drafted ``drafted_horizon`` > 0 (not autoregressive rounds)."""
    if DRAFTED not in table.column_names:
        return np.zeros(L.size, dtype=bool)
    dh = table.column(DRAFTED)
    d = np.asarray(dh.fill_null(0).to_numpy(), dtype=np.int64) if dh.null_count else dh.to_numpy().astype(np.int64)
    return (L == 0) & (d > 0)


def _batch(table: pa.Table, sh: _Shared, part: _Part, check_keys: bool) -> None:
    n = table.num_rows
    ti, tv, _ = _strings(table, "task", None)
    pi, pv, _ = _strings(table, "prompt_id", None)
    ci, cv, cnull = _strings(table, "condition", S.CONDITIONS_DEFAULT)
    di, dv, dnull = _strings(table, "drafter", S.FILLED_WHEN_NULL["drafter"])
    part.filled["condition"] = part.filled.get("condition", 0) + cnull
    part.filled["drafter"] = part.filled.get("drafter", 0) + dnull
    hcol = table.column("root_entropy")
    H = np.asarray(hcol.to_numpy(), dtype=np.float32).astype(np.float64)
    # null entropy (not measured; NaN itself was refused by the contract check in _read, as were
    # entropies above 2^20 nats) goes to hbin -1 with sum_h 0
    hnull = np.asarray(hcol.is_null()) if hcol.null_count else None
    if hnull is not None:
        H[hnull] = 0.0
    np.maximum(H, 0.0, out=H)
    a = table.column("accepted").to_numpy().astype(np.int64)
    L = table.column("horizon").to_numpy().astype(np.int64)
    if check_keys:
        ri, rv, _ = _strings(table, "run_id", None)
        rnd = table.column("round").to_numpy().astype(np.int64)
        s = _stream_hash(ri, rv, pi, pv, ci, cv)
        brk = np.flatnonzero(np.r_[True, (s[1:] != s[:-1]) | (rnd[1:] <= rnd[:-1])])
        ends = np.r_[brk[1:] - 1, n - 1]
        part.segments.append((s[brk], rnd[brk].astype(np.int32), rnd[ends].astype(np.int32)))
    ok = np.ones(len(cv), dtype=bool) if sh.allowed is None else np.array([c in sh.allowed for c in cv])
    drafted = L > 0
    ended = _ended_at_zero(table, L)
    zero = ended & ok[ci]
    if zero.any():   # counted apart: a verification round the law's likelihood cannot read (scale.reduce)
        for k, c in zip(*np.unique(ti[zero] * len(dv) + di[zero], return_counts=True)):
            key = (tv[int(k) // len(dv)], dv[int(k) % len(dv)])
            part.ended_at_zero[key] = part.ended_at_zero.get(key, 0) + int(c)
    part.horizon0 += int(n - drafted.sum() - ended.sum())
    other = (drafted | ended) & ~ok[ci]   # rounds of the conditions left out, the output-ending ones too
    if other.any():
        for k, c in zip(*np.unique(ci[other], return_counts=True)):
            part.conditions[cv[k]] = part.conditions.get(cv[k], 0) + int(c)
    inc = drafted & ok[ci]
    if not inc.any():
        return
    if not inc.all():
        ti, pi, di, H, a, L = ti[inc], pi[inc], di[inc], H[inc], a[inc], L[inc]
        hnull = hnull[inc] if hnull is not None else None
    P, D = len(pv), len(dv)
    u, inv = _unique(ti * P + pi, len(tv) * P)
    ut, up = (u // P).tolist(), (u % P).tolist()
    from glance_law.scale.reduce import buckets_of
    bucket = buckets_of([tv[t] for t in ut], [pv[p] for p in up], sh.buckets)[inv]
    v, vinv = _unique(ti * D + di, len(tv) * D)
    td = np.array([sh.td_code(tv[x // D], dv[x % D]) for x in v.tolist()], dtype=np.int32)[vinv]
    # distinct prompts per (drafter, task): one hash per distinct (td, prompt) of the batch
    w, winv = _unique(td.astype(np.int64) * P + pi, (int(td.max()) + 1) * P)
    first = np.full(w.size, -1, dtype=np.int64)
    first[winv[::-1]] = np.arange(winv.size)[::-1]
    ph = np.fromiter((hash((tv[ti[i]], pv[pi[i]])) for i in first.tolist()), dtype=np.int64, count=w.size)
    part.prompts.append((td[first], ph))
    hbin = sh.grid.index(H)
    if hnull is not None:
        hbin[hnull] = -1
    sh.add_cells(_aggregate([td.astype(np.int64), bucket, hbin, L, a], [np.ones(H.size), H, H * H]))


KEY_TYPES = (np.int32, np.int32, np.int32, np.int16, np.int16)


def _aggregate(keys: list, values: list) -> dict:
    """Sum ``values`` (float arrays) over the distinct rows of ``keys`` (int arrays, in GROUP order):
    a dense ``bincount`` when the key space is small, else a stable sort (linear on the sorted runs
    that merges concatenate). Returns the keys (compact integer types, sorted lexicographically) and
    the sums as a dict."""
    n = keys[0].size
    lows = [int(k.min()) if n else 0 for k in keys]
    sizes = [int(k.max()) - lo + 1 if n else 1 for k, lo in zip(keys, lows)]
    space = float(np.prod([float(x) for x in sizes]))
    if space >= 2.0 ** 62:  # pragma: no cover - absurd key ranges: let Arrow hash them
        t = pa.table({**{g: k for g, k in zip(GROUP, keys)}, **{f"v{i}": v for i, v in enumerate(values)}})
        g = t.group_by(GROUP, use_threads=False).aggregate([(f"v{i}", "sum") for i in range(len(values))])
        g = g.sort_by([(c, "ascending") for c in GROUP])
        return {**{c: g.column(c).to_numpy().astype(t_) for c, t_ in zip(GROUP, KEY_TYPES)},
                "sums": [g.column(f"v{i}_sum").to_numpy() for i in range(len(values))]}
    key = np.zeros(n, dtype=np.int64)
    for k, lo, size in zip(keys, lows, sizes):
        key *= size
        key += k - lo
    if space <= max(4 * n, 1 << 22):
        first = np.bincount(key, values[0], int(space))
        u = np.flatnonzero(first)
        sums = [first[u]] + [np.bincount(key, v, int(space))[u] for v in values[1:]]
    else:
        order = np.argsort(key, kind="stable")
        key = key[order]
        start = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        u = key[start]
        del key
        sums = [np.add.reduceat(v[order], start) for v in values]
    out, rest = {}, u
    for name, lo, size, typ in reversed(list(zip(GROUP, lows, sizes, KEY_TYPES))):
        rest, r = np.divmod(rest, size)
        out[name] = (r + lo).astype(typ)
    out["sums"] = sums
    return out


def _rows(cells: dict) -> int:
    return cells["sums"][0].size


def _concat_merge(parts: list) -> dict:
    """Merge partial cells by adding their sums."""
    if len(parts) == 1:
        return parts[0]
    keys = [np.concatenate([p[g] for p in parts]) for g in GROUP]
    sums = [np.concatenate([p["sums"][i] for p in parts]) for i in range(3)]
    return _aggregate(keys, sums)


class _Cells:
    """Partial cells, partitioned by bucket so that every merge stays small: a partition merges its
    pending partials into its accumulated cells once they outgrow them (amortised, memory <= ~3x)."""

    def __init__(self, partitions: int = 16, floor: int = 200_000):
        self.P, self.floor = int(partitions), int(floor)
        self.acc: list = [None] * self.P
        self.pending: list = [[] for _ in range(self.P)]
        self.rows = [0] * self.P

    def add(self, cells: dict) -> None:
        if self.P == 1:
            parts = [(0, cells)]
        else:
            p = cells["bucket"].astype(np.int64) % self.P
            order = np.argsort(p, kind="stable")
            bounds = np.r_[0, np.cumsum(np.bincount(p, minlength=self.P))]
            parts = []
            for q in range(self.P):
                idx = order[bounds[q]:bounds[q + 1]]
                if idx.size:
                    parts.append((q, {**{g: cells[g][idx] for g in GROUP}, "sums": [v[idx] for v in cells["sums"]]}))
        for q, c in parts:
            self.pending[q].append(c)
            self.rows[q] += _rows(c)
            have = _rows(self.acc[q]) if self.acc[q] is not None else 0
            if self.rows[q] > max(have, self.floor):
                self._merge(q)

    def _merge(self, q: int) -> None:
        parts = ([self.acc[q]] if self.acc[q] is not None else []) + self.pending[q]
        if parts:
            self.acc[q] = _concat_merge(parts)
        self.pending[q], self.rows[q] = [], 0

    def partitions(self):
        """The merged partitions (each a dict of cells), emptying the accumulator."""
        for q in range(self.P):
            self._merge(q)
            if self.acc[q] is not None:
                yield self.acc[q]
            self.acc[q] = None


def _read(src: Source, columns, batch_rows: int):
    """Contract-checked record batches of one file (as tables), with their first row number."""
    from glance_law.data import uri
    from glance_law.data.io import LogError
    cols = [c for c in columns if c in src.columns]
    source = None
    try:
        source = uri.open_input(src.path)  # a store URI streams from the store: ranged reads per batch
        pf = pq.ParquetFile(source, read_dictionary=[c for c in cols if c in STRINGS], page_checksum_verification=True)
    except uri.StoreError as exc:
        raise LogError(src.path, exc.problem, exc.fix) from None
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types
        if source is not None and source is not src.path:
            source.close()
        raise LogError(src.path, f"could not be read ({str(exc).splitlines()[0][:120]})",
                       "the file may be truncated or corrupt; delete it and rerun the logger") from None
    start = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_rows, columns=cols, use_threads=False):
            table = pa.Table.from_batches([batch])
            p = S.check_values(S.KIND_ROUNDS, table)
            if p is not None:
                raise LogError(src.path, f"{p.problem} (rows counted from row {start} of the file)", p.fix,
                               p.column)
            yield start, table
            start += table.num_rows
    except LogError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise LogError(src.path, f"could not be read ({str(exc).splitlines()[0][:120]})",
                       "the file may be truncated or corrupt; delete it and rerun the logger") from None
    finally:
        pf.close()
        if source is not src.path:
            source.close()


def _reduce_file(src: Source, sh: _Shared, batch_rows: int, check_keys: bool):
    from glance_law.data.io import LogError
    part = _Part()
    try:
        for _, table in _read(src, READ_COLUMNS + (DRAFTED,), batch_rows):
            _batch(table, sh, part, check_keys)
            part.rows += table.num_rows
    except LogError as exc:
        return exc, part.rows > 0
    except GlanceError as exc:
        return LogError(src.path, str(exc)), part.rows > 0
    return part


def _exact_duplicates(sources: list[Source], files: np.ndarray, suspects: np.ndarray, batch_rows: int):
    """Every occurrence of a duplicated key among the suspect streams (re-reading only their files)."""
    frames = []
    cols = ("run_id", "prompt_id", "condition", "round")
    for f in np.unique(files).tolist():
        for _, t in _read(sources[f], cols, batch_rows):
            ri, rv, _ = _strings(t, "run_id", None)
            pi, pv, _ = _strings(t, "prompt_id", None)
            ci, cv, _ = _strings(t, "condition", S.CONDITIONS_DEFAULT)
            keep = np.isin(_stream_hash(ri, rv, pi, pv, ci, cv), suspects)
            if keep.any():
                frames.append(pd.DataFrame({"file": f, "run_id": np.asarray(rv, dtype=object)[ri[keep]],
                                            "prompt_id": np.asarray(pv, dtype=object)[pi[keep]],
                                            "condition": np.asarray(cv, dtype=object)[ci[keep]],
                                            "round": t.column("round").to_numpy()[keep].astype(np.int64)}))
    if not frames:
        return pd.DataFrame(columns=["file", *cols])
    rows = pd.concat(frames, ignore_index=True)
    return rows[rows.duplicated(list(cols), keep=False)]


def reduce(sources: list[Source], *, grid: Grid, buckets: int, condition, check_keys: bool = True,
           skip_bad: bool = False, batch_rows: int = 1 << 18, workers: int | None = None):
    """Reduce rounds files with pyarrow; returns (cells DataFrame, info). See the module docstring."""
    sh = _Shared(grid, int(buckets), None if condition is None else set(condition))
    workers = default_workers(len(sources)) if workers is None else max(1, int(workers))
    cells = _Cells()
    sh.cells = cells
    seg_s, seg_lo, seg_hi, seg_f, prompts = [], [], [], [], []
    info = {"rounds_read": 0, "excluded_horizon0": 0, "excluded_conditions": {}, "filled": {}}
    bad: list[tuple[str, str]] = []
    rerun = False  # a bad file whose first batches already reached the shared cells
    with ThreadPoolExecutor(max_workers=workers) as pool:
        queue: deque = deque()
        nxt = 0
        while nxt < len(sources) or queue:
            while nxt < len(sources) and len(queue) < 2 * workers:
                queue.append((nxt, pool.submit(_reduce_file, sources[nxt], sh, int(batch_rows), check_keys)))
                nxt += 1
            i, fut = queue.popleft()
            part = fut.result()
            if not isinstance(part, _Part):
                err, contributed = part
                if not skip_bad:
                    for _, f in queue:
                        f.cancel()
                    raise BadFiles([(sources[i].path, str(err))])
                bad.append((sources[i].path, str(err)))
                rerun = rerun or contributed
                continue
            info["rounds_read"] += part.rows
            info["excluded_horizon0"] += part.horizon0
            for (t, d), k in part.ended_at_zero.items():
                z = info.setdefault(ENDED_AT_ZERO, {}).setdefault(d, {})
                z[t] = z.get(t, 0) + k
            for k, v in part.conditions.items():
                info["excluded_conditions"][k] = info["excluded_conditions"].get(k, 0) + v
            for k, v in part.filled.items():
                info["filled"][k] = info["filled"].get(k, 0) + v
            for s, lo, hi in part.segments:
                seg_s.append(s), seg_lo.append(lo), seg_hi.append(hi), seg_f.append(np.full(s.size, i, np.int32))
            prompts += part.prompts
            if len(prompts) > 64:
                prompts = [_unique_pairs(prompts)]
            part = None
    if rerun:
        raise BadFiles(bad)
    if check_keys and seg_s:
        s, f = np.concatenate(seg_s), np.concatenate(seg_f)
        suspects = suspect_streams(s, np.concatenate(seg_lo), np.concatenate(seg_hi))
        if suspects.size:
            files = np.unique(f[np.isin(s, suspects)])
            dups = _exact_duplicates(sources, files, suspects, int(batch_rows))
            found = blame(dups, sources)
            if found:
                raise BadFiles(found if skip_bad else found[:1])
    for col in ("condition", "drafter"):  # as the reader: rows of files without the column count, unless no file has it
        if not any(col in s.columns for s in sources):
            info["filled"][col] = 0
    names = {code: td for td, code in sh.td.items()}
    info["prompts"] = {}
    if prompts:
        tdc, ph = _unique_pairs(prompts)
        codes, counts = np.unique(tdc, return_counts=True)
        for c, k in zip(codes.tolist(), counts.tolist()):
            task, drafter = names[c]
            info["prompts"].setdefault(drafter, {})[task] = int(k)
    info["bad_files"] = bad
    parts = list(cells.partitions())
    if not parts:
        return pd.DataFrame(columns=["task", "drafter", "bucket", "hbin", "horizon", "accepted", "n", "sum_h",
                                     "sum_h2"]), info
    tasks = sorted({t for t, _ in names.values()})
    drafters = sorted({d for _, d in names.values()})
    lut_t = np.array([tasks.index(names[c][0]) for c in range(len(names))], dtype=np.int64)
    lut_d = np.array([drafters.index(names[c][1]) for c in range(len(names))], dtype=np.int64)
    total = sum(_rows(p) for p in parts)
    out = {g: np.empty(total, dtype=t) for g, t in zip(GROUP, KEY_TYPES)}
    out.update({name: np.empty(total) for name in ("n", "sum_h", "sum_h2")})
    at = 0
    while parts:  # copy partition by partition, releasing each one
        p = parts.pop(0)
        k = _rows(p)
        for g in GROUP:
            out[g][at:at + k] = p[g]
        for i, name in enumerate(("n", "sum_h", "sum_h2")):
            out[name][at:at + k] = p["sums"][i]
        at += k
        del p
    td = out.pop("td")
    cells_df = pd.DataFrame({"task": pd.Categorical.from_codes(lut_t[td], tasks),
                             "drafter": pd.Categorical.from_codes(lut_d[td], drafters), **out})
    return cells_df, info


def _unique_pairs(pairs: list) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (td code, prompt hash) pairs among a list of pair arrays."""
    tdc = np.concatenate([p[0] for p in pairs]).astype(np.int64)
    ph = np.concatenate([p[1] for p in pairs]).astype(np.int64)
    df = pd.DataFrame({"t": tdc, "p": ph}).drop_duplicates()
    return df["t"].to_numpy(), df["p"].to_numpy()
