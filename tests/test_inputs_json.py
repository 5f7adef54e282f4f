"""The bounded JSON reader's depth count and lone-surrogate check (glance_law.data.inputs): the
fast paths (numpy over the bytes, the escape-pair scan) give what the definitions give."""
from __future__ import annotations

import json
import random

import pytest

from glance_law.data import inputs


def _depth_by_parsing(text: str) -> int:
    def depth(v):
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        if isinstance(v, dict):
            return 1 + max((depth(x) for x in v.values()), default=0)
        return 0
    return depth(json.loads(text))


@pytest.mark.parametrize("text, want", [
    ('{"a": "[[[[", "b": [1, [2]]}', 3),
    ('["\\"[[[", [["\\\\"]]]', 3),
    ('["\\\\\\"]]]", {"k": ["]]"]}]', 3),
    ('"no brackets"', 0),
    ('[' * 70 + ']' * 70, 70),
])
def test_depth_ignores_brackets_in_strings(text, want):
    assert inputs.json_depth(text.encode()) == want == _depth_by_parsing(text)


def test_depth_matches_parsing_on_random_documents():
    rng = random.Random(7)
    pieces = ['"[', '"{', '\\\\', '\\"', "]", "}", "x"]

    def value(d):
        r = rng.random()
        if d > 6 or r < 0.3:
            return '"' + "".join(rng.choice(pieces[:5]) if rng.random() < 0.7 else "a" for _ in range(4)) \
                .replace('"', '\\"').replace("\\\\\\", "\\\\") + '"'
        if r < 0.65:
            return "[" + ", ".join(value(d + 1) for _ in range(rng.randint(0, 3))) + "]"
        return "{" + ", ".join(f'"k{i}": {value(d + 1)}' for i in range(rng.randint(0, 3))) + "}"

    checked = 0
    for _ in range(300):
        text = value(0)
        try:
            want = _depth_by_parsing(text)
        except ValueError:
            continue
        assert inputs.json_depth(text.encode()) == want, text
        checked += 1
    assert checked > 100


def test_quick_depth_matches_the_blanked_count_on_random_bytes():
    """The numpy count (brackets found by one bit mask that also catches Y _ y DEL, then sorted out)
    gives what blanking the strings gives, on byte soups of brackets, quotes, backslashes and the
    bytes that share the brackets' bits; None only where it says it may differ."""
    rng = random.Random(11)
    alphabet = ['[', ']', '{', '}', '"', '\\', 'Y', '_', 'y', '\x7f', 'a', ' ', '\n', ',']
    decided = 0
    for _ in range(3000):
        data = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))).encode()
        fast = inputs._quick_depth(data)
        if fast is not None:
            assert fast == inputs._blanked_depth(data), data
            decided += 1
    assert decided > 500


def test_unterminated_string_still_counted():
    # not valid JSON: the regex blanking decides (an unmatched quote is not a string)
    assert inputs.json_depth(b'[[["') == 3


@pytest.mark.parametrize("text", ['["\\ud83d\\ude00"]', '["\\uD83D\\uDE00 and \\ud83c\\udf89"]',
                                  '["\\\\ud800"]'])
def test_surrogate_pairs_and_escaped_text_are_text(text):
    assert inputs.loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ['["\\ud83d"]', '["\\ude00"]', '["\\ud83d\\ud83d\\ude00"]',
                                  '["\\\\\\ud83d x"]', '["\\\\ud83d\\ude00"]', '["a\\udfff"]'])
def test_lone_surrogates_refused(text):
    with pytest.raises(inputs.JSONLimitError, match="lone UTF-16 surrogate"):
        inputs.loads(text)


def test_loads_lines_bounds_the_array_it_builds():
    """loads_lines: the lines read as one array; the array adds a level, so a line nested
    MAX_JSON_DEPTH deep is refused (whether the per-line count spares the full count or not),
    one level less passes, and brackets in strings only make the full count run."""
    d = inputs.MAX_JSON_DEPTH
    ok = "[" * (d - 1) + "]" * (d - 1)
    assert inputs.loads_lines(f'{{"a": 1}}\n{ok}'.encode()) == [{"a": 1}, json.loads(ok)]
    with pytest.raises(inputs.JSONLimitError, match="nested deeper"):
        inputs.loads_lines(f'{{"a": 1}}\n{"[" * d + "]" * d}'.encode())
    in_str = json.dumps({"s": "{[" * d, "x": [[1]]})
    assert inputs.loads_lines(f"{in_str}\n{in_str}".encode()) == [json.loads(in_str)] * 2
    with pytest.raises(inputs.JSONLimitError, match="lone UTF-16 surrogate"):
        inputs.loads_lines(b'{"a": 1}\n["\\ud83d"]')


def test_the_collector_is_paused_only_while_values_are_built():
    """collector_paused: the cyclic collector off inside (where it ran) and back on after, even on an
    error; left off where the caller had turned it off; a cycle made inside is collected after."""
    import gc
    import weakref

    assert gc.isenabled()
    with pytest.raises(ValueError):
        with inputs.collector_paused():
            assert not gc.isenabled()
            raise ValueError("x")
    assert gc.isenabled()

    class Node:
        pass

    with inputs.collector_paused():
        a, b = Node(), Node()
        a.other, b.other = b, a
        ref = weakref.ref(a)
        del a, b
    gc.collect()
    assert ref() is None
    gc.disable()
    try:
        with inputs.collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
