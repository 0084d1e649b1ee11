"""Run one framework's measurement in its own process.

Each framework measures in a fresh process (see ``context``): its thread pools, allocators and JIT caches
cannot slow down the next framework, its thread count is set in the environment before any
library starts its pool, and a segfault, a hang or runaway memory is recorded as that framework's
failure while the parent keeps every other framework's result. The parent samples the worker's
resident memory in the background (the peak is reported) and kills it past the memory limit or
the timeout, checking both on every turn of its loop; a worker dies with its parent.

The poll cannot stop an allocation faster than its 50 ms turn (one array of 30 GiB), so a CPU
worker also runs under a hard limit the kernel enforces (``RLIMIT_DATA``: its private writable
memory; the address-space limit would not do, torch's and TVM's reserved address space is 3-4x
what they use). Private writable memory runs ahead of resident memory by what is mapped but not
touched: 0.48 GiB in a worker that has only imported torch and TVM (measured), so the hard limit
is the memory limit plus half of it, at least 1 GiB. The poll stays the precise limit and the
kernel the backstop; an allocation the kernel refuses is reported as the framework's
out-of-memory failure. GPU workers get no hard limit: the CUDA driver maps memory of its own.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tvmbench.errors import UserError, headline

Progress = Callable[[str], None]


@dataclass
class Outcome:
    ok: bool
    value: Any = None
    error: dict[str, Any] = field(default_factory=dict)  # type, message, kind, traceback
    peak_rss_bytes: int = 0  # the whole worker's peak: loading and compiling included
    wall_s: float = 0.0
    peak_gpu_bytes: int | None = None  # device memory held by the worker, when sampled (see gpu_memory)
    peak_rss_marked_bytes: int | None = None  # the peak from the ``mark`` message on (e.g. inference only)


def describe_exception(e: BaseException) -> dict[str, Any]:
    """A failure as result data: a user mistake (message only) or the framework's failure (the
    line of its message that says what broke, and the traceback for the JSON)."""
    if isinstance(e, UserError):
        return {"kind": "user", "type": type(e).__name__, "message": str(e)}
    return {"kind": "exception", "type": type(e).__name__, "message": headline(e),
            "traceback": traceback.format_exc()}


def _die_with_parent() -> None:
    """Have the kernel kill this worker when its parent dies (Linux ``PR_SET_PDEATHSIG``), so a
    ``kill -9`` of tvmbench never leaves a worker running on; if the parent is already gone, go.
    A forked worker's parent is the fork server, which exits as soon as tvmbench is gone."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() == 1:  # adopted by init: the parent died before the signal was armed
        os._exit(1)
    from multiprocessing import forkserver

    # A forked worker holds a copy of the pipe whose end tells the fork server that tvmbench is
    # gone; closed here, or the server would wait for the worker, and the worker for the server.
    alive = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    if alive is not None:  # only set in a worker the fork server made
        with contextlib.suppress(OSError):
            os.close(alive)
        forkserver._forkserver._forkserver_alive_fd = None  # type: ignore[attr-defined]


# scipy.stats: the timer's stopping rule needs it, 0.9 s to import after torch (measured on the
# Zen 1 host), once per worker otherwise.
PRELOAD = ["torch", "torchvision", "tvm", "scipy.stats"]
# Imported after PRELOAD, so that its exit handler runs before theirs (see that module).
SERVER_EXIT = "tvmbench.measure.fork_server_exit"


def context(preloaded: bool = True) -> Any:
    """Where workers come from: forked from a server that has imported torch, torchvision and TVM
    (and scipy.stats, for the timer), or spawned.

    A spawned worker is a new interpreter that imports torch and TVM itself: 6-7 s on the 2-core
    hosts here, most of a small model's run and the larger part of the test suite's time (and
    torchvision 1.2 s more, in each of a point's four workers at once in the zoo sweep). The
    fork server (started on first use) imports them once; each worker is then a fork of that
    pristine process (0.03 s), which has run nothing: no thread pool started, no allocation made,
    no model seen, so a worker is as fresh as a spawned one. Thread counts still hold: PyTorch,
    ONNX Runtime and OpenVINO are given theirs explicitly, and TVM reads ``TVM_NUM_THREADS`` when
    its pool starts, in the worker. Outside Linux, for a worker that must not have torch (a
    package's), or with ``TVMBENCH_WORKERS=spawn`` in the environment (to compare the two:
    ``benchmarks/worker_start.py``), workers are spawned. The server leaves as soon as tvmbench has
    gone (``fork_server_exit``), not a second later."""
    if not preloaded or not sys.platform.startswith("linux") or os.environ.get("TVMBENCH_WORKERS") == "spawn":
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([*PRELOAD, SERVER_EXIT])  # read when the server starts (once per tvmbench process)
    return ctx


def _first_to_go_when_memory_runs_out() -> None:
    """Make this worker the kernel's first choice when the machine runs out of memory, so its OOM
    killer takes the worker (reported as that framework's out-of-memory failure), never tvmbench
    with every other framework's result. Raising one's own score needs no privilege."""
    with contextlib.suppress(OSError):
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")


def hard_limit(memory_limit_bytes: int) -> int:
    """The kernel-enforced limit of a worker whose resident memory is polled against ``memory_limit_bytes``."""
    return memory_limit_bytes + max(memory_limit_bytes // 2, 2**30)


def _limit_data(limit: int | None) -> None:
    if limit:
        import resource

        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _refused_allocation(error: dict[str, Any]) -> bool:
    """A worker's exception that is an allocation the kernel refused (Python, numpy, torch, C++)."""
    text = f"{error.get('type')}: {error.get('message')}"
    return error.get("type") == "MemoryError" or any(
        s in text for s in ("can't allocate memory", "Cannot allocate memory", "bad_alloc", "Unable to allocate"))


def _redirect_output(path: str | None) -> None:
    """The worker's own stdout and stderr (file descriptors 1 and 2, so native libraries' prints and
    crash dumps too) into ``path``: nothing a framework prints reaches a ``--json`` document on
    stdout or the user's terminal, and a crash's dump is kept for the report."""
    if path is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _child(conn: Any, fn: Callable[[Any, Progress], Any], arg: Any, env: dict[str, str],
           data_limit: int | None = None, output: str | None = None) -> None:
    _die_with_parent()
    _redirect_output(output)
    _first_to_go_when_memory_runs_out()
    _limit_data(data_limit)
    _thread_lock_for_progress_bars()
    os.environ.clear()
    os.environ.update(env)
    try:
        value = fn(arg, lambda msg: conn.send(("progress", msg)))
        conn.send(("ok", value))
    except BaseException as e:
        conn.send(("error", describe_exception(e)))
    finally:
        conn.close()


def _thread_lock_for_progress_bars() -> None:
    """tqdm guards its bars with a multiprocessing lock, a named semaphore in /dev/shm, made on
    first use (torch.export's graph interpreter draws a bar: every worker that imports a model).
    A worker stopped by a signal (Ctrl-C, a timeout, the memory limit) never unlinks it: 90 such
    files had piled up on the development machine, and Python's resource tracker printed a
    "leaked semaphore" warning after every interrupted command. A worker draws from one process,
    so a thread lock serves."""
    try:
        import tqdm
    except ImportError:
        return
    tqdm.tqdm.set_lock(threading.RLock())


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in _tree(proc):
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


@contextlib.contextmanager
def _main_script_hidden() -> Iterator[None]:
    """Start workers without re-running the user's script in them.

    A spawned child normally runs the parent's ``__main__`` script again (as ``__mp_main__``), so
    a plain script calling ``tvmbench.run(...)`` at top level, without an
    ``if __name__ == "__main__":`` guard, would call it again in every worker, which
    multiprocessing refuses. The workers need nothing from the script (their functions and jobs
    are tvmbench's, pickled by reference), so while a worker starts, ``__main__`` shows no file,
    as in an interactive session, and the child skips it."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or getattr(main, "__spec__", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def run_isolated(fn: Callable[[Any, Progress], Any], arg: Any, *, timeout_s: float, memory_limit_bytes: int,
                 env: dict[str, str] | None = None, on_progress: Progress | None = None,
                 poll_s: float = 0.05, gpu_sampler: Any | None = None, mark: str | None = None,
                 preloaded: bool = True, output: Path | None = None) -> Outcome:
    """Call ``fn(arg, progress)`` in a fresh worker process and return what happened; with
    ``preloaded=False`` a spawned one, in which torch is not imported (see ``context``).

    ``fn`` must be a module-level function (it is pickled by reference). With ``gpu_sampler``
    (a GpuMemorySampler), the peak device memory of the worker's processes is recorded too. From
    the progress message ``mark`` on, the peak resident memory is also kept on its own
    (``peak_rss_marked_bytes``): the worker's memory during inference, without its compile.
    With ``output``, what the worker prints goes to that file, named in the error when the worker
    fails (and deleted when it succeeds); without it, the worker writes to this process's terminal.
    """
    ctx = context(preloaded)
    recv_conn, send_conn = ctx.Pipe(duplex=False)
    limit = hard_limit(memory_limit_bytes) if gpu_sampler is None else None
    # The whole environment as it is now, as spawn passes it: a forked worker would otherwise
    # see the server's, from when it started.
    proc = ctx.Process(target=_child, args=(send_conn, fn, arg, {**os.environ, **(env or {})}, limit,
                                            None if output is None else str(output)), daemon=True)
    start = time.monotonic()
    with _main_script_hidden():
        proc.start()
    send_conn.close()
    watch = _Watch(psutil.Process(proc.pid), gpu_sampler, mark)
    try:
        outcome = _supervise(proc, recv_conn, watch, start, timeout_s=timeout_s,
                             memory_limit_bytes=memory_limit_bytes, on_progress=on_progress, poll_s=poll_s)
    except BaseException:
        _kill(proc)  # Ctrl-C: do not leave a worker running
        raise
    proc.join(timeout=10)
    if proc.is_alive():
        _kill(proc)
    if outcome is None:
        outcome = _died(proc.exitcode, watch.peak)
    if not outcome.ok and limit and outcome.error.get("kind") == "exception" and _refused_allocation(outcome.error):
        outcome.error = _refused_at_limit(outcome.error, limit, watch.peak)
    _keep_output(outcome, output)
    outcome.peak_rss_bytes = max(watch.peak, outcome.peak_rss_bytes)
    outcome.peak_rss_marked_bytes = watch.marked or None
    outcome.peak_gpu_bytes = watch.peak_gpu
    outcome.wall_s = time.monotonic() - start
    recv_conn.close()
    return outcome


class _Watch:
    """The peaks of a worker's process tree: resident memory, resident memory from the progress
    message ``mark`` on, and device memory (with a GPU sampler)."""

    def __init__(self, ps: psutil.Process, gpu_sampler: Any | None, mark: str | None) -> None:
        self.ps, self.gpu_sampler, self.mark = ps, gpu_sampler, mark
        self.peak = 0
        self.marked: int | None = None
        self.peak_gpu: int | None = None

    def message(self, payload: Any) -> None:
        if payload == self.mark:
            self.marked = 0

    def sample(self) -> None:
        rss = _tree_rss(self.ps)
        self.peak = max(self.peak, rss)
        if self.marked is not None:
            self.marked = max(self.marked, rss)
        if self.gpu_sampler is not None:
            used = self.gpu_sampler.used_by({p.pid for p in _tree(self.ps)})
            if used is not None:
                self.peak_gpu = max(self.peak_gpu or 0, used)


def _supervise(proc: Any, recv_conn: Any, watch: _Watch, start: float, *, timeout_s: float,
               memory_limit_bytes: int, on_progress: Progress | None, poll_s: float) -> Outcome | None:
    """Pass the worker's progress on and enforce its limits until it answers (its outcome), is
    killed over a limit (that outcome), or dies without answering (None: its exit code says how)."""
    while True:
        if recv_conn.poll(poll_s):
            try:
                kind, payload = recv_conn.recv()
            except (EOFError, OSError):
                return None  # the worker died; its exit code says how
            if kind != "progress":
                return Outcome(ok=kind == "ok", value=payload if kind == "ok" else None,
                               error=payload if kind == "error" else {})
            watch.message(payload)
            if on_progress:
                on_progress(payload)
        # the limits are checked on every turn, messages or not (a chatty worker is no exception)
        watch.sample()
        if watch.peak > memory_limit_bytes:
            _kill(proc)
            return Outcome(ok=False, error={
                "kind": "oom", "type": "MemoryLimitExceeded",
                "message": f"out of memory: the worker went over its limit of {memory_limit_bytes / 2**30:.1f} "
                           "GiB (raise it with --memory-limit, or use a smaller batch or sequence)"})
        if time.monotonic() - start > timeout_s:
            _kill(proc)
            return Outcome(ok=False, error={
                "kind": "timeout", "type": "Timeout",
                "message": f"timed out after {timeout_s:g} s (raise it with --timeout)"})
        if not proc.is_alive() and not recv_conn.poll(0):
            return None


def _died(code: int | None, peak: int) -> Outcome:
    """The outcome of a worker that ended without answering, from its exit code."""
    if code == -signal.SIGKILL:  # not ours (we set an outcome when we kill): most likely the OOM killer
        return Outcome(ok=False, error={
            "kind": "oom", "type": "MemoryLimitExceeded",
            "message": f"the worker was killed by SIGKILL, most likely by the kernel's out-of-memory killer "
                       f"(it had used up to {peak / 2**30:.1f} GiB; use a smaller batch or sequence, or lower "
                       "--memory-limit so tvmbench stops it first)"})
    how = f"crashed with {_signal_name(code)}" if code is not None and code < 0 else f"exited with code {code}"
    return Outcome(ok=False, error={"kind": "crash", "type": "WorkerCrashed",
                                    "message": f"the worker process {how} (a crash inside the framework)"})


def _refused_at_limit(error: dict[str, Any], limit: int, peak: int) -> dict[str, Any]:
    """An allocation the kernel refused at the worker's hard limit, as an out-of-memory error.

    The kernel refuses one request for more than is left under the limit, whatever the worker
    holds: torchvision's vit_b_16 hit TVM's ConvertLayout asking for an impossible size right
    after the import, so the message says what was held and names both causes."""
    return {**error, "kind": "oom", "type": "MemoryLimitExceeded",
            "message": f"out of memory: an allocation failed at the worker's hard limit of "
                       f"{limit / 2**30:.1f} GiB with {peak / 2**30:.1f} GiB resident "
                       f"({error['message']}): this size needs more in one piece (raise "
                       "--memory-limit, or use a smaller batch or sequence), or, with little "
                       "resident, the framework asked for an impossible size (a bug it has with this "
                       "model)"}


def output_file(what: str) -> Path:
    """A new file for one worker's output, under the cache's ``logs`` folder."""
    from tvmbench.paths import cache_dir

    folder = cache_dir("logs")
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f"{time.strftime('%Y%m%d-%H%M%S')}-{what}-", suffix=".log", dir=folder)
    os.close(fd)
    return Path(name)


def _keep_output(outcome: Outcome, output: Path | None) -> None:
    """A failed worker's output file is named in its error when it holds anything; otherwise gone."""
    if output is None:
        return
    try:
        size = output.stat().st_size
    except OSError:
        return
    if outcome.ok or size == 0:
        output.unlink(missing_ok=True)
    else:
        outcome.error = {**outcome.error, "output": str(output),
                         "message": f"{outcome.error.get('message')} (the worker's output: {output})"}


def _kill(proc: Any) -> None:
    try:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
    except psutil.Error:
        pass
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=5)
