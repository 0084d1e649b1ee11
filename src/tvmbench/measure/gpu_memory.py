"""Peak device memory of a framework's worker, through NVML.

NVML sees what each process holds on the GPU whatever allocated it (PyTorch's caching allocator,
TVM's pooled allocator, ONNX Runtime's arena, TensorRT's engine), so every framework is measured
the same way, from outside, like host RSS. It needs the ``nvidia-ml-py`` package (the ``gpu``
extra) and a driver; without them the field is simply absent from the result.
"""

from __future__ import annotations

from typing import Any


class GpuMemorySampler:
    def __init__(self, device_index: int = 0) -> None:
        self.handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        except Exception:  # no package, no driver, no device
            self.handle = None

    @property
    def available(self) -> bool:
        return self.handle is not None

    def used_by(self, pids: set[int]) -> int | None:
        """Bytes of device memory held by the processes ``pids`` right now (None: cannot tell)."""
        if self.handle is None:
            return None
        try:
            procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except Exception:
            return None
        return sum(int(p.usedGpuMemory or 0) for p in procs if p.pid in pids)
