"""Figures of the theory appendix, drawn from result objects (matplotlib, Agg backend, no maths).

Every function takes a fitted result (:class:`glance_law.law.LawFit`,
:class:`glance_law.tail.TailFit`, :class:`glance_law.replay.width.WidthAllocation`) and
returns a matplotlib ``Figure``; :func:`save_figure` writes it as PNG and PDF with
fixed metadata (no timestamps, no version strings), so the same result gives the
same bytes.

Print-safe: tasks (and models) are told apart by marker and line style, with colour
(the Okabe-Ito palette) only as a third cue, so every figure reads in greyscale.
Axes carry units: root entropy H in nats, accepted length in tokens (bonus token
excluded), budget in nodes per round.

* :func:`decile_curves` - Figure 3(a): measured decile curves of every task on one axis.
* :func:`law_fits` - Figure 8: one panel per task, decile means with intervals, the
  fitted law and the isotonic curve.
* :func:`law_brackets` - Figure 4: every task's law drawn against the AdaEDL lower bracket
  and the paper's 2 ln N / H ceiling, log scale.
* :func:`survival_curves` - the floor regime's run-length survival: observed vs the
  geometric (single-hazard) law vs the two-state model, log scale.
* :func:`width_pareto` - Figure 5: accepted value against budget per width policy.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from glance_law.data.tasks import TASKS
from glance_law.errors import GlanceError

__all__ = ["TASK_ORDER", "task_styles", "decile_curves", "law_fits", "law_brackets", "survival_curves",
           "width_pareto", "save_figure", "FIGURE_FORMATS"]

#: Known task families in the order of grounding (open to grounded); others follow, sorted.
TASK_ORDER = TASKS  # open to grounded, then the control (glance_law.data.tasks)
FIGURE_FORMATS = ("png", "pdf")

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
_LINES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (3, 1)), (0, (1, 1)), (0, (8, 2)))
_COLORS = ("#000000", "#E69F00", "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#56B4E9", "#F0E442")
_DPI = 150


def _plt():
    import matplotlib
    if matplotlib.get_backend().lower() not in ("agg", "pdf", "svg") and not _interactive():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _interactive() -> bool:
    """True inside Jupyter (keep its inline backend)."""
    import sys
    return "ipykernel" in sys.modules


def ordered(tasks) -> list[str]:
    """Tasks in grounding order: the known families first (TASK_ORDER), then the rest sorted."""
    tasks = list(dict.fromkeys(str(t) for t in tasks))
    known = [t for t in TASK_ORDER if t in tasks]
    return known + sorted(t for t in tasks if t not in TASK_ORDER)


def task_styles(tasks) -> dict[str, dict]:
    """A fixed marker, line style and colour per task (the pooled row gets a plain black line)."""
    out = {}
    for i, t in enumerate(ordered(tasks)):
        if t == "pooled":
            out[t] = dict(marker="*", ls="-", color="0.35")
            continue
        k = TASK_ORDER.index(t) if t in TASK_ORDER else len(TASK_ORDER) + i
        out[t] = dict(marker=_MARKERS[k % len(_MARKERS)], ls=_LINES[k % len(_LINES)],
                      color=_COLORS[k % len(_COLORS)])
    return out


def _drafter(law, drafter):
    ds = law.drafters
    if drafter is None:
        if len(ds) > 1:
            raise GlanceError(f"the fit holds several drafters ({', '.join(ds)}); pass drafter=...")
        return ds[0]
    if drafter not in ds:
        raise GlanceError(f"no drafter {drafter!r} in this fit; drafters: {', '.join(ds)}")
    return drafter


def fitted_groups(law, drafter, tasks, pooled: bool) -> list[str]:
    t = law.to_frame()
    t = t[(t["drafter"] == drafter) & np.isfinite(t["b1"].to_numpy(dtype=float))]
    names = [g for g in t["task"].tolist() if g != "pooled"]
    if tasks is not None:
        unknown = [g for g in tasks if g not in names]
        if unknown:
            raise GlanceError(f"no fitted group {', '.join(unknown)} for drafter {drafter!r}")
        names = list(tasks)
    names = ordered(names)
    if pooled and "pooled" in t["task"].tolist():
        names.append("pooled")
    if not names:
        raise GlanceError(f"nothing to plot: no fitted group for drafter {drafter!r}")
    return names


def _support_ylim(ax, law, groups, drafter, curves) -> None:
    """Clip the y axis to the support of a (0 <= a <= L): small-sample t intervals of a
    decile mean can reach below 0 or above the horizon, which only squashes the means."""
    Ls = []
    for g in groups:
        try:
            Ls.append(float(law.row(g, drafter)["horizon"]))
        except (KeyError, TypeError, ValueError):
            pass
    tops = [float(np.nanmax(c["mean_accepted"])) for c in curves] + [1.0]
    top = max(tops) * 1.15
    his = [float(np.nanmax(c["hi"])) for c in curves]
    if his:
        top = max(top, max(his))
    if Ls and np.isfinite(max(Ls)):
        top = min(top, max(Ls))
    ax.set_ylim(-0.04 * top, top * 1.04)


def _grid(hi: float, n: int = 200) -> np.ndarray:
    return np.linspace(0.0, max(float(hi), 1e-3), n)


def _subplots(n: int, ncols: int, w: float = 3.6, h: float = 3.0):
    plt = _plt()
    nc = max(1, min(ncols, n))
    nr = int(np.ceil(n / nc))
    fig, axes = plt.subplots(nr, nc, figsize=(w * nc, h * nr), squeeze=False)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    return fig, axes.ravel()[:n]


def _title(drafter: str, what: str, law) -> str:
    return what if len(law.drafters) <= 1 else f"{what} (drafter {drafter})"


# ---------------------------------------------------------------------------
# the law
# ---------------------------------------------------------------------------

def decile_curves(law, drafter: str | None = None, tasks: Sequence[str] | None = None, errorbars: bool = True):
    """Figure 3(a): mean accepted length against mean measured root entropy per entropy decile,
    every task on one axis (markers and line styles per task), with the decile means'
    prompt-clustered intervals."""
    d = _drafter(law, drafter)
    plt = _plt()
    names = fitted_groups(law, d, tasks, pooled=False)
    st = task_styles(names)
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    curves = [law.curve(g, d) for g in names]
    for g, c in zip(names, curves):
        s = st[g]
        if errorbars:
            ax.errorbar(c["mean_entropy"], c["mean_accepted"],
                        yerr=[c["mean_accepted"] - c["lo"], c["hi"] - c["mean_accepted"]],
                        fmt="none", ecolor=s["color"], elinewidth=0.7, capsize=2, alpha=0.7)
        ax.plot(c["mean_entropy"], c["mean_accepted"], label=g, ms=5, lw=1.1, mfc="white", **s)
    _support_ylim(ax, law, names, d, curves)
    ax.set_xlabel("root entropy H (nats), decile mean")
    ax.set_ylabel("mean accepted length a (tokens)")
    ax.set_title(_title(d, "decile curves", law), fontsize=10)
    ax.grid(alpha=0.3, lw=0.5)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def law_fits(law, drafter: str | None = None, tasks: Sequence[str] | None = None, ncols: int = 3,
             pooled: bool = True):
    """Figure 8: one panel per task (and the pooled fit): decile means with prompt-clustered
    intervals, the fitted law E[a|H] = M(sigmoid(b0 - b1 H), L) and the decreasing isotonic
    decile curve."""
    d = _drafter(law, drafter)
    names = fitted_groups(law, d, tasks, pooled)
    st = task_styles(names)
    fig, axes = _subplots(len(names), ncols, h=2.9)
    for ax, g in zip(axes, names):
        c = law.curve(g, d)
        b0, b1 = law.params(g, d)
        s = st[g]
        H = _grid(float(c["mean_entropy"].max()) * 1.08)
        ax.errorbar(c["mean_entropy"], c["mean_accepted"],
                    yerr=[c["mean_accepted"] - c["lo"], c["hi"] - c["mean_accepted"]], fmt=s["marker"],
                    color=s["color"], mfc="white", ms=5, elinewidth=0.8, capsize=2,
                    label="decile mean (prompt-clustered interval)")
        ax.plot(H, law.predict(H, group=g, drafter=d), color="0.0", ls="-", lw=1.3, label="law E[a|H]")
        ax.plot(c["mean_entropy"], c["predicted"], ls="none", marker="x", color="0.0", ms=4,
                label="law averaged over the bin's rounds")
        ax.step(c["mean_entropy"], c["isotonic"], where="mid", color="0.45", ls=":", lw=1.1,
                label="isotonic (decreasing)")
        _support_ylim(ax, law, [g], d, [c])
        r2 = float(law.row(g, d)["r2_curve"])
        ax.set_title(f"{g}: b0 = {b0:.2f}, b1 = {b1:.2f}, curve R$^2$ = {r2:.2f}", fontsize=8.5)
        ax.set_xlabel("root entropy H (nats)")
        ax.set_ylabel("accepted length (tokens)")
        ax.grid(alpha=0.3, lw=0.5)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7.5, frameon=False)
    fig.suptitle(_title(d, "law fits per task", law), fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def law_brackets(law, drafter: str | None = None, tasks: Sequence[str] | None = None, budget: int = 31,
                 gamma: float = 0.2, horizon: int | None = None):
    """Figure 4: every task's fitted law (lines) and decile means (markers) against the AdaEDL
    lower bracket M(1 - sqrt(gamma H), L) and the paper's verification ceiling 2 ln N / H at
    budget N (drawn as the paper does; with Shannon entropy it is not a bound, see
    docs/theory.md), with the horizon L; accepted length on a log scale."""
    from glance_law.brackets import bracket_curves
    d = _drafter(law, drafter)
    plt = _plt()
    names = fitted_groups(law, d, tasks, pooled=False)
    st = task_styles(names)
    L = int(horizon) if horizon is not None else int(law.row("pooled", d)["horizon"])
    hmax = max(float(law.curve(g, d)["mean_entropy"].max()) for g in names) * 1.1
    H = _grid(hmax, 300)[1:]
    br = bracket_curves(H, N=int(budget), L=L, gamma=gamma)
    fig, ax = plt.subplots(figsize=(5.6, 4.6))
    ax.fill_between(br["entropy"], br["adaedl"], np.minimum(br["ceiling"], 10 * L), color="0.93", lw=0)
    ax.plot(br["entropy"], br["adaedl"], color="0.55", ls="-", lw=2.6, alpha=0.8,
            label=f"lower bracket: AdaEDL M(1 - sqrt({gamma:g} H), L)")
    ax.plot(br["entropy"], br["ceiling"], color="0.55", ls=(0, (1, 1)), lw=2.6,
            label=f"upper bracket: 2 ln N / H, N = {int(budget)} (paper's; not a bound)")
    ax.axhline(L, color="0.55", lw=0.8, ls=(0, (4, 2)), label=f"horizon L = {L}")
    for g in names:
        s = st[g]
        c = law.curve(g, d)
        ax.plot(H, law.predict(H, group=g, drafter=d), color=s["color"], ls=s["ls"], lw=1.3)
        ax.plot(c["mean_entropy"], c["mean_accepted"], ls="none", marker=s["marker"], color=s["color"],
                mfc="white", ms=4.5)
        ax.plot([], [], color=s["color"], ls=s["ls"], marker=s["marker"], mfc="white", label=f"{g}: law, deciles")
    ax.set_yscale("log")
    lows = [float(law.curve(g, d)["mean_accepted"].min()) for g in names]
    ax.set_ylim(max(min(lows) / 2.5, 1e-2), L * 4)
    ax.set_xlim(0, hmax)
    ax.set_xlabel("root entropy H (nats)")
    ax.set_ylabel("E[a | H] (tokens, log scale)")
    ax.set_title(_title(d, "law fits against the two brackets", law), fontsize=10)
    ax.grid(alpha=0.3, lw=0.5, which="major")
    ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# the tail and the width
# ---------------------------------------------------------------------------

def survival_curves(tail, tasks: Sequence[str] | None = None, ncols: int = 3):
    """The floor regime's run-length survival P(a >= l), one panel per task: observed
    (Kaplan-Meier over the rounds' horizons, markers), the fitted geometric (single
    hazard, dashed) and the fitted two-state model (solid); log scale."""
    items = list(tail.tasks)
    label = {id(t): (t.task if not t.drafter else f"{t.drafter}/{t.task}") for t in items}
    if tasks is not None:
        items = [t for t in items if t.task in tasks or label[id(t)] in tasks]
    if not items:
        raise GlanceError("nothing to plot: the tail fit holds no task")
    order = {n: i for i, n in enumerate(ordered([t.task for t in items]))}
    items.sort(key=lambda t: (t.drafter, order[t.task]))
    fig, axes = _subplots(len(items), ncols)
    for ax, t in zip(axes, items):
        s = t.survival_table()
        ok = s["observed"].to_numpy(dtype=float) > 0
        ax.plot(s["l"][ok], s["observed"][ok], ls="none", marker="o", color="0.0", mfc="white", ms=4.5,
                label=f"observed ({t.n_rounds} rounds)")
        def pos(col, s=s):  # a survival of 0 has no place on a log axis
            v = s[col].to_numpy(dtype=float)
            return np.where(v > 0, v, np.nan)
        ax.plot(s["l"], pos("geometric"), color="#D55E00", ls="--", lw=1.3, label="geometric (one hazard)")
        ax.plot(s["l"], pos("two_state"), color="#0072B2", ls="-", lw=1.3, label="two-state")
        ax.set_yscale("log")
        # down to a tenth of the smallest observable survival (1 / rounds), never below 1e-4: the
        # fitted curves' far tails say nothing the data could check
        obs = s["observed"].to_numpy(dtype=float)[ok]
        lo = min(obs.min() if ok.any() else 1.0, 1.0 / max(t.n_rounds, 1)) / 10
        ax.set_ylim(max(lo, 1e-4), 1.6)
        ax.set_xlim(0.5, float(np.max(s["l"])) + 0.5)
        if not ok.any():
            ax.text(0.5, 0.5, "no run reaches l = 1", transform=ax.transAxes, ha="center", fontsize=8)
        ax.set_title(f"{label[id(t)]}: floor H <= {t.threshold:.3g} nats", fontsize=9)
        ax.set_xlabel("run length l (tokens)")
        ax.set_ylabel("P(a >= l)")
        ax.grid(alpha=0.3, lw=0.5, which="both")
        ax.legend(fontsize=6.5, frameon=False, loc="lower left")
    fig.suptitle("run-length survival at the entropy floor", fontsize=10)
    fig.tight_layout()
    return fig


def width_pareto(width, tasks: Sequence[str] | None = None, ncols: int = 3):
    """Figure 5: accepted value (tokens per round) against mean verifier budget (nodes per
    round) for the oracle, entropy-keyed and fixed-width policies (:func:`glance_law.replay.width.plot_pareto`)."""
    _plt()
    if tasks is None:
        tasks = ordered(width.pareto["task"].astype(str).unique())
    return width.plot(tasks=tasks, ncols=ncols)


# ---------------------------------------------------------------------------
# saving
# ---------------------------------------------------------------------------

_META = {"png": {"Software": None},
         "pdf": {"Creator": None, "Producer": None, "CreationDate": None, "ModDate": None}}


def save_figure(fig, stem, formats: Sequence[str] = FIGURE_FORMATS, close: bool = True,
                root=None) -> list[Path]:
    """Write ``fig`` as ``stem.png`` and ``stem.pdf`` (by default) with fixed metadata, so the same
    figure gives the same bytes; returns the paths. Closes the figure unless ``close=False``.
    Each file is written by :func:`glance_law.data.outputs.write_file` (fresh temporary file,
    then rename; with ``root``, no folder between ``root`` and the file may be a link)."""
    import io

    from glance_law.data.outputs import write_file
    stem = Path(stem)
    if root is None:
        stem.parent.mkdir(parents=True, exist_ok=True)
    out = []
    try:
        for fmt in formats:
            if fmt not in _META:
                raise GlanceError(f"unknown figure format {fmt!r}; choose from {', '.join(_META)}")
            path = stem.with_name(f"{stem.name}.{fmt}")
            buf = io.BytesIO()
            fig.savefig(buf, format=fmt, dpi=_DPI, metadata=_META[fmt])
            write_file(path, buf.getvalue(), root=root)
            out.append(path)
    finally:
        if close:
            _plt().close(fig)
    return out
