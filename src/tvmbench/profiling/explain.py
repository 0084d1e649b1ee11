"""``tvmbench explain``: where TVM wins and loses against a peer, operator kind by operator kind.

Each framework is profiled in its own worker with its own profiler: TVM with the Relax VM's
instrument hook (each kernel's time inside the model, as ``tvmbench profile``), ONNX Runtime with
its session profiling, OpenVINO with its per-node performance counters, PyTorch with
``torch.profiler`` (self time per aten op). Their operators are grouped by the same kinds
(``backends.base.OP_KINDS``: conv, matmul, norm, softmax, pool, layout, elementwise) and set side
by side. Each framework's end-to-end median is measured in the same worker without the profiler;
what its per-operator sum does not explain (the runtime's own work, the profiler's overhead) is
printed as such, so a reader can tell how far the breakdown can be trusted.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from tvmbench.backends.base import OP_KINDS, BackendConfig, OpTime
from tvmbench.models import ModelOptions

PEERS = ("onnxruntime", "openvino", "pytorch")

# tvmbench's operator kinds (profiling/collect.py) by the kinds all frameworks share.
_TVM_KINDS = {"dense": "matmul", "batch matmul": "matmul", "winograd transform": "conv", "reduction": "pool"}


def tvm_kind(kind: str) -> str:
    return "conv" if kind.startswith("conv2d") else _TVM_KINDS.get(kind, kind if kind in OP_KINDS else "elementwise")


@dataclass
class Breakdown:
    """One framework's per-operator profile and its end-to-end median, both in ms per inference."""

    framework: str
    end_to_end_ms: float
    ops: list[OpTime] = field(default_factory=list)

    @property
    def explained_ms(self) -> float:
        return sum(op.ms for op in self.ops)

    def per_kind(self) -> dict[str, float]:
        out = dict.fromkeys(OP_KINDS, 0.0)
        for op in self.ops:
            out[op.kind] = out.get(op.kind, 0.0) + op.ms
        return out

    def to_json(self) -> dict[str, Any]:
        return {"framework": self.framework, "end_to_end_ms": self.end_to_end_ms, "explained_ms": self.explained_ms,
                "per_kind_ms": self.per_kind(), "ops": [asdict(op) for op in self.ops]}


@dataclass(frozen=True)
class ExplainJob:
    model: str
    options: ModelOptions
    framework: str
    backend: BackendConfig
    runs: int = 20
    warmup: int = 5


def explain_job(job: ExplainJob, progress: Any = None) -> Breakdown:
    """Worker entry: prepare the framework, time plain runs, then its per-operator profile."""
    from tvmbench.profiling.kernels import plain_runs, prepared_backend

    say = progress or (lambda msg: None)
    backend = prepared_backend(job.framework, job.model, job.options, job.backend, say)
    say("end-to-end runs")
    plain = plain_runs(backend, job.warmup, job.runs)
    say("per-operator profile")
    ops = _tvm_ops(backend, job) if job.framework in ("tvm", "tvm_untuned") else backend.op_profile(job.runs)
    backend.close()
    return Breakdown(job.framework, statistics.median(plain) * 1e3, sorted(ops, key=lambda op: -op.ms))


def _tvm_ops(backend: Any, job: ExplainJob) -> list[OpTime]:
    """TVM's kernels inside the model, each with its kind; VM builtins (allocation, shape
    functions) are the rest, reported as unexplained."""
    import tvm

    from tvmbench.compile import pipeline
    from tvmbench.profiling.collect import op_kind

    legal = pipeline.per_inference(pipeline.legalized(backend.relax_module(), job.backend.target))
    funcs = {gv.name_hint: f for gv, f in legal.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    per_run, _ = backend.time_kernels(job.runs)
    return [OpTime(name, kind, tvm_kind(kind), statistics.median(r.get(name, 0.0) for r in per_run) * 1e3)
            for name, f in funcs.items() for kind in [op_kind(name, f)]
            if any(name in r for r in per_run)]


def compare(tvm: Breakdown, peer: Breakdown) -> list[dict[str, Any]]:
    """Per kind: both frameworks' ms per inference, TVM's loss (positive: TVM slower) and the
    ratio, largest loss first."""
    ours, theirs = tvm.per_kind(), peer.per_kind()
    rows = [{"kind": k, "tvm_ms": ours[k], "peer_ms": theirs[k], "tvm_loss_ms": ours[k] - theirs[k],
             "ratio": ours[k] / theirs[k] if theirs[k] > 0 else None}
            for k in OP_KINDS if ours[k] > 0 or theirs[k] > 0]
    return sorted(rows, key=lambda r: -r["tvm_loss_ms"])
