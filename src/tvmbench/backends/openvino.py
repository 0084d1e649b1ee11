"""OpenVINO on the shared ONNX export: CPU plugin (GPU plugin when asked for and present).

OpenVINO defaults to bf16 inference on CPUs with AVX-512 BF16 (this project's machines have it),
which changes the numbers; tvmbench asks for f32 so every framework computes the same thing, and
records the precision in the result. ``--openvino-hint throughput`` selects the throughput hint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from tvmbench.backends.base import (
    Backend,
    BackendOptions,
    OpTime,
    Paced,
    inputs_by_name,
    unpaced,
    weight_elements,
)
from tvmbench.errors import UserError
from tvmbench.models import LoadedModel


def _type_name(value: object) -> str:
    getter = getattr(value, "get_type_name", None)
    return str(getter()) if callable(getter) else str(value)


_OV_PRECISION = {"fp32": "f32", "fp16": "f16", "amp": "f16", "bf16": "bf16"}


# OpenVINO's node types (after its transformations) by operator kind; the rest is elementwise.
_KINDS = {
    **dict.fromkeys(("Convolution", "GroupConvolution", "ConvolutionBackpropData"), "conv"),
    **dict.fromkeys(("MatMul", "FullyConnected", "ScaledDotProductAttention", "Gemm", "GRUSequence", "LSTMSequence",
                     "RNNSequence"), "matmul"),
    **dict.fromkeys(("MVN", "NormalizeL2", "BatchNormInference", "RMS"), "norm"),
    **dict.fromkeys(("Softmax", "SoftMax"), "softmax"),
    **dict.fromkeys(("MaxPool", "AvgPool", "ReduceMean", "ReduceSum", "ReduceMax", "Pooling"), "pool"),
    **dict.fromkeys(("Reshape", "Transpose", "Concat", "Gather", "Split", "StridedSlice", "Reorder", "Squeeze",
                     "Unsqueeze", "Pad", "Broadcast", "ShapeOf", "Convert", "VariadicSplit", "Slice"), "layout"),
}
_NOT_KERNELS = ("Parameter", "Result", "Constant")
# A fused primitive (``Subgraph``: OpenVINO's snippets, e.g. a whole attention) is of the kind
# of the first of these among the layers it fused: ViT's attention is one Subgraph that read as
# elementwise work, leaving TVM's attention kernel (a matmul) without a counterpart.
_FUSED_KIND_ORDER = ("matmul", "conv", "softmax", "norm", "pool", "layout")


@dataclass(frozen=True)
class OpenVINOOptions(BackendOptions):
    openvino_hint: str = "latency"
    precision: str = "fp32"

    def validate(self) -> None:
        if self.openvino_hint not in ("latency", "throughput"):
            raise UserError(f"--openvino-hint must be latency or throughput, got '{self.openvino_hint}'")


class OpenVINOBackend(Backend):
    name = "openvino"
    result_key = "openvino"
    label = "OpenVINO"
    reduced_precision = True
    options_type = OpenVINOOptions
    requires = ("openvino", "onnx")
    extra = "openvino"

    @classmethod
    def devices(cls) -> list[str]:
        import openvino as ov

        return [d.lower() for d in ov.Core().available_devices]

    def prepare(self, model: LoadedModel) -> None:
        import openvino as ov

        from tvmbench.models.onnx_export import onnx_file

        exported = onnx_file(model, use_cache=self.config.use_cache)
        self.phases_s["export_onnx_s"] = exported.export_s
        core = ov.Core()
        device = "GPU" if self.config.target.device == "cuda" else "CPU"
        if device not in core.available_devices:
            raise UserError(f"OpenVINO has no {device} device here (available: {', '.join(core.available_devices)})")
        hint = self.options.openvino_hint.upper()
        # --precision (fp32 by default: OpenVINO alone would pick bf16 on AVX-512-BF16/AMX CPUs).
        precision = _OV_PRECISION.get(self.options.precision, "f32")
        config = {"PERFORMANCE_HINT": hint, "INFERENCE_PRECISION_HINT": precision}
        if device == "CPU":
            config["INFERENCE_NUM_THREADS"] = self.config.threads
        self._core, self._device, self._config = core, device, config
        t0 = time.perf_counter()
        ov_model = self._ov_model = core.read_model(str(exported.path))
        self.phases_s["convert_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.compiled = core.compile_model(ov_model, device, config)
        self.phases_s["compile_s"] = time.perf_counter() - t0
        self.request = self.compiled.create_infer_request()
        feeds = inputs_by_name([p.get_any_name() for p in self.compiled.inputs], model.inputs)
        arrays = [np.ascontiguousarray(a) for a in feeds.values()]
        self._host_inputs = arrays
        # Tensors share the numpy memory: set once, no copy per run.
        for port, a in zip(self.compiled.inputs, arrays, strict=True):
            self.request.set_tensor(port, ov.Tensor(a, shared_memory=True))
        self.info = {"device": device, "version": ov.__version__, "threads": self.config.threads,
                     "performance_hint": hint,
                     "inference_precision": _type_name(self.compiled.get_property("INFERENCE_PRECISION_HINT")),
                     "onnx_exporter": exported.exporter}

    def op_profile(self, runs: int, paced: Paced | None = None) -> list[OpTime]:
        """OpenVINO's per-node performance counters (the model compiled again with PERF_COUNT):
        per executed node, the median of its real time over the runs."""
        import math
        import statistics

        import openvino as ov

        compiled = (paced or unpaced)(  # (in a turn: a compile beside another framework's timing would slow it)
            lambda: self._core.compile_model(self._ov_model, self._device, {**self._config, "PERF_COUNT": "YES"}))
        request = compiled.create_infer_request()
        for port, a in zip(compiled.inputs, self._host_inputs, strict=True):
            request.set_tensor(port, ov.Tensor(a, shared_memory=True))
        times: dict[str, list[float]] = {}  # in the order the counters list the nodes: execution order
        types: dict[str, str] = {}
        for _ in range(runs):
            (paced or unpaced)(request.infer)
            for info in request.get_profiling_info():
                if info.node_type in _NOT_KERNELS or str(info.status).endswith("NOT_RUN"):
                    continue
                times.setdefault(info.node_name, []).append(info.real_time.total_seconds() * 1e3)
                types[info.node_name] = info.node_type
        shapes, fused = _runtime_shapes(compiled), _fused_kinds(compiled, self._ov_model)

        def op(order: int, node: str, t: list[float]) -> OpTime:
            kind, layers = (_KINDS[types[node]], 1) if types[node] in _KINDS else fused.get(node, ("elementwise", 1))
            inputs, out = shapes.get(node, ([], None))
            return OpTime(node, types[node], kind, statistics.median(t), order,
                          math.prod(out) if out is not None else None, weight_elements(kind, inputs, out), layers)

        return [op(order, node, t) for order, (node, t) in enumerate(times.items())]

    def run(self) -> None:
        self.request.infer()

    def run_with_io(self) -> None:
        self.request.infer(self._host_inputs)
        for out in self.compiled.outputs:
            np.array(self.request.get_tensor(out).data)

    def outputs(self) -> list[np.ndarray]:
        return [np.array(self.request.get_tensor(out).data) for out in self.compiled.outputs]

    def close(self) -> None:
        self.request = None
        self.compiled = None


def _fused_kinds(compiled: Any, source: Any) -> dict[str, tuple[str, int]]:
    """Per executed node that fused several of the source model's layers: the kind of the layers
    it fused (``originalLayersNames`` of its runtime info, their types in the source model),
    the first of _FUSED_KIND_ORDER found among them, and how many of them are of that kind (an
    attention subgraph: its two matmuls)."""
    types = {op.get_friendly_name(): op.get_type_name() for op in source.get_ordered_ops()}
    kinds: dict[str, str] = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        try:
            value = op.get_rt_info()["originalLayersNames"]
        except Exception:  # (no such entry)
            continue
        names = [n.strip() for n in str(getattr(value, "value", value)).split(",") if n.strip()]  # (an OVAny)
        found = [_KINDS.get(types.get(name, ""), "elementwise") for name in names]
        if len(names) > 1:
            kind = next((k for k in _FUSED_KIND_ORDER if k in found), "elementwise")
            kinds[op.get_friendly_name()] = (kind, max(1, found.count(kind)))
    return kinds


def _runtime_shapes(compiled: Any) -> dict[str, tuple[list[Any], Any]]:
    """Per executed node of the compiled model (its runtime graph, whose names are the profiling
    counters' names): the shapes of its first two inputs and of its first output (None where
    dynamic)."""

    def shape(partial: Any) -> list[int] | None:
        try:
            return [int(d) for d in partial.to_shape()]
        except Exception:  # a dynamic dimension
            return None

    return {op.get_friendly_name(): ([shape(op.input_value(i).get_partial_shape())
                                      for i in range(min(op.get_input_size(), 2))],
                                     shape(op.get_output_partial_shape(0)) if op.get_output_size() else None)
            for op in compiled.get_runtime_model().get_ordered_ops()}
