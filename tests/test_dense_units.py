"""The dense path's small parts without a model: the stop rule's cut (prefix-causal: the cut of
a longer output is the cut of any longer one), copy runs against copy_len, and a round's copy_len
rebuilt from the runs."""
from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("torch")

from glance_log.dense import StopRule  # noqa: E402
from glance_log.record import copy_len, copy_runs  # noqa: E402
from glance_log.rounds import _copy_len  # noqa: E402


class CharTok:
    """A tokenizer whose tokens are strings (decode joins them)."""

    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids, **kw):
        return "".join(self.pieces[i] for i in ids)


def test_stop_rule_cuts_before_the_text_and_is_prefix_causal():
    tok = CharTok([" Paris", ".", "\n\n", "Question", ":", " What", "\n", "Qu", "estion:"])
    rule = StopRule("\nQuestion:")
    out = [0, 1, 2, 3, 4, 5]                  # " Paris.\n\nQuestion: What"
    assert rule.cut(tok, out) == 2            # " Paris." (the "\n\n" token holds the text's first newline)
    assert rule.cut(tok, out[:5]) == 2        # the same cut once the text is complete
    assert rule.cut(tok, out[:4]) is None     # not yet
    assert rule.cut(tok, [0, 6, 7, 8, 5]) == 1     # the text split over tokens
    assert rule.cut(tok, [6, 7, 8]) == 1      # at least one token is kept
    assert StopRule(None).cut(tok, out) is None


def test_copy_runs_give_copy_len_of_every_window():
    rng = random.Random(0)
    from glance_log.record import _code  # noqa: PLC0415 - the test builds a reference string directly

    for _ in range(50):
        ref_ids = [rng.randrange(6) for _ in range(rng.randrange(0, 30))]
        toks = [rng.randrange(6) for _ in range(rng.randrange(1, 25))]
        ref = "".join(_code(t) for t in ref_ids)
        runs = copy_runs(toks, ref)
        for i in range(len(toks)):
            assert runs[i] == max((n for n in range(len(toks) - i + 1) if copy_len(toks[i:i + n], ref) == n),
                                  default=0)
        # a round at root p commits output tokens p+1 .. p+c; the dense row p holds runs[p + 1]
        out = [9] + toks
        rows = np.concatenate([runs, [0]])          # rows[p] = run from output token p + 1
        for p in range(len(out) - 1):
            for c in range(1, len(out) - p):
                assert _copy_len(rows, p, c) == copy_len(out[p + 1:p + 1 + c], ref)
