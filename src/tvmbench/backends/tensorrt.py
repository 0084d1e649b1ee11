"""TensorRT through its ONNX parser, on the shared ONNX export; fp32, or fp16 with ``precision``.

TensorRT runs only on NVIDIA GPUs: on any other machine (or with a CPU target) the framework is
*unavailable* and the run records "unavailable: needs an NVIDIA GPU with TensorRT" for it, while
the other frameworks are measured as usual. Engines are built once per (ONNX file, precision,
GPU) and cached; the build is reported as the compile phase. Inputs and outputs live in CUDA
memory allocated through PyTorch (no extra dependency such as pycuda), and ``run`` waits for the
stream, so the timer measures the engine's work.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from tvmbench.backends.base import Backend, BackendOptions
from tvmbench.errors import UserError
from tvmbench.models import LoadedModel

PRECISIONS = ("fp32", "fp16")


@dataclass(frozen=True)
class TensorRTOptions(BackendOptions):
    precision: str = "fp32"

    def validate(self) -> None:
        if self.precision not in PRECISIONS:
            raise UserError(f"TensorRT precision '{self.precision}' is not supported; use one of "
                            f"{', '.join(PRECISIONS)}")


class TensorRTBackend(Backend):
    name = "tensorrt"
    result_key = "tensorrt"
    label = "TensorRT"
    reduced_precision = True
    options_type = TensorRTOptions
    requires = ("tensorrt", "onnx", "torch")
    extra = "tensorrt"

    @classmethod
    def unavailable_reason(cls, target: Any | None = None) -> str | None:
        from tvmbench.targets import query_gpu

        if query_gpu() is None:
            return "unavailable: needs an NVIDIA GPU with TensorRT (this machine has no CUDA device)"
        if target is not None and target.device != "cuda":
            return "unavailable: TensorRT runs on NVIDIA GPUs; pass --target cuda to compare on the GPU"
        return None

    @classmethod
    def devices(cls) -> list[str]:
        return [] if cls.unavailable_reason() else ["cuda"]

    def prepare(self, model: LoadedModel) -> None:
        import tensorrt as trt
        import torch

        from tvmbench.files import replacing
        from tvmbench.models.onnx_export import onnx_file
        from tvmbench.paths import cache_dir

        reason = self.unavailable_reason(self.config.target)
        if reason:
            raise UserError(reason)
        precision = self.options.precision
        exported = onnx_file(model, use_cache=self.config.use_cache)
        self.phases_s["export_onnx_s"] = exported.export_s
        logger = trt.Logger(trt.Logger.WARNING)
        gpu = torch.cuda.get_device_name(0)
        key = hashlib.sha256(f"{exported.path}|{exported.path.stat().st_mtime_ns}|{precision}|{gpu}|"
                             f"{trt.__version__}".encode()).hexdigest()[:16]
        engine_path = cache_dir("tensorrt", key) / "model.engine"
        t0 = time.perf_counter()
        if not (self.config.use_cache and engine_path.is_file()):
            builder = trt.Builder(logger)
            network = builder.create_network(0)  # explicit batch (the only mode in TensorRT 10)
            parser = trt.OnnxParser(network, logger)
            if not parser.parse_from_file(str(exported.path)):
                errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
                raise RuntimeError(f"TensorRT's ONNX parser rejected the model: {errors}")
            config = builder.create_builder_config()
            if precision == "fp16":
                config.set_flag(trt.BuilderFlag.FP16)
            serialized = builder.build_serialized_network(network, config)
            if serialized is None:
                raise RuntimeError("TensorRT could not build an engine for this model (see its log above)")
            with replacing(engine_path, suffix=".engine") as tmp:
                tmp.write_bytes(bytes(serialized))
        self.engine = trt.Runtime(logger).deserialize_cuda_engine(engine_path.read_bytes())
        self.phases_s["compile_s"] = time.perf_counter() - t0
        self.context = self.engine.create_execution_context()
        self.stream = torch.cuda.Stream()
        self._host_inputs = [np.ascontiguousarray(a) for a in model.inputs.values()]
        self._inputs: list[Any] = []
        self._outputs: list[Any] = []
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        if len(inputs) != len(self._host_inputs):
            raise RuntimeError(f"the engine takes {len(inputs)} inputs, the model has {len(self._host_inputs)}")
        host = dict(zip(inputs, self._host_inputs, strict=True))
        for n in names:
            if n in host:
                self.context.set_input_shape(n, host[n].shape)
        for n in names:
            dtype = torch.from_numpy(np.zeros(0, dtype=trt.nptype(self.engine.get_tensor_dtype(n)))).dtype
            if n in host:
                tensor = torch.from_numpy(host[n]).to(device="cuda", dtype=dtype)
                self._inputs.append(tensor)
            else:
                tensor = torch.empty(tuple(self.context.get_tensor_shape(n)), dtype=dtype, device="cuda")
                self._outputs.append(tensor)
            self.context.set_tensor_address(n, tensor.data_ptr())
        self.info = {"device": f"cuda:0 ({gpu})", "version": trt.__version__, "precision": precision,
                     "onnx_exporter": exported.exporter, "engine": str(engine_path)}

    def run(self) -> None:
        self.context.execute_async_v3(self.stream.cuda_stream)
        self.stream.synchronize()

    def run_with_io(self) -> None:
        import torch

        for dev, host in zip(self._inputs, self._host_inputs, strict=True):
            dev.copy_(torch.from_numpy(host), non_blocking=False)
        self.run()
        for t in self._outputs:
            t.cpu()  # each output copied back to host memory

    def outputs(self) -> list[np.ndarray]:
        return [t.float().cpu().numpy() if t.dtype.is_floating_point else t.cpu().numpy() for t in self._outputs]

    def close(self) -> None:
        self.context = None
        self.engine = None
