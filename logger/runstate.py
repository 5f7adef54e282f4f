"""What a logging run finds in its output folder and holds while it writes: run ids, the prompts
already logged (resume), orphaned round rows, the run lock and the audit state. Shared by the tree
decoder's runs (glance_log.run), the llama.cpp engine (glance_log.run_llamacpp) and the dense pass
(glance_log.dense); it imports neither of them."""
from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from pathlib import Path

from glance_law import schema as S
from glance_law.data import uri
from glance_law.data.outputs import pid_lock, safe_stem, store_lock
from glance_law.errors import GlanceError

__all__ = ["run_id_of", "logged_prompts", "logged_outputs", "remove_orphan_rounds", "run_lock", "audit_state"]


def run_id_of(key: dict) -> str:
    """A run id that is a function of the configuration, so a rerun resumes the same run."""
    h = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{key['task']}-{key['drafter']}-{h}"


def _prompt_rows(out, run_id: str, condition: str, columns=()):
    """The prompt rows (dicts of ``prompt_id`` and ``columns``) of ``run_id``/``condition`` in ``out``."""
    import pyarrow.parquet as pq

    for f in _parts(out, "prompts-"):
        try:
            with _opened(f) as src:
                pf = pq.ParquetFile(src)
                md = pf.schema_arrow.metadata or {}
                if md.get(S.META_KIND, b"").decode() != S.KIND_PROMPTS:
                    continue
                want = ("run_id", "prompt_id", "condition", *columns)
                tab = pf.read(columns=[c for c in want if c in pf.schema_arrow.names]).to_pydict()
        except Exception:  # noqa: BLE001 - an unreadable part is left for the reader to report
            continue
        conds = tab.get("condition") or [S.CONDITIONS_DEFAULT] * len(tab["run_id"])
        for i, (r, c) in enumerate(zip(tab["run_id"], conds)):
            if r == run_id and (c or S.CONDITIONS_DEFAULT) == condition:
                yield {k: (tab[k][i] if k in tab else None) for k in ("prompt_id", *columns)}


def logged_prompts(out: Path, run_id: str, condition: str) -> set:
    """Prompt ids already complete (a prompt row exists) for ``run_id``/``condition`` in ``out``."""
    return {r["prompt_id"] for r in _prompt_rows(out, run_id, condition)}


def logged_outputs(out: Path, run_id: str, condition: str, prompt_ids) -> dict:
    """The emitted tokens (the prompt row's ``tokens``) of the logged ``prompt_ids``; a prompt
    whose row has no tokens is left out."""
    want = set(prompt_ids)
    if not want:
        return {}
    return {r["prompt_id"]: [int(t) for t in r["tokens"]] for r in _prompt_rows(out, run_id, condition, ("tokens",))
            if r["prompt_id"] in want and r["tokens"] is not None}


def remove_orphan_rounds(out: Path, run_id: str, condition: str, done: set) -> int:
    """Round rows of prompts with no prompt row (a crash between the two part writes) are
    removed by rewriting their part file, so the rerun of those prompts does not duplicate
    keys. Returns the number of rows removed."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from glance_law.io import write_table

    removed = 0
    for f in _parts(out, "rounds-"):
        try:
            with _opened(f) as src:
                tab = pq.read_table(src)
        except Exception:  # noqa: BLE001
            continue
        md = tab.schema.metadata or {}
        cond = tab.column("condition") if "condition" in tab.column_names else None
        mine = pc.equal(tab.column("run_id").cast("string"), run_id)
        if cond is not None:
            mine = pc.and_(mine, pc.equal(cond.cast("string"), condition))
        orphan = pc.and_(mine, pc.invert(pc.is_in(tab.column("prompt_id").cast("string"),
                                                  value_set=__import__("pyarrow").array(sorted(done), "string"))))
        k = pc.sum(orphan).as_py() or 0
        if not k:
            continue
        keep = tab.filter(pc.invert(orphan))
        removed += k
        if keep.num_rows:
            run = json.loads(md.get(S.META_RUN, b"{}").decode() or "{}")
            write_table(keep.replace_schema_metadata(None), f, S.KIND_ROUNDS, run)
        elif uri.is_uri(f):
            fs, inner = uri.filesystem(f)
            fs.delete_file(inner)
        else:
            f.unlink()
    return removed


def _parts(out, prefix: str) -> list:
    """The ``prefix*.parquet`` part files directly in ``out`` (a folder, or a store prefix listed
    through glance_law.data.uri), sorted; none when ``out`` does not exist yet."""
    if uri.is_uri(out):
        base = str(out).rstrip("/") + "/"
        return [f for f in uri.list_prefix(base) if "/" not in f[len(base):] and f[len(base):].startswith(prefix)]
    out = Path(out)
    return sorted(out.glob(f"{prefix}*.parquet")) if out.exists() else []


@contextmanager
def _opened(f):
    """What pyarrow reads for a part: the local path, or an open store file (closed after)."""
    src = uri.open_input(f)
    try:
        yield src
    finally:
        if src is not f:
            src.close()


@contextmanager
def run_lock(out: Path, run_id: str):
    """Hold an exclusive OS lock (fcntl.flock on ``out/.glance-log-<run_id>.lock``, the run id made one
    file-name component by :func:`glance_law.data.outputs.safe_stem`: never a path) while a run
    writes into ``out``: a second glance-log of the same configuration into the same folder is
    refused instead of logging prompts twice or removing the first run's in-flight rows. The
    OS drops the lock when the process ends, so a crashed run never blocks its resume. On a
    store prefix the lock is the object ``.glance-log-<run_id>.lock`` created only if absent
    (:func:`glance_law.data.outputs.store_lock`; a crashed run's lock is taken over by a rerun on
    the same host)."""
    name = f".glance-log-{safe_stem(run_id)}.lock"     # a task (a question file's category) may hold / or ..
    if uri.is_uri(out):
        with store_lock(str(out).rstrip("/"), "glance-log", name=name) as confirm:
            yield
            confirm()
        return

    def busy(holder):
        return GlanceError(f"run {run_id} is being written into {out} by another glance-log (pid {holder}); "
                           "wait for it to finish, then rerun this command to resume")
    with pid_lock(out / name, busy):
        yield


def audit_state(out: Path, run_id: str) -> tuple[int, int, int]:
    """(audited, mismatches, unaudited) over the matched prompt rows of ``run_id`` in ``out``."""
    import pyarrow.parquet as pq

    audited = mismatches = unaudited = 0
    for f in _parts(out, "prompts-"):
        try:
            with _opened(f) as src:
                pf = pq.ParquetFile(src)
                names = pf.schema_arrow.names
                if (pf.schema_arrow.metadata or {}).get(S.META_KIND, b"").decode() != S.KIND_PROMPTS:
                    continue
                cols = [c for c in ("run_id", "condition", "greedy_match") if c in names]
                tab = pf.read(columns=cols).to_pydict()
        except Exception:  # noqa: BLE001 - an unreadable part is left for the reader to report
            continue
        n = len(tab["run_id"])
        conds = tab.get("condition") or [S.CONDITIONS_DEFAULT] * n
        gm = tab.get("greedy_match") or [None] * n
        for r, c, g in zip(tab["run_id"], conds, gm):
            if r != run_id or (c or S.CONDITIONS_DEFAULT) != S.CONDITIONS_DEFAULT:
                continue
            if g is None:
                unaudited += 1
            else:
                audited += 1
                mismatches += int(not g)
    return audited, mismatches, unaudited
