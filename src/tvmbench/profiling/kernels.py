"""Per-kernel profile of a TVM-compiled model, measured inside the model.

The model is prepared exactly as ``tvmbench run`` prepares it (same TVM backend, cached library,
databases, weight transforms, bound arguments), then run ``runs`` times with the Relax VM's
instrument hook, which brackets every call the VM makes; the device is synchronised after each
call so a kernel's time is its own. Per kernel the median over runs of its time per inference is
reported. The instrumented runs are slower than plain ones (a Python callback per call), so the
end-to-end median is measured separately, without the hook; what the kernels do not explain
(VM instructions, allocation, the hook itself) is reported as the difference.

Kernel times inside the model are what tuning should be judged by: MetaSchedule measures each
kernel alone, with its inputs and weights hot in cache, which can differ a lot from the kernel's
time between its neighbours.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from tvmbench.backends.base import BackendConfig, Paced, unpaced
from tvmbench.measure.lockstep import Pacer
from tvmbench.measure.peak import percent_of_peak
from tvmbench.measure.stats import paired_ratio_ci
from tvmbench.models import ModelOptions, load_model


@dataclass
class KernelProfile:
    name: str
    kind: str  # conv, matmul, pool, reduction, layout, elementwise, vm (a VM builtin)
    calls: int  # per inference
    ms: float  # all calls of one inference, median over the instrumented runs
    share: float  # of the kernels' total
    mflop: float | None = None  # all calls of one inference
    gflops: float | None = None
    percent_of_peak: float | None = None
    schedule: str | None = None  # "tuning record" or "default" (tvmbench's rules); None for VM builtins
    workload: str | None = None  # structural hash of the tuning record's workload, when one applies
    percent_of_bound: float | None = None  # of the cache-aware roofline's least time (``measure.peak``)
    peak_rate: float = 1.0  # its arithmetic's peak against the FMA peak: 2 for bf16 dot products, 16 on AMX tiles


@dataclass
class ModelProfile:
    model: str
    target: dict[str, Any]
    variant: str  # "tvm" (databases applied) or "tvm_untuned"
    end_to_end_ms: float
    kernels_ms: float
    runs: int
    threads: int
    peak_gflops: float | None
    peak_method: str | None
    database: dict[str, Any] | None
    kernels: list[KernelProfile] = field(default_factory=list)
    bandwidth: dict[str, Any] | None = None  # the roofline's slopes: memory's GB/s and each cache level's

    @property
    def unexplained_ms(self) -> float:
        return self.end_to_end_ms - self.kernels_ms

    def floor_ms(self, k: KernelProfile) -> float | None:
        """The least time any schedule could give kernel ``k`` (all its calls): its FLOPs at the
        machine's FMA peak (or at the fastest kernel's rate, if one beat the peak: measured at
        a slow moment of a shared machine, the peak would make the bound tight, not generous);
        0 for a kernel that counts none (layout, Winograd transforms); None for the VM's own
        work, which no schedule changes, or without a measured peak."""
        if k.kind == "vm" or not self.peak_gflops:
            return None
        peak = max([self.peak_gflops, *(x.gflops / x.peak_rate for x in self.kernels if x.gflops)]) * k.peak_rate
        return (k.mflop or 0.0) * 1e6 / (peak * 1e9) * 1e3

    def ceiling(self) -> Ceiling | None:
        """How much faster any schedule search could make this model: every kernel at its
        ``floor_ms``, the VM's work unchanged (see ``Ceiling``). None without a measured peak."""
        if not self.peak_gflops or self.kernels_ms <= 0:
            return None
        headroom = {k.name: max(0.0, k.ms - floor) for k in self.kernels
                    if (floor := self.floor_ms(k)) is not None}
        saved = sum(headroom.values())
        if saved >= self.kernels_ms:
            return None
        speedup = self.kernels_ms / (self.kernels_ms - saved)
        top = sorted(headroom.items(), key=lambda kv: -kv[1])[:3]
        return Ceiling(speedup, self.end_to_end_ms / speedup, saved, [(n, ms) for n, ms in top if ms > 0])

    def to_json(self) -> dict[str, Any]:
        ceiling = self.ceiling()
        return {**asdict(self), "unexplained_ms": self.unexplained_ms,
                "ceiling": ceiling._asdict() if ceiling else None}


class Ceiling(NamedTuple):
    """The most any schedule of these kernels could gain, end to end.

    Tuning (MetaSchedule, Droplet, grid) only reschedules the kernels a model compiles to: the
    same operators with the same FLOPs. No schedule runs a kernel faster than its FLOPs at the
    machine's measured FMA peak, so with every kernel there, and every kernel that counts no
    FLOPs (copies, layout changes) taking no time at all, the kernels' time falls by
    ``saved_ms``. The bound is generous on purpose (real kernels load and store; nothing reaches
    the peak), so a tuning goal above it cannot be met by search on this machine; what could beat
    it is a different algorithm, layout or fusion: compiler work, not tuning."""

    speedup: float  # end to end, at most
    end_to_end_ms: float  # the end-to-end time at the ceiling
    saved_ms: float  # of the instrumented kernels' time
    headroom: list[tuple[str, float]]  # the kernels with the most ms above their floor, most first


@dataclass(frozen=True)
class ProfileJob:
    model: str
    options: ModelOptions
    backend: BackendConfig
    variant: str = "tvm"
    runs: int = 20
    warmup: int = 5
    measure_peak: bool = True


def kernel_kind(name: str) -> str:
    n = name.lower()
    for kind, words in (("conv", ("conv", "winograd")), ("matmul", ("matmul", "dense", "bmm", "attention", "_scan")),
                        ("pool", ("pool",)),
                        ("reduction", ("softmax", "norm", "mean", "sum", "max", "min", "erf")),
                        ("layout", ("transpose", "reshape", "layout", "concat", "split", "take", "strided_slice",
                                    "broadcast_to"))):
        if any(w in n for w in words):
            return kind
    return "elementwise"


class KernelFacts(NamedTuple):
    flops: float | None  # per call; None where TVM's count cannot be divided by (Winograd transforms)
    workload: str | None  # the tuning record's workload hash; None without one
    bytes: int | None = None  # compulsory bytes per call (``collect.features``)
    rate: float = 1.0  # the peak of its arithmetic against the FMA's: 2 for bf16 dot products (compile/bf16.py)


def _kernel_facts(mod: Any, target: Any, databases: list[Any]) -> dict[str, KernelFacts]:
    """FLOPs, the tuning record's workload hash (None without one) and compulsory bytes of every
    per-inference kernel, by function name."""
    import tvm
    import tvm_ffi
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    from tvmbench.compile import pipeline
    from tvmbench.compile.names import WINOGRAD_INPUT, WINOGRAD_OUTPUT
    from tvmbench.compile.rules.amx import peak_rate
    from tvmbench.compile.tir import kernel_flops
    from tvmbench.profiling.collect import compulsory_bytes

    facts = {}
    for gv, func in pipeline.per_inference(pipeline.legalized(mod, target)).functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        flops = kernel_flops(func)
        flops = 0.0 if flops is None else flops
        if WINOGRAD_INPUT in gv.name_hint or WINOGRAD_OUTPUT in gv.name_hint:
            # TVM's estimate counts every branch of the transforms' coefficient selects, though
            # one branch runs per element: not a count to divide by.
            flops = None
        normalized = _normalize_mod(func)
        tuned = any(db.has_workload(normalized) for db in databases)
        facts[gv.name_hint] = KernelFacts(flops, str(tvm_ffi.structural_hash(normalized)) if tuned else None,
                                          compulsory_bytes(func), peak_rate(func, target))
    return facts


def prepared_backend(framework: str, model: str, options: ModelOptions, config: BackendConfig,
                     say: Any) -> Any:
    """The model built and ``framework`` prepared on it exactly as a benchmark's worker does."""
    from tvmbench.backends import backend_class

    say("building the model")
    loaded = load_model(model, options)
    backend = backend_class(framework)(config)
    say("importing and compiling" if framework.startswith("tvm") else "preparing")
    backend.prepare(loaded)
    return backend


def plain_runs(backend: Any, warmup: int, runs: int, paced: Paced | None = None) -> list[float]:
    """Seconds of each of ``runs`` plain inferences, after ``warmup`` untimed ones; each made
    through ``paced`` when given (``lockstep.Pacer``: in this worker's turns)."""
    for _ in range(warmup):
        (paced or unpaced)(backend.run)
    times = []

    def timed() -> None:
        t0 = time.perf_counter()
        backend.run()
        times.append(time.perf_counter() - t0)

    for _ in range(runs):
        (paced or unpaced)(timed)
    return times


# Runs per block of ``interleaved_runs``: short enough that a state of a shared host (which lasts
# seconds) falls on both kinds of run alike, long enough that switching costs nothing measurable.
INTERLEAVE_BLOCK = 5


def interleaved_runs(backend: Any, warmup: int, runs: int, sequence: list[list[tuple[str, float]]] | None = None,
                     block: int = INTERLEAVE_BLOCK, paced: Pacer | None = None
                     ) -> tuple[list[float], list[dict[str, float]], dict[str, int]]:
    """``runs`` plain inferences and ``runs`` instrumented ones (``time_kernels``), alternating in
    blocks of ``block``: the plain times (s), the per-kernel seconds of each instrumented run, and
    the kernels' calls per inference.

    "Not in kernels" is the plain median minus the kernels' sum, two numbers from two sets of
    runs. Timed one set after the other, a host that changes speed in between (this project's
    shared 2-vCPU hosts move by 30 % for seconds at a time) put that change into the
    difference: ``tvmbench profile --model resnet18`` read +4.6 ms and -1.1 ms of a 12 ms model
    in two runs a minute apart. Alternating short blocks lets every stretch of the host fall on
    both sets alike. ``paced``: every run in this worker's turns (``lockstep.Pacer``), the
    instrumented ones without a warm-up call at a turn's start (it would be timed with them)."""
    plain_runs(backend, warmup, 0, paced)
    plain: list[float] = []
    per_run: list[dict[str, float]] = []
    calls: dict[str, int] = {}
    while len(plain) < runs:
        n = min(block, runs - len(plain))
        plain += plain_runs(backend, 0, n, paced)
        timed, calls_of = backend.time_kernels(n, sequence, paced.profiled if paced else None)
        per_run += timed
        calls = calls or calls_of
    return plain, per_run, calls


def profile_job(job: ProfileJob, progress: Any = None) -> ModelProfile:
    """Prepare the model as a benchmark would, then profile it (runs in a worker process)."""
    import tvm

    from tvmbench.measure.peak import measure_bandwidth, measure_compute_peak

    say = progress or (lambda msg: None)
    backend = prepared_backend(job.variant, job.model, job.options, job.backend, say)
    say("kernel FLOPs and schedules")
    facts = _kernel_facts(backend.relax_module(), job.backend.target, backend.tuning_databases())
    say("end-to-end and instrumented runs, alternating")
    plain, per_run, calls = interleaved_runs(backend, job.warmup, job.runs)
    peak = measure_compute_peak(job.backend.threads) if job.measure_peak else None
    bandwidth = measure_bandwidth(job.backend.threads) if job.measure_peak and job.backend.target.device == "cpu" else None
    info = backend.info
    backend.close()
    kernels = kernel_profiles(per_run, calls, facts, peak, bandwidth)
    return ModelProfile(model=job.model, target=job.backend.target.config, variant=job.variant,
                        end_to_end_ms=statistics.median(plain) * 1e3, kernels_ms=sum(k.ms for k in kernels),
                        runs=job.runs, threads=int(tvm.runtime.num_threads()),
                        peak_gflops=peak.gflops if peak else None, peak_method=peak.method if peak else None,
                        database=info.get("database"), kernels=kernels,
                        bandwidth=None if bandwidth is None else {
                            "memory_gbs": bandwidth.gbs, "caches": [asdict(c) for c in bandwidth.caches]})


def kernel_profiles(per_run: list[dict[str, float]], calls: dict[str, int], facts: dict[str, KernelFacts],
                    peak: Any, bandwidth: Any = None) -> list[KernelProfile]:
    """Per kernel (VM builtins too) its median time per inference over ``per_run``, FLOPs and
    schedule from ``facts`` (``_kernel_facts``), and with ``peak`` and ``bandwidth``
    (``measure.peak``) its share of the cache-aware roofline's bound; slowest first."""
    kernels = []
    for name in calls:
        ms = statistics.median(r.get(name, 0.0) for r in per_run) * 1e3
        per_call, workload, nbytes, rate = facts.get(name, KernelFacts(None, None))
        flops = per_call * calls[name] if per_call is not None else None
        gflops = flops / (ms * 1e6) if flops and ms > 0 else None
        bound_ms = None
        if peak is not None and bandwidth is not None and name in facts and (per_call or nbytes):
            bound_ms = calls[name] * 1e3 * max((per_call or 0.0) / (rate * peak.gflops * 1e9),
                                               (nbytes or 0) / (bandwidth.gbs_for(nbytes or 0) * 1e9))
        kernels.append(KernelProfile(
            name=name, kind=kernel_kind(name) if name in facts else "vm", calls=calls[name], ms=ms, share=0.0,
            mflop=flops / 1e6 if flops is not None else None, gflops=gflops,
            percent_of_peak=percent_of_peak(gflops and gflops / rate, peak), peak_rate=rate,
            schedule=None if name not in facts else "tuning record" if workload else "default", workload=workload,
            percent_of_bound=100 * bound_ms / ms if bound_ms and ms > 0 else None))
    total = sum(k.ms for k in kernels)
    for k in kernels:
        k.share = k.ms / total if total else 0.0
    return sorted(kernels, key=lambda k: -k.ms)


@dataclass(frozen=True)
class PairedJob:
    """The model built with the databases of ``backend`` and without any, in one worker; with
    ``candidates`` (database folders), once with each instead of ``backend``'s databases."""

    model: str
    options: ModelOptions
    backend: BackendConfig
    rounds: int = 10  # alternating blocks per build: the pairs a record's gain is tested on
    runs: int = 10  # instrumented inferences per block
    warmup: int = 5
    candidates: tuple[str, ...] = ()


class PairedGains(NamedTuple):
    """``paired_gains_job``'s answer: the rows of the kernels that run a record (each with the
    index of its ``candidate`` build), and the untuned build's profile from the same blocks (its
    ``ceiling`` says how much any tuning could gain; its ``end_to_end_ms`` is the instrumented
    kernels' sum, no plain runs are timed)."""

    rows: list[dict[str, Any]]
    untuned: ModelProfile


def paired_gains_job(job: PairedJob, progress: Any = None) -> PairedGains:
    """Per kernel that runs a tuning record: its time with the databases (each candidate build)
    and with tvmbench's default schedule, all builds in this one process, timed in alternating
    blocks.

    Two processes can run 15-50 % apart on a shared machine, uniformly; ``compare_profiles``
    corrects that drift by the kernels both builds run with the default schedule, which a model
    whose every kernel was tuned (a small one) does not have. In one process, alternating, the
    drift falls on both builds alike. Rows as ``compare_profiles`` gives them (``corrected_gain``
    is the gain itself), with each round's median in ``tuned_blocks_ms`` and ``untuned_blocks_ms``:
    the pairs ``select_in_model`` tests the gain on."""
    say = progress or (lambda msg: None)
    configs = [replace(job.backend, databases=(("--db", c),)) for c in job.candidates] or [job.backend]
    builds = [prepared_backend("tvm", job.model, job.options, c, say) for c in configs]
    untuned = prepared_backend("tvm_untuned", job.model, job.options, replace(job.backend, databases=()), say)
    facts = [_kernel_facts(b.relax_module(), job.backend.target, b.tuning_databases()) for b in builds]
    say("alternating instrumented runs")
    # times[build][kernel][round]: the seconds of each run of that round's block (the last build
    # is the untuned one)
    times: list[dict[str, list[list[float]]]] = [{} for _ in range(len(builds) + 1)]
    for b in [*builds, untuned]:
        plain_runs(b, job.warmup, 0)
    untuned_runs: list[dict[str, float]] = []
    calls: dict[str, int] = {}
    for r in range(job.rounds):
        # One fixed cycle, tuned builds then the untuned one: each block follows another build's,
        # never its own (``t u | u t`` gives every other pair one side warm from its own block).
        for i, b in enumerate([*builds, untuned]):
            runs, calls_of = b.time_kernels(job.runs)
            if b is untuned:
                untuned_runs += runs
                calls = calls_of
            for run in runs:
                for kernel, secs in run.items():
                    times[i].setdefault(kernel, [[] for _ in range(job.rounds)])[r].append(secs)
    for b in [*builds, untuned]:
        b.close()
    rows = [{**_paired_row(kernel, workload, times[i][kernel], times[-1][kernel]), "candidate": i}
            for i, kernels in enumerate(facts) for kernel, workload in ((k, f.workload) for k, f in kernels.items())
            if workload and kernel in times[i] and kernel in times[-1]]
    return PairedGains(rows, _untuned_profile(job, untuned_runs, calls, facts[0]))


class EndToEnd(NamedTuple):
    """The tuned build over the untuned one end to end (``end_to_end_job`` in several processes):
    the gain with its 95 % interval, and, when the host-state probe saw the cores in more than
    one state, the gain in each as (the state's name, ``probe.HostStates``; gain; pairs of blocks);
    the processes it was measured in."""

    gain: float
    low: float
    high: float
    states: tuple[tuple[str, float, int], ...] = ()
    processes: int = 0

    @classmethod
    def of(cls, runs: list[list[tuple[float, float, tuple[float, ...] | None]]]) -> EndToEnd:
        """From each process's pairs: the geometric mean of the processes' gains, Student's t over
        them (the processes the units); per host state, the pairs in it (the pairs the units)."""
        from tvmbench.measure.probe import HostStates

        gains = [paired_ratio_ci([u for _, u, _ in pairs], [t for t, _, _ in pairs])[0] for pairs in runs]
        gain, low, high = paired_ratio_ci(gains, [1.0] * len(gains))
        probed = [(t, u, (0, *reading)) for r in runs for t, u, reading in r if reading is not None]
        host = HostStates.of([turn for *_, turn in probed])
        if len(host) < 2:
            return cls(gain, low, high, processes=len(runs))
        by_state = []
        for k, name in enumerate(host.names):
            mine = [(t, u) for t, u, turn in probed if host.of_turn(turn) == k]
            if mine and name is not None:
                by_state.append((name, paired_ratio_ci([u for _, u in mine], [t for t, _ in mine])[0], len(mine)))
        return cls(gain, low, high, tuple(by_state), len(runs))

    def worst_state(self, min_pairs: int = 5) -> tuple[str, float, int] | None:
        """The state with the lowest gain among those with ``min_pairs`` pairs, if several."""
        seen = [s for s in self.states if s[2] >= min_pairs]
        return min(seen, key=lambda s: s[1]) if len(seen) > 1 else None

    def surely_faster(self) -> bool:
        """Whether the tuned build may be applied: its interval above 1, and no host state with
        enough pairs to judge it by (``worst_state``) slower. A gain whose interval holds 1 is no
        gain a user can count on, and may be a loss in a state the check did not see: resnet18's
        Droplet database of session 120 read 1.006x [0.976-1.036] here, all in the host's fast
        state, and 0.921x in a benchmark run in its slow one (docs/performance.md)."""
        worst = self.worst_state()
        return self.low > 1.0 and (worst is None or worst[1] >= 1.0)

    def settled(self) -> bool:
        """Whether more processes could not change the verdict: the interval excludes 1."""
        return self.low > 1.0 or self.high < 1.0


def end_to_end_job(job: PairedJob, progress: Any = None) -> list[tuple[float, float, tuple[float, ...] | None]]:
    """The build with ``job.backend``'s databases against the build without any, end to end:
    ``job.rounds`` pairs of alternating blocks of ``job.runs`` plain inferences in this one process,
    each pair as (tuned median, untuned median, the host-state probe's reading after it:
    microseconds per fork-join and per paired-work call, ``measure/probe.py``, or None off a CPU).
    Each kernel's gain inside the model is
    timed with the VM's instrument hook, a device sync after every call; their sum need not be
    what the model gains when it runs freely, and this is that. The probe says which state the
    host's cores were in for each pair: on the EPYC VM a schedule's gain differs between them."""
    from tvmbench.measure.probe import HostProbe

    say = progress or (lambda msg: None)
    tuned = prepared_backend("tvm", job.model, job.options, job.backend, say)
    untuned = prepared_backend("tvm_untuned", job.model, job.options, replace(job.backend, databases=()), say)
    probe = HostProbe() if job.backend.target.device == "cpu" else None
    say("alternating end-to-end runs")
    pairs: list[tuple[float, float, tuple[float, ...] | None]] = []
    for b in (tuned, untuned):
        plain_runs(b, job.warmup, 0)
    for _ in range(job.rounds):
        t, u = (statistics.median(plain_runs(b, 1, job.runs)) for b in (tuned, untuned))
        pairs.append((t, u, tuple(s * 1e6 for s in probe.reading()) if probe is not None else None))
    tuned.close()
    untuned.close()
    return pairs


def _untuned_profile(job: PairedJob, per_run: list[dict[str, float]], calls: dict[str, int],
                     facts: dict[str, KernelFacts]) -> ModelProfile:
    """The untuned build's profile from its instrumented blocks, with the machine's FMA peak."""
    import tvm

    from tvmbench.measure.peak import measure_compute_peak

    peak = measure_compute_peak(job.backend.threads)
    kernels = kernel_profiles(per_run, calls, {k: f._replace(workload=None) for k, f in facts.items()}, peak)
    total = sum(k.ms for k in kernels)
    return ModelProfile(model=job.model, target=job.backend.target.config, variant="tvm_untuned",
                        end_to_end_ms=total, kernels_ms=total, runs=len(per_run),
                        threads=int(tvm.runtime.num_threads()), peak_gflops=peak.gflops, peak_method=peak.method,
                        database=None, kernels=kernels)


def _paired_row(kernel: str, workload: str, tuned: list[list[float]], untuned: list[list[float]]) -> dict[str, Any]:
    """A kernel's row from its per-round run times with and without the databases (seconds)."""
    t_ms = statistics.median(s for block in tuned for s in block) * 1e3
    u_ms = statistics.median(s for block in untuned for s in block) * 1e3
    gain = u_ms / t_ms if t_ms > 0 else None
    pairs = [(statistics.median(t) * 1e3, statistics.median(u) * 1e3)
             for t, u in zip(tuned, untuned, strict=True) if t and u]
    return {"name": kernel, "schedule": "tuning record", "workload": workload, "tuned_ms": t_ms,
            "untuned_ms": u_ms, "gain": gain, "corrected_gain": gain,
            "tuned_blocks_ms": [t for t, _ in pairs], "untuned_blocks_ms": [u for _, u in pairs]}


class InModelVerdict(NamedTuple):
    """``select_in_model``'s answer: the workloads whose records lose inside the models, every
    judged workload's gain there, and its 95 % interval where paired blocks gave one."""

    losing: set[str]
    gains: dict[str, float]
    intervals: dict[str, tuple[float, float]]


def select_in_model(gains: list[list[dict[str, Any]]], min_gain: float = 0.02) -> InModelVerdict:
    """Which tuned workloads lose inside the models.

    ``gains`` holds one row list per model profiled with and without the database
    (``paired_gains_job`` or ``compare_profiles``). MetaSchedule's runner times a kernel alone,
    with its inputs hot in cache; inside a model the inputs come from the previous kernel and the
    weights were evicted by it, and a record that won the first way can lose the second.

    Where the rows carry paired blocks (``paired_gains_job``), a workload's times are summed over
    its kernels per block, and its records are kept only when the 95 % interval of the paired
    gain lies above 1 and the gain is at least ``1 + min_gain``: a fixed threshold alone kept
    records that were the default schedule itself, measured 1.03x-1.09x "faster" by chance on
    kernels of tens of microseconds. Without blocks, the gain is the drift-corrected untuned time
    over the tuned time summed over every call in every model (a task shared by two models is
    judged on both), kept at ``1 + min_gain``.
    """
    rows_of: dict[str, list[dict[str, Any]]] = {}
    for rows in gains:
        for row in rows:
            if row.get("schedule") == "tuning record" and row.get("workload") and row.get("corrected_gain"):
                rows_of.setdefault(row["workload"], []).append(row)
    verdict = InModelVerdict(set(), {}, {})
    for wl, rows in rows_of.items():
        blocks = {len(r.get("tuned_blocks_ms") or ()) for r in rows} | {len(r.get("untuned_blocks_ms") or ())
                                                                         for r in rows}
        if len(blocks) == 1 and min(blocks) >= 3:
            tuned = np.sum([r["tuned_blocks_ms"] for r in rows], axis=0)
            untuned = np.sum([r["untuned_blocks_ms"] for r in rows], axis=0)
            gain, low, high = paired_ratio_ci(untuned, tuned)
            verdict.intervals[wl] = (low, high)
            loses = not low > 1.0 or gain < 1 + min_gain
        else:
            tuned_ms = sum(r["tuned_ms"] for r in rows)
            gain = sum(r["tuned_ms"] * r["corrected_gain"] for r in rows) / tuned_ms if tuned_ms > 0 else 0.0
            loses = gain < 1 + min_gain
        verdict.gains[wl] = gain
        if loses:
            verdict.losing.add(wl)
    return verdict


def compare_profiles(tuned: ModelProfile, untuned: ModelProfile) -> tuple[list[dict[str, Any]], float | None]:
    """Per kernel, its time with the databases and without (the same kernels: only schedules
    differ), and the drift between the two processes.

    The two builds run in separate processes, and on a shared or throttling machine a process can
    run uniformly faster or slower than the next. Kernels that run tvmbench's default schedule in
    both builds are the same code, so their median time ratio measures that drift; each kernel's
    ``corrected_gain`` is its gain divided by it. Returns (rows, drift or None).
    """
    base = {k.name: k for k in untuned.kernels}
    same = [base[k.name].ms / k.ms for k in tuned.kernels
            if k.schedule == "default" and k.name in base and k.ms > 0 and k.kind != "vm"]
    drift = statistics.median(same) if len(same) >= 3 else None
    rows = []
    for k in tuned.kernels:
        b = base.get(k.name)
        gain = b.ms / k.ms if b and k.ms > 0 else None
        rows.append({"name": k.name, "kind": k.kind, "schedule": k.schedule, "workload": k.workload, "calls": k.calls,
                     "untuned_ms": b.ms if b else None, "tuned_ms": k.ms, "gain": gain,
                     "corrected_gain": gain / drift if gain is not None and drift else gain})
    return rows, drift
