"""KeepChannelsLast: concats, splits and channel shuffles kept in NHWC after ConvertLayout.

ConvertLayout turns convolutions to NHWC but leaves a ``reshape`` in the model's NCHW (a reshape
has no layout to convert), so it wraps every reshape in transposes: NHWC -> NCHW before it and
back after. A channel shuffle (``reshape [N, g, C/g, H, W]``, swap the two channel axes,
``reshape [N, C, H, W]``: ShuffleNet's every block) then carries its tensor through two full
transposes per block, and the concat and split around it (``chunk``/``cat``) move to NCHW with
it. Measured on the Zen 4 host, shufflenet_v2_x1_0 at batch 8, 320 px: 13 % of the model's time
in such layout kernels (``tvmbench profile``), each a strided transpose of the whole activation.

Here the NCHW values that are only a transpose of an NHWC value are followed through the
layout-agnostic operators, which are rewritten on the NHWC value instead:

- ``concat(axis=1)`` of such values is a ``concat(axis=3)`` of their NHWC forms (and of NDHWC
  forms along axis 4: a 3-d U-Net's skip concatenations);
- ``split(axis=1)`` of one splits its NHWC form along axis 3;
- a channel shuffle of one is the same shuffle on the NHWC form's last axis
  (``reshape [N, H, W, g, C/g]``, swap the last two axes, ``reshape [N, H, W, C]``);
- the transpose back to NHWC of such a value is its NHWC form;
- an elementwise operator ConvertLayout has no rule for (a leaky ReLU) on one is the operator on
  its NHWC form, and a max, min, sum or mean over some of its axes is that reduction over the NHWC
  form's matching axes, the small result transposed back. DGCNN's convolutions were each followed
  by a transpose of their whole output (5.4 ms for one of [1024, 20, 256]) before the leaky ReLU
  and the max over neighbours: now the activation joins the convolution and the max reads its
  output in place (the model 64 -> 45 ms).

Each rewritten value stays available in NCHW (a transpose of the new NHWC value) for any other
use; the transposes nothing uses any more are removed. What is left of a shuffle block is one
kernel that copies within each pixel's channels.
"""

from __future__ import annotations

from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import function_pass, op_name, static_shape


def to_first(rank: int) -> list[int]:
    """The transpose from channels last to channels first (NHWC -> NCHW, NDHWC -> NCDHW)."""
    return [0, rank - 1, *range(1, rank - 1)]


def to_last(rank: int) -> list[int]:
    """The transpose from channels first to channels last."""
    return [0, *range(2, rank), 1]


FOLLOW_UNARY_AND_REDUCTIONS = True
# tensors followed: NCHW views of NHWC ones, and NCDHW views of NDHWC ones (3-d U-Nets' skip
# concatenations; splits and shuffles are matched on 4-d tensors only)
RANKS = (4, 5)
# elementwise operators of one tensor that ConvertLayout leaves in NCHW: followed through the transpose
UNARY = {"relax.nn.leakyrelu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.sigmoid",
         "relax.tanh", "relax.nn.relu", "relax.clip", "relax.exp", "relax.erf", "relax.abs", "relax.negative"}
# reductions done on the NHWC form instead (DGCNN's max over neighbours came after a transpose of
# its convolution's whole output)
REDUCTIONS = {"relax.max": relax.op.max, "relax.min": relax.op.min, "relax.sum": relax.op.sum,
              "relax.mean": relax.op.mean}


def _axes(call: Any) -> list[int] | None:
    axes = call.attrs.axes
    return None if axes is None else [int(a) for a in axes]


@mutator
class _ChannelsLast(PyExprMutator):
    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        name = op_name(call)
        rank = len(call.ty.shape) if isinstance(call.ty, relax.TensorType) and call.ty.shape is not None else 0
        if name == "relax.permute_dims" and rank in RANKS and _axes(call) == to_last(rank):
            source = self._nhwc(call.args[0])
            return call if source is None else source
        if name == "relax.concat" and rank in RANKS and call.attrs.axis is not None and \
                int(call.attrs.axis) in (1, 1 - rank):
            fields = self._fields(call.args[0])
            sources = None if fields is None else [self._nhwc(f) for f in fields]
            if sources and all(s is not None for s in sources):
                return self._as_nchw(relax.op.concat(sources, axis=rank - 1))
        source = self._nhwc(call.args[0]) if name == "relax.split" else None
        if source is not None and int(call.attrs.axis) in (1, 1 - len(source.ty.shape)):
            parts = self.builder_.emit(relax.op.split(source, call.attrs.indices_or_sections,
                                                      axis=len(source.ty.shape) - 1))
            n = len(call.ty.fields)
            return relax.Tuple([self._as_nchw(relax.TupleGetItem(parts, i)) for i in range(n)])
        if name == "relax.reshape":
            shuffled = self._shuffle(call)
            if shuffled is not None:
                return shuffled
        if FOLLOW_UNARY_AND_REDUCTIONS and (name in UNARY or name in REDUCTIONS):
            source = self._nhwc(call.args[0])
            new = None if source is None else self._unary(call, source) if name in UNARY else self._reduced(call, source)
            if new is not None:
                return new
        return call

    def _unary(self, call: Any, source: Any) -> Any:
        """An elementwise operator ConvertLayout left in NCHW (it has no layout rule), on the NHWC form."""
        return self._as_nchw(relax.Call(call.op, [source, *call.args[1:]], call.attrs))

    def _reduced(self, call: Any, source: Any) -> Any | None:
        """A reduction of the NCHW view as one of the NHWC form (its axes moved), keeping its axes
        there; the small result is transposed back (and reshaped where the axes were dropped)."""
        if call.attrs.axis is None:
            return None
        rank = len(source.ty.shape)
        axes = sorted(to_last(rank).index(int(a) % rank) for a in call.attrs.axis)
        reduced = self.builder_.emit(REDUCTIONS[op_name(call)](source, axes, keepdims=True))
        out = relax.op.permute_dims(reduced, to_first(rank))
        return out if call.attrs.keepdims else relax.op.reshape(self.builder_.emit(out), call.ty.shape)

    def _as_nchw(self, nhwc: Any) -> Any:
        """``nhwc`` bound to a variable, seen in NCHW: its transpose (removed when unused)."""
        nhwc = self.builder_.emit(nhwc)
        return relax.op.permute_dims(nhwc, to_first(len(nhwc.ty.shape)))

    def _value(self, expr: Any) -> Any:
        return self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr

    def _fields(self, expr: Any) -> list[Any] | None:
        value = self._value(expr)
        return list(value.fields) if isinstance(value, relax.Tuple) else None

    def _nhwc(self, expr: Any) -> Any | None:
        """The NHWC value whose NCHW transpose ``expr`` is, or None."""
        value = self._value(expr)
        if isinstance(value, relax.TupleGetItem):
            fields = self._fields(value.tuple_value)
            return None if fields is None else self._nhwc(fields[int(value.index)])
        if op_name(value) == "relax.permute_dims" and _axes(value) in [to_first(r) for r in RANKS]:
            return value.args[0]
        return None

    def _shuffle(self, call: Any) -> Any | None:
        """A channel shuffle ending in ``call`` (reshape [N, C, H, W] of a swap of the channel axes
        of a reshape [N, g, C/g, H, W]) on a value with an NHWC form, rewritten on that form."""
        out = static_shape(call.ty)
        swapped = self._value(call.args[0])
        if out is None or len(out) != 4 or op_name(swapped) != "relax.permute_dims" \
                or _axes(swapped) != [0, 2, 1, 3, 4]:
            return None
        split = self._value(swapped.args[0])
        if op_name(split) != "relax.reshape":
            return None
        source, grouped = self._nhwc(split.args[0]), static_shape(split.ty)
        n, c, h, w = out
        if source is None or grouped is None or len(grouped) != 5 or grouped[:1] + grouped[3:] != [n, h, w] \
                or grouped[1] * grouped[2] != c or static_shape(source.ty) != [n, h, w, c]:
            return None
        g, per = grouped[1], grouped[2]
        nhwc = self.builder_.emit(relax.op.reshape(source, [n, h, w, g, per]))
        nhwc = self.builder_.emit(relax.op.permute_dims(nhwc, [0, 1, 2, 4, 3]))
        return self._as_nchw(relax.op.reshape(nhwc, [n, h, w, c]))


def keep_channels_last() -> Any:
    """The pass (see the module's docstring)."""
    return function_pass(_ChannelsLast, "KeepChannelsLast", prune=True)
