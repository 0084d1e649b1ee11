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

from tvmbench.compile.ir import op_rewrite_pass, static_shape

# Off: 1-d convolutions stay as TVM lowers them (for A/Bs: ``benchmarks/rule_ab.py``).
ENABLED = True


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
