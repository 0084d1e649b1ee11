"""PyTorch eager: the reference every other framework is checked against."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tvmbench.backends.base import Backend, BackendOptions, OpTime, Paced, unpaced
from tvmbench.errors import UserError
from tvmbench.models import LoadedModel
from tvmbench.models.base import flatten

# aten ops by operator kind (self times, so nested ops are not counted twice); the rest elementwise.
_KINDS = {
    **dict.fromkeys(("aten::mkldnn_convolution", "aten::_convolution", "aten::convolution", "aten::conv2d",
                     "aten::_slow_conv2d_forward", "aten::thnn_conv2d", "aten::_nnpack_spatial_convolution"), "conv"),
    **dict.fromkeys(("aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm",
                     "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention"),
                    "matmul"),
    **dict.fromkeys(("aten::native_layer_norm", "aten::layer_norm", "aten::native_batch_norm", "aten::batch_norm",
                     "aten::_batch_norm_impl_index", "aten::_native_batch_norm_legit_no_training"), "norm"),
    **dict.fromkeys(("aten::_softmax", "aten::softmax"), "softmax"),
    **dict.fromkeys(("aten::max_pool2d", "aten::max_pool2d_with_indices", "aten::adaptive_avg_pool2d",
                     "aten::_adaptive_avg_pool2d", "aten::avg_pool2d", "aten::mean", "aten::sum"), "pool"),
    **dict.fromkeys(("aten::view", "aten::reshape", "aten::transpose", "aten::permute", "aten::contiguous",
                     "aten::cat", "aten::slice", "aten::select", "aten::flatten", "aten::copy_", "aten::clone",
                     "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::t", "aten::embedding",
                     "aten::index_select", "aten::_unsafe_view", "aten::as_strided", "aten::empty",
                     "aten::split", "aten::chunk", "aten::narrow", "aten::to", "aten::_to_copy"), "layout"),
}


def op_kind(aten_op: str) -> str:
    """The op kind of an aten op (``aten::addmm``: matmul); elementwise when not listed."""
    return _KINDS.get(aten_op, "elementwise")


@dataclass(frozen=True)
class PyTorchOptions(BackendOptions):
    # The model and its floating-point inputs in float64: the exact outputs a narrow accuracy
    # miss is judged against (``accuracy.arbitrate``); never timed.
    float64: bool = False
    # "bfloat16" or "float16": the model run under torch.autocast at that precision, PyTorch's own
    # reduced-precision outputs, whose error a framework's reduced-precision miss is judged by
    # (``accuracy.arbitrate_reduced``); never timed.
    autocast: str | None = None

    def validate(self) -> None:
        if self.autocast not in (None, "bfloat16", "float16"):
            raise UserError(f"autocast={self.autocast!r}: PyTorch autocasts to bfloat16 or float16")


class PyTorchBackend(Backend):
    name = "pytorch"
    result_key = "pytorch"
    label = "PyTorch"
    runs_onnx_files = False
    requires = ("torch",)
    options_type = PyTorchOptions

    @classmethod
    def devices(cls) -> list[str]:
        from tvmbench.targets import query_gpu

        return ["cpu"] + (["cuda"] if query_gpu() is not None else [])

    def prepare(self, model: LoadedModel) -> None:
        import torch

        if model.module is None:
            raise UserError(f"{model.name} is an ONNX file: PyTorch cannot run it (use an ONNX-capable framework)")
        torch.set_num_threads(self.config.threads)
        self.device = torch.device("cuda:0" if self.config.target.device == "cuda" else "cpu")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise UserError("the target is CUDA but PyTorch sees no CUDA device")
        self.module = model.module.to(self.device).eval()
        self.host_inputs = model.torch_inputs()
        if self.options.float64:
            import copy

            self.module = copy.deepcopy(self.module).double()  # .double() converts in place
            self.host_inputs = tuple(t.double() if t.is_floating_point() else t for t in self.host_inputs)
        self.inputs = tuple(t.to(self.device) for t in self.host_inputs)
        self._sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        self._no_grad = torch.inference_mode
        if self.options.autocast:
            dtype = getattr(torch, self.options.autocast)
            self._no_grad = lambda: _both(torch.inference_mode(), torch.autocast(self.device.type, dtype=dtype))
        self._out: Any = None
        # (the version as a plain str: a TorchVersion makes whoever unpickles it import torch)
        self.info = {"device": str(self.device), "version": str(torch.__version__), "mode": "eager",
                     "threads": torch.get_num_threads(), **({"dtype": "float64"} if self.options.float64 else {}),
                     **({"autocast": self.options.autocast} if self.options.autocast else {})}

    def run(self) -> None:
        with self._no_grad():
            self._out = self.module(*self.inputs)
        self._sync()

    def op_profile(self, runs: int, paced: Paced | None = None) -> list[OpTime]:
        """The PyTorch profiler's self CPU time per aten op, per inference (PyTorch eager has no
        layer names below the module's ops; each op is one row)."""
        import torch

        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(runs):
                (paced or unpaced)(self.run)
        return [OpTime(e.key, e.key, op_kind(e.key), e.self_cpu_time_total / runs / 1e3)
                for e in prof.key_averages() if e.self_cpu_time_total > 0 and e.key.startswith("aten::")]

    def run_with_io(self) -> None:
        with self._no_grad():
            out = self.module(*(t.to(self.device) for t in self.host_inputs))
            self._out = [t.cpu() for t in flatten(out)]
        self._sync()

    def outputs(self) -> list[np.ndarray]:
        floats = (lambda t: t.double()) if self.options.float64 else (lambda t: t.float())
        return [floats(t.detach()).cpu().numpy() if t.dtype.is_floating_point else t.detach().cpu().numpy()
                for t in flatten(self._out)]

    def close(self) -> None:
        self.module = None
        self._out = None


@contextlib.contextmanager
def _both(first: Any, second: Any) -> Iterator[None]:
    with first, second:
        yield
