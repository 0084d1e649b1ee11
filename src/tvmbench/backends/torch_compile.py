"""torch.compile (TorchInductor): PyTorch's own compiler, the peer TVM most often replaces.

Compilation is lazy in PyTorch (it happens at the first call), so ``prepare`` makes that first
call and reports it as ``compile_s``: the timed runs then measure the compiled graph only, and
the cold compile cost is still in the result. ``--torch-compile-mode`` selects the mode
(``default``, ``reduce-overhead``, ``max-autotune``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tvmbench.backends.base import BackendOptions
from tvmbench.backends.pytorch import PyTorchBackend
from tvmbench.errors import UserError, headline
from tvmbench.models import LoadedModel

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class TorchCompileOptions(BackendOptions):
    torch_compile_mode: str = "default"

    def validate(self) -> None:
        if self.torch_compile_mode not in MODES:
            raise UserError(f"--torch-compile-mode must be one of {', '.join(MODES)}, got '{self.torch_compile_mode}'")


class TorchCompileBackend(PyTorchBackend):
    name = "torch_compile"
    result_key = "torch_compile"
    label = "torch.compile"
    requires = ("torch",)
    options_type = TorchCompileOptions

    def prepare(self, model: LoadedModel) -> None:
        import torch

        super().prepare(model)
        mode = self.options.torch_compile_mode
        self.module = torch.compile(self.module, mode=mode, dynamic=False)
        t0 = time.perf_counter()
        try:
            self.run()
        except Exception as e:  # inductor failures are long; the first line says what broke
            raise RuntimeError(f"torch.compile failed: {type(e).__name__}: {headline(e)}") from e
        self.phases_s["compile_s"] = time.perf_counter() - t0
        self.info.update({"mode": f"torch.compile ({mode})", "backend": "inductor"})
