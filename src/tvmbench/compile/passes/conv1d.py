"""Conv1dAsConv2d: a 1-d convolution as a 2-d one over a map one row high.

ConvertLayout, PackWeights, the grouped and depthwise forms and the Contraction rule's tiles are
all written for ``conv2d``; a ``conv1d`` (a speech model's front end, a temporal convolution)
stayed in NCW with TVM's generic loop nest: 2 % of the FMA peak, 3.2 ms of a wav2vec-style front
end's 6.2 ms where ONNX Runtime took 0.8 ms for the whole model. As ``conv2d`` over ``[N, C, 1,
W]`` with a ``1 x K`` kernel it takes the same path as any other convolution; the two reshapes
around it are views.
"""

from __future__ import annotations

from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import function_pass, op_name, op_rewrite_pass, static_shape
from tvmbench.compile.passes.reshape_last import BINARY, UNARY

# Off: 1-d convolutions stay as TVM lowers them (for A/Bs: ``benchmarks/rule_ab.py``).
ENABLED = True
# 0: a 1-d convolution's batch norm, activation and pooling stay on its [N, C, W] output
# (``benchmarks/rule_ab.py M passes.conv1d.ON_ROW_MAPS 0``).
ON_ROW_MAPS = 1
REDUCTIONS = {"relax.max", "relax.min", "relax.sum", "relax.mean"}
# (CPUFriendlyArithmetic has written GELU as erf and products by then: wav2vec 2.0's front end)
ELEMENTWISE = UNARY | {"relax.erf", "relax.sqrt", "relax.rsqrt", "relax.abs", "relax.log", "relax.square",
                       "relax.astype", "relax.floor", "relax.ceil", "relax.round", "relax.sign"}
ELEMENTWISE_BINARY = BINARY | {"relax.power"}


def as_conv2d(call: Any) -> Any | None:
    """The rewrite of one ``conv1d`` call, or None when it does not apply."""
    attrs = call.attrs
    x, w = call.args
    xs, ws, out = static_shape(x.ty), static_shape(w.ty), static_shape(call.ty)
    if (xs is None or ws is None or out is None or str(attrs.data_layout) != "NCW"
            or str(attrs.kernel_layout) != "OIW" or str(attrs.out_layout) != "NCW"):
        return None
    left, right = (int(p) for p in attrs.padding)
    y = relax.op.nn.conv2d(relax.op.reshape(x, [xs[0], xs[1], 1, xs[2]]),
                           relax.op.reshape(w, [ws[0], ws[1], 1, ws[2]]),
                           strides=(1, int(attrs.strides[0])), padding=(0, left, 0, right),
                           dilation=(1, int(attrs.dilation[0])), groups=int(attrs.groups),
                           out_dtype=attrs.out_dtype)
    return relax.op.reshape(y, out)


def conv1d_as_conv2d() -> Any:
    """The pass (see the module's docstring); before ConvertLayout."""
    return op_rewrite_pass("relax.nn.conv1d", as_conv2d, "Conv1dAsConv2d", lambda: ENABLED)


@mutator
class _OnRowMaps(PyExprMutator):
    """Elementwise ops, reductions and reshapes of an ``[N, C, W]`` view of an ``[N, C, 1, W]``
    map computed on the map (see ``on_row_maps``)."""

    def _map(self, expr: Any) -> Any | None:
        """The ``[N, C, 1, W]`` map whose view ``expr`` is (a reshape dropping axis 2), or None."""
        value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        if isinstance(value, relax.TupleGetItem):  # (a part of a split moved to the map)
            parts = value.tuple_value
            parts = self.lookup_binding(parts) if isinstance(parts, relax.Var) else parts
            return self._map(parts.fields[int(value.index)]) if isinstance(parts, relax.Tuple) else None
        if op_name(value) not in ("relax.reshape", "relax.squeeze"):  # (max_pool1d's import squeezes its 2-d pool)
            return None
        inner, outer = static_shape(value.args[0].ty), static_shape(value.ty)
        if inner is None or outer is None or len(outer) != 3 or inner != outer[:2] + [1] + outer[2:]:
            return None
        return value.args[0]

    def _operand(self, arg: Any) -> Any | None:
        """``arg`` as the map broadcasts it: its map, itself (a scalar), or a reshape of it with the
        map's row axis inserted (a per-channel vector, a residual of the view's shape)."""
        found, dims = self._map(arg), static_shape(arg.ty)
        if found is not None or dims is None or len(dims) > 3:
            return found
        if not dims:
            return arg
        dims = [1] * (3 - len(dims)) + dims
        return self.builder_.emit(relax.op.reshape(arg, dims[:2] + [1] + dims[2:]))

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        out = static_shape(call.ty)
        if ON_ROW_MAPS and op_name(call) == "relax.split":
            return self._split(call)
        if not ON_ROW_MAPS or out is None or not call.args:
            return call
        moved = self._moved(call, op_name(call))
        if moved is None:
            return call
        if isinstance(moved, relax.Var) and op_name(call) in ("relax.reshape", "relax.expand_dims"):
            return moved  # (a reshape back to the map: the map itself)
        moved = self.builder_.emit(moved)
        return moved if static_shape(moved.ty) == out else relax.op.reshape(moved, out)

    def _moved(self, call: Any, name: str | None) -> Any | None:
        """``call`` computed on the map(s) its view operands are of, or None."""
        if name == "relax.concat":
            return self._concat(call)
        source = self._map(call.args[0])
        if source is None and not (name in ELEMENTWISE_BINARY and self._map(call.args[1]) is not None):
            return None
        if name in ("relax.reshape", "relax.expand_dims"):  # (expand_dims: max_pool1d's import, to a 2-d pool)
            out = static_shape(call.ty)
            return source if static_shape(source.ty) == out else relax.op.reshape(source, out)
        if name in ELEMENTWISE:
            return relax.Call(call.op, [source, *call.args[1:]], call.attrs, call.ty_args)
        if name in ELEMENTWISE_BINARY:
            args = [self._operand(a) for a in call.args]
            return None if any(a is None for a in args) else relax.Call(call.op, args, call.attrs, call.ty_args)
        if name in REDUCTIONS and call.attrs.axis is not None:
            axes = [int(a) % 3 for a in call.attrs.axis]
            axes = [a if a < 2 else a + 1 for a in axes] + ([] if call.attrs.keepdims else [2])
            return getattr(relax.op, name.split(".")[1])(source, sorted(set(axes)), bool(call.attrs.keepdims))
        if name == "relax.nn.group_norm" and int(call.attrs.channel_axis) % 3 == 1 \
                and [int(a) % 3 for a in call.attrs.axes] == [2]:  # (wav2vec 2.0's first layer)
            a = call.attrs
            return relax.op.nn.group_norm(source, call.args[1], call.args[2], int(a.num_groups), 1, [2, 3],
                                          float(a.epsilon), bool(a.center), bool(a.scale))
        if name == "relax.strided_slice" and isinstance(call.args[1], relax.Tuple) \
                and all(int(a.value) % 3 < 2 for a in call.args[1].fields):
            return relax.Call(call.op, [source, *call.args[1:]], call.attrs, call.ty_args)  # (channels, batch)
        return None

    def _split(self, call: Any) -> Any:
        """A split of a view along the channels (or batch): the map's split, its parts as views."""
        source = self._map(call.args[0])
        if source is None or int(call.attrs.axis) % 3 > 1 or any(static_shape(f) is None for f in call.ty.fields):
            return call
        parts = self.builder_.emit(relax.op.split(source, call.attrs.indices_or_sections, int(call.attrs.axis) % 3))
        return relax.Tuple([self.builder_.emit(relax.op.reshape(relax.TupleGetItem(parts, i), static_shape(f)))
                            for i, f in enumerate(call.ty.fields)])

    def _concat(self, call: Any) -> Any | None:
        """A concat along the channels (or batch) of views, at least one of them of a map: the
        concat of the maps (the other fields reshaped to maps, views too)."""
        fields = call.args[0]
        if isinstance(fields, relax.Var):
            fields = self.lookup_binding(fields)
        if not isinstance(fields, relax.Tuple) or call.attrs.axis is None or int(call.attrs.axis) % 3 > 1 \
                or all(self._map(f) is None for f in fields.fields):
            return None
        maps = [self._operand(f) for f in fields.fields]
        if any(m is None or len(static_shape(m.ty) or []) != 4 for m in maps):
            return None
        return relax.op.concat(maps, axis=int(call.attrs.axis) % 3)


def on_row_maps() -> Any:
    """OnRowMaps (after Conv1dAsConv2d, before ConvertLayout): a 1-d convolution's output is a
    reshape of its 2-d form's ``[N, C, 1, W]`` map to ``[N, C, W]``, and its batch norm, ReLU
    and pooling ran on that view. ConvertLayout cannot carry a reshape into NHWC, so it wrapped
    each in transposes: PointNet's layers were conv (NHWC), a transpose to NCHW, the batch norm
    apart from the convolution, a transpose back for the next; its 1024-channel layers spent
    7.6 ms transposing and 6.4 ms in the batch norm and max over points, against 22.5 ms of
    convolution (8 clouds of 1024 points). Computed on the map (per-channel vectors and residuals
    reshaped to it, reductions over the map's axes), the chain from one convolution to the next
    is 4-D: ConvertLayout keeps it in NHWC, the batch norm folds into the weights, the ReLU joins
    the kernel's epilogue, and the next convolution's reshape back to a map is the map itself."""
    return function_pass(_OnRowMaps, "OnRowMaps", prune=True)
