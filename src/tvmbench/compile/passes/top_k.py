"""TopKBySelection: ``topk`` on CPU as ``compile/topk.py``'s parallel selection instead of TVM's
whole-row sort on one thread.

DGCNN finds each point's 20 nearest neighbours among 1024 with ``topk`` over a 1024 x 1024
distance matrix in each of its four EdgeConvs: TVM's sort took 7.3 ms a call, the selection 1.9.
Its max over the 20 neighbours, ``x.max(dim=-1)[0]``, is exported as a ``topk`` of 1 with the
positions unused: TVM sorted every run of 20 (88 of the model's 157 ms for the four), and here it
is the ``max`` reduction it is. The axis is moved last (a transpose either side) when it is not.
Selections of more than ``MAX_K`` entries stay with TVM's sort: insertion costs grow with k, and
a sort is the better method for a long one.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import bindings, builder_pass, op_name, static_shape, variables

# the longest selection kept here: inserting an entry moves up to k slots
MAX_K = 64


@mutator
class _Select(PyExprMutator):
    values_only: list[Any] = []

    def visit_call_(self, call: Any) -> Any:
        original, call = call, super().visit_call_(call)
        if op_name(call) != "relax.topk":
            return call
        if int(call.attrs.k) == 1 and any(original.same_as(c) for c in self.values_only):
            # a max with its position unused (``x.max(dim)[0]`` exports as a topk of 1): a reduction
            return relax.Tuple([relax.op.max(call.args[0], int(call.attrs.axis), keepdims=True)])
        new = self._select(call)
        return call if new is None else new

    def _select(self, call: Any) -> Any | None:
        from tvmbench.compile.topk import top_k_rows

        data, a = call.args[0], call.attrs
        shape = static_shape(data.ty)
        if shape is None or not shape:
            return None
        axis, k = int(a.axis) % len(shape), int(a.k)
        if not 1 <= k <= min(MAX_K, shape[axis]):
            return None
        order = [d for d in range(len(shape)) if d != axis] + [axis]
        moved = [shape[d] for d in order]
        emit = self.builder_.emit
        x = data if order[-1] == len(shape) - 1 else emit(relax.op.permute_dims(data, order))
        x = emit(relax.op.reshape(x, [-1, shape[axis]]))
        both = emit(self.builder_.call_te(top_k_rows, x, k, bool(a.largest), str(a.dtype),
                                          primfunc_name_hint="top_k_rows"))
        back = [order.index(d) for d in range(len(shape))]
        outs = []
        for field in (0, 1):
            y = relax.op.reshape(relax.TupleGetItem(both, field), moved[:-1] + [k])
            outs.append(y if order[-1] == len(shape) - 1 else relax.op.permute_dims(emit(y), back))
        return {"both": relax.Tuple(outs), "values": outs[0], "indices": outs[1]}[str(a.ret_type)]


def _values_only(mutator_: Any, func: Any) -> None:
    """The topk calls of ``func`` whose indices nothing reads."""
    found = [b for b in bindings(func) if op_name(b.value) == "relax.topk" and str(b.value.attrs.ret_type) == "both"]
    read = set()
    for expr in [b.value for b in bindings(func)] + [func.body.body]:
        if isinstance(expr, relax.TupleGetItem) and expr.index == 0:
            continue
        read.update(v for v in variables(expr) if any(v.same_as(b.var) for b in found))
    mutator_.values_only = [b.value for b in found if b.var not in read]


def top_k_by_selection() -> Any:
    """The pass (see the module's docstring)."""
    # (the indices a max's export packs into a tuple and never reads go first, for _values_only to see)
    return tvm.transform.Sequential([relax.transform.CanonicalizeBindings(), relax.transform.DeadCodeElimination(),
                                     builder_pass(_Select, "TopKBySelection", before=_values_only)])
