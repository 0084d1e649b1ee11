"""ElementwiseBeforeReshape: elementwise ops on a tensor whose last axis was merged from two
(``[..., G, C] -> [..., G * C]``) computed before the merge instead.

A grouped convolution runs over its groups as an axis of their own (``grouped_conv.py``) and its
``[N, H, W, G, Co]`` output is reshaped to NHWC for the rest of the model. Its batch-norm shift
and ReLU come after that reshape, and FuseOps does not fuse a reshape into the convolution's
kernel, so every grouped convolution of RegNet wrote its output, and a kernel of its own read it
back, added the shift, applied the ReLU and wrote it again. Computed on the 5-D tensor (the
shift reshaped to ``[G, Co]``, a weight-only reshape done at load time), the shift and the ReLU
fuse into the convolution's epilogue and the reshape is a view.

A binary op qualifies when its other operand broadcasts along the last axis only (a per-channel
vector, a scalar); a unary op (its first argument the tensor, the rest attributes or scalars)
always. Each moved op leaves a reshape after it, so a chain moves one op at a time.

A unary op also moves in front of any other reshape of a computed value (ANY_RESHAPE_UNARY):
T5's feed-forward layer reshapes its first dense layer's 2-D output to 3-D before the ReLU (and
back after), and the ReLU ran as a kernel of its own that read and wrote [128, 3072] per layer.
Same-process A/B against 0 (session 66, `rule_ab.py t5-base passes.reshape_last.ANY_RESHAPE_UNARY
0`): fp32 1.014x; under --precision bf16, with Bf16Dense's cast before the reshapes, 1.039x (the
ReLU and the cast both in the dense layer's epilogue). bert, mobilenet_v2, resnet50: unchanged.

With ``splits`` (PackWeights runs the pass so after computing 1x1 convolutions as dense layers,
``pack_weights.CONV_AS_DENSE``) a binary op also moves in front of a reshape of a 2-D ``[M, C]``
tensor to NHWC: its per-channel operand reshaped to ``[1, C]``, a residual of the NHWC shape to
``[M, C]`` (a view), so the bias, ReLU and residual add stay in the dense kernel's epilogue.

(CPUFriendlyArithmetic moves a residual add and the attention mask in front of a dense layer's
reshape the same way, but it runs before ConvertLayout, long before this reshape exists.)
"""

from __future__ import annotations

from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import builder_pass, op_name, static_shape

# Unary ops move in front of any reshape of a computed value, not only a merge of the last axes.
ANY_RESHAPE_UNARY = 1
# Binary ops move in front of Conv3dAsConv2d's unfold of its 2-d convolution's output (``[N * T,
# H, W, C] -> [N, T, H, W, C]``): a 3-d convolution's batch norm and residual add join its kernel's
# epilogue instead of a kernel of their own (0: they stay after the unfold).
UNFOLDED = 1
UNARY = {"relax.nn.relu", "relax.clip", "relax.sigmoid", "relax.tanh", "relax.nn.silu", "relax.nn.gelu",
         "relax.nn.gelu_tanh", "relax.nn.leakyrelu", "relax.negative", "relax.exp"}
BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum"}


def _split(value: Any) -> tuple[Any, list[int]] | None:
    """(the 2-D tensor, its shape) when ``value`` reshapes ``[M, C]`` to an NHWC ``[N, H, W, C]``
    with ``N * H * W = M``: a 1x1 convolution computed as a dense layer (``pack_weights.CONV_AS_DENSE``)."""
    if op_name(value) != "relax.reshape":
        return None
    inner, outer = static_shape(value.args[0].ty), static_shape(value.ty)
    if inner is None or outer is None or len(inner) != 2 or len(outer) != 4 or inner[1] != outer[3] \
            or outer[0] * outer[1] * outer[2] != inner[0]:
        return None
    return value.args[0], inner


def _merged(value: Any) -> tuple[Any, list[int]] | None:
    """(the 5-D tensor, its shape) when ``value`` is a reshape merging its input's last two axes."""
    if op_name(value) != "relax.reshape":
        return None
    inner, outer = static_shape(value.args[0].ty), static_shape(value.ty)
    if inner is None or outer is None or len(inner) != len(outer) + 1 or inner[:-2] != outer[:-1] \
            or inner[-2] * inner[-1] != outer[-1] or min(inner[-2:]) < 2:
        return None
    return value.args[0], inner


def _unfolded(value: Any) -> tuple[Any, list[int]] | None:
    """(the 4-D tensor, its shape) when ``value`` reshapes it to 5-D keeping its last axis:
    Conv3dAsConv2d's output, its clips' steps unfolded from the images (UNFOLDED)."""
    if not UNFOLDED or op_name(value) != "relax.reshape":
        return None
    inner, outer = static_shape(value.args[0].ty), static_shape(value.ty)
    if inner is None or outer is None or len(inner) != 4 or len(outer) != 5 or inner[-1] != outer[-1]:
        return None
    return value.args[0], inner


@mutator
class _Sink(PyExprMutator):
    def __init__(self, mod: Any, splits: bool = False) -> None:
        super().__init__(mod)
        self.splits = splits

    def _source(self, arg: Any, unary: bool = False) -> tuple[Any, list[int]] | None:
        bound = self.lookup_binding(arg) if isinstance(arg, relax.Var) else None
        if bound is None:
            return None
        merged = _merged(bound)
        if merged is None and unary and ANY_RESHAPE_UNARY and op_name(bound) == "relax.reshape":
            source = bound.args[0]
            computed = isinstance(source, relax.Var) and self.lookup_binding(source) is not None
            shape = static_shape(source.ty)
            return (source, shape) if computed and shape is not None else None
        return merged or (_split(bound) if self.splits else None) or _unfolded(bound)

    def _operand(self, other: Any, shape: list[int], outer: list[int] | None = None) -> Any | None:
        """``other`` broadcast over the 5-D ``shape``: itself when it is a scalar or all ones, a
        reshape to ``[1, ..., G, Co]`` when it runs along the merged axis only, else None. Over a
        split's 2-D ``shape`` (``outer``: the NHWC shape it was reshaped to), a per-channel vector
        reshaped to ``[1, C]``, a tensor of the whole NHWC shape (a residual) to ``[M, C]``."""
        dims = static_shape(other.ty)
        if len(shape) == 4 and outer is not None and len(outer) == 5:  # (an unfold's: per channel, or whole)
            if dims == outer:
                return self.builder_.emit(relax.op.reshape(other, shape))
            if dims is None or any(d != 1 for d in dims[:-1]) or (dims and dims[-1] not in (1, shape[-1])):
                return None
            return self.builder_.emit(relax.op.reshape(other, [1, 1, 1, dims[-1]])) if dims else other
        if len(shape) == 2 and outer is not None:
            if dims == outer:
                return self.builder_.emit(relax.op.reshape(other, shape))
            if dims is None or len(dims) > 4 or any(d != 1 for d in dims[:-1]):
                return None
            return other if not dims or dims[-1] == 1 else \
                self.builder_.emit(relax.op.reshape(other, [1, shape[1]])) if dims[-1] == shape[1] else None
        if dims is None or len(dims) > len(shape) - 1 or any(d != 1 for d in dims[:-1]):
            return None
        if not dims or dims[-1] == 1:
            return other
        if dims[-1] != shape[-2] * shape[-1]:
            return None
        return self.builder_.emit(relax.op.reshape(other, [1] * (len(dims) - 1) + shape[-2:]))

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        name = op_name(call)
        if name not in UNARY and name not in BINARY:
            return call
        args = list(call.args)
        for i in range(1 if name in UNARY else 2):
            found = self._source(args[i], name in UNARY)
            if found is None:
                continue
            tensor, shape = found
            if name in BINARY:
                other = self._operand(args[1 - i], shape, static_shape(args[i].ty))
                if other is None:
                    return call
                args[1 - i] = other
            args[i] = tensor
            moved = self.builder_.emit(relax.Call(call.op, args, call.attrs, call.ty_args))
            return relax.op.reshape(moved, static_shape(call.ty))
        return call


def elementwise_before_reshape(splits: bool = False) -> Any:
    """The pass (after GroupedConvNHWC); ``splits``: binary ops move in front of 2-D -> NHWC
    splits too (``_split``; PackWeights' run after its CONV_AS_DENSE rewrites)."""
    return builder_pass(lambda mod: _Sink(mod, splits), "ElementwiseBeforeReshape")
