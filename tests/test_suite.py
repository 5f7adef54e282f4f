"""The embedded synthetic suite: determinism, splits, grounding, openness, tokenizer, images."""
from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest

from glance_log import suite
from glance_log.tasks import TASKS, TaskItem

GROUNDED = ("infovqa", "docvqa", "chartqa")


@pytest.mark.parametrize("task", TASKS)
def test_load_items_deterministic_and_prefix_stable(task, tmp_path):
    a = suite.load_items(task, n=12, seed=0, image_dir=tmp_path / "a")
    b = suite.load_items(task, n=5, seed=0, image_dir=tmp_path / "b")
    assert [x.prompt for x in a[:5]] == [x.prompt for x in b]
    assert all(isinstance(x, TaskItem) and x.task == task for x in a)
    assert len({x.prompt_id for x in a}) == 12
    assert len({x.prompt for x in a}) == 12  # no duplicate prompts
    # another seed gives another partition and other items
    c = suite.load_items(task, n=12, seed=1, render=False)
    assert [x.prompt for x in c] != [x.prompt for x in a]


@pytest.mark.parametrize("task", TASKS)
def test_items_fields(task):
    for it in suite.load_items(task, n=6, render=False):
        assert it.prompt == suite.format_prompt(it.context, it.question)
        assert it.prompt.endswith("\nanswer:")
        assert it.reference == it.answer and it.answer
        assert it.image.endswith(".png")


@pytest.mark.parametrize("task", TASKS)
def test_train_and_heldout_are_disjoint_by_content(task):
    held = {x.prompt for x in suite.load_items(task, "heldout", n=60, render=False)}
    train = {x.prompt for x in suite.load_items(task, "train", n=240, render=False)}
    assert not held & train
    for ex in suite.load_examples(task, "heldout", 20):
        assert suite.split_of(ex, 0) == "heldout"
    for ex in suite.load_examples(task, "train", 20):
        assert suite.split_of(ex, 0) == "train"


def test_heldout_fraction_is_about_one_in_five():
    rng = random.Random(7)
    exs = [suite.gen_docvqa(rng) for _ in range(3000)]
    share = sum(suite.split_of(e) == "heldout" for e in exs) / len(exs)
    assert 0.17 < share < 0.23


@pytest.mark.parametrize("task", GROUNDED)
def test_grounded_answers_copy_a_context_value_verbatim(task):
    for ex in suite.load_examples(task, "heldout", 40):
        for qa in ex.qas:
            values = [v for _, v in ex.fields if v in qa.answer]
            assert values, (task, qa.answer)
            assert any(v in ex.context for v in values)


def test_docvqa_answers_restate_the_key_and_keys_are_unique():
    for ex in suite.load_examples("docvqa", "heldout", 40):
        keys = [k for k, _ in ex.fields]
        assert len(keys) == len(set(keys))
        m = re.match(rf"what is the (.+?)(?: on the {re.escape(ex.title)})?\?$", ex.qas[0].question)
        k = m.group(1)
        v = dict(ex.fields)[k]
        assert all(alt.startswith(("the " + k, k)) and v in alt for alt in ex.qas[0].alternatives)


def test_chartqa_has_one_template_and_table_fields():
    for ex in suite.load_examples("chartqa", "heldout", 40):
        qa = ex.qas[0]
        (cat,) = re.match(r"what is the value of (\w+)\?", qa.question).groups()
        val = dict(ex.fields)[cat]
        assert qa.alternatives == (f"the value of {cat} is {val}.",)
        assert f"{cat}: {val}" in ex.context


def test_captions_are_open_and_not_self_repeating():
    # one context admits many captions: redraw captions for a fixed context
    objs = (("red", "dog"), (None, "car"), ("blue", "kite"), (None, "bench"))
    caps = [suite.draw_caption(random.Random(s), objs, "park") for s in range(300)]
    assert len(set(caps)) > 150
    assert len({tuple(c.split()[:3]) for c in caps}) >= 7
    for ex in suite.load_examples("caption", "heldout", 60):
        cap = ex.qas[0].answer
        assert cap.endswith(".")
        mentioned = [n for _, n in ex.fields if re.search(rf"\b{n}\b", cap)]
        assert len(mentioned) >= 2
        for n in mentioned:
            assert len(re.findall(rf"\b{n}\b", cap)) == 1


def test_textvqa_wrappers_are_open_and_copy_the_text():
    for ex in suite.load_examples("textvqa", "heldout", 30):
        text = ex.fields[0][1]
        assert len(ex.qas[0].alternatives) == len(suite.TEXT_WRAPPERS)
        assert all(text in a for a in ex.qas[0].alternatives)
        assert f"text: {text}" in ex.context


def test_scienceqa_single_letter_answer_is_right():
    for ex in suite.load_examples("scienceqa", "heldout", 40):
        qa = ex.qas[0]
        assert qa.answer in suite.LETTERS and len(qa.answer) == 1
        cat = re.match(r"which of these is an? (\w+)\?", qa.question).group(1)
        picked = ex.fields[suite.LETTERS.index(qa.answer)]
        assert picked in suite.SCIENCE[cat]
        assert sum(o in suite.SCIENCE[cat] for o in ex.fields) == 1


def test_unknown_task_or_split_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown task"):
        suite.load_items("mmlu")
    with pytest.raises(ValueError, match="unknown split"):
        suite.load_items("docvqa", split="test")


def test_tokenizer_covers_the_suite_and_splits_values():
    from glance_log.train.tokenizer import UNK, suite_tokenizer

    tok = suite_tokenizer()
    rng = random.Random(3)
    for task, gen in suite.GENERATORS.items():
        for _ in range(150):
            ex = gen(rng, n_questions=3)
            for text in [ex.context] + [a for q in ex.qas for a in (q.question, *q.alternatives)]:
                assert UNK not in tok.encode(text).ids, (task, text)
    enc = tok.encode("total due: $574.76\nanswer:", add_special_tokens=False)
    assert enc.tokens == ["total", "due", ":", "$", "5", "7", "4", ".", "7", "6", "|", "answer", ":"]


def test_hf_tokenizer_roundtrip(tmp_path):
    from transformers import AutoTokenizer

    from glance_log.train.tokenizer import BOS, EOS, save_hf_tokenizer, suite_tokenizer

    save_hf_tokenizer(suite_tokenizer(), tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    assert tok.bos_token_id == BOS and tok.eos_token_id == EOS
    it = suite.load_items("chartqa", n=1, render=False)[0]
    ids = tok(it.prompt)["input_ids"]
    assert ids[0] == BOS and tok.unk_token_id not in ids
    assert tok.decode(ids[1:]).split() == suite_tokenizer().encode(it.prompt, add_special_tokens=False).tokens


@pytest.mark.parametrize("task", TASKS)
def test_images_render_deterministically(task, tmp_path):
    from PIL import Image

    a = suite.load_items(task, n=2, image_dir=tmp_path / "a")
    b = suite.load_items(task, n=2, image_dir=tmp_path / "b")
    for x, y in zip(a, b):
        assert Path(x.image).read_bytes() == Path(y.image).read_bytes()
        with Image.open(x.image) as im:
            assert im.size[0] == 480 and im.size[1] > 50
    # cached: a second load does not redraw
    m = (tmp_path / "a" / f"{a[0].prompt_id}.png").stat().st_mtime_ns
    suite.load_items(task, n=2, image_dir=tmp_path / "a")
    assert (tmp_path / "a" / f"{a[0].prompt_id}.png").stat().st_mtime_ns == m


def test_default_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GLANCE_CACHE", str(tmp_path))
    it = suite.load_items("docvqa", n=1)[0]
    assert it.image.startswith(str(tmp_path)) and (tmp_path / "suite-v1" / "docvqa").is_dir()


def test_read_only_cache_is_one_line(monkeypatch, tmp_path):
    """Issue 36.7: GLANCE_CACHE on a read-only mount gave an OSError traceback. The mount is simulated
    (EROFS from the folder's creation); the message names the folder and GLANCE_CACHE."""
    import errno

    from glance_law.errors import GlanceError
    monkeypatch.setenv("GLANCE_CACHE", str(tmp_path / "ro"))

    def refuse(self, *a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(self))
    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(GlanceError) as e:
        suite.load_items("docvqa", n=1)
    msg = str(e.value)
    assert "\n" not in msg and "read-only file system" in msg and "GLANCE_CACHE" in msg
    assert str(tmp_path / "ro" / "suite-v1" / "docvqa") in msg and not (tmp_path / "ro").exists()


def test_unwritable_cache_through_the_cli_is_one_line(monkeypatch, tmp_path, capsys):
    """The same through glance-log, with a real folder nobody can create files in (/sys where it is
    not writable, as in containers; skipped elsewhere)."""
    if os.access("/sys", os.W_OK) and _writable("/sys"):
        pytest.skip("/sys is writable here")
    monkeypatch.setenv("GLANCE_CACHE", "/sys/glance-cache")
    from glance_log.cli import main
    assert main(["--task", "docvqa", "--n", "1", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err and "GLANCE_CACHE" in err, err


def _writable(folder) -> bool:
    try:
        os.mkdir(os.path.join(folder, "glance-probe"))
    except OSError:
        return False
    os.rmdir(os.path.join(folder, "glance-probe"))
    return True
