"""PrefetchWrites: a Winograd input transform asks for the lines it will write a tile ahead.

The input transform (``rules/winograd.py``) writes each tile's values position by position:
``V[pos, t, c]``, 16 or 36 lines per vector of channels, each in a stream of its own. The
product after it runs over positions, so on the next inference those lines sit in the other
core's cache, and each store must first take its line back; with 36 streams the prefetchers
follow none of them and every store waits. Where the two vCPUs sit on two core complexes (the
far state, ``measure/probe.py``) the stand-alone input transforms of resnet18 took 4-6x as long
as in the near state (docs/performance.md, session 35). This pass asks for ownership of the
next tile's lines (``prefetchw``) while the current tile is computed, one line per store, so
the stores find their lines owned. Measured (same-process A/Bs, session 74): inception_v3
1.03-1.04x, densenet121 1.02x, the ResNets within 1-2 % either way; in the far state those input
transforms still take about 2.4x their near-state time, so most of that cost is elsewhere.
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm import tirx

from tvmbench.compile.ir import kernel_pass

KEY = "tvmbench.prefetch_writes"
# Tiles ahead (0: off).
DISTANCE = 1
_L1 = 3  # llvm.prefetch locality 3: into L1


def mark(sch: Any, loop: Any, tile_loop: Any, buffer: Any) -> None:
    """Mark ``loop`` (the channel-vector loop inside a tile, the positions inside it) for the
    pass: ``buffer`` is the ``[positions, tiles, channels]`` output, ``tile_loop`` the tiles."""
    sch.annotate(loop, KEY, buffer.name)
    sch.annotate(tile_loop, KEY + ".tiles", buffer.name)


def prefetch_writes(func: Any) -> Any:
    """``func`` with the write prefetches in its marked loop; the function itself without one."""
    loops: list[Any] = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)])
    marked = [f for f in loops if KEY in f.annotations]
    tiles = [f for f in loops if KEY + ".tiles" in f.annotations]
    if not DISTANCE or len(marked) != 1 or len(tiles) != 1:
        return func
    name = str(marked[0].annotations[KEY])
    stores: list[Any] = []
    tvm_ffi.structural_walk(func.body, [(tirx.BufferStore, lambda s: stores.append(s.buffer)
                                         if s.buffer.name == name else None)])
    if not stores or len(stores[0].shape) != 3 or not all(isinstance(d, tirx.IntImm) for d in stores[0].shape):
        return func
    buffer = stores[0]
    positions, count, channels = (int(d) for d in buffer.shape)
    width = channels // int(marked[0].extent)
    t, c = tiles[0].loop_var, marked[0].loop_var
    flat = tirx.decl_buffer([positions * count * channels], buffer.dtype, f"{name}_flat", data=buffer.data)
    ahead = tirx.min(t + DISTANCE, count - 1) * channels + c * width
    prefetches = [tirx.Evaluate(tirx.call_llvm_intrin(
        "void", "llvm.prefetch", tirx.address_of(tirx.BufferLoad(flat, [p * count * channels + ahead])), 1, _L1, 1))
        for p in range(positions)]

    def on_for(loop: Any) -> Any:
        if loop.loop_var.same_as(c):
            body = tirx.SeqStmt([tirx.DeclBuffer(flat, data=buffer.data), *prefetches, loop.body])
            return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding,
                            {k: v for k, v in loop.annotations.items() if k != KEY})
        if loop.loop_var.same_as(t):
            return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, loop.thread_binding,
                            {k: v for k, v in loop.annotations.items() if k != KEY + ".tiles"})
        return loop

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, on_for)))


# PrefetchWrites over every kernel of a module (module docstring).
prefetch_writes_pass = kernel_pass(prefetch_writes, "PrefetchWrites")
