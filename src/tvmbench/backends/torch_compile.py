"""torch.compile (TorchInductor): PyTorch's own compiler, the peer TVM most often replaces.

Compilation is lazy in PyTorch (it happens at the first call), so ``prepare`` makes that first
call and reports it as ``compile_s``: the timed runs then measure the compiled graph only, and
the cold compile cost is still in the result. ``--torch-compile-mode`` selects the mode
(``default``, ``reduce-overhead``, ``max-autotune``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tvmbench.backends.base import OpTime, Paced, unpaced
from tvmbench.backends.pytorch import PyTorchBackend, PyTorchOptions
from tvmbench.errors import UserError, headline
from tvmbench.models import LoadedModel

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class TorchCompileOptions(PyTorchOptions):  # its eager parts read PyTorch's
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
        self._eager = self.module
        self.module = torch.compile(self.module, mode=mode, dynamic=False)
        t0 = time.perf_counter()
        try:
            self.run()
        except Exception as e:  # inductor failures are long; the first line says what broke
            raise RuntimeError(f"torch.compile failed: {type(e).__name__}: {headline(e)}") from e
        self.phases_s["compile_s"] = time.perf_counter() - t0
        self.info.update({"mode": f"torch.compile ({mode})", "backend": "inductor"})

    def op_profile(self, runs: int, paced: Paced | None = None) -> list[OpTime]:
        """The PyTorch profiler's self CPU time per kernel of the compiled graph, per inference.

        Inductor's generated C++ kernels are invisible to the profiler unless they are compiled
        with kernel profiling on, which adds a profiler call to each: so a second copy of the
        model is compiled that way for the profile, and the end-to-end time stays the plain
        build's. Rows are Inductor's fused kernels (``graph_0_cpp_fused_add_relu_3``) and the
        library calls it keeps (``aten::addmm``, ``mkldnn::_convolution_pointwise``)."""
        import torch
        import torch._inductor.config as inductor_config

        def compiled() -> Any:  # (in a turn: compiling beside another framework's timing slows it)
            with inductor_config.patch({"cpp.enable_kernel_profile": True}):
                torch._dynamo.reset()
                profiled = torch.compile(self._eager, mode=self.options.torch_compile_mode, dynamic=False)
                with self._no_grad():
                    profiled(*self.inputs)
            return profiled

        profiled = (paced or unpaced)(compiled)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(runs):
                with self._no_grad():
                    (paced or unpaced)(lambda: profiled(*self.inputs))
        return [OpTime(e.key, e.key, kind, e.self_cpu_time_total / runs / 1e3)
                for e in prof.key_averages() if e.self_cpu_time_total > 0
                for kind in [inductor_kind(e.key)] if kind is not None]


_LAYOUT_WORDS = {"clone", "cat", "permute", "view", "transpose", "copy", "embedding", "index", "select", "slice",
                 "expand", "constant", "pad", "stack", "split"}


def inductor_kind(key: str) -> str | None:
    """The op kind of a profiler row of a compiled graph; None for rows that are not kernels
    (the compiled region's own bookkeeping)."""
    from tvmbench.backends.pytorch import op_kind

    if key.startswith(("aten::", "mkldnn::")):
        if "convolution" in key:
            return "conv"
        if "linear" in key:
            return "matmul"
        return op_kind(key)
    if "cpp_fused" not in key:
        return None
    words = [w for w in key.split("cpp_fused", 1)[1].split("_") if w and not w.isdigit()]
    for kind, marks in (("softmax", ("softmax",)), ("norm", ("norm",)), ("pool", ("pool2d", "mean")),
                        ("matmul", ("bmm", "mm"))):
        if any(m in w for w in words for m in marks):
            return kind
    return "layout" if words and all(w in _LAYOUT_WORDS for w in words) else "elementwise"
