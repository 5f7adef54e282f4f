"""Issue 26, item 1: the one output path (glance_law.data.outputs), tried the way the issue's
reproductions did - each case is a command that used to lose or replace data, or write outside
the named output, and must now give the right result or exit 2 with one line, with nothing else
changed.

Full disks and read-only folders are real: a tiny tmpfs mounted in a private mount namespace
(``unshare -m``; skipped where that is not allowed), plus an in-process ENOSPC that always runs.
"""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from _fuzz import ROOT, CliResult, run_cli

from glance_law.data import outputs as O
from glance_law.io import LogError, read_logs, write_table
from glance_law.simulate import TaskSpec, simulate_rounds

REALDATA = ROOT / "tests" / "data" / "realdata"
SPEC = REALDATA / "spec_bench__vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl.gz"     # 2381 rounds
MEDUSA = REALDATA / "vicuna-7b-v1.3-medusa.jsonl.gz"                                  # 958 rounds
POLICY = ["--budget", "3", "--bootstrap", "0", "--folds", "2"]


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _rounds(seed=0, n_prompts=6, run_id=None):
    return simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=n_prompts, seed=seed, vectors=False,
                           run_id=run_id or f"run{seed}")


@pytest.fixture
def logs(tmp_path) -> Path:
    write_table(_rounds(), tmp_path / "logs" / "rounds-a.parquet")
    return tmp_path / "logs"


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


MAINS = {"glance_law.reduce": "glance_law.cli.reduce", "glance_law.fit": "glance_law.cli.fit",
         "glance_law.ingest": "glance_law.cli.ingest", "glance_law.report": "glance_law.cli.report",
         "glance_law.policy": "glance_law.policy.cli"}


def cli(module: str, args, cwd=None) -> CliResult:
    """``python -m module args`` in this process (its ``main``; stdout and stderr captured): the cases
    that need no child of their own (a kill, a second pid, a mount) save the interpreter's start."""
    import contextlib
    import importlib
    import io
    main = importlib.import_module(MAINS[module]).main
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main([str(a) for a in args])
    finally:
        os.chdir(here)
    return CliResult((module, *map(str, args)), rc, out.getvalue(), err.getvalue())


def _child(code: str, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=_env())


# --------------------------------------------------------------------------- onto the inputs

def test_reduce_onto_its_own_input_is_refused(logs):
    a = logs / "rounds-a.parquet"
    before = _sha(a)
    cli("glance_law.reduce", [a, "--out", a]).expect_refusal("is the input")
    # the shell expanded `--out logs/*.parquet` to the one file there: an input, refused
    cli("glance_law.reduce", [logs, "--out", a]).expect_refusal("read as an input")
    # the pattern matched nothing and reached the command as it was typed
    cli("glance_law.reduce", [logs, "--out", logs / "*.parquet"]).expect_refusal("pattern")
    cli("glance_law.fit", [a, "--out", a]).expect_refusal("is the input")
    assert _sha(a) == before and sorted(p.name for p in logs.iterdir()) == ["rounds-a.parquet"]


def test_file_uri_outputs_get_every_local_check(logs, tmp_path):
    """Issue 36.1: ``--out file:///ABS/...`` is the local path ABS/... for the self-overwrite, folder-input
    and link checks (it replaced its input, or wrote JSON over a rounds file, before)."""
    a = logs / "rounds-a.parquet"
    b = write_table(_rounds(seed=1), logs / "rounds-b.parquet")
    before = {p.name: _sha(p) for p in logs.iterdir()}
    uri = lambda p: "file://" + str(Path(p).absolute())          # noqa: E731
    cli("glance_law.reduce", [a, "--out", uri(a)]).expect_refusal("is the input")
    cli("glance_law.reduce", [uri(a), "--out", a]).expect_refusal("is the input")     # a file:// input too
    cli("glance_law.policy", [logs, *POLICY, "--out", uri(b)]).expect_refusal("read as an input")
    cli("glance_law.fit", [a, "--out", uri(a)]).expect_refusal("is the input")
    cli("glance_law.ingest", ["auto", logs, "--out", uri(logs.parent)]).expect_refusal("holds the input")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "link.json"
    link.symlink_to(victim)
    cli("glance_law.policy", [logs, *POLICY, "--out", uri(link)]).expect_refusal("symbolic link")
    # percent-encoded, the same file
    cli("glance_law.reduce", [a, "--out", uri(a).replace("rounds-a", "rounds%2Da")]).expect_refusal("is the input")
    assert {p.name: _sha(p) for p in logs.iterdir()} == before
    assert victim.read_text() == "precious\n" and link.is_symlink()
    # a file:// output elsewhere is written as before
    out = tmp_path / "red" / "stats.parquet"
    cli("glance_law.reduce", [a, "--out", uri(out)]).expect_ok()
    assert pq.read_metadata(out).num_rows > 0


def test_file_uri_folder_outputs_are_local_folders(logs, tmp_path):
    """Issue 36.7: ``ingest auto F --out file:///nonexistent/dir`` ended in a FileNotFoundError traceback
    (the folder output took the store's lock path); it is a local folder: created, locked, written."""
    uri = lambda p: "file://" + str(Path(p).absolute())          # noqa: E731
    new = tmp_path / "no" / "such" / "dir"
    r = cli("glance_law.ingest", ["auto", SPEC, "--out", uri(new)]).expect_ok()
    assert "2381 rounds" in r.stderr and "Traceback" not in r.stderr
    names = sorted(p.name for p in new.iterdir())
    assert [n.split("-")[0] for n in names] == ["prompts", "rounds"], names      # no lock, no marker
    assert pq.read_metadata(new / names[1]).num_rows == 2381
    app = tmp_path / "app"
    cli("glance_law.report", [logs, "--only", "law", "--out", uri(app)]).expect_ok()
    assert (app / "index.md").is_file() and not (app / O.INCOMPLETE).exists() and not (app / O.LOCK).exists()
    # a file:// folder nothing can be created in: one line
    if not os.access("/sys", os.W_OK) or not _can_mkdir("/sys"):
        cli("glance_law.ingest", ["auto", SPEC, "--out", "file:///sys/glance-no/dir"]).expect_refusal("/sys")


def _can_mkdir(folder) -> bool:
    try:
        os.mkdir(os.path.join(folder, "glance-probe"))
    except OSError:
        return False
    os.rmdir(os.path.join(folder, "glance-probe"))
    return True


def test_refused_folder_writes_leave_no_lock_and_no_folder(tmp_path, monkeypatch):
    """Issue 36.7: full-disk refusals left ``.glance-write.lock`` behind (and the folder they created).
    ENOSPC in process: the first file written into the folder (the INCOMPLETE marker) fails."""
    real = os.open

    def full(path, flags, *a, **k):
        if str(path).endswith(".tmp") and flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, flags, *a, **k)
    old = tmp_path / "old"
    old.mkdir()
    (old / "keep.txt").write_text("mine\n")
    monkeypatch.setattr(O.os, "open", full)
    for out in (tmp_path / "new", old):
        r = cli("glance_law.ingest", ["auto", SPEC, "--out", out])
        r.expect_refusal("no space left")
    monkeypatch.undo()
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in old.iterdir()) == ["keep.txt"]          # no lock file, no marker


def test_a_folder_lock_is_removed_and_still_excludes(tmp_path):
    """The lock file goes with its holder; a second writer is still refused while the first holds it,
    and a writer that opened the file before the holder removed it locks a fresh one."""
    busy = lambda pid: O.OutputError(f"busy {pid}")             # noqa: E731
    lock = tmp_path / O.LOCK
    with O.pid_lock(lock, busy):
        assert lock.read_text() == str(os.getpid())
        stale = os.open(lock, os.O_RDWR)                       # opened now, locked after the holder is gone
        with pytest.raises(O.OutputError, match=f"busy {os.getpid()}"):
            with O.pid_lock(lock, busy):
                pass
    assert not lock.exists()
    with O.pid_lock(lock, busy):
        import fcntl
        fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)      # the removed file's lock is nobody's
        assert lock.exists() and os.fstat(stale).st_ino != os.stat(lock).st_ino
    os.close(stale)
    assert not lock.exists()


def test_reduce_into_the_logs_folder_never_counts_rounds_twice(logs, tmp_path):
    stats = logs / "stats.parquet"
    cli("glance_law.reduce", [logs, "--out", stats]).expect_ok()
    n = pq.read_metadata(logs / "rounds-a.parquet").num_rows
    # the second and third runs: the reduction is among the inputs now, so it is not replaced ...
    for _ in range(2):
        cli("glance_law.reduce", [logs, "--out", stats]).expect_refusal("read as an input")
    # ... and fitting the folder (rounds + their reduction) is refused, not counted twice
    cli("glance_law.fit", [logs]).expect_refusal("counted twice")
    other = tmp_path / "elsewhere.parquet"
    cli("glance_law.reduce", [logs / "rounds-a.parquet", stats, "--out", other]).expect_refusal("counted twice")
    # a copy of the rounds file under another name is recognised too (rows, run metadata, content)
    cli("glance_law.reduce", [logs / "rounds-a.parquet", "--out", other]).expect_ok()
    cli("glance_law.fit", [stats, other]).expect_refusal()
    # the reduction alone fits the rounds once
    from glance_law.scale.reduce import read_reduced
    assert read_reduced(stats).info["rounds_read"] == n


def test_renamed_copies_of_a_rounds_file_are_one_file(logs, tmp_path):
    """Issue 36.2: a reduction is matched to its rounds by content (rows, run metadata and the Parquet
    footer's statistics), not by name: a copy renamed or moved beside a reduction of the original was
    counted twice by fit and reduce. Two different parts with equal rows and one run document
    (written in the same second) still merge, each counted once."""
    a = logs / "rounds-a.parquet"
    n = pq.read_metadata(a).num_rows
    ren, other = tmp_path / "ren", tmp_path / "other"
    ren.mkdir()
    shutil.copy(a, ren / "rounds-zz.parquet")
    x = other / "x.parquet"
    cli("glance_law.reduce", [a, "--out", x]).expect_ok()
    before = {p: _sha(p) for p in (a, ren / "rounds-zz.parquet", x)}
    for module in ("glance_law.fit", "glance_law.reduce"):
        extra = ["--out", tmp_path / "y.parquet"] if module == "glance_law.reduce" else []
        cli(module, [ren, x, *extra]).expect_refusal("x.parquet", "rounds-zz.parquet", "copy of rounds-a.parquet",
                                                     "counted twice")
    # two reductions of the two names: one rounds file reduced twice
    z = other / "z.parquet"
    cli("glance_law.reduce", [ren, "--out", z]).expect_ok()
    cli("glance_law.fit", [other]).expect_refusal("both reduce", "counted twice")
    # the same name in another folder (moved) is the same file too
    moved = tmp_path / "moved" / "rounds-a.parquet"
    moved.parent.mkdir()
    shutil.copy(a, moved)
    cli("glance_law.fit", [moved.parent, x]).expect_refusal("is a reduction of", "counted twice")
    assert not (tmp_path / "y.parquet").exists()
    assert {p: _sha(p) for p in before} == before
    # distinct parts: equal rows, one run document, other rounds -> merged, every round counted once
    run = {"tool": "glance-log", "created_at": "2026-12-07T00:00:00+00:00"}
    fr = _rounds(seed=3)
    half = len(fr) // 2
    parts = tmp_path / "parts"
    write_table(fr.iloc[:half], parts / "rounds-0.parquet", run=run)
    write_table(fr.iloc[half:2 * half], parts / "rounds-1.parquet", run=run)
    reds = [tmp_path / f"red{i}" / "r.parquet" for i in range(2)]
    for i, r in enumerate(reds):
        cli("glance_law.reduce", [parts / f"rounds-{i}.parquet", "--out", r]).expect_ok()
    from glance_law.scale.engines import reduce_logs
    assert reduce_logs([parts / "rounds-0.parquet", reds[1]]).rounds == 2 * half
    assert reduce_logs(reds).rounds == 2 * half
    res = cli("glance_law.fit", [*reds, "--format", "json"]).expect_ok()
    assert n > 0 and f'"rounds": {2 * half}' in res.stdout.replace('"rounds":{', '"rounds": {')


# --------------------------------------------------------------------------- ingest

def _same_stem_sources(tmp_path) -> tuple[Path, Path]:
    """Two different answer files whose imports get the same file stem (same folder and file name)."""
    a, b = tmp_path / "r1" / "a" / "x.jsonl.gz", tmp_path / "r2" / "a" / "x.jsonl.gz"
    a.parent.mkdir(parents=True)
    b.parent.mkdir(parents=True)
    shutil.copy(SPEC, a)
    shutil.copy(MEDUSA, b)
    return a, b


def _rows(folder) -> int:
    return len(read_logs(folder).frame)


def test_ingest_never_replaces_another_sources_import(tmp_path):
    a, b = _same_stem_sources(tmp_path)
    out = tmp_path / "logs"
    cli("glance_law.ingest", ["auto", a, "--out", out]).expect_ok()
    files = sorted(p.name for p in out.glob("*.parquet"))
    n = _rows(out)
    assert n == 2381
    cli("glance_law.ingest", ["auto", b, "--out", out]).expect_refusal("would replace it")
    assert _rows(out) == n and sorted(p.name for p in out.glob("*.parquet")) == files
    cli("glance_law.ingest", ["auto", a, "--out", out]).expect_ok()          # a rerun of the same source
    assert _rows(out) == n and not (out / O.INCOMPLETE).exists()


def test_concurrent_ingests_never_both_succeed(tmp_path):
    a, b = _same_stem_sources(tmp_path)
    out = tmp_path / "logs"
    procs = [subprocess.Popen([sys.executable, "-m", "glance_law.ingest", "auto", str(src), "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
             for src in (a, b)]
    res = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    codes = sorted(rc for rc, _ in res)
    assert codes == [0, 2], res
    err = next(e for rc, e in res if rc == 2)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    winner = (a, b)[[rc for rc, _ in res].index(0)]
    assert _rows(out) == (2381 if winner == a else 958)


def test_killed_ingest_is_refused_by_fit_and_a_rerun_completes(tmp_path):
    src = tmp_path / "answers.jsonl.gz"
    shutil.copy(SPEC, src)
    out = tmp_path / "logs"
    p = _child(f"""
        import os, signal
        import glance_law.data.io as gio
        real = gio.write_table
        def write_table(*a, **k):
            real(*a, **k)
            os.kill(os.getpid(), signal.SIGKILL)      # killed after its first file (rounds, no prompts)
        gio.write_table = write_table
        from glance_law.cli.ingest import main
        main(["auto", {str(src)!r}, "--out", {str(out)!r}])
    """)
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert len(list(out.glob("*.parquet"))) == 1 and (out / O.INCOMPLETE).exists()
    cli("glance_law.fit", [out]).expect_refusal("unfinished", "INCOMPLETE")
    cli("glance_law.reduce", [out, "--out", tmp_path / "s.parquet"]).expect_refusal("unfinished")
    cli("glance_law.ingest", ["auto", src, "--out", out]).expect_ok()
    assert not (out / O.INCOMPLETE).exists() and len(list(out.glob("*.parquet"))) == 2
    assert _rows(out) == 2381
    assert len(read_logs(out, "prompts").frame) == 3


def test_ingest_refuses_an_output_holding_its_input_or_a_file(tmp_path):
    src = tmp_path / "in" / "answers.jsonl.gz"
    src.parent.mkdir()
    shutil.copy(MEDUSA, src)
    cli("glance_law.ingest", ["auto", src, "--out", src.parent]).expect_refusal("holds the input")
    cli("glance_law.ingest", ["auto", src, "--out", src]).expect_refusal("not a folder")
    assert sorted(p.name for p in src.parent.iterdir()) == ["answers.jsonl.gz"]


# --------------------------------------------------------------------------- store URIs, links

@pytest.mark.parametrize("module,args,out", [
    ("glance_law.ingest", ["auto", str(MEDUSA)], "s3:/KEY:SECRET@bucket/logs"),
    ("glance_law.ingest", ["auto", str(MEDUSA)], "nosuchscheme://bucket/x"),
    ("glance_law.reduce", [], "s3:/KEY:SECRET@bucket/x.parquet"),
    ("glance_law.report", ["--only", "law"], "gs:bucket/app"),
    ("glance_law.policy", POLICY, "abfs:/container/p.json"),
    ("glance_law.fit", [], "nosuchscheme://bucket/x"),
])
def test_store_lookalikes_never_make_a_local_folder(tmp_path, logs, module, args, out):
    args = args if module == "glance_law.ingest" else [logs, *args]
    line = cli(module, [*args, "--out", out], cwd=tmp_path).expect_refusal()
    assert "SECRET" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]       # no folder named s3: or gs: or nosuchscheme:


def test_report_to_a_store_is_refused_in_one_line(tmp_path, logs):
    cli("glance_law.report", [logs, "--out", "gs://bucket/app"], cwd=tmp_path).expect_refusal("local folder")


def test_policy_and_width_plot_never_write_through_a_link(tmp_path, logs):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "policy.json"
    link.symlink_to(victim)
    cli("glance_law.policy", [logs, *POLICY, "--out", link]).expect_refusal("symbolic link")
    plot = tmp_path / "pareto.png"
    plot.symlink_to(victim)
    cli("glance_law.fit", [logs, "--width", "--width-plot", plot]).expect_refusal("symbolic link")
    assert victim.read_text() == "precious\n" and link.is_symlink() and plot.is_symlink()


def test_width_plot_goes_through_the_writer(tmp_path):
    from glance_law.simulate import simulate_tree_rounds
    logs = tmp_path / "tree"
    write_table(simulate_tree_rounds(n_prompts=6, rounds_per_prompt=(8, 12), seed=7), logs / "a.parquet")
    plot = tmp_path / "fig" / "pareto.png"
    cli("glance_law.fit", [logs, "--width", "--budgets", "7,15", "--width-bootstrap", "0",
                               "--width-plot", plot]).expect_ok()
    assert plot.read_bytes()[:4] == b"\x89PNG" and not [p for p in plot.parent.iterdir() if p.name.startswith(".")]


# --------------------------------------------------------------------------- report folders

def test_report_killed_during_its_first_run_can_be_rerun(tmp_path, logs):
    out = tmp_path / "app"
    p = _child(f"""
        import os, signal
        import glance_law.cli.report as R
        real = R.run_section
        def run_section(*a, **k):
            entry = real(*a, **k)
            os.kill(os.getpid(), signal.SIGKILL)     # killed after its first section's files
        R.run_section = run_section
        R.main([{str(logs)!r}, "--out", {str(out)!r}, "--quiet", "--jobs", "1", "--only", "summary,law"])
    """)
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert (out / O.INCOMPLETE).exists() and not (out / "manifest.json").exists()
    assert list((out / "tables").iterdir())
    cli("glance_law.report", [logs, "--out", out, "--quiet", "--jobs", "1", "--only", "summary,law"]).expect_ok()
    assert (out / "manifest.json").exists() and not (out / O.INCOMPLETE).exists()
    # a folder with other content and no manifest is still refused
    other = tmp_path / "other"
    other.mkdir()
    (other / "mine.txt").write_text("x")
    cli("glance_law.report", [logs, "--out", other, "--only", "law"]).expect_refusal("not empty")


def test_figures_of_drafters_differing_in_replaced_characters_do_not_collide():
    stems = {O.safe_stem(n) for n in ("x/y", "x_y", "x y", "x:y", ".x_y", "x_y-")}
    assert len(stems) == 6
    assert O.safe_stem("block") == "block" and O.safe_stem("x_y") == "x_y"
    assert all(O.check_output_path(f"figures/{s}.png") is None for s in stems)


# --------------------------------------------------------------------------- full disk, read-only

def _mount_ns_ok() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        d = Path(os.environ.get("TMPDIR", "/tmp"))
        r = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {d}"],
                           capture_output=True, timeout=20)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_mount = pytest.mark.skipif(not _mount_ns_ok(), reason="no private mount namespace (unshare -m) here")


def _in_tmpfs(mnt: Path, setup: str, commands: list[list], after: str = "") -> list[tuple[int, str]]:
    """Mount a 256 KiB tmpfs at ``mnt`` in a private mount namespace, run ``setup`` (shell), then each
    command (``python -m ...``), then ``after``; returns (exit code, stderr) per command."""
    mnt.mkdir(exist_ok=True)
    lines = [f"mount -t tmpfs -o size=256k tmpfs {mnt}", f"cd {mnt}", setup]
    for i, cmd in enumerate(commands):
        argv = " ".join(f"'{a}'" for a in map(str, cmd))
        lines.append(f"{sys.executable} -m {argv} >/dev/null 2>{mnt.parent}/err{i}; echo $? > {mnt.parent}/rc{i}")
    lines.append(after)
    r = subprocess.run(["unshare", "-m", "sh", "-c", "\n".join(lines)], capture_output=True, text=True,
                       timeout=300, env=_env())
    assert r.returncode == 0, r.stderr
    return [(int((mnt.parent / f"rc{i}").read_text()), (mnt.parent / f"err{i}").read_text())
            for i in range(len(commands))]


def _one_line(rc_err, *words):
    rc, err = rc_err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, rc_err
    assert all(w in err for w in words), rc_err


@needs_mount
def test_full_disk_leaves_the_previous_output_intact(tmp_path, logs):
    mnt = tmp_path / "disk"
    prev = '{"previous": "policy"}'
    setup = (f"printf '%s' '{prev}' > p.json; cp {logs}/rounds-a.parquet prev.parquet; cp prev.parquet r.parquet; "
             "mkdir ing; head -c 1M /dev/zero > fill 2>/dev/null || true")
    after = (f"cat p.json > {tmp_path}/p.after; cmp -s r.parquet prev.parquet && echo same > {tmp_path}/r.after; "
             f"ls -A ing > {tmp_path}/ing.after; ls -A > {tmp_path}/top.after")
    res = _in_tmpfs(mnt, setup, [["glance_law.policy", logs, *POLICY, "--out", mnt / "p.json"],
                                 ["glance_law.reduce", logs, "--out", mnt / "r.parquet"],
                                 ["glance_law.ingest", "auto", SPEC, "--out", mnt / "ing"],
                                 ["glance_law.ingest", "auto", SPEC, "--out", mnt / "new"],
                                 ["glance_law.report", logs, "--only", "law", "--out", mnt / "ing"],
                                 ["glance_law.fit", logs, "--out", mnt / "law.txt"]], after)
    for r in res:
        _one_line(r, "no space left")
    assert (tmp_path / "p.after").read_text() == prev and (tmp_path / "r.after").read_text() == "same\n"
    # issue 36.7: no .glance-write.lock left in the folder, no new folder left behind
    assert (tmp_path / "ing.after").read_text() == ""
    assert sorted((tmp_path / "top.after").read_text().split()) == ["fill", "ing", "p.json", "prev.parquet",
                                                                    "r.parquet"]


@needs_mount
def test_read_only_output_folder_is_one_line(tmp_path, logs):
    mnt = tmp_path / "ro"
    setup = "mkdir app ing; mount -o remount,ro ."
    res = _in_tmpfs(mnt, setup, [["glance_law.policy", logs, *POLICY, "--out", mnt / "p.json"],
                                 ["glance_law.reduce", logs, "--out", mnt / "r.parquet"],
                                 ["glance_law.ingest", "auto", MEDUSA, "--out", mnt / "ing"],
                                 ["glance_law.report", logs, "--only", "law", "--out", mnt / "app"],
                                 ["glance_law.fit", logs, "--out", mnt / "sub" / "law.txt"]])
    for r in res:
        _one_line(r, "read-only")


def test_enospc_in_process_keeps_the_previous_file(tmp_path, monkeypatch):
    """The writer's own path (no mount needed): a write that fails with ENOSPC half-way."""
    target = tmp_path / "t.parquet"
    write_table(_rounds(1), target)
    before = _sha(target)
    real = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def write(self, b):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()
            return False

    monkeypatch.setattr(O.os, "fdopen", lambda fd, mode="r", *a, **k: Full(real(fd, mode, *a, **k)))
    with pytest.raises(O.OutputError, match="no space left.*previous file there is unchanged"):
        write_table(_rounds(2), target)
    with pytest.raises(O.OutputError, match="no space left.*nothing was written"):
        O.write_file(tmp_path / "new.json", "{}")
    monkeypatch.undo()
    assert _sha(target) == before and sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


# --------------------------------------------------------------------------- temporary files, checksums

def test_stale_temporary_files_of_dead_writers_are_cleaned(tmp_path, logs):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    dead = O.temp_name("law.txt").replace(f"-{os.getpid()}-", f"-{p.pid}-")
    live = O.temp_name("law.txt")                       # this process: alive, so kept
    foreign = ".law.txt.1234.tmp"                        # not a name this writer makes: kept
    for name in (dead, live, foreign):
        (tmp_path / name).write_text("half")
    run_cli("glance_law.fit", [logs, "--out", tmp_path / "law.txt"]).expect_ok()      # a writer of another pid
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert left == sorted([live, foreign])


def test_flipped_byte_in_a_data_page_is_refused(tmp_path):
    f = write_table(_rounds(3, n_prompts=20), tmp_path / "logs" / "rounds-a.parquet")
    md = pq.read_metadata(f)
    assert md.row_group(0).column(0).statistics is not None
    col = next(md.row_group(0).column(i) for i in range(md.num_columns)
               if md.row_group(0).column(i).path_in_schema == "root_entropy")
    start = col.data_page_offset
    end = (col.dictionary_page_offset or col.data_page_offset) + col.total_compressed_size
    data = bytearray(f.read_bytes())
    data[(start + end) // 2] ^= 0x01                     # inside the data page, after its header
    f.write_bytes(bytes(data))
    line = cli("glance_law.fit", [f]).expect_refusal("could not be read")
    assert "checksum" in line.lower() or "crc" in line.lower()
    with pytest.raises(LogError, match="(?i)checksum|crc"):
        read_logs(f)


def test_check_output_refuses_links_inputs_and_lookalikes(tmp_path):
    a = write_table(_rounds(), tmp_path / "a.parquet")
    with pytest.raises(O.OutputError, match="is the input"):
        O.check_output(tmp_path / "." / "a.parquet", [str(a)])
    with pytest.raises(O.OutputError, match="is the input"):
        O.check_output(a, [str(tmp_path / "*.parquet")])
    (tmp_path / "l.parquet").symlink_to(a)
    with pytest.raises(O.OutputError, match="symbolic link"):
        O.check_output(tmp_path / "l.parquet", [])
    with pytest.raises(O.OutputError, match="lost a slash"):
        O.check_output("abfs:container/x", [])
    with pytest.raises(O.OutputError, match="is a folder"):
        O.check_output(tmp_path, [])
    assert O.check_output(tmp_path / "new.parquet", [str(a)]) == tmp_path / "new.parquet"
    assert O.check_output("s3://bucket/x.parquet", []) == "s3://bucket/x.parquet"


def test_glance_log_out_is_checked_before_the_model_loads(tmp_path, capsys):
    pytest.importorskip("torch")
    from glance_log.cli import main
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "logs"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    for out, words in ((link, "symbolic link"), (victim, "not a folder"), ("s3:/bucket/logs", "lost a slash")):
        assert main(["--task", "docvqa", "--n", "1", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
    assert victim.read_text() == "precious\n" and not (tmp_path / "elsewhere").exists()
    assert not (Path.cwd() / "s3:").exists()


def test_report_rerun_never_inlines_a_kept_table_through_a_link(tmp_path, logs):
    import json
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET\n")
    out = tmp_path / "app"
    cli("glance_law.report", [logs, "--out", out, "--quiet", "--only", "law,summary"]).expect_ok()
    kept = [o for e in json.loads((out / "manifest.json").read_text())["sections"] if e["name"] == "summary"
            for o in e["outputs"] if o.endswith(".md")]
    assert kept
    for rel in kept:
        (out / rel).unlink()
        (out / rel).symlink_to(secret)                # planted: the kept section's table now points outside
    def nothing_inlined(res):
        assert "TOPSECRET" not in (out / "index.md").read_text() and "TOPSECRET" not in res.stdout + res.stderr
    cli("glance_law.report", [logs, "--out", out, "--quiet", "--only", "law"]).expect_handled(nothing_inlined)
    assert "TOPSECRET" not in (out / "index.md").read_text() and secret.read_text() == "TOPSECRET\n"


def test_ingest_into_a_store_goes_through_the_store_layer(tmp_path):
    pytest.importorskip("fsspec")
    from glance_law.data import uri
    out = "memory://glance-outpath/ing"
    cli("glance_law.ingest", ["auto", MEDUSA, "--out", out], cwd=tmp_path).expect_ok()
    names = sorted(uri.basename(f) for f in uri.list_prefix(out + "/"))
    assert len(names) == 2 and names[0].startswith("prompts-") and names[1].startswith("rounds-")
    assert len(read_logs(out + "/").frame) == 958 and O.incomplete_marker(out) is None
    assert list(tmp_path.iterdir()) == []                  # nothing local
    uri.put_atomic(uri.join(out, O.INCOMPLETE), b"killed")  # as a killed ingest leaves it
    with pytest.raises(LogError, match="unfinished"):
        read_logs(out + "/")
    cli("glance_law.ingest", ["auto", MEDUSA, "--out", out], cwd=tmp_path).expect_ok()   # the rerun completes it
    assert O.incomplete_marker(out) is None and len(read_logs(out + "/").frame) == 958
