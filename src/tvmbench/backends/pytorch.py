"""PyTorch eager: the reference every other framework is checked against."""

from __future__ import annotations

from typing import Any

import numpy as np

from tvmbench.backends.base import Backend, flatten
from tvmbench.errors import UserError
from tvmbench.models import LoadedModel


class PyTorchBackend(Backend):
    name = "pytorch"
    result_key = "pytorch"
    label = "PyTorch"
    runs_onnx_files = False
    requires = ("torch",)

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
        self.inputs = tuple(t.to(self.device) for t in self.host_inputs)
        self._sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        self._no_grad = torch.inference_mode
        self._out: Any = None
        self.info = {"device": str(self.device), "version": torch.__version__, "mode": "eager",
                     "threads": torch.get_num_threads()}

    def run(self) -> None:
        with self._no_grad():
            self._out = self.module(*self.inputs)
        self._sync()

    def run_with_io(self) -> None:
        with self._no_grad():
            out = self.module(*(t.to(self.device) for t in self.host_inputs))
            self._out = [t.cpu() for t in flatten(out)]
        self._sync()

    def outputs(self) -> list[np.ndarray]:
        return [t.detach().float().cpu().numpy() if t.dtype.is_floating_point else t.detach().cpu().numpy()
                for t in flatten(self._out)]

    def close(self) -> None:
        self.module = None
        self._out = None
