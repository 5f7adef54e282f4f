"""Engines that reduce round logs to the law's sufficient statistics (:mod:`glance_law.reduce`).

``reduce_logs(paths, engine="arrow")`` is the entry point. It sorts the inputs by
``glance.kind`` (rounds files are reduced, ``reduced`` files merged in, other kinds
ignored), checks every rounds file's metadata, required columns and column types
from its footer (as :func:`glance_law.io.read_logs` does), runs the engine, and
returns a :class:`glance_law.reduce.Reduced`:

* ``arrow`` (:mod:`.arrow`): streaming pyarrow, one record batch at a time, files
  in parallel threads; memory is bounded by the batch size and the number of cells.
  The embedded default.
* ``duckdb`` (:mod:`.duck`): the same reduction as DuckDB SQL over ``read_parquet``.
* ``spark`` (:mod:`.spark`): the same reduction as Spark SQL (PySpark, an optional
  dependency: ``pip install glance-law[spark]``).

Every engine applies the reader's value checks to the columns it reads (non-null
keys, finite non-negative entropy, 0 <= accepted <= horizon, round >= 0), the law's
exclusions (horizon == 0, other conditions; counted), and the reader's duplicate-key
rule: a (run_id, prompt_id, condition, round) may occur once among all files, the
later file in input order is blamed. Engines find candidate duplicates cheaply
(increasing runs of rounds per prompt whose ranges overlap, or per-file round
ranges that are not dense) and confirm them exactly. A bad file stops the
reduction with one line naming it (or, with ``skip_bad``, is left out and listed).
"""
from __future__ import annotations

from glance_law.errors import GlanceError
from glance_law.scale.reduce import (
    DEFAULT_BUCKETS,
    Grid,
    Reduced,
    check_buckets,
    merge,
    normalize_cells,
    normalize_condition,
    plain_drafters,
    read_reduced,
)

from .sources import (
    READ_COLUMNS,
    BadFiles,
    Source,
    blame,
    refuse_mixing,
    scan,
    source_id,
    suspect_streams,
    verify_pages,
)

__all__ = ["ENGINES", "Source", "BadFiles", "scan", "reduce_logs", "READ_COLUMNS", "suspect_streams", "blame",
           "verify_pages"]

ENGINES = ("arrow", "duckdb", "spark")


def _engine(name: str):
    if name == "arrow":
        from . import arrow as mod
    elif name == "duckdb":
        from . import duck as mod
    elif name == "spark":
        from . import spark as mod
    else:
        raise GlanceError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    return mod


def reduce_logs(paths, engine: str = "arrow", *, buckets: int = DEFAULT_BUCKETS, grid: Grid | None = None,
                condition="matched", skip_bad: bool = False, check_keys: bool = True, horizon=None,
                chain=None, page_check: bool = True, **engine_options) -> Reduced:
    """Reduce the round logs among ``paths`` (files, folders, globs) with ``engine`` and merge any
    reduced files among them. ``condition``: the conditions kept (None pools all).
    ``engine_options`` go to the engine (arrow: ``batch_rows``, ``workers``; duckdb: ``threads``,
    ``memory_limit``, ``temp_directory``; spark: ``spark`` (a SparkSession), ``master`` (a master
    URL: :mod:`.spark`)).

    Parameters
    ----------
    paths : str, Path or sequence
        Files, folders or globs; rounds files are reduced, reduced files merged in.
    engine : str, default "arrow"
        "arrow", "duckdb" or "spark".
    buckets : int, default 256
        Prompt buckets per task.
    grid : Grid, optional
        The entropy grid (default ``Grid()``).
    condition : str or sequence, default "matched"
        Conditions kept (None pools all).
    skip_bad : bool, default False
        Leave bad files out (listed in ``info["skipped"]``) instead of stopping.
    check_keys : bool, default True
        Refuse duplicate rounds across files.
    horizon : int or mapping, optional
        For foreign logs imported in memory: the deepest draft offset L overriding the method
        table (:func:`glance_law.data.importers.import_logs`).
    chain : sequence of str, optional
        Drafters declared to have drafted one top-1 chain (``--chain``; ``"*"``: every drafter):
        recorded in ``info["declared"]`` and the notes (a reduction keeps no per-round shape).
    page_check : bool, default True
        With an engine whose reader does not verify Parquet page checksums (duckdb, spark), verify
        them first in a pyarrow pass over the columns the reduction reads: duckdb's streamed on
        this machine (:func:`.sources.verify_pages`), spark's on the executors
        (:func:`.spark.bad_pages`); a file that fails is refused (or, with ``skip_bad``, left out
        and listed). The arrow engine verifies them as it reads, whatever this says.
    **engine_options
        arrow: ``batch_rows``, ``workers``; duckdb: ``threads``, ``memory_limit``,
        ``temp_directory``; spark: ``spark`` (a SparkSession), ``master`` (a master URL).

    Returns
    -------
    Reduced
        The cells and their metadata.

    Examples
    --------
    >>> import glance_law as gl
    >>> red = gl.reduce_logs("data/example")  # doctest: +SKIP
    """
    from glance_law.data.io import LogError
    grid = grid if grid is not None else Grid()
    B = check_buckets(buckets)
    cond = normalize_condition(condition)
    mod = _engine(engine)
    from glance_law.data.io import expand_paths, split_foreign
    found: list = []     # broken links and unlistable folders (with skip_bad): listed as skipped below
    files, foreign = split_foreign(expand_paths(paths, found if skip_bad else None))
    parts: list[Reduced] = []
    if foreign:  # .jsonl/.jsonl.gz/.prom logs: imported in memory, reduced in pandas, merged below
        from glance_law.data.importers import import_logs
        from glance_law.scale.reduce import reduce_frame
        imp = import_logs(foreign, skip_bad=skip_bad, horizon=horizon)
        if len(imp.rounds):
            red = reduce_frame(imp.rounds, buckets=B, grid=grid, condition=cond)
            parts.append(Reduced(red.cells, red.grid, red.buckets,
                                 {**red.info, "skipped": [list(s) for s in imp.skipped], "imported": list(imp.notes),
                                  "sources": [{"engine": "import", "files": len(imp.sources),
                                               "rounds_read": int(red.info.get("rounds_read", 0))}]}))
        per_turn = [p[0] for p in imp.parts if p[2] == 0 and p[3] > 0]     # files of prompt rows only
        drafted = bool(len(imp.rounds)) and bool((imp.rounds["horizon"].to_numpy() > 0).any())
        if not files:
            if not parts or (per_turn and not drafted):
                from glance_law.data.io import PROMPTS_ONLY, PROMPTS_ONLY_FIX
                where = ", ".join(str(p) for p in (per_turn or foreign)[:3]) + (" ..." if len(per_turn or foreign) > 3 else "")
                raise LogError(where, PROMPTS_ONLY, "a reduction needs per-round rows; " + PROMPTS_ONLY_FIX)
            return _declare(merge(parts), chain) if chain else merge(parts)
    rounds, reduced, _, skipped = scan(files, skip_bad)
    refuse_mixing(rounds, reduced)      # a reduction beside the rounds it came from: counted twice
    skipped = list(found) + list(skipped)
    own_check = getattr(mod, "OWN_PAGE_CHECK", False)      # spark: on the executors, never on the driver
    if own_check:
        engine_options = {**engine_options, "page_check": page_check}
    elif rounds and page_check and engine != "arrow":
        rounds = _verified(rounds, skip_bad, skipped)
    if rounds:
        names = _one_target(rounds, read_columns=not own_check)
        while True:
            try:
                cells, info = mod.reduce(rounds, grid=grid, buckets=B, condition=cond, check_keys=check_keys,
                                         skip_bad=skip_bad, **engine_options)
                break
            except BadFiles as exc:
                if not skip_bad:
                    path, msg = exc.files[0]
                    raise LogError(None, msg) from None
                bad = {p for p, _ in exc.files}
                skipped += exc.files
                rounds = [s for s in rounds if s.path not in bad]
                if not rounds:
                    raise LogError(None, f"every rounds file was bad ({len(skipped)} skipped); first: "
                                         f"{skipped[0][1]}", "fix the files or point at other logs") from None
        bad_here = [tuple(b) for b in info.pop("bad_files", [])]
        if "column_targets" in info:    # the target column, read by the engine's executors
            names = _one_target([s for s in rounds if s.path not in {p for p, _ in bad_here}],
                                read_columns=False, column_targets=info.pop("column_targets"))
        skipped += bad_here
        if info.get("rounds_read", 0) == 0 and not reduced:
            raise LogError(None, f"every rounds file was bad ({len(skipped)} skipped); first: {skipped[0][1]}",
                           "fix the files or point at other logs")
        info = {"condition": cond, **info, "skipped": [list(s) for s in skipped],
                "sources": [{"engine": engine, "files": len(rounds) - len(bad_here),
                             "rounds_read": int(info.get("rounds_read", 0))}]}
        if names:      # recorded: a merge with reductions of other targets keeps them apart
            info["targets"] = names
        bad = {p for p, _ in skipped}
        info["from_files"] = sorted(source_id(s) for s in rounds if s.path not in bad)   # refuse_mixing reads it
        if info["rounds_read"]:
            parts.append(plain_drafters(Reduced(normalize_cells(cells), grid, B, info)))   # ' @ ' in a name
    if reduced:
        red = read_reduced([s.path for s in reduced], skip_bad=skip_bad)
        if not rounds and red.condition != cond:
            have = "all conditions pooled" if red.condition is None else ", ".join(red.condition)
            want = "all" if cond is None else ",".join(cond)
            raise GlanceError(f"the reduced inputs hold {have}, not {want.replace(',', ', ')}; pass --condition "
                              f"{'all' if red.condition is None else ','.join(red.condition)} to use them, or "
                              f"reduce the logs again with --condition {want}")
        parts.append(red)
        if not rounds and skipped:
            parts[-1] = Reduced(red.cells, red.grid, red.buckets,
                                {**red.info, "skipped": list(red.info.get("skipped", [])) + [list(s) for s in skipped]})
    return _declare(merge(parts), chain) if chain else merge(parts)


def _verified(rounds: list[Source], skip_bad: bool, skipped: list) -> list[Source]:
    """``rounds`` less the files whose page checksums fail (appended to ``skipped`` with
    ``skip_bad``, else the first is refused in one line)."""
    from glance_law.data.io import LogError
    bad = verify_pages(rounds)
    if not bad:
        return rounds
    if not skip_bad:
        raise LogError(None, bad[0][1])
    skipped += bad
    gone = {p for p, _ in bad}
    kept = [s for s in rounds if s.path not in gone]
    if not kept:
        raise LogError(None, f"every rounds file was bad ({len(skipped)} skipped); first: {skipped[0][1]}",
                       "fix the files or point at other logs")
    return kept


def _declare(red: Reduced, chain) -> Reduced:
    """A reduction with the ``--chain`` declarations recorded (checked against its drafters)."""
    from glance_law.data.declare import ALL, CHAIN_NOTE
    from glance_law.scale.reduce import DECLARED
    have = sorted({str(d).split(" @ ")[0] for d in red.cells["drafter"].astype(str).unique()})
    unknown = [c for c in chain if c != ALL and c not in have]
    if unknown:
        raise GlanceError(f"--chain {unknown[0]}: no drafter of that name in the logs (they hold {', '.join(have)}); "
                          "pass one of those names")
    who = ", ".join(have if ALL in chain else chain)
    note = CHAIN_NOTE.format(who=who, n=red.rounds).replace("read with budget = horizon", "recorded; a reduction "
                                                              "keeps no per-round shape")
    return Reduced(red.cells, red.grid, red.buckets, {**red.info, DECLARED: list(red.info.get(DECLARED, [])) + [note]})


def _one_target(sources, read_columns: bool = True, column_targets=()) -> list[str]:
    """Refuse rounds files of several target models: the engines' cells are keyed by (task,
    drafter), so they would pool one method's rounds across targets (the in-memory path keeps
    them apart, glance_law.data.arms). Targets come from each file's ``glance.run`` and, where a
    file has one, its ``target`` column (read here when ``read_columns``, else given as
    ``column_targets`` by an engine that read it where the data lie)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from glance_law.data import uri
    from glance_law.data.arms import run_targets, target_name
    names = {t for t in run_targets([s.run for s in sources]) if t is not None} | {str(t) for t in column_targets}
    for s in sources:
        if read_columns and "target" in s.columns and not uri.is_uri(str(s.path)):
            col = pq.read_table(str(s.path), columns=["target"]).column("target")
            names |= {str(x) for x in pc.unique(col).to_pylist() if x is not None}
    names = {target_name(t) for t in names if t != ""}    # as arm labels name them (a target 'unknown' quoted)
    if len(names) > 1:
        raise GlanceError(f"the rounds files hold {len(names)} target models ({', '.join(sorted(names))}) and the "
                          "out-of-core reduction would pool one method's rounds across them; reduce each target's "
                          "files separately, or fit without --engine (the in-memory path keeps targets apart)")
    return sorted(names)
