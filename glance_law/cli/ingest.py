"""``python -m glance_law.ingest FORMAT PATHS... --out DIR``: import foreign decode logs and
write them as contract Parquet (a rounds file and a prompts file per source file).

::

    python -m glance_law.ingest spec-bench data/spec_bench/model_answer/ --out logs/
    python -m glance_law.ingest auto answers/*.jsonl.gz --out logs/ --skip-bad --horizon ssd=4

FORMAT is one of ``spec-bench``, ``glance``, ``vllm``, ``sglang``, or ``auto`` (detected per
file from its records). ``--horizon L`` (or ``KEY=L``, repeatable; KEY a method, model_id or
file name) overrides the method table. ``--skip-bad`` skips corrupt lines and refused files
and lists each. Every note (what was done with each oddity) is printed on stderr. Files are
written only inside DIR: ``rounds-<run>.parquet`` and ``prompts-<run>.parquet``, through the one
output path (:mod:`glance_law.data.outputs`): DIR is a local folder or a store prefix (``s3://...``),
never one of the inputs; one ingest writes into DIR at a time (a second is refused); DIR holds an
``INCOMPLETE`` marker until the last file is written (readers refuse it; rerunning completes it);
a file holding the import of another source (same stem) is never replaced - refused in one line.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from glance_law.cli.common import Parser, UsageError, run_main
from glance_law.data.declare import add_declare_arguments

PROG = "python -m glance_law.ingest"


def build_parser() -> argparse.ArgumentParser:
    from glance_law.data.importers import FORMATS
    p = Parser(prog=PROG, allow_abbrev=False,
                description="Import decode logs written by other tools (Spec-Bench/EAGLE/Medusa model_answer JSONL, "
                            "GLANCE round logs, vLLM, SGLang) and write them as contract Parquet.")
    p.add_argument("format", choices=("auto",) + tuple(FORMATS), metavar="FORMAT",
                   help="auto (detect per file), " + ", ".join(FORMATS))
    p.add_argument("paths", nargs="+", metavar="PATHS", help="files, folders or globs (.jsonl, .jsonl.gz, .prom)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write the Parquet files into")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip corrupt lines and refused files, listing each (default: stop at the first)")
    add_declare_arguments(p, chain=False)     # --horizon, as on fit, report, reduce and policy
    p.add_argument("--task", metavar="NAME", help="task of records that carry none (default: unknown)")
    return p


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:120] or "run"


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return run_main(PROG, lambda: _run(argv), argv)


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from glance_law.data.importers import import_logs, parse_horizon_option
    from glance_law.data.io import write_table
    from glance_law.data.outputs import check_output, folder_session
    out = check_output(args.out, args.paths, folder=True)     # a store URI or a local folder, never an input
    imp = import_logs(args.paths, format=None if args.format == "auto" else args.format,
                      horizon=parse_horizon_option(args.horizon), skip_bad=args.skip_bad, task=args.task)
    plan = _plan(imp, out)
    with folder_session(out, PROG) as session:     # one writer; INCOMPLETE marker until the last file is written
        _refuse_replacing(plan, session.found)
        session.mark()
        written = [write_table(table, target, kind, run) for kind, target, table, run in plan]
    for note in imp.notes:                         # once written (a refusal stays one line)
        print(f"{PROG}: note: {note}", file=sys.stderr)
    nr = 0 if imp.rounds_table is None else imp.rounds_table.num_rows
    npr = 0 if imp.prompts_table is None else imp.prompts_table.num_rows
    print(f"{PROG}: {nr} rounds and {npr} prompt rows from {len(imp.sources)} file(s) ({imp.format}) written to "
          f"{len(written)} file(s) in {out}" + (f"; {len(imp.skipped)} file(s) refused and skipped"
                                                 if imp.skipped else ""))
    return 0


def _origin(path) -> str:
    """What an imported file came from, as stored in its ``glance.run`` (``ingested_from``)."""
    from glance_law.data import uri
    return str(path) if uri.is_uri(str(path)) else os.path.realpath(path)


def _plan(imp, out) -> list[tuple]:
    """(kind, target, table, run) of every file to write: ``<kind>-<stem>.parquet`` per source file,
    the run metadata naming the source (``ingested_from``)."""
    from glance_law.data import schema as S
    from glance_law.data import uri
    required = {k: set(S.required_names(k)) for k in ("rounds", "prompts")}
    plan, r0, p0, used = [], 0, 0, set()
    for path, _fmt, n_r, n_p, run in imp.parts:
        stem = _safe(str(run.get("run_id") or Path(path).name))
        while stem in used:
            stem += "_"
        used.add(stem)
        run = {**run, "ingested_from": _origin(path)}
        for kind, whole, at, n in (("rounds", imp.rounds_table, r0, n_r), ("prompts", imp.prompts_table, p0, n_p)):
            if n:
                part = whole.slice(at, n)
                keep = [c for c in part.column_names if c in required[kind] or part.column(c).null_count < n]
                plan.append((kind, uri.join(out, f"{kind}-{stem}.parquet"), part.select(keep), run))
        r0, p0 = r0 + n_r, p0 + n_p
    return plan


def _refuse_replacing(plan, resuming: bool) -> None:
    """Refuse (before anything is written) to replace a file that holds the import of another
    source: an earlier ingest of a file with the same stem. The same source's file is replaced (a
    rerun); so is any file when the folder holds the marker of a killed ingest (``resuming``) and
    the file is not another source's import."""
    from glance_law.data import uri
    from glance_law.data.io import LogError, file_meta
    for _kind, target, _table, run in plan:
        if uri.size(target) is None:
            continue
        try:
            prev = file_meta(target)[2].get("ingested_from")
        except LogError:
            prev = None                                # a partial or foreign file at that name
            if resuming:
                continue
        if prev != run["ingested_from"]:
            what = f"the import of {prev}" if prev else "a file this ingest did not write"
            raise UsageError(f"{target} holds {what}; importing {run['ingested_from']} would replace it: "
                             "ingest into another folder (--out), or remove that file first")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
