"""The sections of the theory appendix: one short function per table or figure, public API only.

Each section takes an :class:`Inputs` (the round logs read once, the prompt files,
the options, and the law/tail fits shared between sections) and returns
:class:`Table` and :class:`Figure` artifacts; :mod:`glance_law.report` writes them
(Markdown, LaTeX and CSV for tables, PNG and PDF for figures) and the index. A section whose
inputs the logs do not carry raises :class:`glance_law.errors.MissingColumnError`
naming the logger flag that records them (``glance_law.schema.SUPPLIED_BY``); the
report lists it as skipped. No statistics are computed here: every number comes
from the analysis modules (law, tail, width, probe, order, transfer, offsets,
audit, timing, fano), figures from :mod:`glance_law.results.plots`.

The ``analyses/`` scripts run one section each; ``python -m glance_law.report``
runs them all.

Large logs: the report may read only the scalar columns into :attr:`Inputs.rounds` and set
:attr:`Inputs.reader`; a section that needs per-offset list columns (:data:`VECTORS`: ``match``,
``topk_logq``, ``target_rank``, ...) gets them from :meth:`Inputs.part`, which also samples whole
prompts (:mod:`glance_law.data.sample`, seeded by ``--seed``) when the logs hold more rounds than the
section's cap (:attr:`Options.replay_rounds` for the width and policy replays,
:attr:`Options.offset_rounds` for the per-offset tables; 0 = every round), and says so in the
section's notes.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from glance_law.data.outputs import safe_stem
from glance_law.data.schema import LIST_FLOAT, LIST_INT, ROUND_COLUMNS, SUPPLIED_BY
from glance_law.errors import GlanceError, MissingColumnError
from glance_law.results import format as _fmt
from glance_law.results import plots

__all__ = ["Options", "Inputs", "Table", "Figure", "Section", "SECTIONS", "LAW_TABLE_COLUMNS", "VECTORS", "section",
           "names", "get", "select"]

#: The per-offset list columns of the round contract (read per section, and sampled, on large logs).
VECTORS: tuple[str, ...] = tuple(c.name for c in ROUND_COLUMNS if c.family in (LIST_INT, LIST_FLOAT))


@dataclass(frozen=True)
class Options:
    """Knobs of the appendix (every random step derives from ``seed``)."""

    seed: int = 0
    level: float = 0.95
    budget: int | None = None          # N of Figure 4's ceiling (default: the logs' median budget, else 31)
    gamma: float = 0.2                 # AdaEDL's constant (Figure 4)
    tail_boot: int = 199               # parametric-bootstrap replicates of the tail LRT
    tail_quantile: float = 0.1         # the floor: each task's bottom quantile by entropy ...
    tail_threshold: float | None = None  # ... or the rounds with H <= threshold (nats)
    tail_folds: int = 5                # prompt folds of the tail's held-out tests
    probe_boot: int = 2000             # prompt-bootstrap replicates of the probe
    order_boot: int = 2000             # prompt-bootstrap replicates of the ordering
    timing_boot: int = 8000            # paired bootstrap of the timing margin
    width_boot: int = 200              # prompt-bootstrap replicates of the width gains
    policy_groups: int = 20            # prompt groups of the policy table's held-out jackknife
    budgets: tuple[int, ...] = (15, 31, 47, 63)
    exchange_rate: float = 0.0         # the width policies' stopping rule (tokens per node)
    offset_bins: int = 10              # entropy bins of the Assumption 2 tables
    transfer_bins: int = 10            # entropy bins of the transfer tables
    signals: tuple[str, ...] = ()      # Table 13 signal columns (default: position; others only when named)
    task_order: tuple[str, ...] | None = None
    reference: str | None = None       # Table 14's training drafter (default: block if present)
    vocab_size: float | None = None    # Fano check (default: the run metadata's vocab_size)
    tie_threshold: float = 0.1         # the audit's near-tie margin (logits)
    by: str | None = "task"            # "task", or None (--by none): every section's pooled rows only
    replay_rounds: int = 25_000        # width and policy replays: a prompt sample above this many rounds (0: all)
    offset_rounds: int = 200_000       # per-offset tables: a prompt sample above this many rounds (0: all)


@dataclass
class Inputs:
    """The logs every section reads, read once, and the fits sections share."""

    rounds: Any                        # glance_law.io.LogSet of kind rounds
    prompts: pd.DataFrame | None
    options: Options = field(default_factory=Options)
    #: (list columns, keep) -> LogSet: the round files read again with those list columns, only the rows
    #: ``keep`` (a function of an Arrow table, or None) keeps; set when ``rounds`` holds only scalar columns
    reader: Callable | None = None
    _cache: dict = field(default_factory=dict)
    #: the inputs hold per-turn counts only (no per-step rows): ``prompts`` carries them, ``rounds`` is empty
    per_turn: bool = False
    #: with ``per_turn``: per-step rows were read, none drafted (an autoregressive arm's per-step lengths)
    per_turn_steps: bool = False
    #: a reduction (:class:`glance_law.scale.reduce.Reduced`) in place of per-round rows (``rounds`` is then
    #: empty): only the sections marked ``reduced`` run, the law and the tail from its sufficient statistics
    reduced: Any = None

    @property
    def frame(self) -> pd.DataFrame:
        return self.rounds.frame

    def drafters(self) -> list[str]:
        """Speculative drafters present (rounds with horizon > 0, matched)."""
        f = self.frame
        live = f.loc[(f["horizon"] > 0) & (f["condition"].astype(str) == "matched")]
        return sorted(set(live["drafter"].astype(str)))

    def part(self, vectors: Sequence[str], sample: str | None = None) -> tuple[Any, str | None]:
        """The rounds with the list columns ``vectors`` (read through :attr:`reader` when the frame
        lacks them), of a prompt-clustered sample when there are more rounds than the Options field
        ``sample`` allows (None or 0: every round), and the sample's note (None: every round)."""
        from dataclasses import replace

        from glance_law.data.sample import sample_note, sample_prompts
        max_rounds = int(getattr(self.options, sample)) if sample else 0
        key = ("part", tuple(vectors), max_rounds)
        if key in self._cache:
            return self._cache[key]
        f = self.frame
        mask, kept = sample_prompts(f, int(max_rounds), self.options.seed)
        need = [v for v in vectors if v in VECTORS and v not in f.columns]
        if self.reader is not None and need:
            rounds = self.reader(need, None if mask is None else _keep_clusters(kept))
        else:
            rounds = self.rounds if mask is None else replace(self.rounds, frame=f.loc[mask].reset_index(drop=True))
        note = None
        if mask is not None:
            note = sample_note(len(rounds.frame), len(f), len(kept), _n_prompts(f), self.options.seed,
                               "--" + str(sample).replace("_", "-"))
        self._cache[key] = (rounds, note)
        return rounds, note

    def missing(self, needs: Sequence[str], sample: str | None = None) -> list[str]:
        """The columns of ``needs`` the logs lack (absent or null in every row); list columns the
        frame was read without are looked for in :meth:`part`'s rounds."""
        from glance_law.data.needs import missing
        if self.reduced is not None:     # a reduction keeps the counting columns, and root_entropy when logged
            return [c for c in needs if c not in ("accepted", "horizon")
                    and not (c in ENTROPY and self.reduced.has_entropy)]
        lacking = missing(self.frame, needs)
        late = [c for c in lacking if c in VECTORS and self.reader is not None]
        if late:
            part, _ = self.part(late, sample)
            still = set(missing(part.frame, late))
            lacking = [c for c in lacking if c not in late or c in still]
        return lacking

    def law(self):
        if "law" not in self._cache:
            self._cache["law"] = (_law_fit(self.rounds, self.options) if self.reduced is None
                                  else _law_reduced(self.reduced, self.options))
        return self._cache["law"]

    def _law_if_any(self):
        if self.reduced is not None:
            return self.law() if self.reduced.has_entropy else None
        try:
            return None if _law_or_none(self.rounds, self.options) is None else self.law()
        except GlanceError:
            return None

    def tail(self):
        """The tail fit; computed here, or collected from :meth:`start_tail`'s worker process."""
        if "tail" not in self._cache:
            pending = self._cache.pop("tail_future", None)
            if pending is not None:
                self._cache["tail"] = pending.result()      # re-raises the worker's GlanceError
            elif self.reduced is not None:
                self._cache["tail"] = _tail_reduced(self.reduced, self.options, self._law_if_any())
            else:
                self._cache["tail"] = _tail_fit(self.rounds, self.options, self._law_if_any())
        return self._cache["tail"]

    def start_policy(self, executor) -> None:
        """Evaluate the draft policies (the costliest section left in the main process) in the worker
        process, after the tail, while the other sections run: the same sampled rounds (:meth:`part`),
        the same seeds, so the same numbers."""
        if "policy_future" in self._cache:
            return
        rounds, _ = self.part(REPLAY, "replay_rounds")
        self._cache["policy_future"] = executor.submit(_policy_job, rounds, self.prompts, self.options)

    def policy_results(self):
        """Per speculative drafter ``(name, result or None, why)`` of the policy section; computed here,
        or collected from :meth:`start_policy`'s worker process."""
        pending = self._cache.pop("policy_future", None)
        if pending is not None:
            return pending.result()
        return _policy_results(self.part(REPLAY, "replay_rounds")[0], self.prompts, self.options)

    def start_tail(self, executor) -> None:
        """Fit the tail (the appendix's costliest step: a parametric bootstrap per task) in a worker
        process while the other sections run. Same inputs, same seeds, so the same numbers."""
        if "tail" in self._cache or "tail_future" in self._cache or self.reduced is not None:
            return                 # a reduction's tail fits on its cells, in this process
        from glance_law.data.io import LogSet
        r = self.rounds
        cols = [c for c in ("run_id", "task", "prompt_id", "round", "condition", "drafter", "root_entropy",
                            "accepted", "horizon", "round_order") if c in r.frame.columns]
        light = LogSet(r.kind, r.frame[cols], r.files, r.skipped, r.other, r.notes)
        self._cache["tail_future"] = executor.submit(_tail_job, light, self.options)


def _n_prompts(frame: pd.DataFrame) -> int:
    return int(len(frame[["task", "prompt_id"]].drop_duplicates())) if len(frame) else 0


def _keep_clusters(kept: pd.DataFrame):
    """A ``keep`` function for :func:`glance_law.data.io.read_logs`: the rows of the kept (task, prompt_id)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    want = pa.array((kept["task"].astype(str) + "\x1f" + kept["prompt_id"].astype(str)).tolist(), pa.string())

    def keep(table):
        cols = [pc.cast(table.column(c), pa.string()) for c in ("task", "prompt_id")]
        return pc.fill_null(pc.is_in(pc.binary_join_element_wise(*cols, "\x1f"), value_set=want), False)
    return keep


def _law_fit(rounds, o: Options):
    from glance_law.law.fit import fit_law
    return fit_law(rounds, by=o.by, level=o.level, seed=o.seed)


def _law_reduced(reduced, o: Options):
    from glance_law.scale.law_reduced import fit_reduced
    return fit_reduced(reduced, by=o.by, level=o.level, seed=o.seed)


def _tail_reduced(reduced, o: Options, law):
    from glance_law.scale.law_reduced import tail_reduced
    if not reduced.has_entropy:       # the floor is chosen by entropy; the round logs' tail runs on every round
        raise GlanceError("the tail from a reduction needs column 'root_entropy' (its floor is the low-entropy "
                          "rounds), which these logs do not carry: run the report on the round logs without --engine "
                          "(there the tail runs on every round)")
    return tail_reduced(reduced, law=law, quantile=o.tail_quantile, threshold=o.tail_threshold, n_boot=o.tail_boot,
                        seed=o.seed, folds=o.tail_folds, level=o.level, by=o.by)


def _tail_fit(rounds, o: Options, law):
    from glance_law.tail.report import fit_tail
    return fit_tail(rounds, law=law, n_boot=o.tail_boot, seed=o.seed, level=o.level, quantile=o.tail_quantile,
                    threshold=o.tail_threshold, folds=o.tail_folds, by=o.by)


def _law_or_none(rounds, o: Options):
    """The law for the tail's cap, or None when the logs carry no entropy (the tail then runs on
    the whole log) or the law cannot be fitted (the tail fits it itself and notes why)."""
    from glance_law.data.needs import missing
    if missing(rounds.frame, ENTROPY):
        return None
    try:
        return _law_fit(rounds, o)
    except GlanceError:
        return None


def _policy_results(rounds, prompts, o: Options) -> list[tuple]:
    """``(drafter, policy table or None, why not)`` for every speculative drafter of ``rounds``."""
    from glance_law.policy.search import default_target, policy_table, prepare_for
    frame = rounds.frame
    if "drafter" in frame.columns:
        from glance_law.data.arms import label_targets, plain_drafter
        labels = label_targets(frame)["drafter"].astype(str)
        names = sorted(set(labels[plain_drafter(labels) != "ar"]))
    else:
        names = [None]
    out = []
    for d in names:
        try:
            data = prepare_for(rounds, drafter=d)
            target = default_target(data, o.budgets)
            out.append((d, policy_table(rounds, target, data=data, n_boot=o.width_boot, level=o.level, seed=o.seed,
                                        prompts=prompts, groups=o.policy_groups), ""))
        except GlanceError as exc:
            out.append((d, None, str(exc)))
    return out


def _policy_job(rounds, prompts, o: Options):
    """Worker-process entry point of :meth:`Inputs.start_policy` (errors come back as picklable GlanceErrors)."""
    try:
        return _policy_results(rounds, prompts, o)
    except GlanceError as exc:
        raise GlanceError(str(exc)) from None


def _tail_job(rounds, o: Options):
    """Worker-process entry point of :meth:`Inputs.start_tail` (errors come back as picklable GlanceErrors)."""
    try:
        return _tail_fit(rounds, o, _law_or_none(rounds, o))
    except GlanceError as exc:
        raise GlanceError(str(exc)) from None


@dataclass(frozen=True)
class Table:
    """One table: a result object (rendered by its own ``summary``) or a frame with a title and notes."""

    stem: str
    result: Any = None
    frame: pd.DataFrame | None = None
    title: str = ""
    notes: tuple[str, ...] = ()

    def render(self, fmt: str) -> str:
        r = self.result
        if r is not None and not self.notes:
            return r.summary(fmt)
        if r is not None:               # the result's own table, with the section's notes after its own
            frame = r.display_frame() if fmt in _fmt.HUMAN else r.to_frame()
            return _fmt.render(frame, fmt, r.title, tuple(r.notes) + self.notes, 3, keep=r.display_keep)
        return _fmt.render(self.frame, fmt, self.title, self.notes)

    @property
    def caption(self) -> str:
        return self.result.title if self.result is not None else self.title

    @property
    def rows(self) -> int:
        return len(self.result.to_frame() if self.result is not None else self.frame)


@dataclass(frozen=True)
class Figure:
    stem: str
    figure: Any
    caption: str


@dataclass(frozen=True)
class Section:
    name: str
    paper: str
    what: str
    build: Callable[[Inputs], list]
    needs: tuple[str, ...] = ()      # round columns it cannot do without (checked before it runs)
    by_none: str = ""                # why it has no pooled row (then it does not run with --by none)
    sample: str | None = None        # the Options field capping its rounds (a prompt sample above it)
    reduced: bool = False            # runs on a reduction's sufficient statistics (Inputs.reduced)

    def missing(self, inp: Inputs) -> list[str]:
        """The columns of ``needs`` the logs lack (absent or null in every row)."""
        return inp.missing(self.needs, self.sample)


SECTIONS: list[Section] = []

#: The columns the law needs besides the contract's counting columns.
ENTROPY = ("root_entropy",)


def section(name: str, paper: str, what: str, needs: Sequence[str] = ("accepted", "horizon"), by_none: str = "",
            sample: str | None = None, reduced: bool = False):
    def deco(fn):
        SECTIONS.append(Section(name, paper, what, fn, tuple(needs), by_none, sample, reduced))
        return fn
    return deco


@section("summary", "Section 6", "per task: rounds, prompts, horizon, mean accepted length and tau with "
                                 "prompt-clustered intervals, P(a = L) (every log allows it)", reduced=True)
def summary_table(inp: Inputs) -> list:
    if inp.reduced is not None:   # what a reduction keeps per group (the law table has the clustered intervals)
        red = inp.reduced
        return [Table("summary_reduced", red if inp.options.by is not None else red.pooled_rows())]
    if inp.per_turn:           # per-turn counts: tokens per step per turn and prompt
        from glance_law.evidence.turns import turn_tau
        return [Table("summary_turns", turn_tau(inp.prompts, "task", inp.options.level, from_steps=inp.per_turn_steps))]
    from glance_law.evidence.summary import group_summary
    return [Table("summary_accepted", group_summary(inp.rounds, inp.options.by, inp.options.level))]


def _per_drafter(inp: Inputs, stem: str) -> list[tuple[str, str]]:
    ds = inp.law().drafters
    return [(d, stem if len(ds) == 1 else f"{stem}-{safe_stem(d)}") for d in ds]


# ---------------------------------------------------------------------------
# the law (Section 6, Appendix F)
# ---------------------------------------------------------------------------

LAW_TABLE_COLUMNS = ("drafter", "task", "rounds", "prompts", "b0", "b0_lo", "b0_hi", "b1", "b1_lo", "b1_hi",
                     "r2_curve", "r2_isotonic", "r2_round", "ceiling", "ceiling_fraction", "mean_accepted",
                     "mean_accepted_lo", "mean_accepted_hi", "floor_mean", "floor_mean_lo", "floor_mean_hi",
                     "cap", "sup", "p_ge8", "holds")


@section("law", "Table 12", "the law per task: b0, b1 with intervals, curve and round R^2, the noise ceiling "
                            "and its fraction, mean a, the floor against the cap", needs=ENTROPY,
         reduced=True)
def law_table(inp: Inputs) -> list:
    law = inp.law()
    t = _task_sorted(law.to_frame())
    cols = [c for c in LAW_TABLE_COLUMNS if c != "drafter" or len(law.drafters) > 1]
    return [Table("table12_law", frame=t[cols], title=law.title, notes=law.notes)]


def _task_sorted(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in grounding order (plots.TASK_ORDER first, others sorted, pooled last), per drafter."""
    names = plots.ordered(t for t in frame["task"].astype(str) if t != "pooled")
    rank = {t: i for i, t in enumerate(names + ["pooled"])}
    key = frame["task"].astype(str).map(rank)
    lead = [frame["drafter"].astype(str)] if "drafter" in frame.columns else []
    order = sorted(range(len(frame)), key=lambda i: tuple(x.iloc[i] for x in lead) + (key.iloc[i],))
    return frame.iloc[order].reset_index(drop=True)


#: Why the per-task figures and comparisons do not run with ``--by none``.
COMPARES_TASKS = "compares the tasks with one another"


@section("decile-curves", "Figure 3(a)", "measured decile curves of every task", needs=ENTROPY, by_none=COMPARES_TASKS,
         reduced=True)
def decile_curves(inp: Inputs) -> list:
    return [Figure(f"figure3a_{s}", plots.decile_curves(inp.law(), d),
                   f"Mean accepted length against measured root entropy by entropy decile ({d}), with "
                   "prompt-clustered intervals") for d, s in _per_drafter(inp, "decile_curves")]


@section("law-fits", "Figure 8", "the law fitted per task, with decile means and the isotonic curve", needs=ENTROPY,
         by_none=COMPARES_TASKS, reduced=True)
def law_fits(inp: Inputs) -> list:
    law = inp.law()
    out = [Figure(f"figure8_{s}", plots.law_fits(law, d),
                  f"Task-level law fits ({d}): decile means, the fitted law and the isotonic curve")
           for d, s in _per_drafter(inp, "law_fits")]
    curves = []
    for d in law.drafters:
        for g in law.groups:
            try:
                c = law.curve(g, d)
            except GlanceError:
                continue
            curves.append(c.assign(drafter=d, task=g))
    frame = pd.concat(curves, ignore_index=True)
    lead = (["drafter"] if len(law.drafters) > 1 else []) + ["task"]
    frame = frame[lead + [c for c in frame.columns if c not in ("drafter", "task")]]
    out.append(Table("figure8_decile_table", frame=frame, title="decile curves behind Figures 3(a), 4 and 8",
                     notes=("equal-count entropy bins per group; lo/hi: prompt-clustered interval of the bin "
                            "mean; predicted: the law's mean over the bin's rounds; isotonic: the decreasing "
                            "isotonic fit",)))
    return out


def _budget(inp: Inputs, drafter: str) -> int:
    """Figure 4's N: --budget, else the drafter's median logged budget, else 31."""
    if inp.options.budget is not None:
        return int(inp.options.budget)
    f = inp.frame
    if "budget" in f.columns:
        b = f.loc[(f["horizon"] > 0) & (f["drafter"].astype(str) == drafter), "budget"].dropna()
        if len(b):
            return max(1, int(b.median()))
    return 31


@section("brackets", "Figure 4", "every task's law against the two brackets (AdaEDL below, 2 ln N / H above)", needs=ENTROPY,
         by_none=COMPARES_TASKS, reduced=True)
def brackets(inp: Inputs) -> list:
    from .brackets import outside_counts
    out = []
    law = inp.law()
    unlogged = ", the default: a reduction keeps no budgets (--budget N sets it)" if (
        inp.reduced is not None and inp.options.budget is None) else ""
    for d, s in _per_drafter(inp, "brackets"):
        N = _budget(inp, d)
        L = int(law.row("pooled", d)["horizon"])        # the horizon plots.law_brackets draws
        curves = [law.curve(g, d).dropna(subset=["mean_entropy", "mean_accepted"])
                  for g in plots.fitted_groups(law, d, None, pooled=False)]
        c = pd.concat(curves, ignore_index=True)
        below, above = outside_counts(c["mean_entropy"], c["mean_accepted"], N, L, inp.options.gamma)
        total = len(c)
        out.append(Figure(f"figure4_{s}", plots.law_brackets(law, d, budget=N, gamma=inp.options.gamma),
                          f"Task-level law fits ({d}) drawn against the AdaEDL lower bracket (a heuristic on the "
                          f"draft's entropy, evaluated here at the target's root entropy, L = {L}) and the paper's "
                          f"2 ln N / H ceiling at N = {N}{unlogged} (not a bound with Shannon entropy), log scale; of {total} "
                          f"decile means, {below} lie below the lower bracket and {above} above the ceiling"))
    return out


# ---------------------------------------------------------------------------
# evidence for the law (Appendix F, B.2)
# ---------------------------------------------------------------------------

def _signals(inp: Inputs) -> list[str]:
    """Table 13's signals: the columns named with --signal; by default only ``position`` (a contract
    column that is a signal). Other numeric columns are often bookkeeping (turn, step, question
    index), so they are used only where asked."""
    if inp.options.signals:
        return list(inp.options.signals)
    f = inp.frame
    return ["position"] if "position" in f.columns and f["position"].notna().any() else []


@section("correlations", "Table 13", "correlations of a with H and with a signal v, partial r given H, "
                                     "within-entropy-decile gaps", needs=ENTROPY)
def correlations(inp: Inputs) -> list:
    from glance_law.evidence.probe import signal_effect
    cols = _signals(inp)
    if not cols:
        raise MissingColumnError("a signal column (e.g. image saliency, or position)", "Table 13",
                                 "a logger hook that adds it; name it with --signal COLUMN")
    out = []
    for c in cols:
        res = signal_effect(inp.rounds, c, level=inp.options.level, by=inp.options.by or "none")
        out += [Table(f"table13_correlations_{c}", res),
                Table(f"table13_deciles_{c}", frame=res.deciles(), title=f"within-decile gaps of '{c}'",
                      notes=("per entropy decile: mean a with the signal high vs low, their ratio and "
                             "difference (CR1 prompt-clustered intervals)",))]
    return out


@section("ordering", "Corollary (B.2)", "task ordering by grounding: mean a, slopes, adjacent gaps",
         by_none=COMPARES_TASKS)
def ordering(inp: Inputs) -> list:
    from glance_law.evidence.order import task_order
    o = inp.options
    try:
        res = task_order(inp.rounds, o.task_order, level=o.level, n_boot=o.order_boot, seed=o.seed)
    except MissingColumnError:
        raise
    except GlanceError as exc:
        if o.task_order:
            raise
        raise GlanceError(f"{exc} (name the order with --task-order T1,T2,...)") from None
    return [Table("corollary_order", res), Table("corollary_order_gaps", res.gap_table()),
            Table("corollary_order_verdict", res.verdict_table())]


@section("offsets", "Assumption 2 (B.2)", "per-offset match law, hazards, the Assumption 2 test, survival by decile",
         sample="offset_rounds")
def offsets(inp: Inputs) -> list:
    from glance_law.evidence import offsets as off
    lv, nb = inp.options.level, inp.options.offset_bins
    by = inp.options.by or "none"
    rounds, note = inp.part(("match",), "offset_rounds")
    notes = (note,) if note else ()
    out, errs = [], []
    # the floor's two-state model is the survival section's (fitted once, in inp.tail())
    for stem, make in (("assumption2_offset_law", lambda: off.offset_law(rounds, by=by, level=lv)),
                       ("assumption2_test", lambda: off.assumption2_test(rounds, by=by, n_bins=nb, level=lv)),
                       ("assumption2_hazards", lambda: off.offset_hazards(rounds, by=by, n_bins=nb, level=lv)),
                       ("assumption2_survival_deciles",
                        lambda: off.run_survival(rounds, by=by, n_bins=nb, level=lv, two_state=False))):
        try:
            out.append(Table(stem, make(), notes=notes))
        except MissingColumnError as exc:  # the tables the logs allow are still made
            errs.append(exc)
    if not out:
        raise errs[0]
    return out


# ---------------------------------------------------------------------------
# the grounded tail (B.4)
# ---------------------------------------------------------------------------

@section("tail", "Proposition 3 (B.4)", "the floor regime: geometric vs two-state, LRT, chi-square, "
                                        "prompt-disjoint held-out tests", reduced=True)
def tail_tables(inp: Inputs) -> list:
    fit = inp.tail()
    return [Table("prop3_tail", fit), Table("prop3_tail_models", fit.models()),
            Table("prop3_heldout", fit.heldout_table())]


@section("survival", "Theorem 2 (B.4)", "run-length survival at the floor: observed, geometric, two-state",
         reduced=True)
def survival(inp: Inputs) -> list:
    fit = inp.tail()
    parts = []
    for t in fit.tasks:
        s = t.survival_table()
        s.insert(0, "task", t.task)
        if t.drafter:
            s.insert(0, "drafter", t.drafter)
        parts.append(s)
    return [Figure("figure_survival", plots.survival_curves(fit),
                   "Run-length survival P(a >= l) in each task's entropy floor: observed (Kaplan-Meier), the "
                   "geometric law and the two-state model"),
            Table("figure_survival_table", frame=pd.concat(parts, ignore_index=True),
                  title="run-length survival at the floor behind the survival figure",
                  notes=("observed: Kaplan-Meier over the rounds' horizons; geometric and two_state: the "
                         "models fitted to the same floor rounds (see prop3_tail_models)",))]


# ---------------------------------------------------------------------------
# width (B.5)
# ---------------------------------------------------------------------------

REPLAY = ("topk_logq", "target_rank")


@section("width", "Figure 5 (B.5)", "width policies at equal verifier budget, replayed from the logs",
         needs=ENTROPY + REPLAY, sample="replay_rounds")
def width(inp: Inputs) -> list:
    from glance_law.replay.width import width_allocation
    o = inp.options
    rounds, note = inp.part(REPLAY, "replay_rounds")
    notes = (note,) if note else ()
    res = width_allocation(rounds, budgets=o.budgets, n_boot=o.width_boot, level=o.level, seed=o.seed,
                           exchange_rate=o.exchange_rate, by=o.by)
    return [Figure("figure5_width_pareto", plots.width_pareto(res),
                   "Accepted value against mean verifier budget for the oracle, entropy-keyed and fixed-width "
                   "policies (replayed" + ("; a prompt-clustered sample, see the tables' notes)" if note else ")")),
            Table("figure5_width", res, notes=notes), Table("figure5_rescue", res.rescue, notes=notes),
            Table("figure5_regret", res.regret, notes=notes),
            Table("figure5_pareto_points", frame=res.pareto, title="the Pareto points behind Figure 5",
                  notes=("accepted: mean accepted tokens per round of each policy at each mean budget "
                         "(nodes per round), replayed from the logged top-k",) + notes)]


@section("policy", "B.5, causal form", "draft policies fitted on training prompts, scored on held-out prompts",
         sample="replay_rounds")
def policy(inp: Inputs) -> list:
    _, note = inp.part(REPLAY, "replay_rounds")
    results = inp.policy_results()
    out, why = [], []
    for d, res, problem in results:
        if res is None:
            why.append(f"{d}: {problem}")
            continue
        out.append(Table("policy_heldout" if len(results) == 1 else f"policy_heldout-{safe_stem(d)}", res,
                         notes=(note,) if note else ()))
    if not out:
        raise GlanceError("no drafter's rounds could be evaluated as draft policies (" + "; ".join(why) + ")")
    return out


# ---------------------------------------------------------------------------
# transfer and the probe (Appendix F)
# ---------------------------------------------------------------------------

@section("transfer-drafters", "Table 14", "the law fitted on one drafter, frozen, scored on the others", needs=ENTROPY)
def transfer_drafters(inp: Inputs) -> list:
    from glance_law.evidence.transfer import transfer
    ds = inp.drafters()
    if len(ds) < 2:
        raise MissingColumnError("a second speculative drafter (rounds of another drafter on the same task)",
                                 "Table 14 (transfer across drafters)",
                                 "glance-log --drafter pld|two_model|block (a second run)")
    ref = inp.options.reference or ("block" if "block" in ds else ds[0])
    if ref not in ds:
        raise GlanceError(f"Table 14: the reference drafter {ref!r} is not in the logs ({', '.join(ds)})")
    res = transfer(inp.rounds, [ref], [d for d in ds if d != ref], by="drafter", n_bins=inp.options.transfer_bins,
                   level=inp.options.level)
    return [Table("table14_transfer_drafters", res), Table("table14_calibration", res.calibration())]


@section("transfer-tasks", "Table 15", "leave one task out: the law fitted on the other tasks, scored on it", needs=ENTROPY,
         by_none=COMPARES_TASKS)
def transfer_tasks(inp: Inputs) -> list:
    from glance_law.evidence.transfer import transfer
    t = inp.law().to_frame()
    tasks = plots.ordered(x for x in t["task"].astype(str) if x != "pooled")
    if len(tasks) < 2:
        raise MissingColumnError("a second task", "Table 15 (transfer across tasks)", "glance-log --task <another>")
    fitted = set(t.loc[t["b1"].notna(), "task"].astype(str))
    frames, notes, title, left = [], [], "", []
    for task in tasks:
        if task not in fitted:            # no own fit to compare with (e.g. every round accepted 0)
            left.append(task)
            continue
        try:
            res = transfer(inp.rounds, [x for x in tasks if x != task], [task], by="task", n_bins=inp.options.transfer_bins,
                           level=inp.options.level)
        except MissingColumnError:
            raise
        except GlanceError as exc:
            notes.append(f"{task} not scored: {exc}")
            continue
        frames.append(res.to_frame())
        notes += [n for n in res.notes if n not in notes]
        title = res.title
    if not frames:
        why = "; ".join(notes) or f"no task has a law of its own ({', '.join(left)})"
        raise GlanceError(f"Table 15: no task could be scored ({why})")
    notes.insert(0, "each row: the law fitted on every other task (pooled), frozen, scored on the row's task")
    if left:
        notes.insert(1, f"not scored (no law of their own to compare with; see the law table): {', '.join(left)}; "
                        "they stay in the other rows' training rounds")
    return [Table("table15_transfer_tasks", frame=pd.concat(frames, ignore_index=True),
                  title=f"{title} (leave one task out)", notes=tuple(notes))]


@section("probe", "Table 16", "the mismatched-image probe: the effect of the correct image, raw and "
                              "entropy-controlled", needs=ENTROPY)
def probe(inp: Inputs) -> list:
    from glance_law.evidence.probe import probe as run_probe
    f = inp.frame
    if "mismatched" not in set(f["condition"].astype(str)):
        raise MissingColumnError("rounds of the mismatched condition", "Table 16 (the probe)",
                                 SUPPLIED_BY["condition=mismatched"])
    o = inp.options
    return [Table("table16_probe", run_probe(inp.rounds, by=o.by or "none", level=o.level, n_boot=o.probe_boot, seed=o.seed))]


# ---------------------------------------------------------------------------
# losslessness and timing (Table 7, Appendix E), Fano (Proposition 1)
# ---------------------------------------------------------------------------

def _prompts(inp: Inputs, analysis: str, flag: str) -> pd.DataFrame:
    if inp.prompts is None or not len(inp.prompts):
        raise MissingColumnError("prompt files (prompts-*.parquet)", analysis,
                                 f"{flag}; glance-log writes prompts-*.parquet next to the round files, pass them too")
    return inp.prompts


@section("audit", "Table 7", "the lossless audit: output vs greedy decoding, near-ties explained")
def audit(inp: Inputs) -> list:
    from glance_law.evidence.audit import audit as run_audit
    P = _prompts(inp, "Table 7 (the audit)", SUPPLIED_BY["greedy_match"])
    frame = inp.frame
    if ("greedy_match" in P.columns and P["greedy_match"].notna().any()) or "tokens" in P.columns:
        frame = inp.part(("committed",))[0].frame   # every round: the audit follows each prompt's whole stream
    res = run_audit(P, frame, threshold=inp.options.tie_threshold, by=inp.options.by or "none")
    return [Table("table7_audit", res), Table("table7_divergences", res.divergences())]


@section("timing", "Appendix E", "the timing ledger: paired ms/token against the autoregressive arm, round cost")
def timing(inp: Inputs) -> list:
    from glance_law.data.arms import plain_drafter
    from glance_law.evidence.timing import round_cost, timing_ledger
    P = _prompts(inp, "Appendix E (the timing ledger)", SUPPLIED_BY["drafter=ar"])
    arm = plain_drafter(P["drafter"])     # "ar @ <target>" rows are baseline rows too (several targets)
    if not (arm == "ar").any():
        raise MissingColumnError("the autoregressive baseline arm (drafter=ar)", "Appendix E (the timing ledger)",
                                 SUPPLIED_BY["drafter=ar"])
    o = inp.options
    res = timing_ledger(P.loc[arm == "ar"], P.loc[arm != "ar"], n_boot=o.timing_boot, seed=o.seed, level=o.level,
                        by=o.by or "none")
    out = [Table("appE_timing", res)]
    f = inp.frame
    if inp.per_turn:           # no rounds: no round-cost regression
        return out
    is_ar = plain_drafter(f["drafter"]) == "ar"
    cols = ("round_ms", "draft_passes", "budget")
    if all(c in f.columns and f.loc[~is_ar, c].notna().any() for c in cols):
        out.append(Table("appE_round_cost", round_cost(f.loc[~is_ar], baseline_rounds=f.loc[is_ar] if is_ar.any() else None,
                                                       baseline_prompts=P.loc[arm == "ar"], seed=o.seed, level=o.level)))
    return out


@section("fano", "Proposition 1 (i)", "Fano consistency of the logged root_pmax and root_entropy", needs=ENTROPY + ("root_pmax",))
def fano(inp: Inputs) -> list:
    from .fano import fano_check, run_vocab_size
    V = inp.options.vocab_size
    if V is None:
        V = run_vocab_size(inp.rounds)
    if V is None:
        raise MissingColumnError("the target's vocabulary size", "the Fano check",
                                 "--vocab-size V (or a vocab_size field in the logs' run metadata)")
    return [Table("prop1_fano", fano_check(inp.rounds, vocab_size=V, by=inp.options.by))]


def names() -> list[str]:
    return [s.name for s in SECTIONS]


def get(name: str) -> Section:
    for s in SECTIONS:
        if s.name == name:
            return s
    raise GlanceError(f"unknown section {name!r}; sections: {', '.join(names())}")


def select(only: Sequence[str] | None = None, skip: Sequence[str] = ()) -> list[Section]:
    chosen = [get(n) for n in only] if only else list(SECTIONS)
    for n in skip:
        get(n)
    return [s for s in chosen if s.name not in set(skip)]
