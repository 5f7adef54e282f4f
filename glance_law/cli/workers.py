"""Worker processes that end with their parent.

:func:`process_pool` is the ``ProcessPoolExecutor`` the CLIs run side jobs in (the report's tail
fit): fresh interpreters (``spawn``) whose initializer, :func:`bind_to_parent`, asks Linux to kill
the worker when the process that started it dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, through
ctypes) and, on every platform, starts a watchdog thread that ends the worker within a second of
its parent's pid changing (the parent killed, even by SIGKILL, reparents the worker). A parent
that stops on an exception or a signal (Ctrl-C, SIGTERM: see :func:`terminate_on_signals`) ends its
workers with :func:`stop` instead of waiting for their jobs.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

__all__ = ["bind_to_parent", "process_pool", "stop", "terminate_on_signals"]

PR_SET_PDEATHSIG = 1
WATCH_S = 0.5


def bind_to_parent(parent: int) -> None:
    """Worker initializer: end this process when ``parent`` (the pid that started it) dies."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):   # no prctl: the watchdog below still ends the worker
            pass
    if os.getppid() != parent:              # the parent died before the prctl took effect
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), name="parent-watchdog", daemon=True).start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    os._exit(1)


def process_pool(workers: int):
    """A ``spawn`` process pool whose workers end with this process (:func:`bind_to_parent`)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=bind_to_parent, initargs=(os.getpid(),))


def stop(executor, wait: bool) -> None:
    """Shut ``executor`` down: after its jobs (``wait``), or now, terminating its workers."""
    if wait:
        executor.shutdown(wait=True, cancel_futures=True)
        return
    procs = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        with contextlib.suppress(Exception):
            p.terminate()
    for p in procs:
        with contextlib.suppress(Exception):
            p.join(2.0)


@contextlib.contextmanager
def terminate_on_signals():
    """While inside: SIGTERM raises SystemExit (143) in the main thread, so the caller's cleanup
    (:func:`stop`) runs; SIGINT already raises KeyboardInterrupt. Elsewhere than the main thread, a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
