"""Frameworks that fail the way real ones do, loaded as plugins (TVMBENCH_BACKENDS) so that a real
`tvmbench run` starts them in real worker processes next to TVM: one segfaults while it prepares
(a native crash in a converter), one hangs in its first inference (a deadlocked runtime), one
allocates without bound (a leak)."""

from __future__ import annotations

import ctypes
import time

import numpy as np

from tvmbench.backends.base import Backend

PLUGINS = "segfaults=tests.faulty_backend:Segfaults,hangs=tests.faulty_backend:Hangs,hogs=tests.faulty_backend:Hogs"


class Faulty(Backend):
    requires = ()
    runs_onnx_files = True

    def prepare(self, model) -> None:
        self.result = [np.zeros(1, np.float32)]

    def run(self) -> None:
        pass

    def run_with_io(self) -> None:
        self.run()

    def outputs(self) -> list[np.ndarray]:
        return self.result


class Segfaults(Faulty):
    name = result_key = label = "segfaults"

    def prepare(self, model) -> None:
        ctypes.string_at(0)  # reads address 0: SIGSEGV


class Hangs(Faulty):
    name = result_key = label = "hangs"

    def run(self) -> None:
        time.sleep(3600)


class Hogs(Faulty):
    name = result_key = label = "hogs"

    def prepare(self, model) -> None:
        held = []
        while True:  # 64 MiB at a time, every page written, until the worker's limit stops it
            held.append(np.ones(8 << 20))
