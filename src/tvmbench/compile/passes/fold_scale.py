"""FoldScaleIntoConv: a per-output-channel affine epilogue (inference batch norm) folded into the
convolution's weights.

After DecomposeOpsForInference a batch norm is ``((conv - mean) * rsqrt) * gamma + beta``: four
per-channel operands loaded and four vector ops on every output element, in the convolution's
write-back. For a depthwise 3x3 (9 multiply-adds per output) or a 1x1 with 16 input channels that
epilogue costs as much as the convolution. Folded, the weights are multiplied by
``rsqrt * gamma`` and the epilogue is one bias add; both products depend on weights only, so
LiftTransformParams computes them once at load time (what ONNX Runtime and OpenVINO do when they
load a model). A chain is folded only when each intermediate result has no other use, and only
with operands that are per-channel and weight-derived.

Where no convolution comes first (DenseNet's batch norm over a block's concatenated features),
a chain of three steps or more becomes one multiply and one add, ``y * (b d) + (c - a b) d``,
whose operands are computed at load time the same way: two operands loaded per output vector
instead of four, and fewer blocks for the elementwise rule to inline into the concatenation's.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import bindings, numel, op_name, out_dtype, use_counts, weight_only, weight_params

_AFFINE_OPS = {"relax.subtract", "relax.multiply", "relax.add"}
# Off: only chains after a convolution fold (for A/Bs: ``benchmarks/rule_ab.py``).
AFFINE_CHAINS = True
# A chain with no convolution before it folds from this many steps (two would stay two).
AFFINE_MIN_STEPS = 3


@mutator
class _Fold(PyExprMutator):
    def __init__(self, mod: Any) -> None:
        super().__init__(mod)
        self.bound: dict[Any, Any] = {}
        self.uses: dict[Any, int] = {}
        self.weights: set[Any] = set()
        self.chains: dict[Any, tuple[Any, Any, list[tuple[str, Any]]]] = {}

    def prepare(self, func: Any) -> None:
        """Find the foldable chains of ``func``: each keyed by its last variable."""
        self.weights = weight_params(func)
        self.uses, self.chains = use_counts(func), {}
        self.bound = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
        users = {}
        for var, value in self.bound.items():
            if op_name(value) in _AFFINE_OPS and isinstance(value.args[0], relax.Var):
                users[value.args[0]] = var
        taken: set[Any] = set()
        for var, value in self.bound.items():
            if op_name(value) == "relax.nn.conv2d" and value.attrs.kernel_layout == "HWIO":
                taken.update(self.follow_chain(var, value, users))
        for var in self.bound if AFFINE_CHAINS else ():
            if var not in taken and isinstance(var.ty, relax.TensorType) and var.ty.ndim > 0:
                taken.update(self.follow_chain(var, None, users))

    def follow_chain(self, var: Any, conv: Any, users: dict[Any, Any]) -> list[Any]:
        """The chain from ``var`` (a convolution's result, or with ``conv`` None any tensor's),
        recorded when it folds; returns the variables it covers."""
        if self.uses.get(var) != 1 or var not in users:
            return []  # (asked first: most variables start no chain, and numel costs)
        x = var if conv is None else conv.args[1]
        channels = numel(x.ty) and int(x.ty.shape[-1])
        steps, cur, covered = [], var, [var]
        while self.uses.get(cur) == 1 and cur in users:
            nxt = users[cur]
            operand = self.bound[nxt].args[1]
            if not self.per_channel(operand, channels, var.ty.ndim):
                break
            steps.append((op_name(self.bound[nxt]), operand))
            cur = nxt
            covered.append(cur)
        enough = conv is not None or len(steps) >= AFFINE_MIN_STEPS
        # The chain's end must be a dataflow variable: it is re-emitted inside the block.
        if enough and any(kind == "relax.multiply" for kind, _ in steps) and isinstance(cur, relax.DataflowVar):
            self.chains[cur] = (conv, var, steps)
            return covered
        return []

    def per_channel(self, expr: Any, channels: int | None, ndim: int) -> bool:
        shape = numel(expr.ty) is not None and [int(v) for v in expr.ty.shape]
        return bool(shape) and channels is not None and shape[-1] in (1, channels) and len(shape) <= ndim \
            and all(d == 1 for d in shape[:-1]) and weight_only(expr, self.bound.get, self.weights)

    def visit_var_binding_(self, binding: Any) -> None:
        chain = self.chains.get(binding.var)
        if chain is None:
            return super().visit_var_binding_(binding)
        conv, start, steps = chain
        scale, bias = self.fold_steps(steps)
        emit = self.builder_.emit
        if conv is None:  # y * scale + bias
            out = relax.op.multiply(self.visit_expr(start), scale)
            out = out if bias is None else relax.op.add(emit(out), bias)
            self.set_var_remap(binding.var, emit(out, name_hint=binding.var.name))
            return None
        x, w = (self.visit_expr(a) for a in conv.args)
        channels = int(w.ty.shape[-1])
        a = conv.attrs
        w = emit(relax.op.multiply(w, relax.op.reshape(scale, [channels]) if numel(scale.ty) == channels
                                   else scale))
        out = relax.op.nn.conv2d(x, w, strides=a.strides, padding=a.padding, dilation=a.dilation,
                                 groups=a.groups, data_layout=a.data_layout, kernel_layout=a.kernel_layout,
                                 out_layout=a.out_layout, out_dtype=out_dtype(conv, x))
        if bias is not None:
            out = relax.op.add(emit(out), bias)
        self.set_var_remap(binding.var, emit(out, name_hint=binding.var.name))

    def fold_steps(self, steps: list[tuple[str, Any]]) -> tuple[Any, Any]:
        """The chain as one (scale, bias): ``((y - a) * b + c) * d`` is ``y * (b d) + (c - a b) d``."""
        emit = self.builder_.emit
        scale = bias = None
        for kind, operand in steps:
            p = self.visit_expr(operand)
            if kind == "relax.subtract":
                bias = emit(relax.op.negative(p)) if bias is None else emit(relax.op.subtract(bias, p))
            elif kind == "relax.multiply":
                scale = p if scale is None else emit(relax.op.multiply(scale, p))
                bias = None if bias is None else emit(relax.op.multiply(bias, p))
            else:
                bias = p if bias is None else emit(relax.op.add(bias, p))
        return scale, bias


def fold_scale_into_conv() -> Any:
    """The pass (see the module's docstring)."""

    @tvm.ir.transform.module_pass(opt_level=0, name="FoldScaleIntoConv")
    def fold(mod: Any, ctx: Any) -> Any:
        folded = False
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
                mutator_ = _Fold(mod)
                mutator_.prepare(func)
                if mutator_.chains:
                    mod[gv] = mutator_.visit_expr(func)
                    folded = True
        # The unfolded chains' bindings are now unused; DCE drops them (otherwise they would run).
        return relax.transform.DeadCodeElimination()(mod) if folded else mod

    return fold
