"""The report layer: every table the toolkit prints goes through :func:`render`.

Result objects hand a flat frame (one column per number, intervals as
``name``, ``name_lo``, ``name_hi``) to :func:`render`, which produces text,
Markdown, LaTeX (booktabs), HTML, JSON or CSV. Human formats fold each
interval triple into one ``est [lo, hi]`` cell; machine formats (JSON, CSV)
keep the flat columns so other tools can read them. Output is deterministic:
the same frame gives the same bytes.
"""
from __future__ import annotations

import html as _html
import json
import math
import re
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from glance_law.data.arms import split_labels
from glance_law.scrub import scrub

FORMATS = ("text", "markdown", "latex", "html", "json", "csv")
HUMAN = ("text", "markdown", "latex", "html")


# ---------------------------------------------------------------------------
# escaping: strings from logs (task names, prompt ids, paths, notes) reach every
# format through these functions and nowhere else
# ---------------------------------------------------------------------------

_TOKEN = r"(?:-?inf|-|nan|[-+]?[0-9][0-9.eE+-]*)"
_NUMBER_CELL = re.compile(rf"{_TOKEN}(?: \[{_TOKEN}, {_TOKEN}\])?")


def _is_number_cell(s) -> bool:
    """A cell :func:`fmt_number` made (a number, ``-``, ``est [lo, hi]``): nothing to escape."""
    return isinstance(s, str) and _NUMBER_CELL.fullmatch(s) is not None


_CONTROL = {i: f"\\x{i:02x}" for i in range(32)} | {0x7F: "\\x7f", 0x85: "\\x85", 0x2028: "\\u2028",
                                                   0x2029: "\\u2029"}
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def one_line(s) -> str:
    """``s`` on one line: newlines, tabs and other control characters shown as ``\\n``, ``\\t``,
    ``\\xNN`` (visible, never dropped), so a log string cannot start a new line of output."""
    return str(s).translate(_CONTROL)


def text_escape(s) -> str:
    """A log string for plain text: :func:`one_line`."""
    return one_line(s)


_MD_SPECIAL = set("\\`*[]|~")


def md_escape(s, table: bool = True) -> str:
    """A log string for Markdown: one line, ``&``, ``<``, ``>`` as HTML entities (raw HTML and
    autolinks cannot form), the punctuation of links, images, code spans, emphasis and tables
    (``[ ] ` * ~ \\`` and non-intraword ``_``) backslash-escaped, and ``|`` too in a table cell
    (``table``; outside tables a pipe is plain text)."""
    if _is_number_cell(s):
        return s
    out, text = [], one_line(s)
    for i, ch in enumerate(text):
        if ch == "_":          # intraword underscores (ceiling_fraction) cannot open emphasis
            inner = 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
            out.append("_" if inner else "\\_")
        elif ch == "&":
            out.append("&amp;")
        elif ch == "<":
            out.append("&lt;")
        elif ch == ">":
            out.append("&gt;")
        elif ch in _MD_SPECIAL and (table or ch != "|"):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def html_escape(s) -> str:
    """A log string for HTML: one line, ``& < > " '`` as entities."""
    return _html.escape(text_escape(s), quote=True)


# a cell a spreadsheet would run as a formula starts with one of these; a plain number stays a number
_FORMULA_LEAD = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:inf|nan)", re.IGNORECASE)


def csv_cell(v):
    """A CSV cell that a spreadsheet cannot run: a string starting with ``=``, ``+``, ``-``, ``@``,
    a tab or a carriage return gets a leading ``'`` (OWASP's neutralisation), unless it is a plain
    number (``-0.25``, ``+3``, ``-inf``) or the missing-value dash ``-``. A carriage return inside
    a string becomes a newline (the CSV writer quotes a field holding a newline, not one holding a
    lone CR, which some readers take for the end of the row). Other cells are returned as they are."""
    if not isinstance(v, str):
        return v
    if v.startswith(_FORMULA_LEAD) and v != "-" and _PLAIN_NUMBER.fullmatch(v) is None:
        v = "'" + v
    return v.replace("\r\n", "\n").replace("\r", "\n") if "\r" in v else v


def csv_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with :func:`csv_cell` applied to its column names and its string cells."""
    out = frame.rename(columns=lambda c: csv_cell(str(c)))
    for c in out.columns:
        if out[c].dtype == object or pd.api.types.is_string_dtype(out[c].dtype):
            col = out[c].map(csv_cell, na_action="ignore")
            if not col.equals(out[c]):
                out[c] = col
    return out


def _is_missing(v) -> bool:
    if v is None:
        return True
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _is_pvalue(name: str) -> bool:
    n = name.lower()
    return n == "p" or n.startswith("p_") and not n.startswith("p_ge") or n.endswith("_p") or "pvalue" in n \
        or n.startswith("lrt_p")


def fmt_number(v, name: str = "", digits: int = 3) -> str:
    """One number as a human cell: ints plainly, p-values in scientific notation when small,
    other floats with ``digits`` decimals (fewer for large magnitudes)."""
    if _is_missing(v):
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        x = float(v)
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        if _is_pvalue(name) and 0 < abs(x) < 1e-3:
            return f"{x:.1e}"
        if x != 0 and abs(x) >= 1e5:
            return f"{x:.3g}"
        if abs(x) >= 100:
            return f"{x:.1f}"
        return f"{x:.{digits}f}"
    return str(v)           # text (a task name, an id): escaped by each renderer


#: A float column whose largest magnitude reaches this prints every cell in scientific notation.
SCI_FROM = 1e6


def _exact_decimals(x: float, digits: int) -> int:
    """The fewest decimals (at most ``digits``) that print ``x`` exactly."""
    for d in range(digits):
        scaled = x * 10 ** d
        if abs(scaled - round(scaled)) <= 1e-9 * max(1.0, abs(scaled)):
            return d
    return digits


def column_decimals(values: Iterable, name: str = "", digits: int = 3) -> int | None:
    """The one number format of a float column (its interval bounds included), so that no
    column mixes "382.0" with "99.765": the fewest decimals, at most ``digits``, that print
    every finite value of the column exactly (counts stored as floats print as integers, a
    Mann-Whitney U as ``1484.0``/``1003.5``, estimates with ``digits``); ``None``: scientific
    notation (4 significant digits) for every cell, when the column reaches :data:`SCI_FROM`.
    P-values keep their own rule (:func:`fmt_number`)."""
    xs = [float(v) for v in values if isinstance(v, (float, np.floating)) and math.isfinite(float(v))]
    if not xs:
        return digits
    if max(abs(x) for x in xs) >= SCI_FROM:
        return None
    return max(_exact_decimals(x, digits) for x in xs)


def _column_cell(v, name: str, decimals: int | None, digits: int) -> str:
    if _is_missing(v) or not isinstance(v, (float, np.floating)) or isinstance(v, (bool, np.bool_)):
        return fmt_number(v, name, digits)
    x = float(v)
    if math.isinf(x) or _is_pvalue(name):
        return fmt_number(v, name, digits)
    return f"{x:.3e}" if decimals is None else f"{x:.{decimals}f}"


def interval_groups(columns: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Map ``name`` to ``(name_lo, name_hi)`` for every complete interval triple."""
    cols = set(columns)
    return {c: (f"{c}_lo", f"{c}_hi") for c in columns if f"{c}_lo" in cols and f"{c}_hi" in cols}


def display_frame(frame: pd.DataFrame, digits: int = 3, intervals: bool = True) -> pd.DataFrame:
    """Strings for human formats, with interval triples folded into one cell. One rule per
    column type: integers plainly, booleans yes/no, p-values as :func:`fmt_number`, every other
    float column at one number of decimals (:func:`column_decimals`)."""
    groups = interval_groups(list(frame.columns)) if intervals else {}
    hidden = {c for pair in groups.values() for c in pair}
    out = {}
    for c in frame.columns:
        if c in hidden:
            continue
        vals = frame[c].tolist()
        if c in groups:
            lo, hi = groups[c]
            los, his = frame[lo].tolist(), frame[hi].tolist()
            d = column_decimals(vals + los + his, c, digits)
            cells = []
            for v, a, b in zip(vals, los, his):
                s = _column_cell(v, c, d, digits)
                if not (_is_missing(a) and _is_missing(b)):
                    s += f" [{_column_cell(a, c, d, digits)}, {_column_cell(b, c, d, digits)}]"
                cells.append(s)
            out[c] = cells
        else:
            d = column_decimals(vals, c, digits)
            out[c] = [_column_cell(v, c, d, digits) for v in vals]
    return pd.DataFrame(out, columns=list(out))


#: Default width (characters) of text tables in the command-line tools; ``width=None`` prints every column.
TEXT_WIDTH = 100
#: Columns that identify a row: a width-limited table never leaves them out.
ALWAYS_KEEP = ("drafter", "task")


def _cell_width(df: pd.DataFrame, c) -> int:
    return max([len(str(c))] + [len(str(v)) for v in df[c]])


def fit_columns(df: pd.DataFrame, width: int | None, keep: Sequence[str] = ()) -> tuple[pd.DataFrame, list[str]]:
    """The columns of a display frame that fit in ``width`` characters (two spaces between
    columns), and the names left out. The first column and those in ``keep`` are always
    kept, and so are the row labels :data:`ALWAYS_KEEP` (their widths are reserved first); the others are taken in order while they fit.
    ``width=None`` keeps every column."""
    cols = list(df.columns)
    if width is None or not cols:
        return df, []
    widths = {c: _cell_width(df, c) for c in cols}
    if sum(widths.values()) + 2 * (len(cols) - 1) <= width:
        return df, []
    keep = set(keep) | set(ALWAYS_KEEP)
    fixed = [c for c in cols if c == cols[0] or c in keep]
    used = sum(widths[c] for c in fixed) + 2 * (len(fixed) - 1)
    chosen = set(fixed)
    for c in cols:
        if c in chosen:
            continue
        if used + 2 + widths[c] <= width:
            chosen.add(c)
            used += 2 + widths[c]
    shown = [c for c in cols if c in chosen]
    return df[shown], [c for c in cols if c not in chosen]


def hidden_note(hidden: Sequence[str], width: int) -> str:
    return (f"{len(hidden)} column(s) not shown to fit {width} characters: {', '.join(hidden)} "
            "(--wide prints every column; --format json or csv carry them all)")


def _text(df: pd.DataFrame, title, notes) -> str:
    df = pd.DataFrame({text_escape(c): [text_escape(v) for v in df[c]] for c in df.columns})
    cols = list(df.columns)
    widths = [_cell_width(df, c) for c in cols]
    left = [i == 0 or c == "drafter" or not any(ch.isdigit() for ch in "".join(df[c].astype(str)))
            or (c == "target" and not any(_is_number_cell(v) for v in df[c]))     # model names, not budgets
            for i, c in enumerate(cols)]

    def line(vals):
        return "  ".join(str(v).ljust(w) if l else str(v).rjust(w) for v, w, l in zip(vals, widths, left)).rstrip()

    rows = [line(cols), line(["-" * w for w in widths])] + [line(r) for r in df.itertuples(index=False)]
    head = [text_escape(title), ""] if title else []
    tail = [""] + [f"note: {text_escape(n)}" for n in notes] if notes else []
    return "\n".join(head + rows + tail) + "\n"


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|")


def markdown_text(s: str) -> str:
    """A line of prose for Markdown: HTML and Markdown control characters escaped, one line."""
    text = _html.escape(" ".join(str(s).split()), quote=False)
    return "".join("\\" + ch if ch in "\\`*_[]#|" else ch for ch in text)


def _markdown(df: pd.DataFrame, title, notes) -> str:
    cols = list(df.columns)
    out = []
    if title:
        out += [f"**{md_escape(title, table=False)}**", ""]
    out.append("| " + " | ".join(md_escape(c) for c in cols) + " |")
    out.append("|" + "|".join(":---" if i == 0 else "---:" for i in range(len(cols))) + "|")
    for r in df.itertuples(index=False):
        out.append("| " + " | ".join(md_escape(v) for v in r) + " |")
    if notes:
        out.append("")
        out += [f"- {md_escape(n, table=False)}" for n in notes]
    return "\n".join(out) + "\n"


_LATEX_ESC = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
              "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(s) -> str:
    """A string for LaTeX: one line (:func:`one_line`), special characters escaped."""
    return "".join(_LATEX_ESC.get(ch, ch) for ch in text_escape(s))


def _latex(df: pd.DataFrame, title, notes) -> str:
    cols = list(df.columns)
    spec = "l" + "r" * (len(cols) - 1)
    out = []
    if title:
        out.append(f"% {latex_escape(title)}")
    out += [rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
            " & ".join(latex_escape(c) for c in cols) + r" \\", r"\midrule"]
    for r in df.itertuples(index=False):
        out.append(" & ".join(latex_escape(v) for v in r) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}"]
    out += [f"% note: {latex_escape(n)}" for n in notes]
    return "\n".join(out) + "\n"


def _html_table(df: pd.DataFrame, title, notes) -> str:
    e = html_escape
    out = ['<table class="glance-table">']
    if title:
        out.append(f"<caption>{e(str(title))}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{e(str(c))}</th>" for c in df.columns) + "</tr></thead>")
    out.append("<tbody>")
    for r in df.itertuples(index=False):
        out.append("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in r) + "</tr>")
    out.append("</tbody></table>")
    if notes:
        out.append("<ul>" + "".join(f"<li>{e(str(n))}</li>" for n in notes) + "</ul>")
    return "\n".join(out) + "\n"


def to_jsonable(v):
    if _is_missing(v) and not isinstance(v, (list, tuple, np.ndarray)):
        return None
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (np.floating, float)):
        x = float(v)
        return x if math.isfinite(x) else None
    if isinstance(v, (list, tuple, np.ndarray)):
        return [to_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): to_jsonable(x) for k, x in v.items()}
    return v if isinstance(v, (int, str)) else str(v)


def records(frame: pd.DataFrame) -> list[dict]:
    frame = split_labels(frame)
    return [{str(k): to_jsonable(v) for k, v in zip(frame.columns, row)}
            for row in frame.itertuples(index=False, name=None)]


def render(frame: pd.DataFrame, fmt: str = "text", title: str | None = None,
           notes: Iterable[str] = (), digits: int = 3, intervals: bool = True, width: int | None = None,
           keep: Sequence[str] = ()) -> str:
    """Render one table in ``fmt`` (one of :data:`FORMATS`).

    Notes are printed once each (repeats dropped, first occurrence kept). No secret of a location
    is printed (:func:`glance_law.scrub.scrub` on the notes and the rendered text); a CSV cell a
    spreadsheet would run as a formula gets a leading ``'`` (:func:`csv_cell`). ``width`` (text only):
    leave out columns until the table fits that many characters (:func:`fit_columns`; the first
    column and ``keep`` stay) and say which in a note; None prints every column."""
    notes = list(dict.fromkeys(scrub(n) for n in notes))
    split = split_labels(frame)   # arm labels "drafter @ target" print as a target column and the drafter
    if split is not frame:
        frame, keep = split, tuple(keep) + ("target",)   # the arm's target is never left out to fit the width
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "json":
        return scrub(json.dumps(records(frame), indent=2, allow_nan=False) + "\n")
    if fmt == "csv":
        return scrub(csv_frame(frame).to_csv(index=False, lineterminator="\n"))
    df = display_frame(frame, digits, intervals)
    if fmt == "text" and width is not None:
        df, hidden = fit_columns(df, width, keep)
        if hidden:
            notes.append(hidden_note(hidden, width))
    return scrub({"text": _text, "markdown": _markdown, "latex": _latex, "html": _html_table}[fmt](df, title, notes))
