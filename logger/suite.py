"""The embedded synthetic task suite: five families from open to grounded, plus a control.

Every item is generated from a seeded :class:`random.Random`, so the suite is
identical on every machine. The families stand in for the paper's benchmarks:

``caption``   a list of objects (with colours) and a setting; the answer is a free
              caption from a small grammar: many valid continuations (opener, which
              objects, their order, relations), each object mentioned at most once.
``textvqa``   a short scene with one line of scene text; the answer copies the text
              inside one of several open phrasings ("it says ...", "the sign reads ...").
``infovqa``   a paragraph of facts about a fictional place; the answer restates the
              attribute in one of three phrasings and copies the value.
``docvqa``    a form/invoice of unique key-value fields; the answer restates the key and
              the document ("the due date on the invoice is 14 march 2019.") and copies
              the value verbatim.
``chartqa``   a category/value table (rendered as a bar chart); one answer template.
``scienceqa`` a multiple-choice question whose answer is one letter: the
              no-decode-loop control.

Train and held-out items are disjoint by content: an item is held out when a salted
hash of its prompt falls in the held-out fifth, so for a given ``seed`` the
partition is fixed and ``load_items(..., n=20)`` is a prefix of ``n=100``.

:func:`load_items` returns :class:`glance_log.tasks.TaskItem` objects: ``prompt`` is
the text a text-only target reads (context, then question, then ``answer:``),
``reference`` is the reference answer, ``image`` the context rendered as a PNG.
:func:`load_examples` returns the structured :class:`Example` (all valid answers,
the fields behind the context) that the training and evaluation scripts use.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from glance_law.errors import GlanceError

from .items import TASKS, TaskItem

SPLITS = ("train", "heldout")
HELDOUT_FRACTION = 5          # one prompt in five (by content hash) is held out
SUITE_VERSION = "1"


def _w(s: str) -> list[str]:
    return s.split()


# --- lexicon ----------------------------------------------------------------------------
COLORS = _w("red blue green yellow black white brown grey orange purple pink silver")
OBJECTS = _w("dog cat car bus bicycle tree bench woman man child kite umbrella boat horse "
             "bird truck train clock lamp chair table laptop cup bottle book ball sign "
             "fence flower bag hat phone sofa bed window door guitar pizza cake sheep cow "
             "giraffe elephant bear skateboard surfboard motorcycle plane vase bowl banana")
SIZES = _w("small large old little")
SETTINGS = {
    "park": ["in a park", "on the grass", "under the trees"],
    "street": ["on a street", "on the road", "in the city"],
    "kitchen": ["in a kitchen", "on a counter", "inside a house"],
    "beach": ["on a beach", "by the sea", "near the water"],
    "field": ["in a field", "on a farm", "in the countryside"],
    "room": ["in a room", "indoors", "inside a house"],
}
CAPTION_OPENERS = ["a photo of", "an image of", "a picture of", "a view of", "a close up of",
                   "there is", "this is"]
RELATIONS = ["next to", "near", "beside", "in front of", "behind", "with", "and", "close to"]
ACTIONS = {"dog": "running", "cat": "sleeping", "woman": "standing", "man": "walking",
           "child": "playing", "horse": "grazing", "bird": "sitting", "sheep": "grazing",
           "cow": "eating", "bus": "parked", "car": "parked", "boat": "floating"}

SCENE_THINGS = _w("sign poster banner bus shirt bottle box door screen board")
SCENE_PLACES = _w("wall street shop window station pole table road")
SCENE_WORDS = _w("open closed stop exit sale cafe pizza bakery pharmacy hotel taxi police "
                 "fresh coffee welcome push pull parking hospital school market books bank "
                 "museum garden theatre cinema danger quiet express local free new")
TEXT_WRAPPERS = ["{t}.", "it says {t}.", "the {thing} says {t}.", "it reads {t}.",
                 "the text reads {t}.", "the {thing} reads {t}."]

FIRST_NAMES = _w("elena marcus priya tomas ingrid kofi sofia liam amara jonas yuki omar "
                 "clara diego nadia felix hana ravi greta milo alice boris chen dara")
LAST_NAMES = _w("vance okafor lindqvist moreau tanaka reyes novak brennan haddad costa "
                "ferreira ivanova kowalski mensah nakamura osei petrov quinn sato walsh")
PLACES = _w("lorwick dunmere calvara ostrand veldin pemberly northgate ashford rivona "
            "tallis breckon marlowe keswin halden sorrel fennick carrow ildra wenbury zolten")
COMPANY_A = _w("acme apex nova orbit summit vertex harbor cedar pioneer atlas beacon crown")
COMPANY_B = _w("corp ltd group supply systems labs foods logistics")
MONTHS = _w("january february march april may june july august september october november december")
COMMODITIES = _w("copper wheat timber wool coffee tea salt cotton tin rice silver fish")
RIVERS = _w("aldra besk corran dune elwy fars glenn hollin")
STREETS = _w("oak elm pine maple high mill church station park river")

# docvqa: (key, value kind); keys are unique within a form.
FORM_TYPES = {
    "invoice": [("invoice number", "id"), ("invoice date", "date"), ("due date", "date"),
                ("customer name", "person"), ("vendor", "company"), ("total due", "amount"),
                ("tax", "amount"), ("account number", "id"), ("phone", "phone"),
                ("billing city", "city")],
    "receipt": [("receipt number", "id"), ("date", "date"), ("store", "company"),
                ("cashier", "person"), ("subtotal", "amount"), ("total", "amount"),
                ("card number", "card"), ("store city", "city")],
    "purchase order": [("order number", "id"), ("order date", "date"), ("delivery date", "date"),
                       ("buyer", "person"), ("supplier", "company"), ("order total", "amount"),
                       ("ship to", "address"), ("contact phone", "phone")],
    "application form": [("applicant name", "person"), ("date of birth", "date"),
                         ("home address", "address"), ("home city", "city"),
                         ("employer", "company"), ("annual income", "amount"),
                         ("reference number", "id"), ("mobile", "phone")],
}
DOC_TEMPLATES = [("the {key} on the {form} is {value}.", 4), ("{key}: {value}", 1)]

CHART_TITLES = _w("sales revenue visitors exports downloads votes members orders")
CHART_CATEGORIES = _w("apples pears plums grapes lemons cherries mangoes peaches "
                      "oslo lima cairo delhi tokyo paris quito dakar hanoi perth "
                      "alpha beta gamma delta omega sigma kappa theta "
                      "laptops tablets phones cameras printers monitors routers speakers")
CHART_YEARS = [str(y) for y in range(2015, 2024)]

INFO_ATTRS = [  # (attribute, sentence templates, answer templates, value kind)
    ("population", ["{e} has a population of {v}.", "about {v} people live in {e}."],
     ["the population of {e} is {v}.", "{e} has a population of {v}.", "{v}."], "bignum"),
    ("founding year", ["{e} was founded in {v}.", "the town of {e} dates from {v}."],
     ["{e} was founded in {v}.", "the founding year of {e} is {v}.", "{v}."], "year"),
    ("mayor", ["the mayor of {e} is {v}.", "{e} is governed by mayor {v}."],
     ["the mayor of {e} is {v}.", "the mayor is {v}.", "{v}."], "person"),
    ("main export", ["the main export of {e} is {v}.", "{e} mostly exports {v}."],
     ["the main export of {e} is {v}.", "{e} mostly exports {v}.", "{v}."], "commodity"),
    ("river", ["the river {v} flows through {e}.", "{e} lies on the river {v}."],
     ["the river {v} flows through {e}.", "the river is the {v}.", "{v}."], "river"),
    ("altitude", ["{e} lies {v} metres above sea level.", "the altitude of {e} is {v} metres."],
     ["the altitude of {e} is {v} metres.", "{e} lies {v} metres above sea level.", "{v} metres."],
     "smallnum"),
    ("area", ["{e} covers {v} square km.", "the area of {e} is {v} square km."],
     ["the area of {e} is {v} square km.", "{e} covers {v} square km.", "{v} square km."],
     "smallnum"),
    ("twin town", ["{e} is twinned with {v}.", "the twin town of {e} is {v}."],
     ["the twin town of {e} is {v}.", "{e} is twinned with {v}.", "{v}."], "city"),
]
INFO_QUESTIONS = {"population": "what is the population of {e}?",
                  "founding year": "when was {e} founded?",
                  "mayor": "who is the mayor of {e}?",
                  "main export": "what is the main export of {e}?",
                  "river": "which river flows through {e}?",
                  "altitude": "what is the altitude of {e}?",
                  "area": "what is the area of {e}?",
                  "twin town": "what is the twin town of {e}?"}

SCIENCE = {
    "mammal": _w("whale dog horse bat dolphin mouse"), "bird": _w("sparrow eagle owl penguin parrot crow"),
    "fish": _w("trout salmon shark cod tuna carp"), "insect": _w("ant bee beetle moth wasp fly"),
    "metal": _w("iron copper gold zinc lead tin"), "planet": _w("mars venus jupiter saturn mercury neptune"),
    "fruit": _w("apple mango lemon cherry grape pear"), "tool": _w("hammer saw drill wrench chisel spanner"),
}
LETTERS = _w("a b c d")

# Words the prompt scaffolding itself uses (the tokenizer vocabulary includes them).
SCAFFOLD = _w("objects setting scene text question answer describe the image write a caption for "
              "what does show is written on number chart table of value who when which how many "
              "these options form field shown in square km metres above sea level people live "
              "say reads says with by an")


# --- structured examples ----------------------------------------------------------------
@dataclass(frozen=True)
class QA:
    question: str
    answer: str                     # the canonical reference answer
    alternatives: tuple[str, ...]   # every answer counted as exact (includes ``answer``)


@dataclass(frozen=True)
class Example:
    task: str
    context: str
    qas: tuple[QA, ...]
    fields: tuple = field(default=(), compare=False)   # what the image renderer draws
    title: str = ""


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _digits(rng, n, lead_nonzero=True):
    first = str(rng.randint(1, 9)) if lead_nonzero else str(rng.randint(0, 9))
    return first + "".join(str(rng.randint(0, 9)) for _ in range(n - 1))


def _value(rng, kind: str) -> str:
    if kind == "id":
        return _digits(rng, rng.randint(4, 6))
    if kind == "date":
        return f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {rng.randint(1990, 2024)}"
    if kind == "amount":
        return f"${rng.randint(1, 999)}.{rng.randint(0, 99):02d}"
    if kind == "person":
        return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    if kind == "company":
        return f"{rng.choice(COMPANY_A)} {rng.choice(COMPANY_B)}"
    if kind == "phone":
        return f"{_digits(rng, 3)}-{_digits(rng, 4, False)}"
    if kind == "card":
        return f"****{_digits(rng, 4, False)}"
    if kind == "city":
        return rng.choice(PLACES)
    if kind == "address":
        return f"{rng.randint(1, 99)} {rng.choice(STREETS)} street"
    if kind == "bignum":
        return f"{rng.randint(2, 99)},{rng.randint(0, 999):03d}"
    if kind == "year":
        return str(rng.randint(1100, 1990))
    if kind == "smallnum":
        return str(rng.randint(10, 999))
    if kind == "commodity":
        return rng.choice(COMMODITIES)
    if kind == "river":
        return rng.choice(RIVERS)
    raise ValueError(kind)


def _lerp_int(lo: int, hi: int, d: float) -> int:
    return int(round(lo + (hi - lo) * max(0.0, min(1.0, d))))


def draw_caption(rng, objs, setting: str) -> str:
    """One caption of ``objs`` ((colour or None, noun) pairs) in ``setting``: an opener, two or
    three of the objects in random order joined by relations, maybe a setting phrase."""
    def np_(c, n):
        adj = c if (c and rng.random() < 0.7) else (rng.choice(SIZES) if rng.random() < 0.3 else None)
        words = f"{adj} {n}" if adj else n
        return f"{article(words)} {words}"

    order = rng.sample(list(objs), rng.randint(2, min(3, len(objs))))
    parts = [rng.choice(CAPTION_OPENERS), np_(*order[0])]
    if order[0][1] in ACTIONS and rng.random() < 0.4:
        parts.append(ACTIONS[order[0][1]])
    for o in order[1:]:
        parts += [rng.choice(RELATIONS), np_(*o)]
    if rng.random() < 0.7:
        parts.append(rng.choice(SETTINGS[setting]))
    return " ".join(parts) + "."


def gen_caption(rng, difficulty=1.0, n_questions=1) -> Example:
    setting = rng.choice(sorted(SETTINGS))
    names = rng.sample(OBJECTS, rng.randint(3, 5))
    objs = [(rng.choice(COLORS) if rng.random() < 0.6 else None, n) for n in names]
    listing = ", ".join(f"{c} {n}" if c else n for c, n in objs)
    context = f"objects: {listing}\nsetting: {setting}"
    q = rng.choice(["describe the image.", "write a caption for the image.", "what does the image show?"])
    cap = draw_caption(rng, objs, setting)
    return Example("caption", context, (QA(q, cap, (cap,)),), fields=tuple(objs), title=setting)


def gen_textvqa(rng, difficulty=1.0, n_questions=1) -> Example:
    thing, place, color = rng.choice(SCENE_THINGS), rng.choice(SCENE_PLACES), rng.choice(COLORS)
    k = rng.random()
    if k < 0.55:
        text = rng.choice(SCENE_WORDS)
    elif k < 0.8:
        text = " ".join(rng.sample(SCENE_WORDS, 2))
    else:
        text = _digits(rng, rng.randint(1, 3))
    context = f"scene: a {color} {thing} on a {place}\ntext: {text}"
    qas = []
    for _ in range(n_questions):
        q = rng.choice([f"what does the {thing} say?", f"what is written on the {thing}?",
                        "what text is shown?"])
        alts = tuple(w.format(t=text, thing=thing) for w in TEXT_WRAPPERS)
        qas.append(QA(q, rng.choice(alts), alts))
    return Example("textvqa", context, tuple(qas), fields=(("text", text),), title=f"{color} {thing}")


def gen_infovqa(rng, difficulty=1.0, n_questions=1) -> Example:
    e = rng.choice(PLACES)
    n_facts = _lerp_int(1, 5, difficulty) + rng.randint(0, 1)
    attrs = rng.sample(INFO_ATTRS, n_facts)
    facts, sentences = [], []
    for name, sents, answers, kind in attrs:
        v = _value(rng, kind)
        while kind == "city" and v == e:
            v = _value(rng, kind)
        facts.append((name, v, answers))
        sentences.append(rng.choice(sents).format(e=e, v=v))
    context = " ".join(sentences)
    qas = []
    for name, v, answers in rng.sample(facts, min(n_questions, len(facts))):
        alts = tuple(a.format(e=e, v=v) for a in answers)
        qas.append(QA(INFO_QUESTIONS[name].format(e=e), rng.choices(alts, weights=(2, 1, 1))[0], alts))
    return Example("infovqa", context, tuple(qas), fields=tuple((n, v) for n, v, _ in facts), title=e)


def gen_docvqa(rng, difficulty=1.0, n_questions=1) -> Example:
    form = rng.choice(sorted(FORM_TYPES))
    pool = FORM_TYPES[form]
    n_fields = min(len(pool), _lerp_int(1, 5, difficulty) + rng.randint(0, 2))
    chosen = rng.sample(pool, n_fields)
    kv = [(k, _value(rng, kind)) for k, kind in chosen]
    context = form + "\n" + "\n".join(f"{k}: {v}" for k, v in kv)
    qas = []
    for k, v in rng.sample(kv, min(n_questions, len(kv))):
        q = rng.choice([f"what is the {k}?", f"what is the {k} on the {form}?"])
        alts = tuple(t.format(key=k, value=v, form=form) for t, _ in DOC_TEMPLATES)
        qas.append(QA(q, rng.choices(alts, weights=[w for _, w in DOC_TEMPLATES])[0], alts))
    return Example("docvqa", context, tuple(qas), fields=tuple(kv), title=form)


def gen_chartqa(rng, difficulty=1.0, n_questions=1) -> Example:
    title = f"{rng.choice(CHART_TITLES)} in {rng.choice(CHART_YEARS)}"
    n_cats = _lerp_int(1, 5, difficulty) + rng.randint(0, 2)
    cats = rng.sample(CHART_CATEGORIES, n_cats)
    kv = [(c, str(rng.randint(1, 99) if rng.random() < 0.6 else rng.randint(100, 999))) for c in cats]
    context = f"chart: {title}\n" + "\n".join(f"{c}: {v}" for c, v in kv)
    qas = []
    for c, v in rng.sample(kv, min(n_questions, len(kv))):
        q = f"what is the value of {c}?"
        a = f"the value of {c} is {v}."
        qas.append(QA(q, a, (a,)))
    return Example("chartqa", context, tuple(qas), fields=tuple(kv), title=title)


def gen_scienceqa(rng, difficulty=1.0, n_questions=1) -> Example:
    cats = sorted(SCIENCE)
    cat = rng.choice(cats)
    n_opt = rng.randint(3, 4)
    others = rng.sample([c for c in cats if c != cat], n_opt - 1)
    opts = [rng.choice(SCIENCE[cat])] + [rng.choice(SCIENCE[c]) for c in others]
    rng.shuffle(opts)
    right = LETTERS[opts.index(next(o for o in opts if o in SCIENCE[cat]))]
    context = "options: " + " ".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(opts))
    q = f"which of these is a {cat}?"
    return Example("scienceqa", context, (QA(q, right, (right,)),), fields=tuple(opts), title=cat)


GENERATORS = {"caption": gen_caption, "textvqa": gen_textvqa, "infovqa": gen_infovqa,
              "docvqa": gen_docvqa, "chartqa": gen_chartqa, "scienceqa": gen_scienceqa}


# --- prompts, splits, items -------------------------------------------------------------
def format_prompt(context: str, question: str) -> str:
    """The text a text-only target reads; the answer follows ``answer :``."""
    return f"{context}\nquestion: {question}\nanswer:"


def split_of(example: Example, seed: int = 0) -> str:
    """``heldout`` for one prompt in five (salted content hash of the first prompt), else ``train``."""
    key = f"glance-suite/{SUITE_VERSION}/{seed}/{example.task}/" + format_prompt(example.context, example.qas[0].question)
    h = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
    return "heldout" if h % HELDOUT_FRACTION == 0 else "train"


def _check(task: str, split: str, n: int):
    if task not in GENERATORS:
        raise ValueError(f"unknown task {task!r}; the embedded suite has {', '.join(TASKS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected train or heldout")
    if n < 0:
        raise ValueError("n must be >= 0")


def load_examples(task: str, split: str = "heldout", n: int = 20, seed: int = 0) -> list[Example]:
    """The first ``n`` structured examples of ``split`` (deterministic; a prefix of any larger n)."""
    _check(task, split, n)
    rng = random.Random(f"glance-suite/{SUITE_VERSION}/{task}/{split}/{seed}")
    out, seen = [], set()
    gen = GENERATORS[task]
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 1000 * (n + 10):  # pragma: no cover - the content spaces are large
            raise RuntimeError(f"could not draw {n} distinct {split} items for {task}")
        ex = gen(rng)
        key = format_prompt(ex.context, ex.qas[0].question)
        if split_of(ex, seed) != split or key in seen:
            continue
        seen.add(key)
        out.append(ex)
    return out


def cache_root() -> Path:
    """The user's cache folder: ``$GLANCE_CACHE`` or ``~/.cache/glance-law`` (rendered suite
    images, converted GGUF models; nothing else is written outside ``--out``)."""
    return Path(os.environ.get("GLANCE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "glance-law"))


def cache_dir() -> Path:
    """Where rendered context images go: ``cache_root() / suite-v<N>``."""
    return cache_root() / f"suite-v{SUITE_VERSION}"


def load_items(task: str, split: str = "heldout", n: int = 20, seed: int = 0, *,
               render: bool = True, image_dir=None) -> list[TaskItem]:
    """``n`` deterministic items of ``task`` from ``split``; ``image`` is the context as PNG.

    Images are rendered once into ``image_dir`` (default :func:`cache_dir`) and reused;
    ``render=False`` leaves ``image`` as the path it would have without drawing it.
    """
    examples = load_examples(task, split, n, seed)
    folder = Path(image_dir) if image_dir is not None else cache_dir() / task
    items = []
    for i, ex in enumerate(examples):
        pid = f"{task}-{split}-s{seed}-{i:04d}"
        qa = ex.qas[0]
        path = folder / f"{pid}.png"
        if render:
            render_png(ex, path)
        items.append(TaskItem(prompt_id=pid, task=task, prompt=format_prompt(ex.context, qa.question),
                              reference=qa.answer, image=str(path), question=qa.question,
                              context=ex.context, answer=qa.answer))
    return items


def lexicon() -> list[str]:
    """Every word the generators can emit (before the tokenizer splits digits and punctuation)."""
    words = set(SCAFFOLD) | set(LETTERS) | set(MONTHS) | set(STREETS) | {"street", "metres", "|"}
    for group in (COLORS, OBJECTS, SIZES, SCENE_THINGS, SCENE_PLACES, SCENE_WORDS, FIRST_NAMES,
                  LAST_NAMES, PLACES, COMPANY_A, COMPANY_B, COMMODITIES, RIVERS, CHART_TITLES,
                  CHART_CATEGORIES):
        words.update(group)
    texts = list(CAPTION_OPENERS) + RELATIONS + list(ACTIONS.values()) + TEXT_WRAPPERS
    texts += [p for ps in SETTINGS.values() for p in ps] + list(SETTINGS)
    texts += list(FORM_TYPES) + [k for fs in FORM_TYPES.values() for k, _ in fs] + [t for t, _ in DOC_TEMPLATES]
    for name, sents, answers, _ in INFO_ATTRS:
        texts += [name, *sents, *answers]
    texts += list(INFO_QUESTIONS.values())
    texts += [w for ws in SCIENCE.values() for w in ws] + list(SCIENCE)
    texts += ["what does the {thing} say?", "what is written on the {thing}?", "what text is shown?",
              "what is the {key}?", "what is the {key} on the {form}?", "the {key} on the {form} is", "what is the value of {c}?",
              "which of these is a {cat}?", "describe the image.", "write a caption for the image.",
              "what does the image show?", "chart: {t} in", "scene: a {c} {t} on a {p}"]
    for t in texts:
        for w in t.replace("{", " {").replace("}", "} ").split():
            if not (w.startswith("{") and w.endswith("}")):
                words.add(w)
    return sorted(words)


# --- images -----------------------------------------------------------------------------
_PALETTE = {"red": (200, 40, 40), "blue": (40, 80, 200), "green": (40, 150, 60), "yellow": (230, 200, 40),
            "black": (20, 20, 20), "white": (235, 235, 235), "brown": (130, 80, 40), "grey": (128, 128, 128),
            "orange": (240, 140, 30), "purple": (130, 50, 160), "pink": (240, 150, 190),
            "silver": (190, 190, 200)}


def render_png(example: Example, path) -> str:
    """Draw ``example``'s context as a PNG at ``path`` (deterministic; skipped when it exists).

    docvqa: a form with a title bar and ruled key/value rows; chartqa: a bar chart with
    labels and values; caption: coloured tiles, one per object; textvqa: a sign carrying
    the scene text; infovqa/scienceqa: wrapped text. Written atomically.
    """
    path = Path(path)
    if path.exists():
        return str(path)
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default()
    W = 480
    task = example.task
    if task == "chartqa":
        kv = [(c, int(v)) for c, v in example.fields]
        H = 300
        img = Image.new("RGB", (W, H), "white")
        d = ImageDraw.Draw(img)
        d.text((10, 8), example.title, fill="black", font=font)
        top, base = 40, H - 40
        vmax = max(v for _, v in kv)
        bw = (W - 40) // len(kv)
        for i, (c, v) in enumerate(kv):
            x0 = 20 + i * bw + 6
            h = int((base - top) * v / vmax)
            d.rectangle([x0, base - h, x0 + bw - 12, base], fill=(60, 110, 180))
            d.text((x0, base - h - 14), str(v), fill="black", font=font)
            d.text((x0, base + 6), c, fill="black", font=font)
        d.line([14, base, W - 14, base], fill="black")
    elif task == "docvqa":
        H = 50 + 28 * len(example.fields)
        img = Image.new("RGB", (W, H), "white")
        d = ImageDraw.Draw(img)
        d.rectangle([0, 0, W - 1, 32], fill=(40, 60, 100))
        d.text((12, 10), example.title.upper(), fill="white", font=font)
        for i, (k, v) in enumerate(example.fields):
            y = 42 + 28 * i
            d.text((12, y), f"{k}:", fill=(60, 60, 60), font=font)
            d.text((200, y), v, fill="black", font=font)
            d.line([8, y + 20, W - 8, y + 20], fill=(200, 200, 200))
    elif task == "caption":
        H = 200
        img = Image.new("RGB", (W, H), (225, 235, 225))
        d = ImageDraw.Draw(img)
        tile = (W - 20) // max(1, len(example.fields))
        for i, (c, n) in enumerate(example.fields):
            x0 = 10 + i * tile
            d.rectangle([x0 + 4, 50, x0 + tile - 4, 150], fill=_PALETTE.get(c, (170, 170, 170)), outline="black")
            d.text((x0 + 8, 156), n, fill="black", font=font)
        d.text((10, 10), f"setting: {example.title}", fill="black", font=font)
    elif task == "textvqa":
        H = 160
        img = Image.new("RGB", (W, H), (210, 210, 200))
        d = ImageDraw.Draw(img)
        color = _PALETTE.get(example.title.split()[0], (200, 40, 40))
        d.rectangle([90, 40, W - 90, 120], fill=color, outline="black", width=3)
        ink = "black" if sum(color) > 450 else "white"
        d.text((110, 72), example.fields[0][1].upper(), fill=ink, font=font)
        d.text((10, 10), example.title, fill="black", font=font)
    else:
        import textwrap

        lines = []
        for para in example.context.split("\n"):
            lines += textwrap.wrap(para, 70) or [""]
        H = max(64, 20 + 16 * len(lines))
        img = Image.new("RGB", (W, H), "white")
        d = ImageDraw.Draw(img)
        for i, line in enumerate(lines):
            d.text((10, 10 + 16 * i), line, fill="black", font=font)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        img.save(tmp, format="PNG")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _cache_problem(path.parent, exc) from None
    return str(path)


def _cache_problem(folder: Path, exc: OSError) -> GlanceError:
    """One line for a suite image that cannot be written into the cache (read-only, full, no permission)."""
    import errno
    what = {errno.EROFS: "is on a read-only file system", errno.ENOSPC: "has no space left",
            errno.EACCES: "is not writable (permission denied)", errno.EPERM: "is not writable (not permitted)"}
    why = what.get(exc.errno, f"cannot be written ({exc.strerror or type(exc).__name__})")
    return GlanceError(f"the suite's image cache {folder} {why}; set GLANCE_CACHE to a writable folder "
                       "(the rendered images go there)")
