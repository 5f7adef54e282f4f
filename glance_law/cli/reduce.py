"""``python -m glance_law.reduce LOGS --out stats.parquet``: reduce round logs to the law's
sufficient statistics (:mod:`glance_law.scale.reduce`), and the reduced path of
``python -m glance_law.fit`` (``--engine``, or reduced files among the inputs)."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from glance_law.cli.common import (
    Parser,
    UsageError,
    add_declare_arguments,
    chain_of,
    horizon_of,
    run_main,
)
from glance_law.data import schema as S

# The reduction and the reduced fit (scale.*, scipy) are imported where they run, so that
# ``python -m glance_law.fit`` on round logs does not import them before anything is read.

PROG = "python -m glance_law.reduce"



def add_reduce_arguments(p: argparse.ArgumentParser, engine_default: str | None = "arrow") -> None:
    """Options of a reduction (shared by this CLI and ``python -m glance_law.fit --engine``)."""
    from glance_law.scale.engines import ENGINES
    from glance_law.scale.reduce import DEFAULT_BUCKETS, Grid
    g = p.add_argument_group("reduction")
    g.add_argument("--engine", choices=ENGINES, default=engine_default,
                   help="the engine that reduces round logs: arrow (streaming pyarrow, bounded memory), duckdb "
                        "(SQL) or spark (pyspark: local[*] unless --spark-master, spark-submit or $SPARK_MASTER names a "
                        "cluster)"
                   + ("" if engine_default else "; without it the rounds are fitted exactly in memory"))
    g.add_argument("--spark-master", default=None, metavar="URL",
                   help="with --engine spark: the cluster to run on (local[*], spark://HOST:7077, yarn, "
                        "k8s://https://HOST:443, ...; default: spark-submit's master, else $SPARK_MASTER, else "
                        "spark.master of Spark's configuration, else local[*]); the executors read the inputs, "
                        "see docs/scale.md")
    g.add_argument("--buckets", type=int, default=DEFAULT_BUCKETS, metavar="B",
                   help=f"prompt buckets per task (default {DEFAULT_BUCKETS})")
    g.add_argument("--per-octave", type=int, default=Grid().per_octave, metavar="S",
                   help=f"entropy bins per octave, a power of two (default {Grid().per_octave})")
    g.add_argument("--no-key-check", action="store_true",
                   help="skip the duplicate-round check (run_id, prompt_id, condition, round) across files")


def build_parser() -> argparse.ArgumentParser:
    from glance_law.results import format as _fmt
    p = Parser(prog=PROG, allow_abbrev=False,
                description="Reduce round logs to the law's sufficient statistics (one small Parquet file of kind "
                            "'reduced' that python -m glance_law.fit accepts; reduced inputs are merged).")
    p.add_argument("paths", nargs="+", metavar="LOGS", help="round-log (or reduced) files, folders or globs")
    p.add_argument("--out", required=True, metavar="FILE", help="the reduced Parquet file to write: a path, or a store URI "
                   "(s3://bucket/stats.parquet; see docs/scale.md)")
    p.add_argument("--condition", default="matched", metavar="C[,C...]",
                   help="conditions kept (default: matched); 'all' pools every condition")
    p.add_argument("--skip-bad", action="store_true", help="reduce the valid files and list every skipped file")
    add_declare_arguments(p)
    p.add_argument("--format", choices=_fmt.FORMATS, default="text", help="format of the summary on stdout")
    add_reduce_arguments(p)
    return p


def check_spark_master(args) -> str | None:
    """``--spark-master``'s URL (None when not given), refused without ``--engine spark``."""
    master = getattr(args, "spark_master", None)
    if master is not None and args.engine != "spark":
        raise UsageError("--spark-master names the cluster of the spark engine: add --engine spark")
    if master is not None and not master.strip():
        raise UsageError("--spark-master needs a master URL (local[*], spark://HOST:7077, yarn, k8s://...)")
    return master


def options(args) -> dict:
    """Keyword arguments of :func:`glance_law.scale.engines.reduce_logs` from parsed options."""
    from glance_law.scale.reduce import Grid
    cond = str(getattr(args, "condition", "matched"))
    engine = args.engine or "arrow"
    master = check_spark_master(args)
    extra = {"master": master} if engine == "spark" else {}
    return dict(engine=engine, buckets=args.buckets, grid=Grid(per_octave=args.per_octave),
                condition=None if cond.lower() == "all" else cond, skip_bad=bool(getattr(args, "skip_bad", False)),
                check_keys=not args.no_key_check, horizon=horizon_of(args), chain=chain_of(args), **extra)


def inputs_reduced(paths) -> bool:
    """Whether any input (files, folders, globs) is a reduced file (footers only)."""
    from glance_law.data.io import LogError, expand_paths, file_meta
    for path in expand_paths(paths, []):   # bad links and folders: the chosen path reports them
        try:
            if file_meta(path)[1] == S.KIND_REDUCED:
                return True
        except LogError:
            continue  # the chosen path reports bad files
    return False


#: ``python -m glance_law.fit`` sections that a reduction can feed (the rest need per-round columns).
REDUCED_SECTIONS = ("--tail",)


def refuse_baseline(red, paths) -> None:
    """One line (:data:`glance_law.data.io.BASELINE_ONLY`) when the reduction read rounds and every one
    was autoregressive: nothing drafted to reduce or fit; what to run on such logs instead."""
    from glance_law.data.io import BASELINE_ONLY, BASELINE_ONLY_FIX, LogError
    n = int(red.info.get("rounds_read", 0))
    if len(red.cells) == 0 and n and int(red.info.get("excluded_horizon0", 0)) == n:
        where = [str(p) for p in paths]
        raise LogError(", ".join(where[:3]) + (" ..." if len(where) > 3 else ""), BASELINE_ONLY, BASELINE_ONLY_FIX)


def cli_fit(args, mods) -> tuple:
    """``python -m glance_law.fit`` on the reduced path (``--engine``, or reduced files among the inputs):
    reduce (or read and merge) the inputs, fit the law and the supported sections; returns (law, sections)."""
    if getattr(args, "weighting", "round") != "round":
        raise UsageError("--weight prompt needs each prompt's rounds, which a reduction does not keep; run it on "
                         "the round logs without --engine")
    for flag, _ in mods:
        if flag not in REDUCED_SECTIONS:
            raise UsageError(f"{flag} needs per-round columns that a reduction does not keep; run it on the round "
                             "logs without --engine (sections available from a reduction: "
                             f"{', '.join(REDUCED_SECTIONS)})")
    from glance_law.scale.engines import reduce_logs
    from glance_law.scale.law_reduced import fit_reduced, tail_reduced
    opts = options(args)
    red = reduce_logs(args.paths, **opts)
    refuse_baseline(red, args.paths)
    for path, reason in red.info.get("skipped", []):
        print(f"python -m glance_law.fit: skipped {reason if str(path) in reason else f'{path}: {reason}'}",
              file=sys.stderr)
    from glance_law.data.selection import grouping
    by = grouping(args.by)
    if not red.has_entropy:      # imported logs (Spec-Bench, vLLM, SGLang): what the reduction does allow
        if mods:
            raise UsageError(f"{mods[0][0]} on a reduction needs root_entropy, which these reduced logs do not carry "
                             "(the format does not record it); run it on the round logs without --engine")
        print("python -m glance_law.fit: not run: law needs column 'root_entropy', which the reduced logs do not "
              "carry (their source did not record it); the table gives rounds, prompts and tau per group",
              file=sys.stderr)
        return None, [("reduced", [red.pooled_rows() if by is None else red])]
    law = fit_reduced(red, by=by, method=args.method, level=args.level, n_boot=args.bootstrap, seed=args.seed,
                      condition=opts["condition"])
    sections = []
    for flag, _ in mods:
        if flag == "--tail":
            if getattr(args, "tail_bootstrap", 199) < 0 or getattr(args, "tail_folds", 5) < 2:
                raise UsageError("--tail-bootstrap must be >= 0 and --tail-folds >= 2")
            tail = tail_reduced(red, law=law, quantile=getattr(args, "tail_quantile", 0.1),
                                threshold=getattr(args, "tail_threshold", None),
                                n_boot=getattr(args, "tail_bootstrap", 199), seed=args.seed,
                                folds=getattr(args, "tail_folds", 5), level=args.level, by=by)
            sections.append(("tail", [tail, tail.models(), tail.heldout_table()]))
    return law, sections


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)

    def body() -> None:
        from glance_law.data.outputs import check_output
        from glance_law.scale.engines import reduce_logs
        from glance_law.scale.reduce import write_reduced
        args = build_parser().parse_args(argv)
        check_output(args.out, args.paths)      # before any work: never a link, a folder or one of the inputs
        red = reduce_logs(args.paths, **options(args))
        refuse_baseline(red, args.paths)
        for path, reason in red.info.get("skipped", []):
            print(f"{PROG}: skipped {reason if str(path) in reason else f'{path}: {reason}'}", file=sys.stderr)
        write_reduced(red, args.out)
        sys.stdout.write(red.summary(args.format))

    return run_main(PROG, body, argv)
