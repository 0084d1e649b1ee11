"""PrefetchNextPanel: a channel-outer contraction reads the next channel tile's weights from
memory while it computes the current one.

A dense layer whose weights do not fit the caches (bert-base's 2.4-9.4 MB, 340 MB in all, so
every inference streams them from memory) runs channel-outer (``rules/contraction.py``): each
core takes a channel tile, reads its weight panel (depth x tile columns, 96-384 KB) once from
memory in the first row tile, then from L2 for the other row tiles. The first row tile asks for
the panel as fast as its FMAs consume it, 16 bytes a cycle, far beyond what one core draws from
memory, and stalls; the hardware prefetchers follow the stream but do not run a panel ahead.
Alone with the weights in L3 (Zen 5), bert-base's 3072 -> 768 layer took 1255 us, from memory
1390 us.

The rule marks the reduction loop of such a tile (``mark``) and this pass (native CPU lowering,
``codegen.py``, ahead of TVM's passes) puts in each of its iterations a prefetch of the next
channel tile's panel, at the pace that spreads the panel over the current tile's row tiles:
row tile ``r`` of ``R`` prefetches the ``r``-th ``R``-th of it, a few cache lines an iteration,
never a burst (a burst of prefetches at the start of each row tile fills the core's miss buffers
and stalls it: bert-base's 768-deep layers ran 10-15 % slower). The last tile prefetches its own
panel again. A batched contraction's tiles (a grouped convolution's, ``[G, Co/B, ...]``
weights, each group's tiles together: ``rules.contraction.BATCH_FIRST``) prefetch the next panel
of their own group. The addresses index the weights as one flat buffer (no divisions per
prefetch). Requires the tile's accumulators in registers across the call
(``passes/stack_buffers.py``). bf16 tiles prefetch too (their weights packed in pairs of steps,
read by the dot product through its own buffer: the weights are found among the parameters).
Measurements: docs/performance.md, "The next weight panel prefetched", "A grouped
convolution's groups one after another" and "bf16 tiles prefetch their next panel".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx

from tvmbench.compile.ir import kernel_pass

KEY = "tvmbench.prefetch_next_panel"
# Fewer row tiles than this per channel tile: the next panel would come at nearly the pace of
# the current one, no gain.
MIN_ROW_TILES = 4
# Kernels whose tile loop is one of several parallel loops (a copy of the padded input, a slice
# of padded output channels) are served too (off: only kernels of one parallel loop).
SEPARATE_LOOPS = True
_LINE = 64
_L2 = 2  # llvm.prefetch locality 2: prefetcht1 on x86, into L2 (the panel is larger than L1)


def mark(sch: Any, loop: Any, weights: Any, inner: int, blocks: int, row_tiles: int, tiles: int,
         batch: int = 0, repeats: int = 1) -> None:
    """Mark ``loop`` (the outer loop of a tile's innermost reduction) for the pass: the packed
    ``weights`` buffer (``[batches, tiles * blocks, ...]`` in order: ``blocks`` consecutive
    blocks are one channel tile's panel), the channel tile ``(i // inner) % tiles`` of the
    enclosing parallel loop's iteration ``i``, ``row_tiles`` row tiles reading each panel, and
    where the contraction is batched (a grouped convolution's weights ``[G, Co/B, ...]``) the
    batch ``i // batch`` (0: none), modulo the batches where the parallel loop runs over them
    ``repeats`` times (a Winograd product's row chunks outside its positions)."""
    sch.annotate(loop, KEY, f"{weights.name},{inner},{blocks},{row_tiles},{tiles},{batch},{repeats}")


def _contains(loop: Any, var: Any) -> bool:
    found = tvm_ffi.structural_walk(loop.body, lambda n: tvm_ffi.structural.VisitInterrupt(True)
                                    if isinstance(n, tirx.For) and n.loop_var.same_as(var) else None, order="pre")
    return found is not None


def _marks(func: Any) -> tuple[Any, list[Any], Any, tuple[int, int, int, int, int]] | None:
    """(parallel loop, the loops from it to the marked loop, weights buffer, (inner, blocks,
    tiles, batch, repeats)) of a marked kernel; None when it has no mark the pass can serve."""
    loops: list[Any] = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)])
    marked = [f for f in loops if KEY in f.annotations]
    if len(marked) != 1:
        return None
    parallel = [f for f in loops if f.kind == tirx.ForKind.PARALLEL]
    if not SEPARATE_LOOPS and len(parallel) != 1:
        return None
    parallel = [f for f in parallel if _contains(f, marked[0].loop_var)]
    if len(parallel) != 1:
        return None
    name, inner, blocks, row_tiles, tiles, batch, repeats = str(marked[0].annotations[KEY]).split(",")
    # (a parameter's buffer: a tensorized tile, the bf16 dot product's, loads the weights through
    # the intrinsic's own buffer, under another name)
    found: list[Any] = [p for p in func.params if getattr(p, "name", None) == name]
    tvm_ffi.structural_walk(func.body, [(tvm.ir.expr.TensorLoad, lambda load: found.append(load.source)
                                         if getattr(load.source, "name", None) == name else None)])
    if not found or len(found[0].shape) < 3 or int(row_tiles) < MIN_ROW_TILES \
            or not all(isinstance(d, tirx.IntImm) for d in found[0].shape):
        return None
    path = [f for f in loops if f is not parallel[0] and _contains(parallel[0], f.loop_var)
            and _contains(f, marked[0].loop_var)]
    path.sort(key=lambda f: -sum(1 for g in path if _contains(f, g.loop_var)))  # outermost first
    return parallel[0], [*path, marked[0]], found[0], (int(inner), int(blocks), int(tiles), int(batch), int(repeats))


def prefetch_next_panel(func: Any) -> Any:
    """``func`` with the prefetches in its marked loop (module docstring); the function itself
    when it has none."""
    marks = _marks(func)
    if marks is None:
        return func
    parallel, path, weights, (inner, blocks, tiles, batch, repeats) = marks
    shape = [int(d) for d in weights.shape]
    batches = int(parallel.extent) // batch // repeats if batch else 1
    if int(np.prod(shape)) % (batches * tiles * blocks):
        return func
    panel = int(np.prod(shape)) // (batches * tiles)  # elements of one channel tile's panel
    bits = tvm.DataType(str(weights.dtype)).bits
    tile = parallel.loop_var
    progress, total = tirx.floormod(tile, inner), inner  # this iteration's place in the tile's work
    for loop in path:
        progress, total = progress * loop.extent + (loop.loop_var - loop.min), total * int(loop.extent)
    following = tirx.min(tirx.floormod(tirx.floordiv(tile, inner), tiles) + 1, tiles - 1)
    first = (tirx.floormod(tirx.floordiv(tile, batch), batches) * tiles + following if batch else following) * panel
    at = tirx.floordiv(progress * panel, total)
    flat = tirx.decl_buffer([int(np.prod(shape))], weights.dtype, f"{weights.name}_flat", data=weights.data)
    prefetches = []
    for i in range(max(1, -(-panel * bits // 8 // total // _LINE))):
        address = tirx.address_of(tirx.BufferLoad(flat, [first + tirx.min(at + i * (_LINE * 8 // bits), panel - 1)]))
        prefetches.append(tirx.Evaluate(tirx.call_llvm_intrin("void", "llvm.prefetch", address, 0, _L2, 1)))

    def on_for(loop: Any) -> Any:
        if not loop.loop_var.same_as(path[-1].loop_var):
            return loop
        body = tirx.SeqStmt([tirx.DeclBuffer(flat, data=weights.data), *prefetches, loop.body])
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding,
                        {k: v for k, v in loop.annotations.items() if k != KEY})

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, on_for)))


# PrefetchNextPanel over every kernel of a module (module docstring).
prefetch_pass = kernel_pass(prefetch_next_panel, "PrefetchNextPanel")
