"""Kernels compiled on every core: TIR lowering and LLVM code generation split across threads.

TVM compiles a model's kernels in one LLVM module on one thread: for DenseNet-201 (411 kernels)
TIR lowering and LLVM took 63 of its 82 s of compile time on this 2-core machine, while the other
core idled. TVM's lowering and LLVM release the GIL, and several TVM object files link into one
shared library (``export_library``'s ``addons``), so the kernels are dealt into one shard per
core, each lowered, compiled and written as an object file on its own thread, while this thread
builds the VM executable without them (writing the machine code is the slow part of
``export_library``, so it is done on the shards' threads too). The Relax functions call an offloaded
kernel by its symbol (``call_dps_packed``), which the VM resolves in the loaded library exactly as
it resolves a kernel compiled in (same name, same calling convention, same memory planning:
CallTIRRewrite treats both calls alike).

Only for kernels a native LLVM build exports to a library: a CUDA build and a cross-compiled
one are built as TVM builds them.

Three changes to TVM's TIR lowering for these kernels, measured on DenseNet-201 at 320 px (224
kernels, one core: 77 s of TIR lowering and LLVM before, 27 s after), each a constant here so
``benchmarks/rule_ab.py`` can A/B it:

- ``ARGUMENT_CHECKS``: TVM's packed-function entry checks each argument (type, rank, dtype, every
  dimension, strides, device, alignment) with asserts whose messages hold the kernel's whole
  signature, so a kernel of n arguments carries n^2 bytes of strings and ten branches per
  argument: a DenseNet concatenation of 68 inputs compiled to 208 KB of object code, and LLVM
  spent 35 of its 53 s on such concatenations. The Relax VM calls these kernels only with the buffers its
  memory plan allocated, shapes fixed when the model compiled; the model's own inputs are still
  checked by the VM (``match_cast`` in ``main``), so a wrong input is still a clear error.
- ``TIR_CSE``: TIR's common-subexpression pass took 28 % of lowering (1.3 s on each unrolled
  Winograd input transform); LLVM's GVN finds the same subexpressions in the machine code.
- ``SIMPLIFY_OPAQUE_BLOCKS``: a concatenation partitioned by input (``rules/base.py``) keeps the
  whole ``if_then_else`` chain in every segment until blocks become opaque, and
  CompactBufferAllocation's region analysis over n segments x n loads x n conditions took 10 s;
  simplifying once the blocks are opaque (the segment's loop bounds decide every condition)
  leaves one load per segment first.
"""

from __future__ import annotations

import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

# Below this many kernels a build takes a few seconds and a thread is not worth it.
MIN_KERNELS_PER_SHARD = 8
ARGUMENT_CHECKS = 0
TIR_CSE = 0
SIMPLIFY_OPAQUE_BLOCKS = 1
PIPELINE = "tvmbench-native-cpu"


def opaque_and_simplified() -> Any:
    """Blocks made opaque (their loop bounds substituted in) and the statements simplified: steps
    of TVM's S-TIR pipeline, taken ahead of CompactBufferAllocation (the pipeline repeats them,
    finding nothing to do)."""
    from tvm import s_tir

    return tvm.transform.Sequential([
        s_tir.transform.LowerInitBlock(), s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.StmtSimplify()])


def _pipeline() -> tuple[Any, Any, Any]:
    """TVM's S-TIR pipeline, after ``opaque_and_simplified`` when ``SIMPLIFY_OPAQUE_BLOCKS``, the
    attention's key loops bounded by their masks (``passes/key_limits.py``), the next weight panel
    prefetched where the contraction rule marked it (``passes/prefetch.py``), a window's rows in
    its padding skipped (``passes/window_rows.py``), small buffers
    kept on the stack (``passes/stack_buffers.py``), vectors of bf16 constants stored one by one
    (``passes/bf16_casts.py``: TVM's legalisation leaves them bf16), roundings to bf16 by the CPU's instruction
    (``passes/bf16_round.py``) and AMX tiles' sums started at zero (``passes/tile_sums.py``)."""
    from tvmbench.compile.passes.bf16_casts import bind_cast_operands_pass, scalar_constant_stores_pass
    from tvmbench.compile.passes.bf16_round import round_to_bf16_pass
    from tvmbench.compile.passes.key_limits import bound_key_loops_pass, truncate_key_loops_pass
    from tvmbench.compile.passes.prefetch import prefetch_pass
    from tvmbench.compile.passes.stack_buffers import stack_buffers_pass
    from tvmbench.compile.passes.tile_sums import tile_sums_from_zero_pass
    from tvmbench.compile.passes.window_rows import window_rows_pass

    lower, host, device = tvm.tirx.get_tir_pipeline("s_tir")
    first = [opaque_and_simplified(), scalar_constant_stores_pass] if SIMPLIFY_OPAQUE_BLOCKS else []
    return tvm.transform.Sequential([prefetch_pass, window_rows_pass, bind_cast_operands_pass, *first, truncate_key_loops_pass, lower,
                                     bound_key_loops_pass,
                                     stack_buffers_pass, round_to_bf16_pass, tile_sums_from_zero_pass]), host, device


tvm.tirx.compilation_pipeline.register_tir_pipeline(PIPELINE, _pipeline)


def lowering_context() -> Any:
    """The pass context every kernel of a native CPU build is lowered in (per thread: TVM's
    context stack is thread-local)."""
    return tvm.transform.PassContext(config={"tirx.disable_assert": not ARGUMENT_CHECKS,
                                             "tirx.disable_cse_tir": not TIR_CSE})


def stack_spills(func: Any, target: Any) -> int:
    """Vector registers ``func`` stores to the stack once compiled for the native CPU ``target``
    (lowered as a build lowers it): LLVM's spills, and a register tile it did not keep in
    registers. Where two schedules differ only in what LLVM's register allocation makes of them,
    this tells them apart without running either (``rules/contraction.py``, SPILLS_DECIDE_UNROLL)."""
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    with lowering_context():
        asm = tvm.tirx.build(mod, target=target, pipeline=PIPELINE).inspect_source("asm")
    return len(re.findall(r"%[xyz]mm\d+, -?\d*\(%rsp\)", asm))


@dataclass
class Built:
    """A Relax VM executable and the object files of the kernels compiled beside it, which
    ``export_library`` must link in (``addons``). The folder holding them lives as long as this."""

    executable: Any
    objects: list[str] = field(default_factory=list)
    folder: Any = None

    def export_library(self, path: str, **kwargs: Any) -> None:
        self.executable.export_library(path, addons=list(self.objects), **kwargs)


def workers() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@mutator
class _CallByName(PyExprMutator):
    """``call_tir(kernel, args)`` becomes ``call_dps_packed("kernel", args)`` for offloaded kernels."""

    def __init__(self, mod: Any, names: set[str]) -> None:
        super().__init__(mod)
        self.names = names
        self.call_tir = tvm.ir.Op.get("relax.call_tir")
        self.dps_packed = tvm.ir.Op.get("relax.call_dps_packed")

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        if call.op.same_as(self.call_tir) and len(call.args) == 2 \
                and isinstance(call.args[0], tvm.ir.GlobalVar) and call.args[0].name_hint in self.names:
            return relax.Call(self.dps_packed, [relax.ExternFunc(call.args[0].name_hint), call.args[1]],
                              call.attrs, call.ty_args)
        return call


def _referenced(mod: Any) -> set[str]:
    """Names of the global functions the Relax functions still mention."""
    found: set[str] = set()
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(
                func, lambda e: found.add(e.name_hint) if isinstance(e, tvm.ir.GlobalVar) else None)
    return found


def split_kernels(mod: Any, shards: int) -> tuple[Any, list[Any]]:
    """``mod`` without its kernels, and the kernels dealt into ``shards`` TIR modules whose
    functions are exported under their names (nothing split below ``MIN_KERNELS_PER_SHARD``
    kernels a shard). Every kernel called other than by a static ``call_tir`` (a symbolic-shape
    call, say) stays in ``mod``."""
    kernels = [(gv, f) for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    shards = min(shards, len(kernels) // MIN_KERNELS_PER_SHARD)
    if shards < 2:
        return mod, []
    dealt = [kernels[i::shards] for i in range(shards)]
    names = {gv.name_hint for part in dealt for gv, _ in part}
    rewriter = _CallByName(mod, names)
    main = tvm.IRModule({gv: rewriter.visit_expr(f) if isinstance(f, relax.Function) else f
                         for gv, f in mod.functions_items()}, attrs=mod.attrs)
    names -= _referenced(main)
    main = tvm.IRModule({gv: f for gv, f in main.functions_items() if gv.name_hint not in names},
                        attrs=mod.attrs)
    parts = [tvm.IRModule({gv: f.with_attr("global_symbol", gv.name_hint) for gv, f in part
                           if gv.name_hint in names}) for part in dealt]
    return main, [p for p in parts if len(p.functions)]


def _object(part: Any, target: Any, path: Path) -> str:
    with lowering_context():
        lib = tvm.tirx.build(part, target=target, pipeline=PIPELINE)
        lib.write_to_file(str(path))
    return str(path)


def build_in_parallel(mod: Any, target: Any, build_main: Any, shards: int | None = None) -> Built:
    """``build_main(module without the kernels)`` on this thread, the kernels' object files on
    one thread per shard; a module of few kernels all on this thread (``build_main(module,
    tir_pipeline=PIPELINE)``: its kernels lowered as the shards' are)."""
    main, parts = split_kernels(mod, shards or workers())
    if not parts:  # (a few kernels: compiled with the VM on this thread, lowered alike)
        with lowering_context():
            return Built(build_main(mod, tir_pipeline=PIPELINE))
    folder = tempfile.TemporaryDirectory(prefix="tvmbench-kernels-")
    with ThreadPoolExecutor(len(parts)) as pool:
        futures = [pool.submit(_object, part, target, Path(folder.name) / f"kernels{i}.o")
                   for i, part in enumerate(parts)]
        with lowering_context():
            executable = build_main(main)
        objects = [f.result() for f in futures]
    return Built(executable, objects, folder)
