"""LazySelect: a ``Select`` whose branches read memory becomes an ``if_then_else`` in scheduled
kernels, so a branch's loads run only when the branch is taken.

Why: TIR's ``Select`` evaluates both branches, and TVM's simplifier proves facts about each branch
under the selection's condition (``a`` under ``c`` in ``Select(c, a, b)``). Inside the branch that
is sound for the value, not for the loads: a padding guard ``if_then_else(1 <= row, x[row - 1],
0)`` that the condition implies is dropped, and the unguarded load then runs for every position,
the ones the condition excludes too. Found in session 34, explained in 35: a MetaSchedule record for resnet18's
Winograd input transform (``passes/winograd.py`` selects the transform's rows by tile position
with ``Select``) fused the position, tile and channel loops under one vectorised loop; the
simplifier then read ``x[0, pos // 28 * 2 + 1, ...]`` unguarded for positions up to 3135 (rows up
to 223 of a 14-row map, 2.8 MB past the input), which segfaulted when that memory was unmapped (in
the model, not in MetaSchedule's runner, where it happened to be mapped and the wrong lanes were
discarded). The default ``Winograd`` rule unrolls the position loops, so every condition is a
constant and both forms compile alike; a tuned schedule need not.

Only a condition on loop or block variables can mislead the simplifier about an index; one that
only compares loaded data (a softmax row's all-masked flag in ``fused_attention``) stays a
``Select``. An ``if_then_else`` is lazy (a branch in the machine code), and TVM vectorises it with vector
branches as long as its condition is the same in every lane; a condition that varies across the
lanes of a vectorised loop (or the threads of a GPU kernel) would turn the loop scalar, so such a
selection stays a ``Select`` (a blend) unless a branch holds a guarded load, the case above,
where being right comes before being fast. Runs after the schedules (stage 3) so tuning records
still match the functions they were tuned on.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm.sym
import tvm_ffi
from tvm import s_tir, tirx

from tvmbench.compile.ir import kernel_pass

# 0 turns the pass off (``benchmarks/rule_ab.py M passes.lazy_select.ENABLED 0`` A/Bs it).
ENABLED = 1
_LANES = (tirx.ForKind.VECTORIZED, tirx.ForKind.THREAD_BINDING)
_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")


def _has(expr: Any, want: Any) -> bool:
    """Whether ``expr`` holds a node ``want`` accepts."""
    found = tvm_ffi.structural_walk(
        expr, lambda node: tvm_ffi.structural.VisitInterrupt(True) if want(node) else None, order="pre")
    return found is not None


def _is_guard(node: Any) -> bool:
    return isinstance(node, tvm.ir.expr.Call) and node.op.same_as(_IF_THEN_ELSE)


def _is_load(node: Any) -> bool:
    return isinstance(node, tvm.ir.expr.TensorLoad)


def _constrains_indices(cond: Any) -> bool:
    """Whether ``cond`` tells the simplifier something about loop or block variables: a variable
    outside the loads it reads (``Select(mask[i] > 0, ...)`` says nothing about ``i``)."""
    found = []

    def visit(node: Any) -> Any:
        if _is_load(node):
            return tvm_ffi.structural.WalkResult.SKIP
        if isinstance(node, tirx.Var):
            found.append(node)
            return tvm_ffi.structural.VisitInterrupt(True)
        return None

    tvm_ffi.structural_walk(cond, visit, order="pre")
    return bool(found)


class _Loops:
    """The loops and blocks of one kernel: each loop variable's range, the variables of the loops
    whose iterations run as lanes, and each block variable's binding."""

    def __init__(self, body: Any) -> None:
        self.analyzer = tvm.sym.Analyzer()
        self.lanes: set[Any] = set()
        self.bindings: dict[Any, Any] = {}

        def on_for(loop: Any) -> None:
            self.analyzer.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
            if loop.kind in _LANES:
                self.lanes.add(loop.loop_var)

        def on_realize(realize: Any) -> None:
            for iv, value in zip(realize.block.iter_vars, realize.iter_values, strict=True):
                self.bindings[iv.var] = value

        tvm_ffi.structural_walk(body, [(tirx.For, on_for), (s_tir.SBlockRealize, on_realize)])

    def in_loops(self, expr: Any) -> Any:
        """``expr`` with block variables replaced by their bindings (nested blocks: repeatedly)."""
        for _ in range(8):
            if not _has(expr, lambda n: isinstance(n, tirx.Var) and n in self.bindings):
                break
            expr = tvm_ffi.structural_map(expr, (tirx.Var, lambda v: self.bindings.get(v, v)))
        return expr

    def varies_across_lanes(self, cond: Any) -> bool:
        simple = self.analyzer.simplify(self.in_loops(cond))
        return _has(simple, lambda n: isinstance(n, tirx.Var) and n in self.lanes)


def lazy_selects(func: Any) -> Any:
    """``func`` with each memory-reading ``Select`` made an ``if_then_else`` where that is safe to
    vectorise or needed to be right (module docstring); the function itself when none is."""
    loops = _Loops(func.body)
    changed = []

    def on_select(sel: Any) -> Any:
        branches = (sel.true_value, sel.false_value)
        if not _constrains_indices(sel.condition) or not any(_has(b, _is_load) for b in branches):
            return sel
        if loops.varies_across_lanes(sel.condition) and not any(_has(b, _is_guard) for b in branches):
            return sel
        changed.append(sel)
        return tirx.if_then_else(sel.condition, sel.true_value, sel.false_value)

    body = tvm_ffi.structural_map(func.body, (tirx.Select, on_select))
    return func.with_body(body) if changed else func


# LazySelect over every kernel of a module (module docstring).
lazy_select = kernel_pass(lazy_selects, "LazySelect", lambda: ENABLED)
