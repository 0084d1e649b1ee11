"""TVM's tensor intrinsics, imported fast, the CUDA ones stubbed out where no GPU is targeted.

``import tvm.s_tir.tensor_intrin`` takes ~40 s here with the CUDA tensor-core intrinsics, and
with them stubbed the other ISAs' (ROCm, Arm, Hexagon, dot products) still took 67 s in a tuning
worker on a Zen 3 host: MetaSchedule's tuning context imports the package for every CPU task.
A CUDA build needs the CUDA ones (DLight's tensor-core matmul rule), and so does CUDA tuning.
:func:`import_tensor_intrin` imports what the target needs in a few seconds instead.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import types
from collections.abc import Iterator
from typing import Any

CUDA_INTRIN = "tvm.s_tir.tensor_intrin.cuda"


def stub_cuda_tensor_intrin() -> None:
    """For CPU tuning only: make the CUDA tensor intrinsics module an empty one (call before
    importing meta_schedule's tuning context)."""
    if CUDA_INTRIN not in sys.modules:
        sys.modules[CUDA_INTRIN] = types.ModuleType(CUDA_INTRIN)


def unstub_cuda_tensor_intrin() -> None:
    """Put the real CUDA tensor intrinsics back: DLight's tensor-core matmul rule needs them, and a
    CUDA build can follow a CPU tuning run in one process (tests, ``compare`` over targets)."""
    stub = sys.modules.get(CUDA_INTRIN)
    if stub is not None and getattr(stub, "__file__", None) is None:
        del sys.modules[CUDA_INTRIN]
        parent = sys.modules.get(CUDA_INTRIN.rsplit(".", 1)[0])
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


def import_tensor_intrin(target_kind: str) -> None:
    """Import ``tvm.s_tir.tensor_intrin`` fast (MetaSchedule's tuning context imports it for every
    task; a CUDA build's tensor-core matmul rule needs it): the real CUDA intrinsics when
    ``target_kind`` is "cuda", an empty stand-in for them otherwise."""
    if target_kind == "cuda":
        unstub_cuda_tensor_intrin()
    else:
        stub_cuda_tensor_intrin()
    with _bare_frame_inspection():  # (importing the CUDA module imports the package first)
        importlib.import_module(CUDA_INTRIN if target_kind == "cuda" else CUDA_INTRIN.rsplit(".", 1)[0])


def register_tvmbench_intrinsics(text: str) -> list[str]:
    """Register every tensor intrinsic of tvmbench's own (``bf16.DOT_16x2``, ``amx.register``'s)
    that ``text`` (a tuning database's records) names, so its traces replay in this process: the
    rules register them as they schedule, and a record applied without the rule running found
    them missing. Returns the names registered."""
    import re

    from tvmbench.compile import amx, bf16

    done = []
    for name in sorted(set(re.findall(r'"(tvmbench_[a-z0-9_]+)"', text))):
        if name in (bf16.DOT_16x2, bf16.DOT_16x2_ROWS, bf16.DOT_16x2_BOTH, bf16.DOT_8x2):
            bf16.register()
        elif not amx.register_named(name):
            continue
        done.append(name)
    return done
