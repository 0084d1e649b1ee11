"""Workers that crash, hang or eat memory are reported; the parent survives."""

import ctypes
import os
import time
from pathlib import Path

import psutil
import pytest

from tvmbench.errors import UserError
from tvmbench.measure.isolation import hard_limit, run_isolated

GiB = 2**30


def works(arg, progress):
    progress("halfway")
    return {"answer": arg * 2, "threads": os.environ.get("TVM_NUM_THREADS")}


def segfaults(arg, progress):
    ctypes.string_at(0)


def hangs(arg, progress):
    time.sleep(3600)


def eats_memory(arg, progress):
    blocks = []
    while True:
        blocks.append(bytearray(64 * 2**20))  # bytearray is zero-filled: the pages are touched
        time.sleep(0.005)


def draws_a_progress_bar_then_is_killed(arg, progress):
    import signal

    import tqdm

    for _ in tqdm.tqdm(range(2), disable=True):  # as torch.export's interpreter does
        pass
    os.kill(os.getpid(), signal.SIGKILL)  # as the memory limit, a timeout or Ctrl-C stop it


def user_mistake(arg, progress):
    raise UserError("framework 'x' needs the package 'y'")


def raises(arg, progress):
    raise RuntimeError("compile failed\nsecond line")


def test_success_returns_the_value_progress_and_environment():
    seen = []
    out = run_isolated(works, 21, timeout_s=60, memory_limit_bytes=8 * GiB, env={"TVM_NUM_THREADS": "3"},
                       on_progress=seen.append)
    assert out.ok and out.value == {"answer": 42, "threads": "3"}
    assert seen == ["halfway"]
    assert out.peak_rss_bytes > 1e6


def test_segfault_is_reported_as_a_crash():
    out = run_isolated(segfaults, None, timeout_s=60, memory_limit_bytes=8 * GiB)
    assert not out.ok and out.error["kind"] == "crash"
    assert "SIGSEGV" in out.error["message"]


def test_hang_is_killed_at_the_timeout():
    t0 = time.monotonic()
    out = run_isolated(hangs, None, timeout_s=3, memory_limit_bytes=8 * GiB)
    assert not out.ok and out.error["kind"] == "timeout"
    assert time.monotonic() - t0 < 30


def test_memory_hog_is_killed_at_the_limit():
    out = run_isolated(eats_memory, None, timeout_s=120, memory_limit_bytes=1 * GiB)
    assert not out.ok and out.error["kind"] == "oom"
    assert "out of memory" in out.error["message"]
    assert out.peak_rss_bytes > 1 * GiB


def allocates_at_once(size, progress):
    import resource

    progress(str(resource.getrlimit(resource.RLIMIT_DATA)[0]))
    return len(bytearray(size))  # one allocation, over the limit, faster than a poll could see


def test_an_allocation_faster_than_the_poll_is_refused_by_the_kernel_and_reported_as_out_of_memory():
    seen = []
    out = run_isolated(allocates_at_once, 4 * GiB, timeout_s=60, memory_limit_bytes=1 * GiB, on_progress=seen.append)
    assert seen == [str(hard_limit(GiB))] and hard_limit(GiB) == 2 * GiB
    assert not out.ok and out.error["kind"] == "oom" and "hard limit of 2.0 GiB" in out.error["message"]
    assert out.peak_rss_bytes < GiB  # refused before a page of it was touched
    assert run_isolated(allocates_at_once, 2**20, timeout_s=60, memory_limit_bytes=1 * GiB).value == 2**20


@pytest.mark.parametrize("fn, kind, text", [(user_mistake, "user", "needs the package"),
                                            (raises, "exception", "compile failed")])
def test_exceptions_are_classified(fn, kind, text):
    out = run_isolated(fn, None, timeout_s=60, memory_limit_bytes=8 * GiB)
    assert not out.ok and out.error["kind"] == kind and text in out.error["message"]
    assert "\n" not in out.error["message"]


def _is_fork_server(proc, parent_pid) -> bool:
    return proc.ppid() == parent_pid and "multiprocessing.forkserver" in " ".join(proc.cmdline())


def _spawned_workers(parent) -> list:
    """The workers under ``parent``: spawned ones, or forks of its fork server (not the server
    itself); zombies and vanished ones skipped."""
    found = []
    for child in parent.children(recursive=True):
        try:
            line = " ".join(child.cmdline())
            if "spawn_main" in line or ("forkserver" in line and not _is_fork_server(child, parent.pid)):
                found.append(child)
        except psutil.Error:
            continue
    return found


def test_terminating_tvmbench_also_ends_its_worker():
    import signal
    import subprocess
    import sys

    import psutil

    proc = subprocess.Popen([sys.executable, "-m", "tvmbench.cli", "run", "--model", "resnet18", "--image-size",
                             "32", "--frameworks", "pytorch", "--runs", "100000", "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    parent = psutil.Process(proc.pid)
    workers = []
    try:
        deadline = time.monotonic() + 120
        while not workers and time.monotonic() < deadline:
            workers = _spawned_workers(parent)
            time.sleep(0.2)
        assert workers, "no worker process started"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "interrupted" in err
        gone, alive = psutil.wait_procs(workers, timeout=10)
        assert not alive
    finally:
        # A failed assertion must not leave a 100000-run benchmark loading the machine for later tests.
        leftovers = workers + (_spawned_workers(parent) if proc.poll() is None else [])
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for child in leftovers:
            try:
                child.kill()
            except psutil.Error:
                pass


def naps(arg, progress):
    time.sleep(arg)
    return os.getpid()


def test_gpu_memory_of_the_worker_is_sampled_by_pid(monkeypatch):
    """NVML is faked here (no GPU on the test machines): the sampler must count only the worker's
    processes and keep the peak."""
    import sys
    import types

    from tvmbench.measure.gpu_memory import GpuMemorySampler

    readings = iter([100, 300, 200] + [50] * 1000)

    class Proc:
        def __init__(self, pid, used):
            self.pid, self.usedGpuMemory = pid, used

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: "gpu0",
        nvmlDeviceGetComputeRunningProcesses=lambda h: [Proc(1, 10**9)] + [
            Proc(p.pid, 10**9 if _is_fork_server(p, os.getpid()) else next(readings))
            for p in psutil.Process().children(recursive=True)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    sampler = GpuMemorySampler()
    assert sampler.available
    out = run_isolated(naps, 1.0, timeout_s=60, memory_limit_bytes=8 * GiB, gpu_sampler=sampler)
    assert out.ok and out.peak_gpu_bytes == 300  # pid 1's and the fork server's gigabytes are not the worker's


def test_without_nvml_gpu_memory_is_not_reported(monkeypatch):
    import sys

    from tvmbench.measure.gpu_memory import GpuMemorySampler

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    sampler = GpuMemorySampler()
    assert not sampler.available and sampler.used_by({os.getpid()}) is None
    out = run_isolated(naps, 0.1, timeout_s=60, memory_limit_bytes=8 * GiB, gpu_sampler=sampler)
    assert out.ok and out.peak_gpu_bytes is None


def chatters_forever(arg, progress):
    while True:  # a progress message far more often than the parent's poll interval
        progress("still here")
        time.sleep(0.001)


def test_a_worker_that_sends_progress_all_the_time_is_still_killed_at_the_timeout():
    t0 = time.monotonic()
    out = run_isolated(chatters_forever, None, timeout_s=2, memory_limit_bytes=8 * GiB)
    assert not out.ok and out.error["kind"] == "timeout"
    assert time.monotonic() - t0 < 20


def reports_pid_and_hangs(arg, progress):
    progress(str(os.getpid()))
    time.sleep(3600)


PARENT = """
import sys
sys.path.insert(0, {tests!r})
from tvmbench.measure.isolation import hard_limit, run_isolated
from test_isolation import reports_pid_and_hangs

run_isolated(reports_pid_and_hangs, None, timeout_s=3600, memory_limit_bytes=8 * 2**30,
             on_progress=lambda pid: print(pid, flush=True))
"""


def test_workers_die_with_their_parent(tmp_path):
    """kill -9 of tvmbench (no chance to clean up) takes its worker with it."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(tests=str(Path(__file__).parent)))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    assert psutil.pid_exists(worker)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and psutil.pid_exists(worker):
        try:
            if psutil.Process(worker).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    alive = psutil.pid_exists(worker) and psutil.Process(worker).status() != psutil.STATUS_ZOMBIE
    assert not alive, "the worker outlived its killed parent"


LEAVES = """
import psutil
from tvmbench.measure import isolation
from test_isolation import works

isolation.PRELOAD = ["slow_exit"]  # stands in for torch and TVM, whose finalizers took 1 s
out = isolation.run_isolated(works, 1, timeout_s=60, memory_limit_bytes=8 * 2**30)
servers = [p.pid for p in psutil.Process().children() if "forkserver" in " ".join(p.cmdline())]
print(out.ok, *servers, flush=True)
"""


def test_the_fork_server_leaves_as_soon_as_tvmbench_has_gone(tmp_path):
    """A run started right after another must not find the first one's fork server still
    finalizing its libraries (it read as other work: "the machine was busy")."""
    import subprocess
    import sys

    (tmp_path / "slow_exit.py").write_text("import atexit, time\natexit.register(time.sleep, 30)\n")
    (tmp_path / "parent.py").write_text(LEAVES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).parent),
                                                        os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")], stdout=subprocess.PIPE, text=True,
                              env=env)
    ok, *servers = parent.stdout.readline().split()
    assert ok == "True" and len(servers) == 1
    server = psutil.Process(int(servers[0]))
    parent.wait(timeout=60)
    try:
        server.wait(timeout=5)  # with its exit handlers run, it would take 30 s
    except psutil.TimeoutExpired:
        server.kill()
        pytest.fail("the fork server was still running 5 s after tvmbench had exited")


def compiles_big_then_infers_small(arg, progress):
    big = bytearray(600 * 2**20)  # "compiling": zero-filled, so its pages are touched
    time.sleep(0.5)
    del big  # a large block goes back to the OS
    progress("first inference")
    time.sleep(0.5)
    return 1


def test_inference_memory_is_kept_apart_from_the_whole_workers_peak():
    out = run_isolated(compiles_big_then_infers_small, None, timeout_s=60, memory_limit_bytes=8 * GiB,
                       mark="first inference")
    assert out.ok and out.peak_rss_bytes > 600 * 2**20
    assert out.peak_rss_marked_bytes is not None and out.peak_rss_marked_bytes < out.peak_rss_bytes - 400 * 2**20


def reads_its_oom_score(arg, progress):
    return int(open("/proc/self/oom_score_adj").read())


def killed_by_sigkill(arg, progress):
    os.kill(os.getpid(), 9)  # what the kernel's OOM killer does


def test_the_oom_killer_takes_the_worker_first_and_a_sigkill_is_reported_as_out_of_memory():
    assert run_isolated(reads_its_oom_score, None, timeout_s=60, memory_limit_bytes=8 * GiB).value == 1000
    out = run_isolated(killed_by_sigkill, None, timeout_s=60, memory_limit_bytes=8 * GiB)
    assert not out.ok and out.error["kind"] == "oom" and "out-of-memory killer" in out.error["message"]


@pytest.mark.serial  # turns and timings: run alone (Makefile)
def test_rounds_measure_the_frameworks_in_lockstep_turns_that_never_overlap():
    """With --rounds, a round's workers are all alive and take quarter-second turns: no turn of
    one framework overlaps a turn of the other (only one computes at a time), the turns
    alternate, and the samples pool over the rounds as before. --no-lockstep (or one round) runs
    them one after the other."""
    from pathlib import Path

    import tvmbench

    mlp = str(Path(__file__).with_name("mlp_model.py")) + ":build"
    result = tvmbench.run(mlp, ["tvm", "pytorch"], "llvm", threads=1, rounds=2, min_time=0.6, max_time=1.0,
                          history=False)  # (the host-state probe on by default with rounds)
    turns = {fw: result.results[fw].lockstep_turns for fw in ("tvm", "pytorch")}
    assert all(r.ok for r in result.results.values()) and all(len(t) >= 4 for t in turns.values()), turns
    spans = sorted((start, end, fw) for fw, ts in turns.items() for start, end, _ in ts)
    for (s1, e1, f1), (s2, e2, f2) in zip(spans, spans[1:], strict=False):
        assert e1 <= s2 + 1e-3, (f1, (s1, e1), f2, (s2, e2))  # one framework at a time
    switches = sum(1 for a, b in zip(spans, spans[1:], strict=False) if a[2] != b[2])
    assert switches >= 4, spans
    assert result.results["tvm"].rounds.count == 2
    # each turn says how many samples it took; they add up, so TVM's speedup pairs adjacent turns
    assert all(sum(n for *_, n in ts) == len(result.results[fw].samples_ms) for fw, ts in turns.items()), turns
    assert result.tvm_speedups["pytorch"].basis.startswith("lockstep turns"), result.tvm_speedups["pytorch"]
    # TVM's workers ran the host-state probe on TVM's pool in their turns, kept apart from the
    # samples; PyTorch's did not (the probe's threads would have competed with its own)
    probed = result.results["tvm"].rounds.probe_turns
    assert result.results["tvm"].info["pool_spin_count"] == "10000"  # TVM's idle spin kept out of PyTorch's turns
    assert len(probed) == 2 and all(probed) and result.results["pytorch"].rounds.probe_turns is None, probed
    from tvmbench.api import run_config
    from tvmbench.models import ModelOptions
    from tvmbench.targets import resolve_target

    def interleaved(**kw):
        return run_config(mlp, ModelOptions(), resolve_target("llvm", gpu_query=lambda: None), ["tvm", "pytorch"],
                          **kw).interleaved()

    assert interleaved(rounds=2) and not interleaved(rounds=2, lockstep=False) and not interleaved(rounds=1)

    def probed(**kw):
        return run_config(mlp, ModelOptions(), resolve_target("llvm", gpu_query=lambda: None), ["tvm"], **kw).probed()

    assert probed(rounds=2) and not probed(rounds=2, probe=False) and not probed(rounds=1)


def test_workers_fork_from_the_preloaded_server_unless_told_to_spawn(monkeypatch):
    from tvmbench.measure.isolation import context

    monkeypatch.delenv("TVMBENCH_WORKERS", raising=False)
    assert context().get_start_method() == "forkserver" and context(preloaded=False).get_start_method() == "spawn"
    monkeypatch.setenv("TVMBENCH_WORKERS", "spawn")
    assert context().get_start_method() == "spawn"


def test_a_worker_stopped_by_a_signal_leaves_no_semaphore_behind():
    """tqdm's bars made a multiprocessing lock (a named semaphore in /dev/shm) in every worker
    that imported a model; a worker killed on a timeout or Ctrl-C never unlinked it."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm on this system")
    before = {p.name for p in shm.glob("sem.*")}
    out = run_isolated(draws_a_progress_bar_then_is_killed, None, timeout_s=60, memory_limit_bytes=8 * GiB)
    assert not out.ok and "SIGKILL" in out.error["message"], out.error
    assert {p.name for p in shm.glob("sem.*")} - before == set()
