"""``python -m glance_law.fit PATHS...``: the draftability law per task plus the pooled row.

::

    python -m glance_law.fit logs/*.parquet [--by task] [--method mle|nls]
        [--format text|markdown|latex|html|json|csv] [--out FILE] [--bootstrap N] [--seed S]
        [--level 0.95] [--condition matched] [--skip-bad] [SECTION FLAGS...]

PATHS are files, folders or globs (a folder means every ``*.parquet`` below it).
The command reads the round logs once (:func:`load`), fits the law
(:func:`law_result`, i.e. :func:`glance_law.law.fit_law`) and renders one row per
task plus the pooled row (per drafter when the logs hold several).

What runs. Every log gets the per-group summary (:mod:`glance_law.evidence.summary`:
rounds, prompts, horizon, mean accepted length and tau with prompt-clustered intervals,
P(a = L)). The law runs when the logs carry ``root_entropy``; when they do not, or when it
cannot be fitted, it is listed as not run and the other sections still run. A section
module may set ``NEEDS`` (the round columns it cannot do without): a section whose columns
the logs lack is not run and is listed with the missing column and the tool that records
it (:mod:`glance_law.data.needs`), on stdout and stderr; so is one that raises
:class:`glance_law.errors.MissingColumnError` naming what records the input (one naming
nothing, e.g. a column the user named that the logs lack, stops the run with exit 2).

Output. Human formats (text, markdown, latex, html) open with one plain sentence per group
saying what the data show and why (:mod:`glance_law.results.explain`), then the summary,
the compact law table with its notes underneath (a note printed once), the sections, the
sections not run, and (text) a closing sentence. Text tables fit 100 characters, naming
the columns left out; ``--wide`` prints every column. ``--format json`` prints one document of the same shape
for every input (:func:`json_document`, version :data:`JSON_VERSION`)::

    {"version": 1,
     "summary": {"<table title>": {"rows": [{...}, ...], "notes": ["...", ...]}},
     "law": {"<table title>": {"rows": [...], "notes": [...]}},
     "<section>": {"<table title>": {"rows": [...], "notes": [...]}, ...},
     "skipped": {"sections not run": {"rows": [{"section": "...", "reason": "..."}], "notes": []}}}

``summary``, ``law`` and ``skipped`` are always present (a part that did not run maps to
``{}`` and has a row under ``skipped``); each table keeps every column (intervals as
``x, x_lo, x_hi``, law rows with the keys of :data:`glance_law.law.LAW_COLUMNS` then the
extra columns) and all of its notes. ``--format csv``: the law's columns as CSV; with
section flags, or when the law or a section was not run, one ``# <section>: <title>``
headed block per table and a ``# skipped:`` line per section not run.

Bad input. A bad file stops the run with exit code 2 and one line on stderr
naming the file, the column and the fix, before any output. ``--skip-bad`` fits
the valid files instead and lists every skipped file with its reason: on stderr
(in every format, so machine-readable stdout stays one JSON document / CSV
table) and, in human formats, also as a note under the table.

Sections. Each further analysis is a line of :data:`SECTIONS`, ``(flag, module,
help)``; a flag written ``"--name METAVAR"`` takes a value (stored as
``args.name``), otherwise it is a switch. A section's module is imported only
when its flag is given (a module that does not exist yet cannot break the
command), may define ``add_cli_arguments(parser)`` for its own options, and must
define ``cli_section(logs, args) -> list[Result]``. It may also set
``CLI_COLUMNS`` (the round columns it needs); without it every column is read.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from glance_law.cli import reduce as _reduce
from glance_law.cli.common import (
    Parser,
    UsageError,
    add_declare_arguments,
    chain_of,
    horizon_of,
    run_main,
)
from glance_law.data.io import LogSet, read_logs
from glance_law.data.outputs import check_output, write_file
from glance_law.data.selection import LAW_INPUT
from glance_law.errors import GlanceError
from glance_law.results import format as _fmt
from glance_law.scrub import scrub

PROG = "python -m glance_law.fit"

#: (flag, module, help). "--flag METAVAR" makes a flag that takes a value.
SECTIONS: list[tuple[str, str, str]] = [
    ("--tail", "glance_law.tail.report",
     "the grounded tail: two-state survival model, LRT (bootstrap and nominal p), held-out falsification"),
    ("--width", "glance_law.replay.width",
     "entropy-keyed width allocation replayed from the logged marginals (oracle, fixed, entropy-keyed)"),
    ("--offsets", "glance_law.evidence.offsets",
     "per-offset match law, conditional hazards and the Assumption 2 test"),
    ("--probe", "glance_law.evidence.probe", "the mismatched-image probe (matched vs mismatched condition)"),
    ("--order", "glance_law.evidence.order", "task ordering by mean accepted length and slope, with intervals"),
    ("--transfer TRAIN:TEST", "glance_law.evidence.transfer",
     "fit the law on TRAIN groups and score it on TEST groups"),
    ("--audit", "glance_law.evidence.audit", "the lossless audit from the prompt files (near-ties explained)"),
    ("--timing BASELINE_GLOB", "glance_law.evidence.timing",
     "the timing ledger against an autoregressive baseline run"),
]

#: Round columns the law itself reads (besides the contract's required and key columns).
LAW_READ_COLUMNS = LAW_INPUT + ("task", "prompt_id", "condition", "drafter", "run_id", "round")  # round: output ends


def _flag(spec: str) -> tuple[str, str | None, str]:
    parts = spec.split()
    name = parts[0]
    return name, (parts[1] if len(parts) > 1 else None), name.lstrip("-").replace("-", "_")


def build_parser(extend: Sequence = ()) -> argparse.ArgumentParser:
    """The parser; ``extend``: section modules whose ``add_cli_arguments`` to apply."""
    p = Parser(prog=PROG, allow_abbrev=False,
                description="Fit the draftability law logit p = b0 - b1 H, E[a|H] = p(1-p^L)/(1-p) to round "
                            "logs: one row per task plus the pooled row, with prompt-clustered intervals.")
    p.add_argument("paths", nargs="+", metavar="PATHS", help="round-log files, folders or globs")
    p.add_argument("--by", default="task", metavar="COLUMN",
                   help="group rows by this column (default: task); 'none': every section's pooled rows only, "
                        "labelled 'pooled' (a section that compares tasks, --order, is listed as not run)")
    p.add_argument("--method", choices=("mle", "nls"), default="mle",
                   help="mle: exact maximum likelihood of the truncated geometric (default); nls: least "
                        "squares of the conditional mean, for comparison")
    p.add_argument("--weight", choices=("round", "prompt"), default="round", dest="weighting",
                   help="round: every round counts once (default, the round-level law); prompt: every prompt "
                        "counts once (weights 1 / its rounds: the prompt-level law, which differs when prompts "
                        "that accept more take fewer rounds, e.g. with fixed-length answers)")
    p.add_argument("--format", choices=_fmt.FORMATS, default="text",
                   help="output format (default: text); json: one versioned document of the same shape for every "
                        "input, {section: {table title: {rows, notes}}} (docs/cli.md)")
    p.add_argument("--out", metavar="FILE",
                   help="write the output to FILE instead of stdout (through a fresh temporary file in FILE's "
                        "folder, renamed onto FILE: a link at FILE is replaced, not written through)")
    p.add_argument("--bootstrap", type=int, default=0, metavar="N",
                   help="prompt-level cluster bootstrap with N replicates (percentile intervals) instead of "
                        "the CR3 cluster jackknife (default 0: jackknife)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="bootstrap seed (default 0)")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--condition", default="matched", metavar="C[,C...]",
                   help="conditions to fit (default: matched); 'all' pools every condition")
    p.add_argument("--skip-bad", action="store_true",
                   help="fit the valid files and list every skipped file with its reason")
    add_declare_arguments(p)
    p.add_argument("--wide", action="store_true",
                   help=f"text tables print every column (default: fit {_fmt.TEXT_WIDTH} characters, naming the "
                        "columns left out)")
    g = p.add_argument_group("sections (each prints its own table after the law)")
    for spec, module, text in SECTIONS:
        name, metavar, dest = _flag(spec)
        if metavar:
            g.add_argument(name, dest=dest, metavar=metavar, default=None, help=f"{text} [{module}]")
        else:
            g.add_argument(name, dest=dest, action="store_true", help=f"{text} [{module}]")
    _reduce.add_reduce_arguments(p, engine_default=None)  # --engine, --buckets, ... (issue 9: out of core)
    for mod in extend:
        add = getattr(mod, "add_cli_arguments", None)
        if add is not None:
            add(p)
    return p


def _import_section(flag: str, module: str):
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise UsageError(f"{flag}: this installation has no {module} module yet, so the section is unavailable")
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"{flag}: {module} could not be imported ({exc})") from None
    if not hasattr(mod, "cli_section"):
        raise UsageError(f"{flag}: {module} does not provide cli_section(logs, args)")
    return mod


def requested_sections(argv: Sequence[str]) -> list[tuple[str, str]]:
    """(flag, module) of every section flag present in ``argv`` (exact flags, abbreviations are off)."""
    out = []
    for spec, module, _ in SECTIONS:
        name = _flag(spec)[0]
        if any(tok == name or tok.startswith(name + "=") for tok in argv):
            out.append((name, module))
    return out


def parse_args(argv: Sequence[str]):
    """Parse in two steps: find the section flags, import those modules, then parse with their options."""
    argv = list(argv)
    if any(tok in ("-h", "--help") for tok in argv):
        mods = []
        for spec, module, _ in SECTIONS:  # show every installed section's options in --help
            try:
                mods.append(_import_section(_flag(spec)[0], module))
            except UsageError:
                pass
        build_parser(mods).parse_args(argv)  # prints help, exits 0
    wanted = requested_sections(argv)
    mods = [(flag, _import_section(flag, module)) for flag, module in wanted]
    args = build_parser([m for _, m in mods]).parse_args(argv)
    if args.bootstrap < 0:
        raise UsageError("--bootstrap must be >= 0")
    if not 0.0 < args.level < 1.0:
        raise UsageError("--level must lie strictly between 0 and 1")
    from glance_law.data.selection import grouping
    args.by = grouping(args.by)  # None: the pooled row only, in every section (labelled 'pooled')
    return args, mods


def _conditions(args):
    c = str(args.condition)
    if c.lower() == "all":
        return None
    parts = [x.strip() for x in c.split(",") if x.strip()]
    return parts[0] if len(parts) == 1 else parts


def load(args, modules: Sequence = ()) -> LogSet:
    """Read the round logs once, only the columns the law and the requested sections need."""
    columns: list[str] | None = list(LAW_READ_COLUMNS) + ([args.by] if args.by else [])
    for mod in modules:
        extra = getattr(mod, "CLI_COLUMNS", None)
        if extra is None:
            columns = None
            break
        columns += list(extra)
    if columns is not None:
        columns = list(dict.fromkeys(columns))
    return read_logs(args.paths, "rounds", columns=columns, skip_bad=args.skip_bad, horizon=horizon_of(args),
                     chain=chain_of(args))


def law_result(logs: LogSet, args):
    """The law table for the logs (the step a reduced-table reader plugs into)."""
    # scipy: imported when the law runs, not when the command starts
    from glance_law.law.fit import fit_law
    return fit_law(logs, by=args.by, method=args.method, level=args.level, n_boot=args.bootstrap,
                   seed=args.seed, condition=_conditions(args), weighting=getattr(args, "weighting", "round"))


def render(law, sections: Sequence[tuple[str, Sequence]], fmt: str, *, summary=None,
           skipped: Sequence[tuple[str, str]] = (), law_skipped: str | None = None,
           width: int | None = None, closing: str | None = None, unavailable: Sequence[str] = (),
           lead: Sequence[str] = ()) -> str:
    """The whole document.

    Human formats: one plain sentence per group (:mod:`glance_law.results.explain`), the
    per-group summary, the law table, each section's tables, the sections that could not run
    (each with the column it needs and the tool that records it) and a closing sentence; notes
    already printed under an earlier table are not repeated; text tables fit ``width``
    characters; ``closing`` replaces the closing sentence, which suggests no flag of ``unavailable``
    (sections the same input would refuse or not run: :func:`unavailable_sections`) and starts with
    ``lead`` (:func:`timing_suggestion`). JSON: always the one versioned document of :func:`json_document`. CSV: the law
    rows alone when nothing else was asked and the law was fitted; otherwise one
    ``# name: title`` block per table."""
    plain = not sections and not skipped and law is not None
    if fmt == "json":
        return json_document(law, sections, summary=summary, skipped=skipped)
    if fmt == "csv":
        if plain:
            return law.summary("csv")
        parts = [f"# law: {law.title}\n" + law.summary("csv")] if law is not None else []
        if summary is not None:
            parts.append(f"# summary: {summary.title}\n" + summary.summary("csv"))
        parts += [f"# {name}: {res.title}\n" + res.summary("csv") for name, results in sections for res in results]
        parts += [f"# skipped: {name}: {' '.join(reason.split())}\n" for name, reason in skipped]
        return "\n".join(parts)
    from glance_law.results import explain
    blocks, seen, hidden = [], set(), False
    if summary is not None:
        lines = (explain.turn_sentences(summary) if getattr(summary, "per_turn", False)
                 else explain.group_sentences(summary, law, law_skipped))
        blocks.append(_sentences(lines, fmt))
    results = ([summary] if summary is not None else []) + ([law] if law is not None else []) + \
        [res for _, rs in sections for res in rs]
    for res in results:
        frame = res.display_frame() if hasattr(res, "display_frame") else res.to_frame()
        notes = [n for n in dict.fromkeys(res.notes) if n not in seen]
        seen.update(notes)
        text = _fmt.render(frame, fmt, res.title, notes, width=width, keep=getattr(res, "display_keep", ()))
        hidden = hidden or "not shown to fit" in text
        blocks.append(text)
    if skipped:
        blocks.append(_sentences(explain.skipped_lines(skipped), fmt))
    if fmt == "text":
        given = [name for name, _ in sections] + [name for name, _ in skipped if name.startswith("--")]
        blocks.append((closing or explain.closing_sentence(hidden, given, unavailable, lead)) + "\n")
    return "\n".join(blocks)


#: Version of the ``--format json`` document (:func:`json_document`); raised when its shape changes.
JSON_VERSION = 1
#: The shape of the ``--format json`` document (printed in docs/cli.md).
JSON_SHAPE = """{"version": 1,
 "summary": {"<table title>": {"rows": [{"<column>": value, ...}, ...], "notes": ["...", ...]}},
 "law":     {"<table title>": {"rows": [...], "notes": [...]}},
 "<section>": {"<table title>": {"rows": [...], "notes": [...]}, "<table title 2>": {...}},
 "skipped": {"sections not run": {"rows": [{"section": "...", "reason": "..."}], "notes": []}}}"""
#: Title of the table that lists the sections not run, under the ``skipped`` key of the JSON document.
SKIPPED_TITLE = "sections not run"


def _table(res) -> dict:
    return {"rows": _fmt.records(res.to_frame()), "notes": [str(n) for n in dict.fromkeys(res.notes)]}


def json_document(law, sections: Sequence[tuple[str, Sequence]] = (), *, summary=None,
                  skipped: Sequence[tuple[str, str]] = ()) -> str:
    """The ``--format json`` document, one shape for every input::

        {"version": 1,
         "summary": {"<table title>": {"rows": [{...}, ...], "notes": ["...", ...]}},
         "law": {"<title>": {"rows": [...], "notes": [...]}},
         "<section>": {"<title>": {...}, "<title 2>": {...}},
         "skipped": {"sections not run": {"rows": [{"section": ..., "reason": ...}], "notes": []}}}

    ``summary``, ``law`` and ``skipped`` are always there; a section that did not run maps to
    ``{}`` (the law without root entropy; the summary of reduced tables) and has its row under
    ``skipped``. Rows carry every column, intervals as ``x, x_lo, x_hi``, missing numbers as
    null; notes are each table's own, whole (none is dropped for having been printed before)."""
    import json

    def block(results) -> dict:
        out: dict = {}
        for res in results:
            key, k = res.title, 2
            while key in out:
                key, k = f"{res.title} ({k})", k + 1
            out[key] = _table(res)
        return out

    doc: dict = {"version": JSON_VERSION, "summary": block([summary] if summary is not None else []),
                 "law": block([law] if law is not None else [])}
    for name, results in sections:
        doc[name] = block(results)
    doc["skipped"] = {SKIPPED_TITLE: {"rows": [{"section": name, "reason": " ".join(str(reason).split())}
                                               for name, reason in skipped], "notes": []}}
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def json_rows(doc: dict, section: str = "law", title: str | None = None) -> list[dict]:
    """The rows of one table of a parsed ``--format json`` document: ``section``'s table
    ``title`` (default: its first table; ``[]`` when the section did not run)."""
    block = doc.get(section) or {}
    if title is None:
        return next(iter(block.values()))["rows"] if block else []
    return block[title]["rows"]


def _sentences(lines: Sequence[str], fmt: str) -> str:
    if fmt == "markdown":
        return "\n".join(_fmt.markdown_text(x) for x in lines) + "\n"
    if fmt == "latex":
        return "\n".join(f"% {_fmt.latex_escape(x)}" for x in lines) + "\n"
    if fmt == "html":
        import html
        return "".join(f"<p>{html.escape(x)}</p>\n" for x in lines)
    return "\n".join(lines) + "\n"


def by_none_reason(flag: str, mod) -> str:
    """Why a section whose rows compare groups (its ``BY_NONE``) does not run with ``--by none``."""
    return f"{flag} {mod.BY_NONE}, so it has no pooled row; it does not run with --by none (drop --by none to run it)"


def run_analyses(logs: LogSet, args, mods: Sequence[tuple[str, object]]):
    """The summary (always), the law (when the logs carry root entropy) and every requested
    section whose columns exist; returns (summary, law, law_skipped, sections, skipped)."""
    from dataclasses import replace

    from glance_law.data import needs
    from glance_law.data.arms import label_targets
    from glance_law.data.importers import RUNS_NOTE
    from glance_law.errors import MissingColumnError
    from glance_law.evidence.summary import group_summary
    arm_notes: list[str] = []
    frame = label_targets(logs.frame, arm_notes)   # several target models: arm = drafter @ target, everywhere
    if arm_notes:
        logs = replace(logs, frame=frame, notes=tuple(logs.notes) + tuple(arm_notes))
    summary = group_summary(logs, by=args.by, level=args.level)
    from glance_law.data.declare import DECLARED_PREFIX
    runs = [n for n in logs.notes if str(n).startswith((RUNS_NOTE, DECLARED_PREFIX))] + arm_notes
    # the runs and targets kept apart or pooled first, then every other note of the reader and the
    # importers (answers left out, drafts cut short, pseudo-prompts, records ignored, ...): printed once,
    # under the summary (the per-turn path, policy and report keep them all too)
    kept = runs + [n for n in logs.notes if n not in runs]
    if kept:
        summary = replace(summary, extra_notes=tuple(dict.fromkeys(kept + list(summary.extra_notes))))
    law, law_skipped, skipped = None, None, []
    lacking = needs.missing(frame, ["root_entropy"])
    if lacking:
        skipped.append(("law", needs.skip_reason("law", lacking)))
        law_skipped = f"the logs carry no root_entropy, which {needs.recorded_by('root_entropy')}"
    else:
        src = logs
        nulls = frame["root_entropy"].isna()
        if nulls.any():
            src = replace(logs, frame=frame.loc[~nulls.to_numpy()],
                          notes=tuple(logs.notes) + (f"{int(nulls.sum())} round(s) without a root entropy left out "
                                                     "of the law (every other table uses them)",))
        try:
            law = law_result(src, args)
        except GlanceError as exc:
            law_skipped = f"it could not be fitted: {' '.join(str(exc).split())}"
            skipped.append(("law", f"law could not be fitted: {' '.join(str(exc).split())}"))
    sections = []
    for flag, mod in mods:
        lacking = needs.missing(frame, getattr(mod, "NEEDS", ()))
        if lacking:
            skipped.append((flag, needs.skip_reason(flag, lacking)))
            continue
        if args.by is None and getattr(mod, "BY_NONE", None):    # a section that has no pooled row
            skipped.append((flag, by_none_reason(flag, mod)))
            continue
        try:
            sections.append((flag.lstrip("-"), list(mod.cli_section(logs, args))))
        except MissingColumnError as exc:
            if exc.supplied_by is None:   # nothing records it (e.g. a column the user named): a usage error
                raise
            skipped.append((flag, " ".join(str(exc).split())))
    return summary, law, law_skipped, sections, skipped


def unavailable_sections(logs: LogSet, args) -> list[str]:
    """The section flags of the closing sentence that these round logs would refuse or not run:
    ``--order`` with ``--by none`` or fewer than two tasks (it compares tasks), ``--tail`` on rounds
    rebuilt from server counters (pseudo-prompts: it clusters by prompt)."""
    from glance_law.data.selection import unordered_rounds
    f = logs.frame
    out = []
    if args.by is None or "task" not in f.columns or f["task"].nunique() < 2:
        out.append("--order")
    if unordered_rounds(f, ("pooled",)).any():
        out.append("--tail")
    return out


def timing_suggestion(logs: LogSet, args) -> list[str]:
    """The closing sentence's first suggestion when the inputs hold the autoregressive baseline (drafter
    ar, every round horizon 0) beside a drafted arm and ``--timing`` was not given: the timing ledger
    against those files (``--timing`` names the baseline; the speculative arm is the rest). The files
    are named by their names only (the same sentence whether the logs are local or in a store)."""
    import os

    from glance_law.data.arms import plain_drafter
    f = logs.frame
    if getattr(args, "timing", None) or not {"drafter", "horizon", "run_id"} <= set(f.columns) or not len(f):
        return []
    ar = (plain_drafter(f["drafter"].astype(str)) == "ar").to_numpy()
    if not ar.any() or not (f["horizon"].to_numpy()[~ar] > 0).any():
        return []
    runs = set(f.loc[ar, "run_id"].astype(str)) - set(f.loc[~ar, "run_id"].astype(str))
    names = [os.path.basename(str(fi.path).rstrip("/")) for fi in (*logs.files, *logs.other)
             if str(fi.run.get("run_id")) in runs]
    names = list(dict.fromkeys(names))
    if len(names) == 1:
        which = f"its file: {names[0]}"
    elif names and all("-ar-" in n for n in names):
        which = f"its {len(names)} files match *-ar-*"
    else:
        which = f"{len(names)} files" if names else "its files"
    return [f"the inputs hold an autoregressive baseline (drafter ar; {which}): add --timing BASELINE (that file, "
            "or its folder or a quoted glob of its files) for the timing ledger (ms per token, speedup) of the "
            "speculative arm against it"]


def reduced_closing(args, law, given: Sequence[str]) -> str:
    """The closing sentence on a reduction: --tail where the reduction carries root entropy (the law
    was fitted; the other sections need per-round columns), else the round logs it was reduced from."""
    todo = [] if law is None or "--tail" in given else ["--tail"]
    if todo:
        return "Next: add --tail for the tail test; --order and --offsets need the round logs (run them there)."
    return ("Next: a reduction gives this table" + ("" if law is not None else " only (no root_entropy)")
            + "; the other sections run on the round logs it was reduced from (python -m glance_law.fit ROUND_LOGS "
            "--offsets).")


def _write(text: str, out: str | None) -> None:
    """stdout, or ``out`` through a fresh temporary file in its folder (random name, exclusive
    create) renamed onto it: a link or file planted beside it is never written through. No secret
    of a location is written (:func:`glance_law.scrub.scrub`)."""
    text = scrub(text)
    if not out:
        sys.stdout.write(text)
        return
    write_file(out, text)


def _report_skips(logs: LogSet | None, skipped) -> None:
    """The files skipped and the sections not run, one line each on stderr."""
    from glance_law.results.explain import skipped_lines
    for path, reason in (logs.skipped if logs is not None else ()):
        print(f"{PROG}: skipped {reason if str(path) in reason else f'{path}: {reason}'}", file=sys.stderr)
    for line in skipped_lines(skipped):
        print(f"{PROG}: {line}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)

    def body() -> None:
        args, mods = parse_args(argv)
        _reduce.check_spark_master(args)
        for flag in ("out", "width_plot"):     # checked before any work: never a link, never an input
            if getattr(args, flag, None):
                check_output(getattr(args, flag), args.paths, what="--" + flag.replace("_", "-"))
        if args.engine or _reduce.inputs_reduced(args.paths):  # out of core: glance_law.scale (issue 9)
            law, sections = _reduce.cli_fit(args, mods)
        else:
            from glance_law.cli import perturn
            from glance_law.data.io import PromptsOnlyError
            steps = True
            try:
                logs = load(args, [m for _, m in mods])
                turns = perturn.per_turn_only(logs)
            except PromptsOnlyError:       # per-turn counts only: the tables they allow
                turns, steps = True, False
            if turns:
                summary, sections, skipped, logs = perturn.fit_tables(args.paths, args, mods, from_steps=steps)
                _report_skips(logs, skipped)
                _write(render(None, sections, args.format, summary=summary, skipped=skipped,
                              law_skipped=perturn.law_reason(summary), width=None if args.wide else _fmt.TEXT_WIDTH,
                              closing=perturn.closing(summary)), args.out)
                return
            _report_skips(logs, ())
            summary, law, law_skipped, sections, skipped = run_analyses(logs, args, mods)
            _report_skips(None, skipped)
            _write(render(law, sections, args.format, summary=summary, skipped=skipped, law_skipped=law_skipped,
                          width=None if args.wide else _fmt.TEXT_WIDTH, unavailable=unavailable_sections(logs, args),
                          lead=timing_suggestion(logs, args)),
                   args.out)
            return
        _write(render(law, sections, args.format, width=None if args.wide else _fmt.TEXT_WIDTH,
                      closing=reduced_closing(args, law, [f for f, _ in mods])), args.out)

    return run_main(PROG, body, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
