"""Small helpers for reading Relax IR, shared by the passes. No TVM import at module level."""

from __future__ import annotations

from typing import Any


def static_shape(ty: Any) -> list[int] | None:
    """The shape of a tensor type as ints, or None when it is unknown or symbolic."""
    try:
        return [int(d) for d in ty.shape]
    except (TypeError, AttributeError):
        return None


def numel(ty: Any) -> int | None:
    """Elements of a tensor type, or None when its shape is unknown or symbolic."""
    import numpy as np

    try:
        return int(np.prod([int(v) for v in ty.shape]))
    except Exception:  # unknown or symbolic shape
        return None


def out_dtype(call: Any, x: Any) -> str:
    """The output dtype a matmul or convolution asks for, or its input ``x``'s dtype when it asks
    for none (torch.export gives "", the ONNX importer None)."""
    asked = getattr(call.attrs, "out_dtype", None)
    return str(asked) if asked is not None and str(asked) not in ("", "void") else str(x.ty.dtype)


def scalar_constant(expr: Any) -> float | None:
    """The value of a one-element constant tensor, else None."""
    import tvm

    if isinstance(expr, tvm.ir.expr.Constant) and expr.value.numpy().size == 1:
        return float(expr.value.numpy().reshape(()))
    return None


def op_name(expr: Any) -> str | None:
    """``"relax.add"`` for a call of a Relax operator, else None."""
    import tvm
    from tvm import relax

    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else None


def bindings(func: Any) -> list[Any]:
    """Every binding of a Relax function, block after block."""
    return [b for block in func.body.blocks for b in block.bindings]


def variables(expr: Any) -> list[Any]:
    """Every Relax variable an expression mentions (with repeats, in no set order).

    Calls, tuples and their items are walked here: ``post_order_visit`` also walks each variable's
    type, and ``params[98]`` of a 500-weight tuple cost a thousand visits (DenseNet-201's passes
    spent a second on it); anything else is left to it."""
    from tvm import relax

    found: list[Any] = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, relax.Var):
            found.append(e)
        elif isinstance(e, relax.Call):
            stack.extend(e.args)
            if isinstance(e.op, relax.Expr):
                stack.append(e.op)
        elif isinstance(e, relax.Tuple):
            stack.extend(e.fields)
        elif isinstance(e, relax.TupleGetItem):
            stack.append(e.tuple_value)
        elif isinstance(e, (relax.If, relax.SeqExpr, relax.Function)):
            relax.analysis.post_order_visit(e, lambda v: found.append(v) if isinstance(v, relax.Var) else None)
    return found


def drop_uncalled(mod: Any, replaced: Any) -> Any:
    """``mod`` without the functions of ``replaced`` (GlobalVars) that no Relax function calls
    any more: kernels a pass replaced by new versions under new names."""
    from tvm import relax

    replaced = list(replaced)
    if not replaced:  # (a CNN's attention passes replace nothing: the walk took 3.4 s on densenet201)
        return mod
    called = {gv.name_hint for func in mod.functions.values() if isinstance(func, relax.Function)
              for gv in relax.analysis.all_global_vars(func.body)}
    for gv in replaced:
        if gv.name_hint not in called and gv in mod.functions:
            del mod[gv]
    return mod


def use_counts(func: Any) -> dict[Any, int]:
    """How many bindings (and the function's result) use each variable of a Relax function."""
    from tvm import relax

    uses: dict[Any, int] = {}
    for expr in [b.value for b in bindings(func)] + [func.body.body]:
        for var in relax.analysis.free_vars(expr):
            uses[var] = uses.get(var, 0) + 1
    return uses


def users_of(bound: dict[Any, Any]) -> dict[Any, list[Any]]:
    """For each variable of ``bound`` (variable -> the value bound to it), the variables whose
    values are calls that take it as an argument, each once."""
    from tvm import relax

    users: dict[Any, list[Any]] = {}
    for var, value in bound.items():
        for arg in {a for a in getattr(value, "args", []) if isinstance(a, relax.Var)}:
            users.setdefault(arg, []).append(var)
    return users


def calls(func: Any, name: str) -> list[Any]:
    """The calls of operator ``name`` in a Relax function."""
    from tvm import relax

    found: list[Any] = []
    relax.analysis.post_order_visit(func.body, lambda e: found.append(e) if op_name(e) == name else None)
    return found


def cast_before_reshapes(mutator_: Any, x: Any, cast: Any, through: bool = True) -> Any:
    """``x`` cast, the cast put before the reshapes that lead to ``x`` (``through``): ``cast(source)``
    (the caller emits it) reshaped again as ``x`` was, so that FuseOps joins the cast to the
    value's producer, whose kernel then writes the cast value, instead of a kernel of its own."""
    from tvm import relax

    reshapes, source = [], x
    while through and isinstance(source, relax.Var) and op_name(mutator_.lookup_binding(source)) == "relax.reshape":
        reshapes.append(mutator_.lookup_binding(source))
        source = reshapes[-1].args[0]
    out = cast(source)
    for reshape in reversed(reshapes):
        out = mutator_.builder_.emit(relax.op.reshape(out, reshape.args[1]))
    return out


def weight_params(func: Any) -> set[Any]:
    """The parameters after ``num_input``: the weights (empty when the function does not say)."""
    n_inputs = int(func.attrs["num_input"]) if func.attrs and "num_input" in func.attrs else None
    return set(func.params[n_inputs:]) if n_inputs is not None else set()


def from_weights(mutator_: Any, expr: Any, weights: set[Any],
                 through: tuple[str, ...] = ("relax.permute_dims", "relax.astype")) -> bool:
    """Whether ``expr`` is a weight parameter, or a transpose or cast of one (what the importers,
    and Bf16Dense, give dense layers), by the bindings ``mutator_`` has seen."""
    from tvm import relax

    while isinstance(expr, relax.Var) and expr not in weights:
        bound = mutator_.lookup_binding(expr)
        if op_name(bound) not in through:
            return False
        expr = bound.args[0]
    return isinstance(expr, relax.Var) and expr in weights


def weight_only(expr: Any, lookup: Any, weights: set[Any]) -> bool:
    """Whether ``expr`` is computed from ``weights`` and constants only (``lookup(var)``: the value
    bound to a variable, None for a parameter). A walk, not a recursion: an activation (a
    squeeze-excite scale) leads back through the whole network to its input."""
    import tvm
    from tvm import relax

    stack, seen = [expr], set()
    while stack:
        e = stack.pop()
        if isinstance(e, tvm.ir.expr.Constant | relax.ShapeExpr) or e in weights:
            continue
        if isinstance(e, relax.Var):
            bound = lookup(e)
            if bound is None:
                return False
            if e not in seen:
                seen.add(e)
                stack.append(bound)
        elif isinstance(e, relax.Call):
            stack.extend(e.args)
        elif isinstance(e, relax.Tuple):
            stack.extend(e.fields)
        else:
            return False
    return True


def function_pass(mutator_class: Any, name: str, prune: bool = False) -> Any:
    """A module pass that runs a PyExprMutator over every Relax function of the module. With
    ``prune``, the bindings a rewritten function no longer uses are removed (so that later passes,
    LiftTransformParams above all, do not compute what the rewrite left behind)."""
    import tvm
    from tvm import relax

    @tvm.ir.transform.module_pass(opt_level=0, name=name)
    def rewrite(mod: Any, ctx: Any) -> Any:
        mutator_ = mutator_class(mod)
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                new = mutator_.visit_expr(func)
                mod[gv] = relax.analysis.remove_all_unused(new) if prune and not new.same_as(func) else new
        return mod

    return rewrite


def kernel_pass(transform: Any, name: str, enabled: Any = lambda: True) -> Any:
    """A module pass replacing every PrimFunc by ``transform(func)`` (the function itself when
    there is nothing to change), while ``enabled()``."""
    import tvm

    @tvm.ir.transform.module_pass(opt_level=0, name=name)
    def rewrite(mod: Any, ctx: Any) -> Any:
        updates = {gv: transform(f) for gv, f in mod.functions_items()
                   if enabled() and isinstance(f, tvm.tirx.PrimFunc)}
        updates = {gv: f for gv, f in updates.items() if not f.same_as(mod[gv])}
        if not updates:
            return mod
        mod = mod.clone()
        for gv, f in updates.items():
            mod.update_func(gv, f)
        return mod

    return rewrite


def op_rewrite_pass(op: str, rewrite: Any, name: str, enabled: Any = lambda: True) -> Any:
    """A ``function_pass`` replacing each call of Relax operator ``op`` by ``rewrite(call)`` where
    that is not None (a form the rewrite does not cover stays as it is), while ``enabled()``
    (a module constant read when the pass runs, so A/Bs can switch it)."""
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Rewrite(PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if enabled() and op_name(call) == op:
                new = rewrite(call)
                return call if new is None else new
            return call

    return function_pass(_Rewrite, name)


class TECache:
    """``builder.call_te`` once per distinct kernel: a later call with tensors of the same shapes and
    dtypes and the same other arguments calls the kernel already made.

    ``call_te`` traces the TE function and makes a PrimFunc each time (11 ms), and the builder then
    finds it structurally equal to one it has: DenseNet-201 at 320 px asked for 392 Winograd
    kernels (four for each of 98 convolutions of a few shapes) and spent 4.4 of its 14 s of Relax
    passes making them."""

    def __init__(self, builder: Any) -> None:
        self.builder = builder
        self.calls: dict[Any, Any] = {}

    def __call__(self, func: Any, *args: Any, primfunc_name_hint: str | None = None) -> Any:
        from tvm import relax

        key = (func, primfunc_name_hint, tuple(_te_key(a) for a in args))
        tensors = [a for a in args if isinstance(a, relax.Expr)]
        first = self.calls.get(key) if None not in key[2] else None
        if first is not None and len(first.args[1].fields) == len(tensors) and len(first.args) == 2:
            return relax.Call(first.op, [first.args[0], relax.Tuple(tensors)], first.attrs, first.ty_args)
        call = self.builder.call_te(func, *args, primfunc_name_hint=primfunc_name_hint)
        if None not in key[2]:
            self.calls[key] = call
        return call


def _te_key(arg: Any) -> Any:
    """What of a ``call_te`` argument shapes the kernel: a tensor's static shape and dtype (None
    when symbolic: not cached), any other argument's value."""
    from tvm import relax

    if isinstance(arg, relax.Expr):
        shape = static_shape(arg.ty)
        return None if shape is None else ("tensor", tuple(shape), str(arg.ty.dtype))
    return repr(arg)


def builder_pass(mutator_class: Any, name: str, before: Any = None, after: Any = None) -> Any:
    """A module pass whose mutator emits new functions through its block builder (``call_te``):
    every Relax function is rewritten and the builder's module returned. ``before(mutator, func)``
    runs ahead of each function (to tell the mutator which parameters are weights, say),
    ``after(mutator, module)`` on the module at the end (returning the module to keep)."""
    import tvm
    from tvm import relax

    @tvm.ir.transform.module_pass(opt_level=0, name=name)
    def rewrite(mod: Any, ctx: Any) -> Any:
        mutator_ = mutator_class(mod)
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                if before is not None:
                    before(mutator_, func)
                mutator_.builder_.update_func(gv, mutator_.visit_expr(func))
        out = mutator_.builder_.get()
        return after(mutator_, out) if after is not None else out

    return rewrite
