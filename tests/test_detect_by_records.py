"""Issue 36.11: formats are detected from the records everywhere. An SSE capture saved as ``.txt``
was read as Parquet by ``fit``, ``reduce`` and ``report`` ("not a Parquet file") while ``ingest auto``
imported it; JSON lines saved as ``.parquet`` likewise. Each command now gives the same result as
for the same bytes under an importable name; a file that is neither stays one line."""
from __future__ import annotations

import contextlib
import io
import json
import shutil

import pytest
from test_importers_engines import response

from glance_law.data.importers.common import reads_as_foreign
from glance_law.io import read_logs


def _main(module: str, args) -> tuple[int, str, str]:
    import importlib
    main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


ACC = [[3, 0, 2, 3], [1, 1, 3, 0, 2], [0, 0, 1]]


@pytest.fixture
def capture(tmp_path):
    """A vLLM streamed (SSE) capture of three requests, each ending in its usage chunk with metrics."""
    lines = []
    for i, acc in enumerate(ACC):
        final = response(f"chatcmpl-s{i}", 3, acc, gen_ms=20.0 + i, ttft_ms=5.0)
        chunk = {"id": f"chatcmpl-s{i}", "object": "chat.completion.chunk", "model": "m",
                 "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
        last = {**final, "object": "chat.completion.chunk", "choices": []}   # the usage chunk carries metrics
        lines += [f"data: {json.dumps(chunk)}", "", f"data: {json.dumps(last)}", "", "data: [DONE]", ""]
    named = tmp_path / "named" / "stream.jsonl"
    named.parent.mkdir()
    named.write_text("\n".join(lines) + "\n")
    txt = tmp_path / "txt" / "stream.txt"
    txt.parent.mkdir()
    shutil.copy(named, txt)
    return named, txt


def test_an_sse_capture_saved_as_txt_is_imported_by_its_records(capture, tmp_path):
    named, txt = capture
    assert reads_as_foreign(txt) and reads_as_foreign(named)
    rounds = read_logs([txt]).frame
    assert rounds["accepted"].tolist() == [a for acc in ACC for a in acc] and (rounds["horizon"] == 3).all()
    for module, extra in (("glance_law.cli.fit", []), ("glance_law.cli.reduce", ["--out", tmp_path / "{}.parquet"])):
        got = {}
        for name, path in (("named", named), ("txt", txt)):
            args = [path] + [str(a).format(name) for a in extra]
            rc, out, err = _main(module, args)
            assert rc == 0, err
            got[name] = (out + err).replace(str(path), "F").replace(path.stem, "S").replace(name, "N")
        assert got["txt"] == got["named"], module
    rc, _, err = _main("glance_law.cli.report", [txt, "--only", "summary", "--out", tmp_path / "app", "--quiet"])
    assert rc == 0, err
    import pandas as pd
    table = pd.read_csv(tmp_path / "app" / "tables" / "summary_accepted.csv").set_index("task")
    flat = [a for acc in ACC for a in acc]
    assert table.loc["pooled", "rounds"] == len(flat) and table.loc["pooled", "prompts"] == len(ACC)
    assert table.loc["pooled", "mean_accepted"] == pytest.approx(sum(flat) / len(flat))


def test_json_lines_saved_as_parquet_and_garbage_as_txt(capture, tmp_path):
    named, _ = capture
    as_parquet = tmp_path / "stream.parquet"
    shutil.copy(named, as_parquet)
    assert read_logs([as_parquet]).frame["accepted"].tolist() == [a for acc in ACC for a in acc]
    junk = tmp_path / "notes.txt"
    junk.write_text("just some notes\n")
    assert not reads_as_foreign(junk)
    rc, _, err = _main("glance_law.cli.fit", [junk])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "notes.txt" in err and "Traceback" not in err
    fifo = tmp_path / "pipe.txt"
    import os
    os.mkfifo(fifo)
    assert not reads_as_foreign(fifo)            # never opened (a FIFO would block the read)
