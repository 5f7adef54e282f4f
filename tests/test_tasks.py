"""Task loaders: JSONL folders, datasets save_to_disk folders (Arrow), Parquet folders,
the embedded suite, and one-line errors naming file and line."""
from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from glance_law.errors import GlanceError
from glance_log import tasks as T


def _png_bytes(seed=0):
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def test_jsonl_folder(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(_png_bytes())
    lines = [{"image": "img/a.png", "prompt": "what is the total?", "reference": "total 42"},
             {"image": "img/a.png", "prompt": "who signed?", "id": "custom-7"}]
    (tmp_path / "docs.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    items = T.load_items("docvqa", tmp_path, n=None)
    assert [it.prompt_id for it in items] == ["docs-00001", "custom-7"]
    assert items[0].image == str(tmp_path / "img" / "a.png") and items[0].reference == "total 42"
    assert items[1].reference is None and items[0].task == "docvqa"
    assert T.load_items("docvqa", tmp_path / "docs.jsonl", n=None)[1].prompt_id == "custom-7"


def test_jsonl_errors_name_file_and_line(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"prompt": "a"}\n{"prompt": "b",}\n')
    with pytest.raises(GlanceError, match=r"d\.jsonl:2: malformed JSON"):
        T.load_items("docvqa", tmp_path)
    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "image": "missing.png"}\n')
    with pytest.raises(GlanceError, match=r"d\.jsonl:1: image 'missing.png' not found"):
        T.load_items("docvqa", tmp_path)
    (tmp_path / "d.jsonl").write_text('{"reference": "no prompt"}\n')
    with pytest.raises(GlanceError, match=r"d\.jsonl:1: no 'prompt'"):
        T.load_items("docvqa", tmp_path)
    (tmp_path / "d.jsonl").write_text('[1, 2]\n')
    with pytest.raises(GlanceError, match=r"d\.jsonl:1: expected a JSON object"):
        T.load_items("docvqa", tmp_path)
    # a caption item needs no prompt: the task's default instruction is used
    (tmp_path / "d.jsonl").write_text('{"reference": "a cat"}\n')
    assert T.load_items("caption", tmp_path)[0].prompt == T.REGISTRY["caption"].default_prompt


def test_datasets_save_to_disk_folder(tmp_path):
    """A DatasetDict saved with save_to_disk: dataset_dict.json + split folders of Arrow stream files."""
    rows = {"question": ["q0", "q1", "q2"], "answers": [["a0", "b0"], ["a1"], ["a2"]],
            "image": [{"bytes": _png_bytes(i), "path": None} for i in range(3)]}
    table = pa.table(rows)
    (tmp_path / "validation").mkdir()
    with pa.OSFile(str(tmp_path / "validation" / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    (tmp_path / "validation" / "state.json").write_text("{}")
    (tmp_path / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "validation"]}))
    (tmp_path / "train").mkdir()
    items = T.load_items("textvqa", tmp_path, n=None, split="validation")
    assert [it.question for it in items] == ["q0", "q1", "q2"]
    assert items[0].reference == "a0 b0" and items[0].image_bytes == _png_bytes(0) and items[0].image is None
    assert items[0].prompt == "q0"


def test_parquet_folder_and_choices(tmp_path):
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"question": ["which is a mammal?"], "choices": [["shark", "whale"]],
                             "answer": [1], "image": [None], "hint": ["sea animals"]}),
                   tmp_path / "data" / "test-00000-of-00001.parquet")
    pq.write_table(pa.table({"question": ["ignored train row"], "choices": [["x"]], "answer": [0],
                             "image": [None], "hint": [""]}),
                   tmp_path / "data" / "train-00000-of-00001.parquet")
    items = T.load_items("scienceqa", tmp_path, n=None)
    assert len(items) == 1
    assert items[0].question == "which is a mammal? (A) shark (B) whale"
    assert items[0].context == "sea animals" and items[0].prompt.startswith("sea animals\n")


def test_selection_is_seeded_and_ids_unique(tmp_path):
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(30)))
    a = [it.prompt_id for it in T.load_items("chartqa", tmp_path, n=5, seed=3)]
    assert a == [it.prompt_id for it in T.load_items("chartqa", tmp_path, n=5, seed=3)]
    assert a != [it.prompt_id for it in T.load_items("chartqa", tmp_path, n=5, seed=4)]
    assert a == sorted(a)                                          # file order kept
    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "id": "x"}\n{"prompt": "b", "id": "x"}\n')
    with pytest.raises(GlanceError, match="occurs more than once"):
        T.load_items("chartqa", tmp_path)


def test_unknown_task_and_missing_data(tmp_path):
    with pytest.raises(GlanceError, match="unknown task 'ocr'"):
        T.load_items("ocr", tmp_path)
    with pytest.raises(GlanceError, match="no such file"):
        T.load_items("docvqa", tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(GlanceError, match="no \\*.jsonl"):
        T.load_items("docvqa", tmp_path / "empty")


def test_derangement():
    for n in (2, 3, 7):
        d = T.derangement(n)
        assert sorted(d) == list(range(n)) and all(d[i] != i for i in range(n))
    with pytest.raises(GlanceError):
        T.derangement(1)


def test_embedded_suite_when_present(tmp_path, monkeypatch):
    suite = pytest.importorskip("glance_log.suite")
    monkeypatch.setenv("GLANCE_CACHE", str(tmp_path))
    items = T.load_items("docvqa", None, n=3, seed=0)
    assert len(items) == 3 and all(isinstance(it, T.TaskItem) or type(it).__name__ == "TaskItem" for it in items)
    assert len({it.prompt_id for it in items}) == 3
    del suite
