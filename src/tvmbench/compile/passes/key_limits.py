"""KeyLimits: a joined attention skips the key tiles its mask hides from every query row of a task
(a decoder's causal mask hides the upper triangle: about half the scores at 512 tokens).

Three parts, so that what is skipped is read from the mask the model actually passes, whatever
computed it (a constant causal mask, a ``where`` of a lifted boolean, a padding mask at run time):

1. ``key_limits`` (this Relax pass, after FuseTIR): for a fused attention whose scores get a mask
   added (``scores + M``, ``M`` an input shaped ``[1, .., 1, queries, keys]``, the same for every
   batch item and head), a small kernel computes per query row the end of its visible keys, one
   past the last key whose mask value is above ``MASKED`` (a row with none visible gets all keys,
   so its result stays exactly what it was); the attention PrimFunc gets those limits as one more
   input (``KEY_LIMITS`` names it in the function's attributes). One limits kernel serves every
   layer passing the same mask.
2. The Attention rule (``rules/attention.py``) marks its task loop with the rows per task and the
   tile the limits are rounded to, and every loop over keys inside the task with its keys per
   iteration, only when it can mark all of them.
3. ``truncate_key_loops`` (a TIR pass of the native CPU lowering, ``codegen.py``, ahead of
   TVM's own passes) skips the iterations of each marked key loop past the task's limit: the
   largest of its rows' limits, rounded up to whole score tiles. Keys past it are masked in every
   row of the task, so their probabilities are exactly 0 and their scores never read; every loop
   of the task stops at the same key, so no loop reads what a shorter one did not write. The skip
   is an ``if`` in each iteration at first, so that TVM sizes the task's buffers from the loops'
   constant extents; once TVM's lowering is done, ``bound_key_loops`` makes each loop end there
   instead. A build lowered otherwise (cross-compiled, MetaSchedule's builders) ignores the marks
   and computes every key, as before.

GPT-2 gains 3-4 % at 512 tokens and 4-7 % at 1024, level at 128; where the mask hides nothing
(BERT) it is level too, its one limits kernel (13 us) aside (docs/performance.md, "Causal
attention skips the keys its mask hides").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, te, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import builder_pass, drop_uncalled, kernel_pass
from tvmbench.compile.tir import as_int, attention_blocks, buffer_shape, is_product_sum

# Off: no limits computed, every key of every row computed (``benchmarks/rule_ab.py`` A/Bs it).
ENABLED = 1
# A mask value at or below this hides its key: -inf and float32's lowest (what torch and
# transformers write) make the probability exactly 0; a finite "-10000" mask does not qualify.
MASKED = -1e30
# Function attribute: the index of the limits parameter. Loop annotations set by the rule.
KEY_LIMITS = "tvmbench.key_limits"
TASK = "tvmbench.key_limits_task"
UNIT = "tvmbench.key_unit"
BOUNDED = "tvmbench.key_bounded"


def additive_mask(func: Any) -> int | None:
    """The index of the parameter ``func`` adds to its scores (the first product sum's output, or
    a tensor computed on the way from it: scaled, biased) before the softmax's first reduction, as
    a mask broadcast over everything but the scores' last two axes, else None."""
    if not isinstance(func, tirx.PrimFunc) or KEY_LIMITS in (func.attrs or {}):
        return None
    blocks = attention_blocks(func)  # (the Attention rule's form: two matmuls, row reductions between)
    if blocks is None:
        return None
    scores = next((b for b in blocks if b.reads and is_product_sum(b)), None)
    if scores is None or len(scores.writes) != 1:
        return None
    last_two = buffer_shape(scores.writes[0].source)[-2:]
    by_buffer = {p: i for i, p in enumerate(func.params)}  # (TVM 0.27: a parameter is its buffer)
    for block in blocks:
        if block is not scores and any(iv.iter_type == tirx.IterVar.CommReduce for iv in block.iter_vars):
            return None  # (the softmax's first reduction: a mask added after it is none)
        value = block.body.value if isinstance(block.body, tirx.BufferStore) else None
        loads = [v for v in (value.a, value.b) if isinstance(v, tvm.ir.expr.TensorLoad)] \
            if isinstance(value, tirx.Add) else []
        if len(loads) != 2 or sum(load.source in by_buffer for load in loads) != 1:
            continue
        mask, score = sorted(loads, key=lambda load: load.source not in by_buffer)
        shape = buffer_shape(mask.source)
        if shape[-2:] == last_two == buffer_shape(score.source)[-2:] and all(d == 1 for d in shape[:-2]) \
                and all(a.same_as(b) for a, b in zip(mask.indices[-2:], score.indices[-2:], strict=True)):
            return by_buffer[mask.source]
    return None


def limits_te(mask: Any) -> Any:
    """Per query row, one past its last visible key (all keys when none is visible)."""
    *lead, queries, keys = mask.shape
    j = te.reduce_axis((0, keys), name="j")
    zeros = [0] * len(lead)
    last = te.compute((queries,), lambda q: te.max(
        tirx.Select(mask[(*zeros, q, j)] <= tirx.const(MASKED, mask.dtype), tirx.const(0, "int32"),
                    j.astype("int32") + 1), axis=j), name="last_visible")
    return te.compute((queries,), lambda q: tirx.Select(last[q] == 0, tirx.const(int(keys), "int32"), last[q]),
                      name="key_limits")


def limits_of(mask: np.ndarray) -> np.ndarray:
    """``limits_te`` of a constant mask, computed here: PadAttention's row hiding ViT's padded
    keys cost 12 limits kernels per inference (17 us each) that every call computed alike."""
    *_, queries, keys = mask.shape
    visible = mask.reshape(-1, queries, keys)[0] > MASKED
    last = np.where(visible.any(axis=1), keys - np.argmax(visible[:, ::-1], axis=1), keys)
    return last.astype("int32")


def with_limits(func: Any, at: int, queries: int) -> Any:
    """``func`` with an int32 ``[queries]`` input inserted at parameter ``at`` (before the outputs)."""
    limits = tirx.decl_buffer((queries,), "int32", name="key_limits")
    params = list(func.params[:at]) + [limits] + list(func.params[at:])
    return tirx.PrimFunc(params, func.body, func.ret_type, func.attrs).with_attr(KEY_LIMITS, at)


@mutator
class _KeyLimits(PyExprMutator):
    def __init__(self, mod: Any) -> None:
        super().__init__(mod)
        self.mod = mod
        self.masks: dict[Any, tuple[int, Any] | None] = {}
        self.limits: dict[Any, Any] = {}
        self.call_tir = tvm.ir.Op.get("relax.call_tir")

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        if not ENABLED or not call.op.same_as(self.call_tir) or not isinstance(call.args[1], relax.Tuple):
            return call
        gv, args = call.args[0], list(call.args[1].fields)
        if gv not in self.masks:  # (the kernel with the limits added, under a new name: the old one's type says 1 less)
            func = self.mod[gv]
            at = additive_mask(func)
            self.masks[gv] = None
            if at is not None and len(args) + _outputs(call) == len(func.params):
                queries = as_int(func.params[at].shape[-2])
                self.masks[gv] = (at, self.builder_.add_func(with_limits(func, len(args), queries), gv.name_hint))
        if self.masks[gv] is None:
            return call
        at, new = self.masks[gv]
        if args[at] not in self.limits:
            self.limits[args[at]] = relax.const(limits_of(args[at].value.numpy()), "int32") \
                if isinstance(args[at], tvm.ir.expr.Constant) else self.builder_.emit(
                    self.builder_.call_te(limits_te, args[at], primfunc_name_hint="key_limits"))
        return relax.Call(call.op, [new, relax.Tuple(args + [self.limits[args[at]]])], call.attrs, call.ty_args)


def _outputs(call: Any) -> int:
    """The outputs a ``call_tir`` writes (one tensor, or a tuple's fields)."""
    ty = call.ty_args[0] if call.ty_args else call.ty
    return len(ty.fields) if isinstance(ty, relax.TupleType) else 1


def key_limits() -> Any:
    """The KeyLimits pass (module docstring)."""
    return builder_pass(_KeyLimits, "KeyLimits", after=_drop_replaced)


def _drop_replaced(mutator: Any, mod: Any) -> Any:
    """The attention kernels given limits are called under new names: their old versions go
    (when no call is left of them)."""
    return drop_uncalled(mod, [gv for gv, found in mutator.masks.items() if found is not None])


def truncate_key_loops(func: Any) -> Any:
    """``func`` with every key loop the Attention rule marked skipping the iterations past its
    task's limit (module docstring, part 3); the marks removed. When the loops found are not the
    ones the rule marked, none skips: every key is computed."""
    if not isinstance(func, tirx.PrimFunc) or KEY_LIMITS not in (func.attrs or {}):
        return func
    tasks: list[Any] = []
    units: list[Any] = []

    def visit(loop: Any) -> None:
        for key, found in ((TASK, tasks), (UNIT, units)):
            if key in loop.annotations:
                found.append(loop)

    tvm_ffi.structural_walk(func.body, [(tirx.For, visit)])
    bound = limit = None
    if len(tasks) == 1:
        rows, blocks, tile, keys, count = (int(v) for v in tasks[0].annotations[TASK])
        if count == len(units):
            limit = _task_limit(tasks[0].loop_var, func.params[int(func.attrs[KEY_LIMITS])], rows, blocks, tile, keys)
            bound = tirx.Var("key_bound", str(tasks[0].loop_var.ty))

    def rewrite(loop: Any) -> Any:
        if TASK not in loop.annotations and UNIT not in loop.annotations:
            return loop
        annotations = {k: v for k, v in loop.annotations.items() if k not in (TASK, UNIT)}
        body = loop.body
        if bound is not None and UNIT in loop.annotations:
            steps = tirx.Cast(str(loop.loop_var.ty), tirx.floordiv(bound, int(loop.annotations[UNIT])))
            body = tirx.IfThenElse(loop.loop_var < steps, body, None)
            annotations[BOUNDED] = 1
        if bound is not None and TASK in loop.annotations:
            body = tirx.SeqStmt([tirx.LetStmt(bound, limit), body])
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, annotations)

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, rewrite)))


def _task_limit(task: Any, limits: Any, rows: int, blocks: int, tile: int, keys: int) -> Any:
    """The keys a task must compute: the largest limit of its rows, rounded up to whole tiles."""
    first = tirx.floormod(task, blocks) * rows
    limit = None
    for r in range(rows):
        value = tirx.Cast(str(task.ty), tirx.BufferLoad(limits, [first + r]))
        limit = value if limit is None else tirx.max(limit, value)
    return tirx.min(tirx.const(keys, str(task.ty)), tirx.floordiv(limit + (tile - 1), tile) * tile)


def bound_key_loops(func: Any) -> Any:
    """``func`` (lowered) with each loop ``truncate_key_loops`` gave an ``if`` made to stop there
    instead (no compare per iteration). After TVM's lowering, whose buffers are sized from the
    loops' constant extents."""
    def rewrite(loop: Any) -> Any:
        if BOUNDED not in loop.annotations:
            return loop
        annotations = {k: v for k, v in loop.annotations.items() if k != BOUNDED}
        body, extent = loop.body, loop.extent
        cond = body.condition if isinstance(body, tirx.IfThenElse) and body.else_case is None else None
        var = cond.a.value if isinstance(cond, tirx.LT) and isinstance(cond.a, tirx.Cast) else getattr(cond, "a", None)
        if isinstance(cond, tirx.LT) and var is not None and var.same_as(loop.loop_var) and as_int(loop.min) == 0:
            body, extent = body.then_case, tirx.min(extent, tirx.Cast(str(extent.ty), cond.b))
        return tirx.For(loop.loop_var, loop.min, extent, loop.kind, body, loop.thread_binding, annotations)

    if not isinstance(func, tirx.PrimFunc) or KEY_LIMITS not in (func.attrs or {}):
        return func
    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, rewrite)))


truncate_key_loops_pass = kernel_pass(truncate_key_loops, "TruncateKeyLoops")
bound_key_loops_pass = kernel_pass(bound_key_loops, "BoundKeyLoops")
