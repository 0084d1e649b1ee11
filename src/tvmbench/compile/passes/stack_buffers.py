"""StackBuffers: a kernel's small buffers live on the stack, not in TVM's workspace pool.

TVM's ``LowerTVMBuiltin`` keeps an allocation on the stack only below 1024 bytes
(``kMaxStackAlloca``); anything larger becomes a ``TVMBackendAllocWorkspace`` call and a
``TVMBackendFreeWorkspace`` call, inside the parallel loop once per iteration. The contraction
rule's register tile accumulates in a buffer of ``rows x vectors`` vectors, which LLVM keeps in
registers: 16 accumulators of 64 bytes are exactly 1024 bytes, so every 2 x 8 and 4 x 4 tile on
AVX-512 (and the 4 x 5 and 4 x 6 ones) went through the pool, two calls per tile, while a 2 x 7
tile's 896 bytes stayed on the stack. Worse, LLVM cannot tell the pool's pointer from any other:
any call in the reduction loop that may touch memory (a prefetch, ``passes/prefetch.py``) made
it store all 16 accumulators on every iteration (bert-base's dense layers ran 1.3x slower).

On the stack (``disable_lower_builtin``, which TVM's lowering honours for exactly this) the buffer
is an ``alloca`` in the kernel's entry block, no call, and SROA keeps it in registers. Buffers up
to ``STACK_BUFFER_BYTES`` (every register tile: 24 accumulators are 1.5 KB) in the native CPU
lowering (``codegen.py``); the worker threads' stacks are megabytes.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from tvmbench.compile.ir import kernel_pass

# 0 turns the pass off (``benchmarks/rule_ab.py M passes.stack_buffers.STACK_BUFFER_BYTES 0``).
STACK_BUFFER_BYTES = 2048
# ... and a buffer a rule scoped "local" (a padded window copied under the tile loop,
# ``rules/contraction._pad_under_tile``) up to this size.
LOCAL_BUFFER_BYTES = 16 << 10
_TVM_STACK_LIMIT = 1024  # (TVM's kMaxStackAlloca: below it, the stack already)
_KEEP = "disable_lower_builtin"


def buffer_bytes(buffer: Any) -> int | None:
    """A buffer's size in bytes; None when a dimension is not a constant."""
    count = 1
    for dim in buffer.shape:
        if not isinstance(dim, tirx.IntImm):
            return None
        count *= int(dim.value)
    dtype = tvm.DataType(str(buffer.dtype))
    return count * dtype.bits * dtype.lanes // 8


def stack_buffers(func: Any) -> Any:
    """``func`` with each allocation of ``_TVM_STACK_LIMIT`` to ``STACK_BUFFER_BYTES`` bytes
    marked to stay on the stack; the function itself when there is none."""
    changed = []

    def on_alloc(node: Any) -> Any:
        size, scope = buffer_bytes(node.buffer), str(node.buffer.scope())
        limit = max(STACK_BUFFER_BYTES, LOCAL_BUFFER_BYTES) if scope == "local" else STACK_BUFFER_BYTES
        if size is None or not _TVM_STACK_LIMIT <= size <= limit or _KEEP in node.annotations \
                or scope not in ("global", "local"):
            return node
        changed.append(node)
        return tirx.AllocBuffer(node.buffer, {**dict(node.annotations), _KEEP: tirx.IntImm("bool", 1)})

    body = tvm_ffi.structural_map(func.body, (tirx.AllocBuffer, on_alloc))
    return func.with_body(body) if changed else func


# StackBuffers over every kernel of a module (module docstring); after TVM's TIR lowering, before
# its LowerTVMBuiltin.
stack_buffers_pass = kernel_pass(stack_buffers, "StackBuffers", lambda: STACK_BUFFER_BYTES > 0)
