"""ONNX Runtime on the shared ONNX export: CPU EP, or CUDA / TensorRT EPs when a GPU is the target.

Inputs are bound once with IOBinding (on the device for GPU EPs), so a timed ``run`` is the
session's own work, the same policy as every other framework.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tvmbench.backends.base import Backend, OpTime, Paced, inputs_by_name, unpaced, weight_elements
from tvmbench.errors import UserError
from tvmbench.models import LoadedModel

# ONNX Runtime's op types (after its graph fusions) by operator kind; the rest is elementwise.
_KINDS = {
    **dict.fromkeys(("Conv", "FusedConv", "NhwcFusedConv", "ConvTranspose", "QLinearConv", "NchwcConv"), "conv"),
    **dict.fromkeys(("MatMul", "Gemm", "FusedMatMul", "FusedGemm", "MatMulInteger", "Attention",
                     "MultiHeadAttention", "QLinearMatMul", "GRU", "LSTM", "RNN"), "matmul"),
    **dict.fromkeys(("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                     "BatchNormalization", "InstanceNormalization", "EmbedLayerNormalization"), "norm"),
    "Softmax": "softmax",
    **dict.fromkeys(("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum",
                     "ReduceMax"), "pool"),
    **dict.fromkeys(("Transpose", "Reshape", "Concat", "Slice", "Gather", "Split", "Squeeze", "Unsqueeze",
                     "Flatten", "Pad", "Expand", "ReorderInput", "ReorderOutput", "Shape", "Cast",
                     "GatherElements", "Tile"), "layout"),
}


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    result_key = "onnxruntime"
    label = "ONNX RT"
    requires = ("onnxruntime", "onnx")
    extra = "onnxruntime"

    @classmethod
    def devices(cls) -> list[str]:
        import onnxruntime as ort

        providers = ort.get_available_providers()
        return ["cpu"] + (["cuda"] if "CUDAExecutionProvider" in providers else []) + \
            (["tensorrt"] if "TensorrtExecutionProvider" in providers else [])

    def prepare(self, model: LoadedModel) -> None:
        import onnxruntime as ort

        from tvmbench.models.onnx_export import onnx_file

        exported = onnx_file(model, use_cache=self.config.use_cache)
        self.phases_s["export_onnx_s"] = exported.export_s
        self._onnx_path = str(exported.path)
        opts = self._session_options()
        on_gpu = self.config.target.device == "cuda"
        available = ort.get_available_providers()
        if on_gpu:
            wanted = [p for p in ("CUDAExecutionProvider",) if p in available]
            if not wanted:
                raise UserError("the target is CUDA but this onnxruntime has no CUDAExecutionProvider "
                                "(pip install onnxruntime-gpu)")
            providers = wanted + ["CPUExecutionProvider"]
        else:
            providers = ["CPUExecutionProvider"]
        t0 = time.perf_counter()
        self._providers = providers
        self.session = ort.InferenceSession(str(exported.path), sess_options=opts, providers=providers)
        self.phases_s["compile_s"] = time.perf_counter() - t0
        device = "cuda" if on_gpu else "cpu"
        self.binding = self.session.io_binding()
        self._host_inputs = inputs_by_name([i.name for i in self.session.get_inputs()], model.inputs)
        self._device_inputs = {n: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a), device, 0)
                               for n, a in self._host_inputs.items()}
        for n, v in self._device_inputs.items():
            self.binding.bind_ortvalue_input(n, v)
        for out in self.session.get_outputs():
            self.binding.bind_output(out.name, device)
        self.info = {"device": device, "version": ort.__version__, "providers": self.session.get_providers(),
                     "threads": self.config.threads, "graph_optimization": "ORT_ENABLE_ALL",
                     "onnx_exporter": exported.exporter, "onnx_path": str(exported.path)}

    def _session_options(self) -> Any:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = self.config.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        return opts

    def op_profile(self, runs: int, paced: Paced | None = None) -> list[OpTime]:
        """ONNX Runtime's session profiling (a second session, same options, profiling on): per
        node, the median of its kernel time over the runs."""
        import json
        import os
        import statistics
        import tempfile

        import onnxruntime as ort

        opts = self._session_options()
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="tvmbench-ort-"), "profile")
        session = (paced or unpaced)(  # (in a turn: building a session beside another framework's timing slows it)
            lambda: ort.InferenceSession(self._onnx_path, sess_options=opts, providers=self._providers))
        for _ in range(runs):
            (paced or unpaced)(lambda: session.run(None, self._host_inputs))
        path = session.end_profiling()
        with open(path) as f:
            events = json.load(f)
        os.remove(path)
        times: dict[str, list[float]] = {}
        types: dict[str, str] = {}
        elements: dict[str, int | None] = {}
        weights: dict[str, int | None] = {}
        for e in sorted(events, key=lambda e: e.get("ts", 0)):  # so nodes are first seen in execution order
            if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
                node = e["name"].removesuffix("_kernel_time")
                times.setdefault(node, []).append(float(e["dur"]) / 1e3)
                types[node] = e.get("args", {}).get("op_name", "?")
                args = e.get("args", {})
                elements.setdefault(node, _elements(args, "output_type_shape", 0))
                weights.setdefault(node, weight_elements(_KINDS.get(types[node], "elementwise"),
                                                         _shapes(args, "input_type_shape"),
                                                         (_shapes(args, "output_type_shape") or [None])[0]))
        return [OpTime(node, types[node], _KINDS.get(types[node], "elementwise"), statistics.median(t), order,
                       elements[node], weights[node]) for order, (node, t) in enumerate(times.items())]

    def run(self) -> None:
        self.session.run_with_iobinding(self.binding)  # synchronous: returns when outputs are ready

    def run_with_io(self) -> None:
        self.session.run(None, self._host_inputs)  # returns the outputs in host memory

    def outputs(self) -> list[np.ndarray]:
        return [np.asarray(o) for o in self.binding.copy_outputs_to_cpu()]

    def close(self) -> None:
        self.binding = None
        self.session = None


def _shapes(args: dict[str, Any], key: str) -> list[Any]:
    """A profiled node's input or output shapes (``input_type_shape``: ``[{"float": [1, 64]}]``)."""
    try:
        return [next(iter(shape.values())) for shape in args.get(key) or []]
    except (AttributeError, StopIteration):
        return []


def _elements(args: dict[str, Any], key: str, index: int) -> int | None:
    """Elements of a profiled node's ``index``-th output or input, else None."""
    import math

    try:
        return math.prod(_shapes(args, key)[index])
    except (IndexError, TypeError):
        return None
