"""Every flag a message of ``glance_law`` suggests exists on the command that prints it.

The string literals of the package (docstrings aside) are scanned for ``--flag`` tokens. A flag
after a command's name in the same string (``glance-log ...``, ``python -m glance_law.X ...``)
must exist on that command; a flag after a foreign tool's name (vLLM, SGLang, GLANCE, pip) is
that tool's and is not checked; any other flag must exist on every command that can print the
message: the module's own command (``glance_law.policy`` -> policy, ``cli/report.py`` and
``appendix.py`` -> report, ...), and for the reader and importers (``glance_law/data``), every
command that reads logs."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
NAMED = re.compile(r"glance-log|python -m glance_law\.(?:fit|report|reduce|ingest|policy)|vllm|vLLM|sglang|SGLang|"
                   r"GLANCE|Spec-Bench|pip")
#: Known exceptions, each with its reason (kept short: a new one needs a reason too).
KNOWN: set = set()
READERS = ("fit", "report", "reduce", "policy")


def _flags(parser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}


@pytest.fixture(scope="module")
def commands() -> dict[str, set[str]]:
    return command_flags()


def command_flags(logger: bool = True) -> dict[str, set[str]]:
    """command name (fit, report, reduce, ingest, policy, and with ``logger`` glance-log) -> its long options."""
    from glance_law.cli import fit, ingest, reduce, report
    from glance_law.policy import cli as policy
    mods = [fit._import_section(fit._flag(spec)[0], module) for spec, module, _ in fit.SECTIONS]
    out = {"fit": _flags(fit.build_parser(mods)), "report": _flags(report.build_parser()),
           "reduce": _flags(reduce.build_parser()), "ingest": _flags(ingest.build_parser()),
           "policy": _flags(policy.build_parser())}
    if not logger:
        return out
    try:
        from glance_log import cli as log_cli
        out["glance-log"] = _flags(log_cli.build_parser())
    except ImportError:      # the logger's extra is not installed: its flags are not checked
        pass
    # hidden old spellings are accepted but never suggested: a message must name the current flag
    return out


def _strings(path: Path):
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def _owners(rel: str) -> tuple[tuple[str, ...], bool]:
    """The commands that can print a message of the module at ``rel``, and whether the flag must
    exist on all of them (else on one: a statistic's message reaches the user through fit's
    section or the report's, and which one is decided at run time)."""
    if rel.startswith("glance_law/policy/"):
        return ("policy",), True
    if rel == "glance_law/cli/ingest.py":
        return ("ingest",), True
    if rel in ("glance_law/cli/report.py", "glance_law/appendix.py", "glance_law/fano.py",
               "glance_law/data/sample.py"):          # the prompt sample: the report's sections only
        return ("report",), True
    if rel == "glance_law/cli/fit.py":
        return ("fit",), True
    if rel == "glance_law/cli/reduce.py":       # reduce's own, and fit's reduced path
        return ("reduce", "fit"), False
    if rel == "glance_law/scale/law_reduced.py":
        return ("fit",), True                  # the reduced fit runs in fit only
    if rel.startswith("glance_law/scale/"):
        return ("fit", "reduce"), True
    if rel.startswith("glance_law/data/"):
        return READERS, True                   # the reader and importers: every command that reads logs
    return ("fit", "report"), False


def test_every_suggested_flag_exists_on_its_command(commands):
    bad = []
    for path in sorted((ROOT / "glance_law").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for line, text in _strings(path):
            for m in FLAG.finditer(text):
                named = NAMED.findall(text[:m.start()])
                who = named[-1] if named else None
                if who is not None and not (who == "glance-log" or who.startswith("python -m")):
                    continue            # a foreign tool's flag (vLLM, SGLang, GLANCE, pip)
                if who:
                    owners, every = ((who.rsplit(".", 1)[-1] if who.startswith("python -m") else who),), True
                else:
                    owners, every = _owners(rel)
                owners = tuple(c for c in owners if c in commands)
                if not owners or (rel, m.group()) in KNOWN:
                    continue
                has = [m.group() in commands[c] for c in owners]
                if not (all(has) if every else any(has)):
                    bad.append(f"{rel}:{line}: {m.group()} (not an option of {', '.join(owners)})")
    assert not bad, "\n".join(bad)
