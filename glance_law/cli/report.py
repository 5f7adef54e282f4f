"""``python -m glance_law.report LOGS... --out DIR``: the whole theory appendix in one command.

::

    python -m glance_law.report logs/ --out appendix/ [--seed 0] [--only law,tail] [--skip width]

Reads the round logs once (and the prompt files among the inputs), runs every
section of :mod:`glance_law.appendix` - one per table or figure of the paper's
theory appendix - and writes

* ``DIR/tables/<stem>.md``, ``.tex`` (booktabs) and ``.csv`` (the flat columns) per table;
* ``DIR/figures/<stem>.png`` and ``.pdf`` per figure (fixed metadata: no timestamps);
* ``DIR/index.md``: every section with its paper counterpart, links to its tables and
  figures, and the sections that were skipped, each with the reason and the logger
  flag that would supply the missing input;
* ``DIR/manifest.json``: the input files (kind, rows, SHA-256), the options and seed,
  the command line, the tool and library versions, and every output with its SHA-256.

Same logs, options and seed give byte-identical tables and index (every bootstrap is
seeded from ``--seed``), and byte-identical figures with the same matplotlib.

Large logs (more than :data:`FULL_READ_ROUNDS` rounds) are read without their per-offset list
columns; a section that needs some (offsets: ``match``; width and policy: ``topk_logq`` and
``target_rank``; the audit: ``committed``) reads only those, again, for the rows it uses. The width
and policy replays run on a seeded prompt-clustered sample of ``--replay-rounds`` rounds (default
25,000) and the per-offset tables on one of ``--offset-rounds`` (default 200,000) when the logs hold
more (:mod:`glance_law.data.sample`; the sample is named in the section's notes; 0 uses every round).
The tail's worker process (``--jobs 2``) ends with the report, even a killed one
(:mod:`glance_law.cli.workers`).

With ``--engine arrow|duckdb|spark`` (``--spark-master URL`` for a cluster, as in
``python -m glance_law.fit``), or with reduced files among the inputs, the logs are reduced to the
law's sufficient statistics (:mod:`glance_law.scale`) and the sections that a reduction feeds run on
them: summary (the reduction's per-group counts), law, decile-curves, law-fits, brackets, tail and
survival. The others need per-round columns and are listed as skipped, saying so. No input byte is
read on the driver: the manifest records each rounds file's footer fingerprint
(:func:`glance_law.scale.engines.sources.footer_fingerprint`) in place of its SHA-256.

A section whose inputs the logs lack (no ``topk_logq``, no mismatched condition, no
autoregressive arm, no prompt files, ...) is *skipped*, never dropped silently: the
index and stderr name what is missing and the flag that records it
(:data:`glance_law.schema.SUPPLIED_BY`). A section that fails for another reason is
listed as *failed* with its error and the command exits 1 after writing everything
else. User errors (bad paths, bad options, unreadable logs) print one line and exit 2.

With ``--only``, the sections run are replaced in ``DIR`` and the others are kept
when the previous report there was made from the same input files; otherwise their
stale outputs are removed. Files of a previous report that the new one does not
produce are removed; a non-empty ``DIR`` without a ``manifest.json`` is refused, unless it holds the
``INCOMPLETE`` marker of a report killed during its first run there (its tables and figures are
removed and the report starts over). ``DIR`` holds ``INCOMPLETE`` while the report writes (readers
refuse it) and one report writes into it at a time (:func:`glance_law.data.outputs.folder_session`);
a store URI as ``--out`` is refused (the report writes a local folder; ``file://`` is one).

Nothing is written or removed outside ``DIR`` (:mod:`glance_law.data.outputs`): the previous
manifest's outputs are validated before anything is removed (relative names under
``tables/`` and ``figures/`` that this tool writes; anything else refuses the run with one
line), a file changed since the previous report wrote it is kept and named, a ``tables/`` or
``figures/`` that is a symbolic link is refused, and every output goes to a fresh temporary
file in its folder (random name, exclusive create) renamed onto its name, so a link planted at
a name is replaced, never written through. Strings from the logs are escaped for Markdown in
the index and tables (:mod:`glance_law.results.format`).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import shlex
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from glance_law import appendix as A
from glance_law._version import __version__
from glance_law.cli import reduce as _reduce
from glance_law.cli import workers
from glance_law.cli.common import (
    Parser,
    UsageError,
    add_declare_arguments,
    add_section_options,
    chain_of,
    deprecated_alias,
    horizon_of,
    names,
    run_main,
)
from glance_law.data.inputs import MAX_DOCUMENT_BYTES, read_json_document
from glance_law.data.outputs import (
    INCOMPLETE,
    OutputError,
    check_output,
    check_output_path,
    folder_session,
    remove_file,
    safe_stem,
    write_file,
)
from glance_law.data.selection import grouping
from glance_law.data.uri import is_uri, scheme
from glance_law.errors import GlanceError
from glance_law.replay.width import parse_budgets
from glance_law.results.format import md_escape
from glance_law.scrub import scrub

PROG = "python -m glance_law.report"
MANIFEST = "manifest.json"
INDEX = "index.md"
TABLE_FORMATS = (("md", "markdown"), ("tex", "latex"), ("csv", "csv"))


#: section modules whose options the report uses (declared once, in each module), by destination
SECTION_OPTIONS = (
    ("glance_law.tail.report", ("tail_bootstrap", "tail_quantile", "tail_threshold", "tail_folds")),
    ("glance_law.replay.width", ("budgets", "width_bootstrap", "exchange_rate")),
    ("glance_law.evidence.offsets", ("offset_bins",)),
    ("glance_law.evidence.probe", ("signal", "probe_bootstrap")),
    ("glance_law.evidence.order", ("task_order", "order_bootstrap")),
    ("glance_law.evidence.transfer", ("transfer_bins",)),
    ("glance_law.evidence.audit", ("tie_threshold",)),
    ("glance_law.evidence.timing", ("timing_bootstrap",)),
)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = Parser(prog=prog, allow_abbrev=False,
                description="Regenerate the theory appendix (every table and figure) from round logs: Markdown, "
                            "LaTeX and CSV tables, PNG and PDF figures, DIR/index.md and DIR/manifest.json.")
    p.add_argument("paths", nargs="*", metavar="LOGS",
                   help="round-log files, folders or globs (prompt files among them feed the audit and timing)")
    p.add_argument("--out", metavar="DIR",
                   help="output folder (created; a previous report there is replaced). Nothing is written or "
                        "removed outside it: a previous manifest.json may list only tables/*.md|tex|csv and "
                        "figures/*.png|pdf, linked tables/ or figures/ folders are refused, and every file is "
                        "written to a fresh temporary file in its folder, then renamed")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of every bootstrap (default 0)")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--only", type=names, default=None, metavar="S1,S2",
                   help="run only these sections (see --list)")
    p.add_argument("--skip", type=names, default=[], metavar="S1,S2", help="leave these sections out")
    p.add_argument("--list", action="store_true", help="list the sections and exit")
    p.add_argument("--skip-bad", action="store_true",
                   help="leave out unreadable log files (listed in the index) instead of stopping")
    p.add_argument("--by", default="task", choices=("task", "none"),
                   help="task: one row per task plus the pooled row (default); none: every section's pooled rows "
                        "only (labelled 'pooled'; the sections that compare tasks are skipped, saying so)")
    add_declare_arguments(p)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), metavar="N",
                   help="processes: with N >= 2 the tail's bootstrap runs in a second process while the other "
                        "sections run (same numbers; default: min(2, CPUs))")
    g = p.add_argument_group("section options")
    g.add_argument("--budget", type=int, default=None, metavar="N",
                   help="budget N of Figure 4's 2 ln N / H ceiling (default: the logs' median budget, else 31)")
    g.add_argument("--gamma", type=float, default=0.2, help="AdaEDL's constant in Figure 4 (default 0.2)")
    g.add_argument("--reference-drafter", default=None, metavar="NAME",
                   help="Table 14's training drafter (default: block when present)")
    g.add_argument("--vocab-size", type=float, default=None, metavar="V",
                   help="the target's vocabulary size for the Fano check (default: from the run metadata)")
    g.add_argument("--replay-rounds", type=int, default=A.Options.replay_rounds, metavar="N",
                   help="the width and policy replays run on a seeded sample of whole prompts of about N rounds "
                        f"when the logs hold more (default {A.Options.replay_rounds}; 0: every round)")
    g.add_argument("--offset-rounds", type=int, default=A.Options.offset_rounds, metavar="N",
                   help="the per-offset tables (offsets) likewise, above N rounds "
                        f"(default {A.Options.offset_rounds}; 0: every round)")
    g.add_argument("--policy-groups", type=int, default=A.Options.policy_groups, metavar="M",
                   help="prompt groups of the policy table's held-out jackknife: every group is left out in turn and "
                        f"each family refitted (default {A.Options.policy_groups}; python -m glance_law.policy leaves "
                        "out one prompt at a time, up to its --bootstrap)")
    # the old --bootstrap of the report meant the probe's and the ordering's replicates
    deprecated_alias(g, "--bootstrap", "probe_bootstrap", "order_bootstrap", type=int)
    for module, dests in SECTION_OPTIONS:
        add_section_options(p, importlib.import_module(module), only=dests)
    _reduce.add_reduce_arguments(p, engine_default=None)
    return p


def options_from(args) -> A.Options:
    for name in ("tail_bootstrap", "probe_bootstrap", "order_bootstrap", "width_bootstrap", "timing_bootstrap"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0")
    if not 0.0 < args.level < 1.0:
        raise UsageError("--level must lie strictly between 0 and 1")
    if args.jobs < 1:
        raise UsageError("--jobs must be >= 1")
    if args.policy_groups < 2:
        raise UsageError("--policy-groups must be >= 2")
    if args.replay_rounds < 0 or args.offset_rounds < 0:
        raise UsageError("--replay-rounds and --offset-rounds must be >= 0 (0: every round)")
    if args.tail_folds < 2 or args.offset_bins < 2 or args.transfer_bins < 2:
        raise UsageError("--tail-folds, --offset-bins and --transfer-bins must be >= 2")
    return A.Options(seed=args.seed, level=args.level, budget=args.budget, gamma=args.gamma,
                     tail_boot=args.tail_bootstrap, tail_quantile=args.tail_quantile,
                     tail_threshold=args.tail_threshold, tail_folds=args.tail_folds,
                     probe_boot=args.probe_bootstrap, order_boot=args.order_bootstrap,
                     timing_boot=args.timing_bootstrap, width_boot=args.width_bootstrap,
                     budgets=tuple(parse_budgets(args.budgets)), exchange_rate=args.exchange_rate,
                     offset_bins=args.offset_bins, transfer_bins=args.transfer_bins, signals=tuple(args.signal),
                     task_order=tuple(names(args.task_order)) if args.task_order else None,
                     reference=args.reference_drafter, vocab_size=args.vocab_size,
                     tie_threshold=args.tie_threshold, by=grouping(args.by), replay_rounds=args.replay_rounds,
                     offset_rounds=args.offset_rounds, policy_groups=args.policy_groups)


# ---------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------

def sha256(path) -> str:
    """SHA-256 of a local file or a store object (read through glance_law.data.uri)."""
    from glance_law.data import uri
    h = hashlib.sha256()
    src = uri.open_input(path)
    with (open(path, "rb") if src is path else src) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


#: Logs with more rounds than this are read without their list columns (each section reads the ones it needs).
FULL_READ_ROUNDS = 200_000


def scalar_columns(paths: Sequence[str], limit: int | None = None) -> list[str] | None:
    """The non-list columns of the round files among ``paths`` when they hold more than ``limit``
    rounds (default :data:`FULL_READ_ROUNDS`; from the Parquet footers); None - read every column -
    for smaller logs and foreign logs. Files the reader will refuse or skip (it names them) are not counted."""
    import pyarrow as pa
    limit = FULL_READ_ROUNDS if limit is None else limit

    from glance_law.data.io import LogError, expand_paths, file_meta, split_foreign
    try:
        files, foreign = split_foreign(expand_paths(list(paths), []))
    except LogError:
        return None
    if foreign:
        return None
    metas = []
    for f in files:
        try:
            metas.append(file_meta(f))
        except LogError:        # the reader names it (or skips it with --skip-bad)
            continue
    rounds = [md for md, kind, _ in metas if kind == "rounds"]
    if sum(md.num_rows for md in rounds) <= limit:
        return None
    names: dict = {}
    for md in rounds:
        for fld in md.schema.to_arrow_schema():
            if not (pa.types.is_list(fld.type) or pa.types.is_large_list(fld.type)
                    or pa.types.is_fixed_size_list(fld.type)):
                names.setdefault(fld.name)
    return list(names)


def _labelled(rounds):
    """``rounds`` with several target models' drafters labelled ``drafter @ target`` (data.arms)."""
    from dataclasses import replace

    from glance_law.data.arms import label_targets
    notes: list[str] = []
    frame = label_targets(rounds.frame, notes)   # several target models: arm = drafter @ target, everywhere
    return replace(rounds, frame=frame, notes=tuple(rounds.notes) + tuple(notes)) if notes else rounds


def read_inputs(paths: Sequence[str], options: A.Options, skip_bad: bool = False, horizon=None,
                chain=None) -> A.Inputs:
    """The round logs and the prompt files among ``paths`` (``horizon``, ``chain``: the declarations
    of ``--horizon`` and ``--chain``, :mod:`glance_law.data.declare`). Every column, or on large logs
    (:func:`scalar_columns`) the scalar columns, with :attr:`glance_law.appendix.Inputs.reader`
    reading list columns for the sections. Per-turn counts only (no per-step rows):
    :func:`per_turn_inputs`."""
    from dataclasses import replace

    from glance_law.cli import perturn
    from glance_law.data.io import PromptsOnlyError, read_logs
    scalars = scalar_columns(paths)
    steps = True                       # per-step rows were read (all autoregressive when ``turns``)
    try:
        rounds = read_logs(list(paths), "rounds", columns=scalars, skip_bad=skip_bad, horizon=horizon, chain=chain)
        turns = perturn.per_turn_only(rounds)
    except PromptsOnlyError:           # per-turn counts only: the summary and timing sections run on them
        turns, steps = True, False
    if turns:
        return per_turn_inputs(paths, options, skip_bad, horizon, steps=steps)
    rounds = _labelled(rounds)
    reader = None
    if scalars is not None:
        files = [f.path for f in rounds.files]
        cols = [c for c in rounds.frame.columns if c in scalars]

        def reader(vectors, keep):
            return _labelled(read_logs(files, "rounds", columns=cols + list(vectors), horizon=horizon, chain=chain,
                                       keep=keep))
        rounds = replace(rounds, notes=tuple(rounds.notes) + (
            f"{len(rounds.frame)} rounds: the per-offset list columns are read only by the sections that use "
            "them, and sections with a round cap run on a prompt-clustered sample (named in their notes)",))
    prompt_files = [f.path for f in rounds.other if f.kind == "prompts"]
    prompts = read_logs(prompt_files, "prompts", skip_bad=skip_bad, horizon=horizon).frame if prompt_files else None
    return A.Inputs(rounds=rounds, prompts=prompts, options=options, reader=reader)


def per_turn_inputs(paths: Sequence[str], options: A.Options, skip_bad: bool = False, horizon=None,
                    steps: bool = False) -> A.Inputs:
    """Inputs of per-turn counts (no drafted per-step rows): the prompt rows, and an empty rounds set
    that lists the prompt files as its other files (the manifest's inputs). ``steps``: per-step rows
    were read, none drafted (an autoregressive arm's)."""
    import pandas as pd

    from glance_law.cli import perturn
    from glance_law.data.io import LogSet
    from glance_law.evidence.common import with_run_target
    logs = perturn.read_prompts(paths, skip_bad, horizon)
    rounds = LogSet("rounds", pd.DataFrame(), (), logs.skipped, logs.files, logs.notes)
    return A.Inputs(rounds=rounds, prompts=with_run_target(logs), options=options, per_turn=True, per_turn_steps=steps)


def reduced_inputs(args, options: A.Options) -> A.Inputs:
    """The inputs reduced by ``--engine`` (or merged from reduced files): :attr:`A.Inputs.reduced`, and
    an empty rounds set whose notes say which engine reduced how many rounds."""
    import pandas as pd

    from glance_law.data.io import LogSet
    from glance_law.scale.engines import reduce_logs
    opts = _reduce.options(args)
    red = reduce_logs(list(args.paths), **opts)
    _reduce.refuse_baseline(red, args.paths)
    where = f" on {opts['master']}" if opts.get("master") else ""
    how = (f"by the {opts['engine']} engine{where}" if args.engine else
           "from the reduced files among the inputs (rounds files among them by the arrow engine)")
    note = (f"{red.rounds} rounds reduced to {len(red.cells)} cells of sufficient statistics {how}: the law and the "
            "tail are fitted from them (docs/scale.md); the sections that need per-round columns are skipped")
    notes = (note,) + tuple(str(n) for n in red.info.get("imported", []))     # what the import did with oddities
    rounds = LogSet("rounds", pd.DataFrame(), (), tuple(tuple(x) for x in red.info.get("skipped", [])), (), notes)
    return A.Inputs(rounds=rounds, prompts=None, options=options, reduced=red)


def reduced_files(paths: Sequence[str], skip_bad: bool) -> list[dict]:
    """The manifest's inputs on the reduced path: a rounds file's footer fingerprint
    (:func:`~glance_law.scale.engines.sources.footer_fingerprint`: no data page is read on the driver), a
    reduced file's SHA-256 (a small file), a foreign log's SHA-256 (imported on the driver anyway, kind
    ``foreign``). Files a ``skip_bad`` reduction left out are not listed (the index names them)."""
    from glance_law.data.io import expand_paths, split_foreign
    from glance_law.scale.engines.sources import scan
    files, foreign = split_foreign(expand_paths(list(paths), [] if skip_bad else None))
    rounds, reduced, _, _ = scan(files, skip_bad) if files else ([], [], [], [])
    return ([{"path": str(f.path), "kind": f.kind, "rows": int(f.rows), "fingerprint": f.fingerprint} for f in rounds]
            + [{"path": str(f.path), "kind": f.kind, "rows": int(f.rows), "sha256": sha256(f.path)} for f in reduced]
            + [{"path": str(f), "kind": "foreign", "rows": 0, "sha256": sha256(f)} for f in foreign])


def input_files(inp: A.Inputs) -> list[dict]:
    files = list(inp.rounds.files) + list(inp.rounds.other)
    return [{"path": str(f.path), "kind": f.kind, "rows": int(f.rows), "sha256": sha256(f.path)} for f in files]


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------

def _write_text(out: Path, rel: str, text: str) -> str:
    """Write ``text`` (scrubbed) at ``out/rel``; the SHA-256 of the bytes written."""
    blob = scrub(text).encode("utf-8")
    write_file(out / rel, blob, root=out)     # index, manifest, tables: no secret of a location
    return hashlib.sha256(blob).hexdigest()


def write_artifacts(artifacts, out: Path, hashes: dict | None = None) -> list[str]:
    """Write a section's tables and figures under ``out``; returns the relative paths (and records
    each one's SHA-256 in ``hashes``: a table's from the bytes written, read back for nothing)."""
    from glance_law.results.plots import save_figure
    written = []
    hashes = {} if hashes is None else hashes
    for art in artifacts:
        if isinstance(art, A.Table):
            for ext, fmt in TABLE_FORMATS:
                rel = f"tables/{art.stem}.{ext}"
                problem = check_output_path(rel)
                if problem is not None:
                    raise GlanceError(f"table {art.stem!r}: {problem}")
                hashes[rel] = _write_text(out, rel, art.render(fmt))
                written.append(rel)
        else:
            problem = check_output_path(f"figures/{art.stem}.png")
            if problem is not None:
                raise GlanceError(f"figure {art.stem!r}: {problem}")
            for p in save_figure(art.figure, out / "figures" / art.stem, root=out):
                rel = p.relative_to(out).as_posix()
                hashes[rel] = sha256(p)
                written.append(rel)
    return written


def _own_bytes(out: Path, rel: str, want: str | None) -> bytes | None:
    """The bytes of the output ``out/rel`` if they are what this tool wrote there (SHA-256 ``want``, from
    this run or the previous manifest), else None: never read through a link, a hard link (a second name
    of a file outside ``out``: not even hashed), a FIFO, a device or a file past the document cap."""
    import stat
    p = out / rel
    if not want or p.parent.is_symlink():
        return None
    try:
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > MAX_DOCUMENT_BYTES:
            return None
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st2 = os.fstat(fh.fileno())
        if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) or st2.st_nlink != 1:
            return None
        data = fh.read(MAX_DOCUMENT_BYTES + 1)
    return data if hashlib.sha256(data).hexdigest() == want else None


def _previous(out: Path) -> dict | None:
    m = out / MANIFEST
    if not m.exists():
        return None
    try:
        doc = read_json_document(m, "report manifest")     # bounded: FIFO, size, depth, syntax refused
    except GlanceError as exc:
        raise UsageError(f"--out {out}: {MANIFEST} cannot be read ({getattr(exc, 'problem', exc)}); refusing to remove or replace "
                         "anything there; choose an empty or new folder") from None
    return doc if isinstance(doc, dict) and doc.get("tool") == "glance-law" else None


def _manifest_outputs(out: Path, prev: dict) -> dict:
    """Every output a previous manifest lists (``outputs`` and each section's), validated before
    anything is removed: relative, inside ``out``, a name this tool writes. Returns rel -> SHA-256."""
    outputs = prev.get("outputs", {})
    sections = prev.get("sections", [])
    listed: dict = {}
    bad = None
    if not isinstance(outputs, dict) or not isinstance(sections, list) \
            or not all(isinstance(e, dict) and isinstance(e.get("outputs", []), list)
                       and all(isinstance(r, str) for r in e.get("outputs", [])) for e in sections):
        bad = "its outputs or sections are not in the form this tool writes"
    else:
        listed = dict(outputs)
        for e in sections:
            for rel in e.get("outputs", []):
                listed.setdefault(rel, None)
        for rel in listed:
            bad = check_output_path(rel)
            if bad is not None:
                break
    if bad is not None:
        raise UsageError(f"--out {out}: {MANIFEST} was not written by this tool ({bad}); refusing to remove "
                         f"or replace anything there; choose an empty or new folder")
    return listed


def _prepare_out(out: Path, resumed: bool = False) -> dict | None:
    """The previous report's manifest (validated), or None; refuses a folder that holds other things.
    ``resumed``: a report killed during its first run into ``out`` left its INCOMPLETE marker and no
    manifest: its tables and figures (names this tool writes) are removed and the report starts over."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder")
    prev = _previous(out) if out.exists() else None
    own = {INCOMPLETE, ".glance-write.lock"}
    if out.exists() and prev is None and resumed:
        for sub in ("tables", "figures"):
            if (out / sub).is_dir() and not (out / sub).is_symlink():
                for p in sorted((out / sub).iterdir()):
                    if check_output_path(f"{sub}/{p.name}") is None:
                        remove_file(out, f"{sub}/{p.name}")
    elif out.exists() and prev is None and any(p.name not in own for p in out.iterdir()):
        raise UsageError(f"--out {out}: the folder is not empty and holds no {MANIFEST} of a previous report; "
                         "choose an empty or new folder")
    if prev is not None:
        prev["_listed"] = _manifest_outputs(out, prev)
    for sub in ("tables", "figures"):
        if (out / sub).is_symlink() or (out / sub).exists() and not (out / sub).is_dir():
            raise UsageError(f"--out {out}: {sub} is a symbolic link or not a folder; refusing to write through "
                             "it (outputs stay inside --out); remove it or choose another folder")
    out.mkdir(parents=True, exist_ok=True)
    return prev


def _remove(out: Path, rels, listed: dict, log=None, rewritten=()) -> list[str]:
    """Remove a previous report's outputs (validated names only); a file whose content changed since
    that report wrote it (or a second name of another file) is kept and named, unless ``rewritten``
    (this report wrote its own file under that name). Returns the names kept."""
    kept = []
    for rel in rels:
        p = out / rel
        want = listed.get(rel)
        if want and p.is_file() and not p.is_symlink() and _own_bytes(out, rel, want) is None:
            kept.append(rel)
            continue
        remove_file(out, rel)
    _say_kept(out, kept, rewritten, log)
    return kept


def _say_kept(out: Path, kept, rewritten, log) -> None:
    for rel in kept:
        if log is not None and rel not in rewritten:
            log(f"{PROG}: kept {out / rel}: changed since the previous report wrote it (remove it yourself if unwanted)")


# ---------------------------------------------------------------------------
# index
# ---------------------------------------------------------------------------

def _anchor(name) -> str:
    return safe_stem(name).lower()


def _link(rel: str, text: str | None = None) -> str:
    return f"[{text or rel.rsplit('/', 1)[-1]}]({rel})"


INLINE_ROWS = 30   # tables up to this many rows are shown in the index itself


def _inline(out: Path | None, rel: str, hashes: dict | None = None) -> list[str]:
    """A table's Markdown for the index: its title as a heading-less caption, the table and its notes;
    read only when it holds what this tool wrote (``hashes``: rel -> SHA-256), else nothing."""
    data = _own_bytes(out, rel, (hashes or {}).get(rel)) if out is not None else None
    if data is None:
        return []
    text = data.decode("utf-8", "replace").strip("\n").splitlines()
    if text and text[0].startswith("**") and text[0].endswith("**"):
        text = text[2:] if len(text) > 1 and not text[1] else text[1:]
    return [""] + text + [""]


def render_index(entries: list[dict], inputs: list[dict], notes: Sequence[str], out: Path | None = None,
                 hashes: dict | None = None) -> str:
    """The index's Markdown; tables of up to :data:`INLINE_ROWS` rows are inlined from ``out`` where
    they hold the bytes ``hashes`` (rel -> SHA-256) says this tool wrote."""
    rounds = [f for f in inputs if f["kind"] == "rounds"]
    prompts = [f for f in inputs if f["kind"] == "prompts"]
    reduced = [f for f in inputs if f["kind"] == "reduced"]
    foreign = [f for f in inputs if f["kind"] == "foreign"]
    also = f", {len(reduced)} reduced file(s) ({sum(f['rows'] for f in reduced)} cells)" if reduced else ""
    also += f", {len(foreign)} foreign log(s) imported" if foreign else ""
    digest = "SHA-256 (a rounds file's footer fingerprint when reduced)" if any(
        "fingerprint" in f for f in inputs) else "SHA-256"
    lines = ["# Theory appendix", "",
             f"Generated by glance-law {__version__} from {len(rounds)} round file(s) "
             f"({sum(f['rows'] for f in rounds)} rounds){also} and {len(prompts)} prompt file(s) "
             f"({sum(f['rows'] for f in prompts)} prompts); the input files with their {digest}, the options, "
             f"the library versions and every output's SHA-256 are in [{MANIFEST}]({MANIFEST}).", "",
             "Regenerate with:", "", "```"] + list(dict.fromkeys(e["command"] for e in entries)) + ["```", ""]
    lines += [f"- {md_escape(n, table=False)}" for n in notes]
    if notes:
        lines.append("")
    lines += ["| section | paper | status | tables | figures |", "|:---|:---|:---|---:|---:|"]
    for e in entries:
        nt = len({o.rsplit(".", 1)[0] for o in e["outputs"] if o.startswith("tables/")})
        nf = len({o.rsplit(".", 1)[0] for o in e["outputs"] if o.startswith("figures/")})
        lines.append(f"| [{md_escape(e['name'])}](#{_anchor(e['name'])}) | {md_escape(e['paper'])} | "
                     f"{md_escape(e['status'])} | {nt} | {nf} |")
    lines.append("")
    for e in entries:
        lines += [f"## {md_escape(e['name'], False)}", "",
                  f"**{md_escape(e['paper'], False)}**: {md_escape(e['what'], False)}.", ""]
        if e["status"] != "ok":
            lines += [f"*{md_escape(e['status'], False)}*: {md_escape(e['reason'], False)}", ""]
            continue
        for art in e["artifacts"]:
            stem = safe_stem(art["stem"])
            caption = md_escape(art["caption"], False)
            if art["kind"] == "table":
                base = f"tables/{stem}"
                rows = int(art.get("rows", 0))
                lines.append(f"**{caption}** ({rows} row{'s' * (rows != 1)}): "
                             f"{_link(base + '.md', 'Markdown')} · {_link(base + '.tex', 'LaTeX')} · "
                             f"{_link(base + '.csv', 'CSV')}")
                lines += _inline(out, base + ".md", hashes) if rows <= INLINE_ROWS else [""]
            else:
                base = f"figures/{stem}"
                lines += ["", f"![{caption}]({base}.png)", "",
                          f"*{caption}.* {_link(base + '.png', 'PNG')} · {_link(base + '.pdf', 'PDF')}", ""]
        lines.append("")
    skipped = [e for e in entries if e["status"] != "ok"]
    if skipped:
        lines += ["## Skipped and failed sections", ""]
        lines += [f"- **{md_escape(e['name'], False)}** ({md_escape(e['paper'], False)}), "
                  f"{md_escape(e['status'], False)}: {md_escape(e['reason'], False)}" for e in skipped]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _command(prog: str, argv: Sequence[str]) -> str:
    """The command line without --out, --jobs and --quiet (the index depends only on what shapes the numbers)."""
    out, skip = [], False
    for tok in argv:
        if skip:
            skip = False
            continue
        if tok in ("--out", "--jobs"):
            skip = True
            continue
        if tok.startswith(("--out=", "--jobs=")) or tok == "--quiet":
            continue
        out.append(tok)
    return " ".join([prog] + [shlex.quote(t) for t in out] + ["--out", "DIR"])


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def run(args, argv: Sequence[str], prog: str = PROG, log=print) -> int:
    options = options_from(args)
    sections = A.select(args.only, args.skip)
    _reduce.check_spark_master(args)          # --spark-master without --engine spark: one line, nothing written
    if not args.paths:
        raise UsageError("give the round logs (files, folders or globs)")
    if not args.out:
        raise UsageError("--out DIR is required")
    target = args.out
    if is_uri(target) and scheme(target) == "file":
        from glance_law.data.uri import filesystem
        target = filesystem(target)[1]          # file:// is a local folder
    if is_uri(target):
        raise UsageError(f"--out {scheme(target)}://...: the report writes a local folder (tables, figures, index); "
                         "write it locally, then copy it to the store")
    out = check_output(target, args.paths, folder=True)
    t0 = time.perf_counter()
    if args.engine or _reduce.inputs_reduced(args.paths):       # out of core: glance_law.scale
        inp = reduced_inputs(args, options)       # its errors first: they name the bad file and the fix
        files = reduced_files(args.paths, args.skip_bad)
    else:
        inp = read_inputs(args.paths, options, args.skip_bad, horizon_of(args), chain_of(args))
        files = input_files(inp)
    with folder_session(out, prog) as session:      # one writer; INCOMPLETE marker until the manifest is written
        prev = _prepare_out(out, session.found)
        session.mark()
        return _write_report(args, argv, prog, log, options, sections, out, t0, inp, files, prev, session.found)


def _write_report(args, argv, prog, log, options, sections, out, t0, inp, files, prev, resumed) -> int:
    """Run the sections and write the report into ``out`` (prepared, held by :func:`run`)."""
    notes = [f"skipped input {p}: {r}" if str(p) not in r else f"skipped input {r}" for p, r in inp.rounds.skipped]
    notes += list(inp.rounds.notes)
    opts = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(options).items()}
    same_inputs = prev is not None and prev.get("inputs") == files and not resumed   # a killed run: keep nothing
    prev_entries = {e["name"]: e for e in (prev or {}).get("sections", [])}
    ran = {s.name for s in sections}
    command = _command(prog, argv)
    entries, status, executor, clean = [], 0, None, False
    hashes: dict = {}       # rel -> SHA-256 of every output this report wrote or kept intact
    try:
        offload = _policy_runs(inp) and "policy" in ran
        if args.jobs >= 2 and inp.reduced is None and (ran & {"tail", "survival"} or offload):
            executor = workers.process_pool(1)   # its worker ends with this process, even a killed one
            if ran & {"tail", "survival"}:
                inp.start_tail(executor)         # inside the try: a Ctrl-C here still stops the worker
            if offload:                          # then the policy tables, while the main process draws
                inp.start_policy(executor)
        for s in A.SECTIONS:
            old = prev_entries.get(s.name)
            keep = old is not None and same_inputs and args.only and s.name not in ran
            changed = _changed(out, old, prev["_listed"]) if keep else None
            if changed:                                  # kept outputs not as written: the section runs again
                log(f"{prog}: {s.name}: runs again: {out / changed} is not the file the previous report wrote "
                    "(changed, or a link)")
            elif keep:
                entries.append(old)                      # kept from the previous report (same inputs)
                hashes.update({rel: prev["_listed"][rel] for rel in old.get("outputs", [])})
                continue
            if s.name not in ran and not changed:
                if old is not None:
                    _remove(out, old.get("outputs", []), prev["_listed"], log)
                continue
            kept = _remove(out, old.get("outputs", []), prev["_listed"]) if old is not None else []
            t = time.perf_counter()
            entry = run_section(s, inp, out, command, opts, hashes)
            _say_kept(out, kept, entry["outputs"], log)      # a kept name the section wrote again is not kept
            status = max(status, int(entry["status"] == "failed"))
            if not args.quiet:
                what = entry["status"] if entry["status"] == "ok" else f"{entry['status']}: {entry['reason']}"
                log(f"{prog}: {s.name} ({s.paper}): {what} [{time.perf_counter() - t:.1f} s]")
            entries.append(entry)
        clean = True
    finally:
        if executor is not None:          # an exception or a signal: end the worker now, not after its job
            workers.stop(executor, wait=clean)
    _write_text(out, INDEX, render_index(entries, files, notes, out, hashes))
    import matplotlib

    from glance_law.data.provenance import library_versions
    libs = {**library_versions(), "matplotlib": matplotlib.__version__}
    outputs = {rel: hashes[rel] for e in entries for rel in e["outputs"]}
    manifest = {"tool": "glance-law", "tool_version": __version__, "command": scrub(" ".join([prog] + list(argv))),
                "seed": options.seed, "options": opts, "inputs": files, "libraries": libs,
                "sections": entries, "outputs": outputs}
    _write_text(out, MANIFEST, json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    if not args.quiet:
        n_ok = sum(e["status"] == "ok" for e in entries)
        log(f"{prog}: wrote {out / INDEX} ({n_ok} of {len(entries)} sections, {len(outputs)} files) "
            f"in {time.perf_counter() - t0:.1f} s")
    return status


def _changed(out: Path, entry: dict, listed: dict) -> str | None:
    """The first output of a kept section that no longer holds what the previous report wrote (a
    link, a hard link, another content; checked with the manifest's SHA-256), or None."""
    for rel in entry.get("outputs", []):
        if _own_bytes(out, rel, listed.get(rel)) is None:
            return rel
    return None


def _policy_runs(inp: A.Inputs) -> bool:
    """Whether the policy section would run on ``inp`` (the checks of :func:`run_section`), so that its
    tables are worth computing in the worker."""
    s = A.get("policy")
    return not inp.per_turn and inp.reduced is None and not (s.by_none and inp.options.by is None) and not s.missing(inp)


def run_section(s: A.Section, inp: A.Inputs, out: Path, command: str, opts: dict, hashes: dict | None = None) -> dict:
    """Build one section and write its artifacts (their SHA-256 into ``hashes``); the manifest entry
    (status ok, skipped or failed)."""
    from glance_law.cli import perturn
    entry = {"name": s.name, "paper": s.paper, "what": s.what, "command": scrub(command), "options": opts,
             "status": "ok", "reason": "", "outputs": [], "artifacts": []}
    if inp.per_turn and s.name != "summary" and perturn.prompts_baseline_alone(inp.prompts):   # a baseline alone
        entry.update(status="skipped", reason=perturn.baseline_section_reason(f"{s.name} ({s.paper})"))
        return entry
    if inp.per_turn and s.name not in perturn.REPORT_SECTIONS:   # per-turn counts: one line says why not
        entry.update(status="skipped", reason=perturn.needs_steps(f"{s.name} ({s.paper})"))
        return entry
    if inp.reduced is not None and not s.reduced:
        entry.update(status="skipped", reason=f"{s.name} ({s.paper}) needs per-round columns, which a reduction does "
                                              "not keep: run the report on the round logs without --engine (logs of "
                                              f"over {FULL_READ_ROUNDS:,} rounds are read in parts and sampled)")
        return entry
    if s.by_none and inp.options.by is None:      # a section that has no pooled row
        entry.update(status="skipped", reason=f"{s.name} ({s.paper}) {s.by_none}, so it has no pooled row; it does "
                                              "not run with --by none (drop --by none to run it)")
        return entry
    lacking = [] if inp.per_turn else s.missing(inp)
    if lacking:                     # the logs lack a column the section needs: named, with what records it
        from glance_law.data.needs import skip_reason
        entry.update(status="skipped", reason=skip_reason(f"{s.name} ({s.paper})", lacking))
        return entry
    try:
        arts = s.build(inp)
        entry["outputs"] = write_artifacts(arts, out, hashes)
        entry["artifacts"] = [{"stem": a.stem, "kind": "table", "caption": a.caption, "rows": a.rows}
                              if isinstance(a, A.Table) else {"stem": a.stem, "kind": "figure", "caption": a.caption}
                              for a in arts]
    except OutputError:             # an output that cannot be written safely stops the report
        raise
    except GlanceError as exc:      # MissingColumnError included: inputs the logs lack, named with the flag
        entry.update(status="skipped", reason=" ".join(str(exc).split()))
    except Exception as exc:  # noqa: BLE001 - a bug in one section must not cost the others
        entry.update(status="failed", reason=f"{type(exc).__name__}: {' '.join(str(exc).split())}")
        traceback.print_exc(file=sys.stderr)
    finally:
        import matplotlib.pyplot as plt
        plt.close("all")
    return entry


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")

    def log(msg):
        print(msg, file=sys.stderr)

    def body() -> int:
        args = build_parser(prog).parse_args(argv)
        if args.list:
            for s in A.SECTIONS:
                print(f"{s.name:18s} {s.paper:22s} {s.what}")
            return 0
        with workers.terminate_on_signals():
            return run(args, argv, prog, log)

    return run_main(prog, body, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
