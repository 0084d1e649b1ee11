"""TVM's programs (``python -m tvm.exec.NAME``) and their worker processes without torch.

``tvm_ffi`` imports torch whenever it is installed (for DLPack exchange): 4-8 s of a process's
start on these hosts, against about 1 s for TVM without it. TVM's own programs never touch
torch: MetaSchedule's workers (its process pools start them afresh for every batch of
candidates, ``tuning/build.py``), and the RPC tracker and device server (``tvmbench rpc``), which
serve from a worker of such a pool too. So this hides torch before importing TVM: ``import
torch`` fails here as if torch were not installed, and ``tvm_ffi`` goes on without it; a code
path that needed torch would fail loudly (``hide_torch``).

    python -m tvmbench.tvm_exec tvm.exec.rpc_server --tracker ... (the program's own arguments)
"""

from __future__ import annotations

import functools
import importlib.abc
import runpy
import sys
from typing import Any

PROGRAMS = ("tvm.exec.popen_worker", "tvm.exec.rpc_server", "tvm.exec.rpc_tracker")


def command(program: str, *args: str) -> list[str]:
    """The command line that runs TVM's ``program`` (one of ``PROGRAMS``) without torch."""
    assert program in PROGRAMS, program
    return [sys.executable, "-m", "tvmbench.tvm_exec", program, *args]


class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("torch is hidden in this process (tvmbench runs it without torch)", name=name)
        return None


def hide_torch() -> None:
    """Make ``import torch`` fail in this process as if torch were not installed.

    A finder that refuses it, not the usual ``sys.modules["torch"] = None``: libraries that look
    for torch in ``sys.modules`` (scipy's array API helpers) take a None entry for the module
    itself, and ``import scipy.stats`` failed on it ("'NoneType' object has no attribute
    'Tensor'"), which made a package's run fail as soon as the timer needed scipy."""
    if not any(isinstance(f, _NoTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoTorch())


@functools.cache
def light_workers() -> None:
    """Make TVM's process pools in this process start their worker without torch (2 s instead of
    6.8 s on a Zen 3 host: MetaSchedule's builder replaces its workers after ``WORKER_USES``
    builds; the RPC tracker and server each serve from one). Only the worker command changes: the
    pool module's ``subprocess`` is replaced by a view of it whose ``Popen`` rewrites that one
    command."""
    import subprocess
    import types

    from tvm.support import popen_pool

    def popen(cmd: list[str], *args: Any, **kwargs: Any) -> Any:
        if list(cmd[1:3]) == ["-m", "tvm.exec.popen_worker"]:
            cmd = command("tvm.exec.popen_worker", *cmd[3:])
        return subprocess.Popen(cmd, *args, **kwargs)

    view = types.ModuleType("subprocess")
    view.__dict__.update(vars(subprocess))
    view.Popen = popen  # type: ignore[attr-defined]
    popen_pool.subprocess = view  # type: ignore[attr-defined]


if __name__ == "__main__":
    hide_torch()
    program = sys.argv[1]
    sys.argv = [program, *sys.argv[2:]]  # as if started as ``python -m program ...``
    if program != "tvm.exec.popen_worker":
        light_workers()  # (the tracker and the server serve from a pool's worker)
    runpy.run_module(program, run_name="__main__", alter_sys=True)
