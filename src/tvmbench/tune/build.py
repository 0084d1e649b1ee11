"""What MetaSchedule needs to work in TVM 0.27 on a machine like ours.

``import tvm.s_tir.tensor_intrin`` takes ~40 s here (almost all of it the CUDA tensor-core
intrinsics), and MetaSchedule's default builder imports it in every builder worker, which it
re-creates for every batch, with a 30 s timeout: every build times out and tuning never measures
anything. :func:`fast_build` is the default build without that import, and
:func:`stub_cuda_tensor_intrin` keeps the main process from paying for it when the target is a CPU.
Both live in an installed module because the builder pickles ``fast_build`` by reference.
Where the intrinsics are needed (CUDA builds and tuning), :func:`import_cuda_tensor_intrin` imports
them in ~3 s instead of 40-250 s.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import types
from collections.abc import Iterator
from typing import Any

_CUDA_INTRIN = "tvm.s_tir.tensor_intrin.cuda"


def stub_cuda_tensor_intrin() -> None:
    """For CPU tuning only: make the CUDA tensor intrinsics module an empty one (call before
    importing meta_schedule's tuning context)."""
    if _CUDA_INTRIN not in sys.modules:
        sys.modules[_CUDA_INTRIN] = types.ModuleType(_CUDA_INTRIN)


def unstub_cuda_tensor_intrin() -> None:
    """Put the real CUDA tensor intrinsics back: DLight's tensor-core matmul rule needs them, and a
    CUDA build can follow a CPU tuning run in one process (tests, ``compare`` over targets)."""
    stub = sys.modules.get(_CUDA_INTRIN)
    if stub is not None and getattr(stub, "__file__", None) is None:
        del sys.modules[_CUDA_INTRIN]
        parent = sys.modules.get(_CUDA_INTRIN.rsplit(".", 1)[0])
        if parent is not None and getattr(parent, "cuda", None) is stub:
            delattr(parent, "cuda")


def _bare_frames(frame: Any) -> list[inspect.FrameInfo]:
    frames = []
    while frame is not None:
        frames.append(inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name,
                                        None, None))
        frame = frame.f_back
    return frames


@contextlib.contextmanager
def _bare_frame_inspection() -> Iterator[None]:
    """TVMScript's parser calls ``inspect.stack()`` for every ``@T.prim_func`` to find closure
    variables, and each call reads the source of every frame on the stack and looks its module up
    among all loaded modules. The tensor intrinsics are ~500 such functions: 46 s in a process with
    torch and transformers loaded, 150-250 s deep inside pytest. The parser only reads the frames'
    locals and names (source lines only to spot functions inside ``@I.ir_module`` classes, and the
    intrinsics define none), so frames without source lines serve it: 2.8 s."""
    stack, outer = inspect.stack, inspect.getouterframes
    inspect.stack = lambda context=1: _bare_frames(sys._getframe(1))  # type: ignore[assignment]
    inspect.getouterframes = lambda frame, context=1: _bare_frames(frame)  # type: ignore[assignment]
    try:
        yield
    finally:
        inspect.stack, inspect.getouterframes = stack, outer


def import_cuda_tensor_intrin() -> None:
    """Import the real tensor intrinsics (DLight's tensor-core matmul rule and MetaSchedule's CUDA
    tuning need them), fast."""
    unstub_cuda_tensor_intrin()
    if _CUDA_INTRIN in sys.modules:
        return
    with _bare_frame_inspection():
        importlib.import_module(_CUDA_INTRIN)


def fast_build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default_build minus the tensor_intrin import; returns a runtime.Module."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def cross_export(mod: Any) -> str:
    """Export a candidate built for aarch64 with the cross compiler, for measurement on a remote
    aarch64 device over RPC (the default export uses the host compiler)."""
    import shutil
    import tempfile

    from tvm.support import cc

    compiler = "aarch64-linux-gnu-g++"
    if shutil.which(compiler) is None:
        raise RuntimeError(f"{compiler} is not installed (apt-get install g++-aarch64-linux-gnu)")
    path = tempfile.mkstemp(suffix=".so", prefix="tvmbench-candidate-")[1]
    mod.export_library(path, fcompile=cc.cross_compiler(compiler))
    return path
