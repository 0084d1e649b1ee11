"""The result of a run, typed: one :class:`FrameworkResult` per framework inside a
:class:`RunResult`. ``to_json()`` writes exactly the documents tvmbench has always written (the
seed project's field names included: ``avg_latency_ms``, ``throughput_samples_per_sec``,
``total_runs``, ``speedup``), and ``from_json()`` reads them back, so old result files stay
readable and scripts keep their keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tvmbench.measure.records import Rounds

# Fields of an "ok" framework entry other than the statistics (``stats.summarize``).
_OK_FIELDS = ("status", "avg_latency_ms", "throughput_samples_per_sec", "total_runs", "device", "warmup_runs",
              "warmup_ms", "block_size", "stop_reason", "first_inference_ms", "phases_s", "peak_rss_bytes",
              "peak_inference_rss_bytes", "peak_gpu_memory_bytes", "info", "samples_ms", "rounds", "gflops_per_sec", "accuracy",
              "lockstep_turns")


@dataclass
class FrameworkResult:
    """One framework's result: its statistics and accuracy, or why it has none.

    ``status`` is "ok", "failed" (it ran and broke) or "unavailable" (it cannot run here)."""

    status: str
    peak_rss_bytes: int | None = None
    # failed or unavailable
    error: str | None = None
    error_type: str | None = None
    error_kind: str | None = None  # "user", "missing", "unavailable", "timeout", ...
    traceback: str | None = None
    # ok
    statistics: dict[str, Any] = field(default_factory=dict)  # stats.summarize: median_ms, CI, ...
    total_runs: int = 0
    device: str | None = None
    warmup_ms: list[float] = field(default_factory=list)
    block_size: int | None = None
    stop_reason: str | None = None
    phases_s: dict[str, float] = field(default_factory=dict)
    peak_gpu_memory_bytes: int | None = None
    # the worker's resident memory from its first inference on (peak_rss_bytes includes compiling)
    peak_inference_rss_bytes: int | None = None
    info: dict[str, Any] = field(default_factory=dict)
    samples_ms: list[float] = field(default_factory=list)
    rounds: Rounds | None = None
    gflops_per_sec: float | None = None
    accuracy: dict[str, Any] = field(default_factory=dict)
    # lockstep: the wall-clock span (Unix seconds) of each turn this framework measured in
    lockstep_turns: list[list[float]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def median_ms(self) -> float | None:
        return self.statistics.get("median_ms")

    def to_json(self) -> dict[str, Any]:
        if not self.ok:
            return {"status": self.status, "error": self.error or "", "error_type": self.error_type,
                    "error_kind": self.error_kind, "traceback": self.traceback,
                    "peak_rss_bytes": self.peak_rss_bytes or None}
        doc: dict[str, Any] = {
            "status": "ok",
            # The seed's field names, kept: avg = mean over the timed runs.
            "avg_latency_ms": self.statistics.get("mean_ms"),
            "throughput_samples_per_sec": self.statistics.get("throughput_samples_per_sec"),
            "total_runs": self.total_runs,
            "device": self.device,
            **{k: v for k, v in self.statistics.items() if k != "throughput_samples_per_sec"},
            "warmup_runs": len(self.warmup_ms),
            "warmup_ms": self.warmup_ms,
            "block_size": self.block_size,
            "stop_reason": self.stop_reason,
            "first_inference_ms": self.phases_s.get("first_inference_s", 0) * 1e3,
            "phases_s": self.phases_s,
            "peak_rss_bytes": self.peak_rss_bytes,
            **({"peak_inference_rss_bytes": self.peak_inference_rss_bytes}
               if self.peak_inference_rss_bytes is not None else {}),
            **({"peak_gpu_memory_bytes": self.peak_gpu_memory_bytes} if self.peak_gpu_memory_bytes is not None
               else {}),
            "info": self.info,
            "samples_ms": self.samples_ms,
        }
        if self.rounds is not None:
            doc["rounds"] = self.rounds.to_json()
        if self.gflops_per_sec is not None:
            doc["gflops_per_sec"] = self.gflops_per_sec
        if self.lockstep_turns:
            doc["lockstep_turns"] = self.lockstep_turns
        doc["accuracy"] = self.accuracy
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> FrameworkResult:
        if doc["status"] != "ok":
            return cls(status=doc["status"], error=doc.get("error"), error_type=doc.get("error_type"),
                       error_kind=doc.get("error_kind"), traceback=doc.get("traceback"),
                       peak_rss_bytes=doc.get("peak_rss_bytes"))
        statistics = {k: v for k, v in doc.items() if k not in _OK_FIELDS}
        statistics["throughput_samples_per_sec"] = doc.get("throughput_samples_per_sec")
        return cls(status="ok", statistics=statistics, total_runs=doc.get("total_runs", 0), device=doc.get("device"),
                   warmup_ms=list(doc.get("warmup_ms", [])), block_size=doc.get("block_size"),
                   stop_reason=doc.get("stop_reason"), phases_s=dict(doc.get("phases_s", {})),
                   peak_rss_bytes=doc.get("peak_rss_bytes"), peak_gpu_memory_bytes=doc.get("peak_gpu_memory_bytes"),
                   peak_inference_rss_bytes=doc.get("peak_inference_rss_bytes"), info=dict(doc.get("info") or {}), samples_ms=list(doc.get("samples_ms", [])),
                   rounds=Rounds.from_json(doc["rounds"]) if "rounds" in doc else None,
                   gflops_per_sec=doc.get("gflops_per_sec"), accuracy=dict(doc.get("accuracy", {})),
                   lockstep_turns=[list(t) for t in doc.get("lockstep_turns", [])])


@dataclass
class Speedup:
    """TVM's speedup over one framework (median other / median TVM) with its 95 % interval, or
    None with the reason in ``basis``."""

    speedup: float | None
    ci95: list[float] | None
    basis: str

    def to_json(self) -> dict[str, Any]:
        return {"speedup": self.speedup, "ci95": self.ci95, "basis": self.basis}


_RUN_HEAD = ("model", "batch_size", "seq_length", "image_size", "target", "target_config", "target_source",
             "frameworks")
_RUN_TAIL = ("speedup", "speedup_ci95", "speedup_basis", "tvm_speedups", "tuning_enabled", "tuning_database",
             "model_info", "measurement", "environment", "warnings")


@dataclass
class RunResult:
    """One model, its frameworks, their results and TVM's speedups over each, with how it was
    measured and on what. ``speedup`` is over PyTorch (the seed's field); ``tvm_speedups`` over
    every framework of the run. ``extra`` keeps keys a caller added (``compare``'s model type)."""

    model: str
    batch_size: int
    seq_length: int | None
    image_size: int | None
    target: str
    target_config: dict[str, Any]
    target_source: Any
    frameworks: list[str]
    results: dict[str, FrameworkResult]  # by framework name, in ``frameworks`` order
    speedup: Speedup
    tvm_speedups: dict[str, Speedup]
    tuning_enabled: bool
    tuning_database: dict[str, Any] | None
    model_info: dict[str, Any]
    measurement: dict[str, Any]
    environment: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # each framework's outputs for the run's inputs (``--save-outputs``); not part of the document
    outputs: dict[str, list[Any]] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        from tvmbench.backends import result_key

        doc: dict[str, Any] = {k: getattr(self, k) for k in _RUN_HEAD}
        doc.update({result_key(fw): self.results[fw].to_json() for fw in self.frameworks})
        doc.update({"speedup": self.speedup.speedup, "speedup_ci95": self.speedup.ci95,
                    "speedup_basis": self.speedup.basis,
                    "tvm_speedups": {fw: s.to_json() for fw, s in self.tvm_speedups.items()}})
        doc.update({k: getattr(self, k) for k in _RUN_TAIL[4:]})
        doc.update(self.extra)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RunResult:
        from tvmbench.backends import result_key

        keys = {result_key(fw) for fw in doc["frameworks"]}
        extra = {k: v for k, v in doc.items() if k not in keys and k not in _RUN_HEAD and k not in _RUN_TAIL}
        return cls(**{k: doc.get(k) for k in _RUN_HEAD},
                   results={fw: FrameworkResult.from_json(doc[result_key(fw)]) for fw in doc["frameworks"]},
                   speedup=Speedup(doc.get("speedup"), doc.get("speedup_ci95"), doc.get("speedup_basis", "")),
                   tvm_speedups={fw: Speedup(**s) for fw, s in doc.get("tvm_speedups", {}).items()},
                   **{k: doc.get(k) for k in _RUN_TAIL[4:]}, extra=extra)

    def result(self, framework: str) -> FrameworkResult:
        return self.results[framework]
