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
panel again. Requires the tile's accumulators in registers across the call
(``passes/stack_buffers.py``). Measurements: docs/performance.md, "The next weight panel
prefetched".
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from tvmbench.compile.ir import kernel_pass

KEY = "tvmbench.prefetch_next_panel"
# Fewer row tiles than this per channel tile: the next panel would come at nearly the pace of
# the current one, no gain.
MIN_ROW_TILES = 4
_LINE = 64
_L2 = 2  # llvm.prefetch locality 2: prefetcht1 on x86, into L2 (the panel is larger than L1)


def mark(sch: Any, loop: Any, weights: Any, row_tiles: int, blocks: int) -> None:
    """Mark ``loop`` (a tile's reduction loop) for the pass: the packed ``weights`` buffer
    ``[blocks * channel tiles, depth, lanes]``, whose ``blocks`` consecutive blocks are one tile's
    panel, and ``row_tiles`` row tiles per channel tile in the enclosing parallel loop (channel
    tile outer: ``c = i // row_tiles``)."""
    sch.annotate(loop, KEY, f"{weights.name},{row_tiles},{blocks}")


def _marks(func: Any) -> tuple[Any, Any, Any, int, int] | None:
    """(parallel loop, marked loop, weights buffer, row tiles, blocks) of a marked kernel."""
    loops: list[Any] = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)])
    parallel = [f for f in loops if f.kind == tirx.ForKind.PARALLEL]
    marked = [f for f in loops if KEY in f.annotations]
    if len(parallel) != 1 or len(marked) != 1:
        return None
    name, row_tiles, blocks = str(marked[0].annotations[KEY]).split(",")
    found: list[Any] = []
    tvm_ffi.structural_walk(func.body, [(tvm.ir.expr.TensorLoad, lambda load: found.append(load.source)
                                         if getattr(load.source, "name", None) == name else None)])
    if not found or len(found[0].shape) != 3 or int(row_tiles) < MIN_ROW_TILES:
        return None
    return parallel[0], marked[0], found[0], int(row_tiles), int(blocks)


def prefetch_next_panel(func: Any) -> Any:
    """``func`` with the prefetches in its marked loop (module docstring); the function itself
    when it has none."""
    marks = _marks(func)
    if marks is None:
        return func
    parallel, marked, weights, row_tiles, blocks = marks
    n_blocks, depth, lanes = (int(d) for d in weights.shape)
    panel = blocks * depth * lanes  # elements of one channel tile's panel
    steps = int(marked.extent)
    per_step = panel * tvm.DataType(str(weights.dtype)).bits // 8 / (row_tiles * steps)  # bytes
    tile, step = parallel.loop_var, marked.loop_var
    first = tirx.min((tirx.floordiv(tile, row_tiles) + 1) * blocks, n_blocks - blocks)
    at = tirx.floordiv((tirx.floormod(tile, row_tiles) * steps + step) * panel, row_tiles * steps)
    prefetches = []
    for i in range(max(1, -(-int(per_step) // _LINE))):
        offset = tirx.min(at + i * _LINE * 8 // tvm.DataType(str(weights.dtype)).bits, panel - 1)
        index = [first + tirx.floordiv(offset, depth * lanes), tirx.floormod(tirx.floordiv(offset, lanes), depth),
                 tirx.floormod(offset, lanes)]
        address = tirx.address_of(tirx.BufferLoad(weights, index))
        prefetches.append(tirx.Evaluate(tirx.call_llvm_intrin("void", "llvm.prefetch", address, 0, _L2, 1)))

    def on_for(loop: Any) -> Any:
        if not loop.loop_var.same_as(step):
            return loop
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, tirx.SeqStmt([*prefetches, loop.body]),
                        loop.thread_binding, {k: v for k, v in loop.annotations.items() if k != KEY})

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, on_for)))


# PrefetchNextPanel over every kernel of a module (module docstring).
prefetch_pass = kernel_pass(prefetch_next_panel, "PrefetchNextPanel")
