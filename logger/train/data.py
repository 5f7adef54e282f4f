"""Training sequences for the default target, drawn from the suite's train partition.

One sequence is one context followed by one or more question/answer turns::

    <bos> context | question : q1 | answer : a1 <eos> | question : q2 | answer : a2 <eos>

The first turn is exactly what the logger feeds at inference (``suite.format_prompt``
+ the answer). Extra turns on the same context multiply the retrieval supervision a
context's tokens buy. Each token carries a loss weight: answers (and their ``<eos>``)
1, questions ``w_question`` (predicting the key a question names is itself a lookup),
the context ``w_context`` (its values are random draws: mostly noise to predict).

Examples whose first prompt falls in the held-out partition (``suite.split_of``) are
rejected, so training never sees a held-out prompt.

Retrieval curriculum. Besides the suite's own difficulty ramp (one field per form,
table and paragraph at first, growing to the full 5-7), a share of the sequences
(:func:`copy_share`: half at first, a tenth once the ramp is done) is a *copy drill*: ``text: <4-16 random value tokens>`` then ``question: what
text is shown?`` and the same tokens as the answer. Every answer token is predictable
only by looking back at the context, which is what makes a small model grow the
induction (look-up-and-copy) heads that form and table retrieval need; without it a
4-layer model trained for 1000 steps answered every chart question with the same
number, and with 12 % drills it still could not copy a drill after 1000 steps. The drill
uses the suite's vocabulary only and is not a suite task.

A further ``LIST_SHARE`` of the sequences is a *listing drill* on a caption context:
``what objects does the image show?`` answered by every listed object exactly once, in
random order. It trains the "mention what has not been mentioned yet" look-up that open
captions need; without it the target's greedy captions repeated an object ("a pink vase
with a pink vase") in 13 of 20 held-out prompts.

A further ``ABSENT_SHARE`` are *absent-key drills*: a grounded question (docvqa,
chartqa, infovqa) asked of another train item's context that does not contain its key,
answered in the usual template with the original item's value, which the shown context
does not determine. Real documents have unanswerable questions and a real target's
value distribution spreads out when the value is not on the page; without the drill the
tiny target copied *some* value from a chart that lacks the asked category with
certainty (mean root entropy 0.001 nats on mismatched chartqa contexts vs 0.002 on the
right ones), i.e. it had never seen a key that was not there.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from .. import suite
from .tokenizer import BOS, EOS, PAD

#: Sampling weights of the task families in training.
TASK_WEIGHTS = {"caption": 0.2, "textvqa": 0.12, "infovqa": 0.18, "docvqa": 0.26, "chartqa": 0.18,
                "scienceqa": 0.06}
LIST_SHARE = 0.08
ABSENT_SHARE = 0.05
ABSENT_TASKS = ("infovqa", "docvqa", "chartqa")


def copy_share(difficulty: float) -> float:
    """Share of copy-drill sequences at a curriculum ``difficulty`` in [0, 1]: 0.5 -> 0.1."""
    return 0.5 - 0.4 * max(0.0, min(1.0, difficulty))

_DRILL_POOL = (list("0123456789") * 3 + suite.FIRST_NAMES + suite.LAST_NAMES + suite.PLACES
               + suite.SCENE_WORDS + suite.COMMODITIES + ["-", ".", "$", ",", "*"])

#: Most question turns per context, per task.
MAX_TURNS = {"caption": 1, "textvqa": 1, "infovqa": 3, "docvqa": 4, "chartqa": 4, "scienceqa": 1}


@dataclass
class Encoded:
    ids: list[int]
    weights: list[float]
    task: str


def encode_example(tok, ex: suite.Example, w_context=0.1, w_question=0.5) -> Encoded:
    def enc(text):
        return tok.encode(text, add_special_tokens=False).ids

    ids, w = [BOS], [0.0]
    ctx = enc(ex.context)
    ids += ctx
    w += [w_context] * len(ctx)
    for t, qa in enumerate(ex.qas):
        q = enc(("\n" if t == 0 else "\n") + f"question: {qa.question}\nanswer:")
        ids += q
        w += [w_question] * len(q)
        a = enc(" " + qa.answer) + [EOS]
        ids += a
        w += [1.0] * len(a)
    # weight i belongs to predicting ids[i] from ids[:i]
    return Encoded(ids, w, ex.task)


class Stream:
    """Deterministic stream of training batches (seeded; rejects held-out prompts)."""

    def __init__(self, tok, seed: int = 0, split_seed: int = 0, weights=None):
        self.tok = tok
        self.rng = random.Random(f"glance-train/{seed}")
        self.split_seed = split_seed
        self.weights = dict(weights or TASK_WEIGHTS)
        self.rejected = 0

    def example(self, difficulty: float) -> suite.Example:
        u = self.rng.random()
        if u < copy_share(difficulty):
            return copy_drill(self.rng)
        if u < copy_share(difficulty) + LIST_SHARE:
            return list_drill(self.rng, self.split_seed)
        if u < copy_share(difficulty) + LIST_SHARE + ABSENT_SHARE:
            return absent_drill(self.rng, difficulty, self.split_seed)
        tasks = list(self.weights)
        task = self.rng.choices(tasks, weights=[self.weights[t] for t in tasks])[0]
        gen = suite.GENERATORS[task]
        while True:
            n_q = self.rng.randint(1, MAX_TURNS[task])
            ex = gen(self.rng, difficulty=difficulty, n_questions=n_q)
            if suite.split_of(ex, self.split_seed) == "train":
                return ex
            self.rejected += 1

    def batch(self, size: int, difficulty: float, max_len: int = 256):
        encs = [encode_example(self.tok, self.example(difficulty)) for _ in range(size)]
        return collate(encs, max_len)


def copy_drill(rng) -> suite.Example:
    """A look-back drill: random value tokens in the context, repeated as the answer."""
    words = [rng.choice(_DRILL_POOL) for _ in range(rng.randint(4, 16))]
    text = " ".join(words)
    qa = suite.QA("what text is shown?", text, (text,))
    return suite.Example("copy", f"text: {text}", (qa,))


def list_drill(rng, split_seed: int = 0) -> suite.Example:
    """Every object of a train-partition caption context, once each, in random order."""
    base = _train_example(rng, "caption", 1.0, split_seed)
    objs = list(base.fields)
    rng.shuffle(objs)
    nps = [f"{suite.article(c or n)} {c + ' ' if c else ''}{n}" for c, n in objs]
    text = (", ".join(nps[:-1]) + " and " + nps[-1]) + "."
    qa = suite.QA("what objects does the image show?", text, (text,))
    return suite.Example("list", base.context, (qa,), fields=base.fields)


def _train_example(rng, task, difficulty, split_seed):
    while True:
        ex = suite.GENERATORS[task](rng, difficulty=difficulty, n_questions=1)
        if suite.split_of(ex, split_seed) == "train":
            return ex


def absent_drill(rng, difficulty: float, split_seed: int = 0) -> suite.Example:
    """A grounded question asked of another train item's context that lacks its key."""
    task = rng.choice(ABSENT_TASKS)
    asked = _train_example(rng, task, difficulty, split_seed)
    key = next(k for k, v in asked.fields if v in asked.qas[0].answer)
    while True:
        shown = _train_example(rng, task, difficulty, split_seed)
        if key not in {k for k, _ in shown.fields} and shown.title != asked.title:
            return suite.Example("absent", shown.context, asked.qas, fields=shown.fields, title=task)


def collate(encs, max_len=256):
    """(input_ids, target_ids, weights) as int64/int64/float32 arrays, right-padded."""
    T = min(max_len, max(len(e.ids) for e in encs))
    x = np.full((len(encs), T), PAD, dtype=np.int64)
    w = np.zeros((len(encs), T), dtype=np.float32)
    for i, e in enumerate(encs):
        n = min(T, len(e.ids))
        x[i, :n] = e.ids[:n]
        w[i, :n] = e.weights[:n]
    # predict token t from tokens < t: inputs x[:, :-1], targets x[:, 1:], weights w[:, 1:]
    return x[:, :-1], x[:, 1:], w[:, 1:]
