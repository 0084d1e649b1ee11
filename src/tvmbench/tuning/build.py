"""What MetaSchedule needs to work in TVM 0.27 on a machine like ours.

``import tvm.s_tir.tensor_intrin`` takes ~40 s here (almost all of it the CUDA tensor-core
intrinsics), and MetaSchedule's default builder imports it in every builder worker, which it
re-creates for every batch, with a 30 s timeout: every build times out and tuning never measures
anything. :func:`fast_build` is the default build without that import; ``compile/intrinsics.py``
imports them fast in the main process (the CUDA ones only for CUDA). ``fast_build`` lives in an
installed module because the builder pickles it by reference.
"""

from __future__ import annotations

import functools
from typing import Any


def fast_build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default_build minus the tensor_intrin import; returns a runtime.Module. For
    this machine's own CPU, lowered as a native build lowers the model's kernels
    (``compile/codegen.py``: the next weight panel prefetched where the rule marked it, register
    tiles' accumulators on the stack), so a candidate is timed as it will run in the model."""
    import platform

    import tvm
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    triple = str(target.attrs.get("mtriple", "") or "")
    if str(target.kind.name) == "llvm" and (not triple or triple.startswith(platform.machine())):
        from tvmbench.compile import codegen

        with codegen.lowering_context():
            return tvm.tirx.build(mod, target=target, pipeline=codegen.PIPELINE)
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


WORKER_USES = 64  # builds per worker process before it is replaced (MetaSchedule's workers leak)


def local_builder(**kwargs: Any) -> Any:
    """MetaSchedule's LocalBuilder (same arguments) that keeps its worker processes.

    MetaSchedule's builder starts a pool of workers for every batch of candidates (its workers
    leak memory over many uses) and another for a start-up sanity check that only looks up the
    build functions. Each start imports TVM (2 s even without torch, see ``light_workers``), which
    Droplet's small batches and the operator lab's one-kernel builds paid every time. This one
    keeps its pool, replaces each worker after ``WORKER_USES`` builds, and skips the check (a
    missing function fails each candidate with its error). A build that times out or crashes
    takes its worker with it; the pool starts another."""
    from tvmbench.tvm_exec import light_workers

    light_workers()
    return _quick_builder_class()(**kwargs)


@functools.cache
def _quick_builder_class() -> Any:
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import LocalBuilder

    @derived_object
    class QuickLocalBuilder(LocalBuilder._cls):  # type: ignore[name-defined,misc]
        def _sanity_check(self) -> None:
            return None

        def build(self, build_inputs: list[Any]) -> list[Any]:
            return _build_in_pool(self, build_inputs)

    return QuickLocalBuilder


def _build_in_pool(builder: Any, build_inputs: list[Any]) -> list[Any]:
    """``LocalBuilder.build`` with the builder's own lasting pool (started on first use)."""
    from tvm.s_tir.meta_schedule.builder import BuilderResult
    from tvm.s_tir.meta_schedule.builder import local_builder as ms_local
    from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

    if getattr(builder, "pool", None) is None:
        builder.pool = PopenPoolExecutor(max_workers=builder.max_workers, timeout=builder.timeout_sec,
                                         initializer=builder.initializer, maximum_process_uses=WORKER_USES)
    work = [(builder.f_build, builder.f_export, b.mod, b.target, ms_local._serialize_params(b.params))
            for b in build_inputs]
    results = []
    for done in builder.pool.map_with_error_catching(lambda x: ms_local._worker_func(*x), work):
        if done.status == StatusKind.COMPLETE:
            results.append(BuilderResult(done.value, None))
        elif done.status == StatusKind.TIMEOUT:
            results.append(BuilderResult(None, f"LocalBuilder: Timeout, killed after {builder.timeout_sec} seconds"))
        else:
            results.append(BuilderResult(None, f"LocalBuilder: An exception occurred\n{done.value}"))
    return results
