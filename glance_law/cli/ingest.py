"""``python -m glance_law.ingest FORMAT PATHS... --out DIR``: import foreign decode logs and
write them as contract Parquet (a rounds file and a prompts file per source file).

::

    python -m glance_law.ingest spec-bench data/spec_bench/model_answer/ --out logs/
    python -m glance_law.ingest auto answers/*.jsonl.gz --out logs/ --skip-bad --horizon ssd=4

FORMAT is one of ``spec-bench``, ``glance``, ``vllm``, ``sglang``, or ``auto`` (detected per
file from its records). ``--horizon L`` (or ``KEY=L``, repeatable; KEY a method, model_id or
file name) overrides the method table. ``--skip-bad`` skips corrupt lines and refused files
and lists each. Every note (what was done with each oddity) is printed on stderr. Files are
written only inside DIR: ``rounds-<run>.parquet`` and ``prompts-<run>.parquet``.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from glance_law.cli.common import Parser, run_main

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
    p.add_argument("--horizon", action="append", metavar="L|KEY=L",
                   help="the deepest draft offset L, overriding the method table: for every file, or for the files "
                        "whose method, model_id or name is KEY (repeatable)")
    p.add_argument("--task", metavar="NAME", help="task of records that carry none (default: unknown)")
    return p


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:120] or "run"


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return run_main(PROG, lambda: _run(argv), argv)


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from glance_law.data import schema as S
    from glance_law.data.importers import import_logs, parse_horizon_option
    from glance_law.data.io import write_table
    imp = import_logs(args.paths, format=None if args.format == "auto" else args.format,
                      horizon=parse_horizon_option(args.horizon), skip_bad=args.skip_bad, task=args.task)
    for note in imp.notes:
        print(f"{PROG}: note: {note}", file=sys.stderr)
    out = Path(args.out)
    required = {k: set(S.required_names(k)) for k in ("rounds", "prompts")}
    written, r0, p0 = [], 0, 0
    used: set = set()
    for path, _fmt, n_r, n_p, run in imp.parts:
        stem = _safe(str(run.get("run_id") or Path(path).name))
        while stem in used:
            stem += "_"
        used.add(stem)
        for kind, whole, at, n in (("rounds", imp.rounds_table, r0, n_r), ("prompts", imp.prompts_table, p0, n_p)):
            if n:
                part = whole.slice(at, n)
                keep = [c for c in part.column_names if c in required[kind] or part.column(c).null_count < n]
                written.append(write_table(part.select(keep), out / f"{kind}-{stem}.parquet", kind, run))
        r0, p0 = r0 + n_r, p0 + n_p
    nr = 0 if imp.rounds_table is None else imp.rounds_table.num_rows
    npr = 0 if imp.prompts_table is None else imp.prompts_table.num_rows
    print(f"{PROG}: {nr} rounds and {npr} prompt rows from {len(imp.sources)} file(s) ({imp.format}) written to "
          f"{len(written)} file(s) in {out}" + (f"; {len(imp.skipped)} file(s) refused and skipped"
                                                 if imp.skipped else ""))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
