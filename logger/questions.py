"""Question files: Spec-Bench / MT-bench ``question.jsonl`` (plain or ``.gz``) as multi-turn
conversations, and the prompts of their turns.

One JSON object a line::

    {"question_id": 81, "category": "writing", "turns": ["first question", "second"],
     "reference": ["optional reference of turn 1", "... of turn 2"]}

* ``category`` is the task: ``--task all`` keeps every category, ``--task <category>`` one;
  ``n`` counts questions *per category*, chosen by a seeded sample (for each category the
  draw :func:`glance_log.tasks.load_items` makes: ``random.Random(seed).sample`` over that
  category's questions, kept in file order), so every arm and every rerun gets the same ones.
* Each turn is one logged prompt, ``q<question_id>-t<turn>`` (``q81-t1``, ``q81-t2``); turn
  ``k``'s prompt holds the earlier turns' questions and the model's own answers to them
  (:func:`encode_conversation`): through the tokenizer's chat template (user / assistant
  messages) when it has one, else as plain text (:func:`plain_conversation`).

A file is read as a question file when its name ends in ``.jsonl.gz`` or when its first
record has ``turns`` (:func:`question_file`); a folder holding ``question.jsonl`` (or
``.gz``), as Spec-Bench lays its data out, means that file.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from glance_law.data.inputs import JSONLimitError, loads
from glance_law.errors import GlanceError

from .models import PromptInputs

__all__ = ["Question", "question_file", "read_questions", "select_questions", "load_questions", "categories",
           "conversation_messages", "plain_conversation", "encode_conversation", "prompt_format", "answer_text",
           "context_limit", "fits_context", "ALL"]

#: the --task value that keeps every category of a question file
ALL = "all"
#: names a folder's question file may have (Spec-Bench: data/<bench>/question.jsonl)
FOLDER_NAMES = ("question.jsonl", "question.jsonl.gz")


@dataclass(frozen=True)
class Question:
    """One question of a question file: its turns (asked in one conversation) and, per turn,
    the tuple of its reference texts (empty where the file gives none)."""

    question_id: str
    category: str
    turns: tuple[str, ...]
    references: tuple[tuple[str, ...], ...]
    where: str = ""

    @property
    def task(self) -> str:
        return self.category

    def prompt_id(self, turn: int) -> str:
        """The logged prompt id of ``turn`` (0-based): ``q<question_id>-t<turn + 1>``."""
        return f"q{self.question_id}-t{turn + 1}"

    @property
    def prompt_ids(self) -> list[str]:
        return [self.prompt_id(t) for t in range(len(self.turns))]


def _lines(path: Path):
    """(line number, text) of the non-blank lines, through the bounded reader
    (:mod:`glance_law.data.inputs`: gzip streamed, lines of at most 64 MiB, FIFOs and devices
    refused); unreadable bytes or gzip get one line."""
    from glance_law.data.inputs import read_text
    text = read_text(path, gzip_only=path.name.endswith(".gz"))
    for k, line in enumerate(text.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            yield text.lineno(k), line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GlanceError(f"{path}: line {text.lineno(k)}: not UTF-8 text ({exc.reason} at byte {exc.start})") \
                from None


def question_file(data) -> Path | None:
    """The question file ``data`` names (a ``.jsonl[.gz]`` file whose first record has ``turns``,
    any ``.jsonl.gz``, or a folder holding ``question.jsonl[.gz]``), else None."""
    if data is None:
        return None
    path = Path(data)
    if path.is_dir():
        found = [path / n for n in FOLDER_NAMES if (path / n).is_file()]
        return found[0] if found else None
    if not path.is_file():
        return None
    if path.name.endswith(".jsonl.gz"):
        return path
    if not path.name.endswith(".jsonl"):
        return None
    for _, line in _lines(path):
        try:
            rec = loads(line)
        except ValueError:
            return None                 # left to the item loader, which names the line
        return path if isinstance(rec, dict) and "turns" in rec else None
    return None


def not_a_question_file(data, task: str) -> str | None:
    """Why ``data`` is not read as a question file although ``--task`` (``all``, or no task family)
    asks for one: one line naming the file, the line and the field (an empty file, a first record
    without ``turns``, a malformed first line, a folder without ``question.jsonl``); None when
    ``data`` is not a JSONL file or folder (the item loader's own message then)."""
    if data is None:
        return None
    path = Path(data)
    need = "records with question_id, category and turns (a list of the turns' texts), one JSON object a line"
    if path.is_dir():
        if any(path.glob("*.jsonl")) or not any(path.iterdir()):
            return (f"--data {path}: holds no question file ({' or '.join(FOLDER_NAMES)}) for --task {task!r}; "
                    f"a question file has {need}")
        return None
    if not path.is_file() or not path.name.endswith((".jsonl", ".jsonl.gz")):
        return None
    for lineno, line in _lines(path):
        rec = _parse(line, f"{path}:{lineno}")
        if "turns" not in rec:
            fields = ", ".join(map(repr, list(rec)[:6])) or "none"
            return (f"{path}:{lineno}: the first record has no field 'turns' (its fields: {fields}), so this is not "
                    f"read as a question file for --task {task!r}; a question file has {need}")
        return None
    return f"{path}: holds no records; a question file for --task {task!r} has {need}"


def _parse(line: str, where: str) -> dict:
    try:
        rec = loads(line)
    except json.JSONDecodeError as exc:
        raise GlanceError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno}); each line must be "
                          '{"question_id": ..., "category": ..., "turns": [...]}') from None
    except JSONLimitError as exc:
        raise GlanceError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(rec, dict):
        raise GlanceError(f"{where}: expected a JSON object with question_id, category and turns, "
                          f"got {type(rec).__name__}")
    return rec


def _question(rec: dict, where: str) -> Question:
    qid = rec.get("question_id")
    if isinstance(qid, bool) or not isinstance(qid, (int, str)) or str(qid) == "":
        raise GlanceError(f"{where}: field 'question_id' must be an integer or a non-empty string, got {qid!r:.40}")
    cat = rec.get("category")
    if not isinstance(cat, str) or not cat.strip() or cat == ALL:
        raise GlanceError(f"{where}: field 'category' must be a non-empty string other than {ALL!r} "
                          f"(it is the task), got {cat!r:.40}")
    turns = rec.get("turns")
    if not isinstance(turns, list) or not turns:
        raise GlanceError(f"{where}: field 'turns' must be a non-empty list of strings (one per turn), "
                          f"got {type(turns).__name__ if turns is not None else 'nothing'}")
    for i, t in enumerate(turns):
        if not isinstance(t, str) or not t.strip():
            raise GlanceError(f"{where}: field 'turns'[{i}] must be a non-empty string, got {t!r:.40}")
    refs = _references(rec.get("reference"), len(turns), where)
    return Question(str(qid), cat, tuple(turns), refs, where)


def _references(ref, n_turns: int, where: str) -> tuple:
    """Per turn, the tuple of its reference texts: ``reference`` is a string (turn 1's), or a list
    with one entry per turn, each a string, a list of acceptable strings (Spec-Bench's rag) or null."""
    if ref is None:
        return ((),) * n_turns
    if isinstance(ref, str):
        ref = [ref]
    bad = GlanceError(f"{where}: field 'reference' must be a string or a list with one entry per turn, "
                      "each a string, a list of strings or null")
    if not isinstance(ref, list):
        raise bad
    out = []
    for r in ref[:n_turns]:
        if r is None:
            out.append(())
        elif isinstance(r, str):
            out.append((r,))
        elif isinstance(r, list) and all(isinstance(x, str) for x in r):
            out.append(tuple(r))
        else:
            raise bad
    return tuple(out) + ((),) * (n_turns - len(out))


def read_questions(path) -> list[Question]:
    """Every question of a question file, in file order; bad input gets one line naming
    ``file:line`` and the field."""
    path = Path(path)
    if not path.is_file():
        raise GlanceError(f"--data {path}: no such file")
    out, seen = [], {}
    for lineno, line in _lines(path):
        where = f"{path}:{lineno}"
        q = _question(_parse(line, where), where)
        if q.question_id in seen:
            raise GlanceError(f"{where}: question_id {q.question_id} already at line {seen[q.question_id]}; "
                              "ids must be unique")
        seen[q.question_id] = lineno
        out.append(q)
    if not out:
        raise GlanceError(f"--data {path}: holds no questions")
    return out


def categories(questions) -> list[str]:
    """The categories in order of first appearance."""
    return list(dict.fromkeys(q.category for q in questions))


def select_questions(questions, task: str = ALL, n: int | None = None, seed: int = 0,
                     source: str = "the question file") -> list[Question]:
    """``n`` questions of each category (``task == "all"``) or of one category, by a seeded
    sample per category (file order kept); ``n=None`` keeps them all."""
    cats = categories(questions)
    if task != ALL and task not in cats:
        raise GlanceError(f"--task {task!r}: not a category of {source}; its categories: {', '.join(cats)} "
                          f"(or {ALL})")
    keep = []
    for cat in (cats if task == ALL else [task]):
        group = [i for i, q in enumerate(questions) if q.category == cat]
        if n is not None and n < len(group):
            group = [group[j] for j in random.Random(seed).sample(range(len(group)), n)]
        keep.extend(group)
    return [questions[i] for i in sorted(keep)]


def load_questions(data, task: str = ALL, n: int | None = 20, seed: int = 0,
                   turns: int | None = None) -> list[Question]:
    """Read and select (see :func:`select_questions`) the question file ``data`` names; ``turns``
    keeps the first turns of each question only (None: every turn)."""
    path = question_file(data)
    if path is None:
        raise GlanceError(f"--data {data}: not a question file (question.jsonl with 'turns')")
    picked = select_questions(read_questions(path), task, n, seed, source=str(path))
    if turns is not None:
        picked = [replace(q, turns=q.turns[:turns], references=q.references[:turns]) for q in picked]
    return picked


# -- the prompt of one turn ---------------------------------------------------------------------
def conversation_messages(turns, answers) -> list[dict]:
    """Chat messages of a conversation: user ``turns[i]`` then assistant ``answers[i]`` for every
    answered turn, ending with the last (unanswered) turn."""
    if len(answers) != len(turns) - 1:
        raise ValueError("a conversation prompt needs one answer for every turn but the last")
    msgs = []
    for i, t in enumerate(turns):
        msgs.append({"role": "user", "content": t})
        if i < len(answers):
            msgs.append({"role": "assistant", "content": answers[i]})
    return msgs


def plain_conversation(turns, answers) -> str:
    """The prompt for a tokenizer without a chat template (a base model): one block per turn,
    ``"Question: <turn>\\nAnswer: <answer>"``, blocks separated by a blank line, ending with
    ``"Question: <last turn>\\nAnswer:"`` for the model to continue."""
    if len(answers) != len(turns) - 1:
        raise ValueError("a conversation prompt needs one answer for every turn but the last")
    blocks = [f"Question: {t}\nAnswer: {a}" for t, a in zip(turns, answers)]
    blocks.append(f"Question: {turns[-1]}\nAnswer:")
    return "\n\n".join(blocks)


def _template_ids(tok, messages) -> list[int]:
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(x) for x in (ids[0] if ids and isinstance(ids[0], list) else ids)]


def encode_conversation(target, turns, answers) -> PromptInputs:
    """The prompt of the last of ``turns`` for ``target``: its chat template over
    :func:`conversation_messages` (as :meth:`Target.encode` does for one message) when the
    tokenizer has one, else :func:`plain_conversation` with the tokenizer's special tokens."""
    tok = target.tokenizer
    if getattr(tok, "chat_template", None):
        ids = _template_ids(tok, conversation_messages(turns, answers))
    else:
        ids = [int(x) for x in tok(plain_conversation(turns, answers), add_special_tokens=True)["input_ids"]]
    if not ids:
        raise GlanceError("a question's prompt encodes to zero tokens")
    t = torch.tensor([ids], dtype=torch.long, device=target.device)
    inputs = {"input_ids": t}
    if getattr(target, "is_vlm", False):            # a VL target reading text only: no image tokens
        inputs["attention_mask"] = torch.ones_like(t)
        inputs["mm_token_type_ids"] = torch.zeros_like(t, dtype=torch.int32)
    return PromptInputs(inputs, ids)


def prompt_format(target) -> str:
    """How :func:`encode_conversation` forms prompts for ``target`` (logged in the run metadata)."""
    if getattr(target.tokenizer, "chat_template", None):
        return "chat template (user/assistant messages)"
    return "plain text: 'Question: <turn>\\nAnswer: <answer>' blocks, blank-line separated, ending 'Answer:'"


def answer_text(tokenizer, tokens) -> str:
    """A turn's answer as the next turn's prompt holds it: the emitted tokens decoded with
    special tokens (the stop token) dropped, surrounding whitespace stripped; nothing cut."""
    return tokenizer.decode([int(t) for t in tokens], skip_special_tokens=True).strip()


def context_limit(target) -> int | None:
    """The model's positions (``max_position_embeddings`` of its text config), or None when
    the config names none."""
    cfg = getattr(target, "text_config", None) or getattr(target, "config", None)
    m = getattr(cfg, "max_position_embeddings", None)
    return int(m) if isinstance(m, int) and m > 0 else None


def fits_context(prompt_tokens: int, max_new_tokens: int, limit: int | None) -> bool:
    """Do the prompt and ``max_new_tokens`` fit in ``limit`` positions (always, without a limit)?"""
    return limit is None or prompt_tokens + max_new_tokens <= limit
