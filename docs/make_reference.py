"""Generate docs/cli.md (from the argparse parsers) and docs/api.md (from the public modules).

    python docs/make_reference.py            # rewrite both
    python docs/make_reference.py --check    # exit 1 when either is out of date

tests/test_docs.py runs the check, so a changed option or public function shows up as a
failing test until this script is rerun.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
WIDTH = 100

#: (command, module, how to build its parser, one line)
COMMANDS = (
    ("glance-log", "glance_log.cli", "build_parser",
     "Decode a task with the reference tree-verify decoder and log every round ([logger.md](logger.md))."),
    ("python -m glance_law.fit", "glance_law.cli.fit", "fit",
     "Fit the law per task plus the pooled row; section flags run the other analyses on the same reading."),
    ("python -m glance_law.report", "glance_law.cli.report", "build_parser",
     "The whole theory appendix: every table and figure, the index and the manifest."),
    ("python -m glance_law.reduce", "glance_law.cli.reduce", "build_parser",
     "Reduce round logs to the law's sufficient statistics (serving scale)."),
    ("python -m glance_law.ingest", "glance_law.cli.ingest", "build_parser",
     "Import logs of other tools (Spec-Bench, GLANCE, vLLM, SGLang) as contract Parquet ([your-logs.md](your-logs.md))."),
    ("python -m glance_law.policy", "glance_law.policy.cli", "build_parser",
     "Fit draft policies, evaluate them on held-out prompts, export the best ([policy.md](policy.md))."),
)

#: (module, one line, names when the module has no __all__)
MODULES = (
    ("glance_law", "Top level: reading and writing logs.", None),
    ("glance_law.data.io", "Reading and writing round logs (the only I/O module; also `glance_law.io`).",
     ["read_logs", "read_rounds", "read_prompts", "write_table", "LogWriter", "LogSet", "FileInfo", "LogError",
      "expand_paths", "to_arrow", "run_metadata", "library_versions"]),
    ("glance_law.data.uri", "Paths and store URIs (s3://, gs://, abfs://, hdfs://, file://): globs, listing, "
     "atomic single-upload writes, one-line store errors.", None),
    ("glance_law.data.schema", "The round-log contract: columns, types, checks (also `glance_law.schema`).",
     ["SCHEMA_VERSION", "ROUND_COLUMNS", "PROMPT_COLUMNS", "REDUCED_COLUMNS", "SUPPLIED_BY", "Column", "columns",
      "column", "required_names", "arrow_schema", "check_type", "check_values"]),
    ("glance_law.data.importers", "Importers of other tools' logs (Spec-Bench, GLANCE, vLLM, SGLang).", None),
    ("glance_law.data.arms", "Arms of several target models: the target column, the label drafter @ target.",
     None),
    ("glance_law.errors", "User-facing errors (one line, exit 2 in the CLIs).", ["GlanceError", "MissingColumnError"]),
    ("glance_law.scrub", "Secrets never leave: the one scrubber for messages, notes, manifests, metadata and "
     "command lines.", None),
    ("glance_law.results", "The frozen result base class.", ["Result"]),
    ("glance_law.results.format", "Rendering tables: text, Markdown, LaTeX, HTML, JSON, CSV.",
     ["FORMATS", "render", "fmt_number", "display_frame", "records", "csv_cell", "csv_frame"]),
    ("glance_law.stats.cluster", "Prompt-clustered inference primitives.",
     ["CLUSTER_BY", "cluster_codes", "t_crit", "cluster_sums", "design_sums", "clustered_covariance",
      "cr1_covariance", "cr3_covariance", "clustered_mean", "bootstrap_counts", "percentile_interval"]),
    ("glance_law.stats.ranks", "Rank correlation with prompt-clustered inference.", ["spearman_clustered"]),
    ("glance_law.law", "The draftability law: numeric core and the grouped fit.", None),
    ("glance_law.stats.ceiling", "The entropy-only noise ceiling.", None),
    ("glance_law.stats.curve", "Equal-count bins, binned means, isotonic fits.", None),
    ("glance_law.tail", "The grounded tail: two-state survival, tests, held-out falsification.", None),
    ("glance_law.fano", "Fano's inequality for the target's root distribution.", None),
    ("glance_law.brackets", "The two brackets of Figure 4 and the rigorous ceilings.", None),
    ("glance_law.replay.tree", "The candidate-tree builder (best-first order).", None),
    ("glance_law.replay", "Counterfactual replay of every tree budget.", None),
    ("glance_law.replay.allocate", "Shared-budget allocation: concave envelopes, global best-first.", None),
    ("glance_law.replay.width", "Entropy-keyed width allocation replayed from the logs.", None),
    ("glance_law.policy", "Draft policies: causal shapes from root statistics, held-out replay, export.", None),
    ("glance_law.evidence.offsets", "Per-offset match law, hazards, the Assumption 2 test.", None),
    ("glance_law.evidence.probe", "The mismatched-image probe and signal columns (Table 13).", None),
    ("glance_law.evidence.order", "Task ordering with prompt-level uncertainty.", None),
    ("glance_law.evidence.transfer", "Law transfer: fit on some groups, score on others.", None),
    ("glance_law.evidence.audit", "The lossless audit with the tie-aware gate.", None),
    ("glance_law.evidence.timing", "The timing ledger (Appendix E).", None),
    ("glance_law.evidence.turns", "Tokens per verification step from per-turn counts (answers without per-step "
     "lengths).", None),
    ("glance_law.scale.reduce", "Sufficient statistics at serving scale: cells, grid, merge, files.", None),
    ("glance_law.scale.law_reduced", "The law and the tail fitted from a reduction.", None),
    ("glance_law.scale.engines", "Reduction engines over Parquet files (arrow, duckdb, spark).", None),
    ("glance_law.simulate", "Simulated round logs from known parameters.", None),
    ("glance_law.appendix", "The appendix sections (one per table or figure).", None),
    ("glance_law.results.plots", "The appendix figures, drawn from result objects.", None),
    ("glance_law.cli.report", "`python -m glance_law.report`: the whole appendix.",
     ["main", "build_parser", "read_inputs", "write_artifacts", "render_index"]),
    ("glance_log.record", "The round logger (a decoder callback).", None),
    ("glance_log.decode", "The reference tree-verify decoder.", None),
    ("glance_log.drafters", "Drafters: block, pld, two_model, early_exit, ar.", None),
    ("glance_log.models", "Loading targets (HF causal LMs and VLMs).", None),
    ("glance_log.sources", "Where --model comes from: a folder, a .gguf file (converted once, cached) or a known name.", None),
    ("glance_log.hooks", "Hooks for other decoders.", None),
    ("glance_log.run", "One logging run (what `glance-log` does).", None),
    ("glance_log.questions", "Spec-Bench / MT-bench question files: multi-turn questions, their prompts.", None),
    ("glance_log.default", "The embedded default model and block head (package data).", None),
)


def _formatter(prog):
    return argparse.HelpFormatter(prog, width=WIDTH, max_help_position=32)


def parser_for(module: str, how: str) -> argparse.ArgumentParser:
    mod = importlib.import_module(module)
    if how == "fit":      # every installed section's options, as --help shows them
        secs = []
        for spec, name, _ in mod.SECTIONS:
            try:
                secs.append(mod._import_section(spec.split()[0], name))
            except mod.UsageError:
                pass
        p = mod.build_parser(secs)
    else:
        p = getattr(mod, how)()
    p.formatter_class = _formatter
    for group in getattr(p, "_subparsers", None) and p._subparsers._group_actions or []:
        for sub in getattr(group, "choices", {}).values():
            sub.formatter_class = _formatter
    return p


def cli_md() -> str:
    out = ["# Command-line reference", "",
           "Generated by `python docs/make_reference.py` from the argparse parsers (a test keeps it current).",
           "User errors print one line on stderr and exit with code 2.", ""]
    out += [f"* [`{cmd}`](#{cmd.replace(' ', '-').replace('.', '').lower()}): {text}" for cmd, _, _, text in COMMANDS]
    out.append("")
    for cmd, module, how, text in COMMANDS:
        help_text = parser_for(module, how).format_help().rstrip()
        out += [f"## {cmd}", "", text, "", "```", help_text, "```", ""]
        shape = getattr(importlib.import_module(module), "JSON_SHAPE", None)
        if shape:
            mod = importlib.import_module(module)
            out += [f"`--format json` prints one document of this shape for every input (version "
                    f"{mod.JSON_VERSION}; `summary`, `law` and `skipped` are always there, a part that did not run "
                    "maps to `{}` and has a row under `skipped`; each table keeps every column, intervals as "
                    "`x, x_lo, x_hi`, missing numbers as null, and all of its notes):", "", "```", shape, "```", ""]
    out += ["The training scripts of the embedded default (`python -m glance_log.train.target`, "
            "`python -m glance_log.train.block`, `python -m glance_log.train.evaluate`) and the block-head recipe "
            "for a real target (`python -m glance_log.train.block_real`) document their options with `--help`.", ""]
    return "\n".join(out)


def _first_line(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    para = doc.split("\n\n")[0].replace("\n", " ").strip()
    return para


def _signature(obj) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""
    params = [q.replace(annotation=inspect.Parameter.empty) for q in sig.parameters.values()]
    sig = str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))
    return sig if len(sig) <= 160 else sig[:157] + "...)"


def public_names(module: str, names=None) -> list[str]:
    mod = importlib.import_module(module)
    if names is not None:
        return list(names)
    return list(mod.__all__)


def api_md() -> str:
    out = ["# API reference", "",
           "The public functions, classes and constants, module by module. Generated by "
           "`python docs/make_reference.py` from each module's `__all__` (or the names listed in the script); "
           "a test checks that every name exists. Every statistic returns a frozen "
           "`glance_law.results.Result`: `summary(fmt)`, `to_frame()`, `to_latex()`, `to_markdown()`, "
           "`to_json()`, `notes`, and an HTML table in Jupyter. The theory behind each is in [theory.md](theory.md).",
           ""]
    out += [f"* [`{m}`](#{m.replace('.', '').lower()}): {text}" for m, text, _ in MODULES]
    out.append("")
    for module, text, names in MODULES:
        mod = importlib.import_module(module)
        out += [f"## {module}", "", text, ""]
        for name in public_names(module, names):
            obj = getattr(mod, name)
            if inspect.isclass(obj):
                kind = "class"
                head = f"`{name}`"
            elif callable(obj):
                kind = "function"
                head = f"`{name}{_signature(obj)}`"
            else:
                kind = "constant"
                head = f"`{name}`"
            line = _first_line(obj) if kind != "constant" else ""
            out.append(f"- {head}" + (f" - {line}" if line else f" ({kind})"))
        out.append("")
    return "\n".join(out)


def targets() -> dict[Path, str]:
    return {DOCS / "cli.md": cli_md(), DOCS / "api.md": api_md()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a file is out of date, write nothing")
    args = ap.parse_args(argv)
    stale = []
    for path, text in targets().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
    if args.check and stale:
        print("out of date: " + ", ".join(str(p) for p in stale) + " (run python docs/make_reference.py)",
              file=sys.stderr)
        return 1
    for p in stale:
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
