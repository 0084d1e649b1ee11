"""The Relax pass pipeline per target, composed like TVM's own ``relax/pipeline.py``.

TVM's default CPU pipeline (``tvm.compile(mod, "llvm")``) does no operator fusion, and its GPU
pipeline does not decompose batch-norm for inference. We use one pipeline shape for both, in four
stages, so that the functions the tuner extracts are exactly the functions this pipeline compiles
(tuning records match by structural hash):

1. library dispatch (sampling, sort/scan) and graph simplification: DecomposeOpsForInference
   (batch-norm to scale/shift), CanonicalizeBindings;
   on CPU, convolutions to NHWC/HWIO and conv/dense weights packed per output-channel tile; then
   LiftTransformParams moves weight-only work (layout transforms, packing, transposes,
   batch-norm folding) into ``main_transform_params``, run once at load;
2. legalize and fuse: (on CPU, FastMathTransform), LegalizeOps, AnnotateTIROpPattern,
   FoldConstant, FuseOps, FuseTIR;
3. schedules: a MetaSchedule database where given, then default rules for what it did not cover
   (tvmbench's CPU rules in ``cpu_rules``, then DLight's; functions already scheduled are skipped);
4. VM lowering: TVM's own dataflow-lowering and finalisation passes for the target.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tvmbench.compile.winograd import winograd_conv3x3
from tvmbench.targets import ResolvedTarget

# Bumped whenever the pipeline changes what it produces, so cached libraries are rebuilt.
PIPELINE_VERSION = "21"


def cpu_friendly_arithmetic() -> Any:
    """Two rewrites that make elementwise epilogues cheap on CPU.

    * ``clip(x, lo, hi)`` (ReLU6, hardtanh) becomes ``minimum(maximum(x, lo), hi)``: ConvertLayout
      has no layout rule for clip in TVM 0.27, so every ReLU6 of an NHWC network became
      transpose -> clip -> transpose, three kernels where the convolution's epilogue could have
      done it; the binary ops follow the layout and fuse.
    * ``x / d`` with a broadcast divisor (batch-norm's ``sqrt(var + eps)``, attention's scale)
      becomes ``x * (1 / d)``: a vector division costs several multiplies, and when ``d`` comes
      from the weights LiftTransformParams then computes ``1 / d`` once at load time.
    * ``x ** 2`` and ``x ** 3`` with a constant exponent (GPT-2's tanh GELU) become products:
      ``pow`` is a libm call per element that LLVM does not vectorise, and TVM warns once per
      kernel that it is unsafe for negative ``x`` with an exponent of 3 or more.
    * ``gelu`` becomes its elementwise formula, moved in front of a reshape that feeds it: as one
      opaque op after the dense layer's reshape it ran as its own kernel with a scalar ``erf``
      per element (FastMathTransform knows ``erf`` but not ``gelu``), 7 % of ViT's time; as
      multiplies, adds and a fast ``erf`` it joins the dense layer's write-back.
    """
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class Rewrite(PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.clip":
                x, lo, hi = call.args
                dtype = x.ty.dtype
                low = relax.op.maximum(x, relax.const(float(lo.value), dtype))
                return relax.op.minimum(low, relax.const(float(hi.value), dtype))
            if isinstance(call.op, tvm.ir.Op) and call.op.name in ("relax.nn.gelu", "relax.nn.gelu_tanh"):
                x = call.args[0]
                bound = self.lookup_binding(x) if isinstance(x, relax.Var) else None
                reshaped = isinstance(bound, relax.Call) and isinstance(bound.op, tvm.ir.Op) and \
                    bound.op.name == "relax.reshape"
                y = _gelu(bound.args[0] if reshaped else x, call.op.name == "relax.nn.gelu_tanh")
                return relax.op.reshape(y, x.ty.shape) if reshaped else y
            if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.reshape" and \
                    isinstance(call.args[0], relax.Var):
                # reshape of a reshape (left by the GELU move): one reshape, or none at all
                bound = self.lookup_binding(call.args[0])
                if isinstance(bound, relax.Call) and isinstance(bound.op, tvm.ir.Op) and \
                        bound.op.name == "relax.reshape":
                    source = bound.args[0]
                    same = _static_shape(source.ty) is not None and \
                        _static_shape(source.ty) == _static_shape(call.ty)
                    return source if same else relax.op.reshape(source, call.args[1])
            if isinstance(call.op, tvm.ir.Op) and call.op.name in ("relax.add", "relax.multiply", "relax.subtract"):
                moved = self.before_reshape(call)
                if moved is not None:
                    return moved
            if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.power":
                x, e = call.args
                exponent = _scalar_constant(e)
                if exponent in (2.0, 3.0) and str(x.ty.dtype).startswith(("float", "bfloat")):
                    square = relax.op.multiply(x, x)
                    return square if exponent == 2.0 else relax.op.multiply(square, x)
            if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.divide":
                x, d = call.args
                xs, ds = x.ty, d.ty
                if str(xs.dtype).startswith(("float", "bfloat")) and _numel(ds) is not None and \
                        _numel(xs) is not None and _numel(ds) < _numel(xs):
                    return relax.op.multiply(x, relax.op.divide(relax.const(1.0, str(ds.dtype)), d))
            return call

        def before_reshape(self, call: Any) -> Any:
            """``op(reshape(y), b)`` with ``b`` of the same shape becomes
            ``reshape(op(y, reshape(b)))``: a transformer's residual add then follows its dense
            layer directly and joins its write-back, instead of being a kernel of its own."""
            a, b = call.args
            for first, operand, other in ((True, a, b), (False, b, a)):
                bound = self.lookup_binding(operand) if isinstance(operand, relax.Var) else None
                if not (isinstance(bound, relax.Call) and isinstance(bound.op, tvm.ir.Op)
                        and bound.op.name == "relax.reshape"):
                    continue
                y = bound.args[0]
                shape, y_shape = _static_shape(operand.ty), _static_shape(y.ty)
                if shape is None or y_shape is None or _static_shape(other.ty) != shape:
                    continue
                other_y = relax.op.reshape(other, y_shape)
                args = (y, other_y) if first else (other_y, y)
                return relax.op.reshape(relax.Call(call.op, list(args), call.attrs), shape)
            return None

    return _function_pass(Rewrite, "CPUFriendlyArithmetic")


def _function_pass(mutator_class: Any, name: str) -> Any:
    """A module pass that runs a PyExprMutator over every Relax function of the module."""
    import tvm
    from tvm import relax

    @tvm.ir.transform.module_pass(opt_level=0, name=name)
    def rewrite(mod: Any, ctx: Any) -> Any:
        mutator_ = mutator_class(mod)
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                mod[gv] = mutator_.visit_expr(func)
        return mod

    return rewrite


def bounded_take() -> Any:
    """``take`` (embedding lookups, gathers) with ``mode="clip"`` instead of Relax's default
    ``"fast"``: with ``"fast"`` a token id outside the vocabulary reads out of bounds and can
    crash the process (a user's model fed the wrong tokenizer's ids), and TVM logs a warning per
    gather while compiling. Clipping costs a min/max per index."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class Clip(PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.take" and str(call.attrs.mode) == "fast":
                axis = call.attrs.axis
                return relax.op.take(call.args[0], call.args[1], None if axis is None else int(axis), mode="clip")
            return call

    return _function_pass(Clip, "BoundedTake")


def fold_scale_into_conv() -> Any:
    """Fold a per-output-channel affine epilogue (inference batch norm) into the convolution.

    After DecomposeOpsForInference a batch norm is ``((conv - mean) * rsqrt) * gamma + beta``:
    four per-channel operands loaded and four vector ops on every output element, in the
    convolution's write-back. For a depthwise 3x3 (9 multiply-adds per output) or a 1x1 with 16
    input channels that epilogue costs as much as the convolution. Folded, the weights are
    multiplied by ``rsqrt * gamma`` and the epilogue is one bias add; both products depend on
    weights only, so LiftTransformParams computes them once at load time (what ONNX Runtime and
    OpenVINO do when they load a model). A chain is folded only when each intermediate result
    has no other use, and only with operands that are per-channel and weight-derived.
    """
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    affine_ops = {"relax.subtract", "relax.multiply", "relax.add"}

    def op_name(expr: Any) -> str | None:
        return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else None

    @mutator
    class Fold(PyExprMutator):
        def __init__(self, mod: Any) -> None:
            super().__init__(mod)
            self.bound: dict[Any, Any] = {}
            self.uses: dict[Any, int] = {}
            self.weights: set[Any] = set()
            self.chains: dict[Any, tuple[Any, list[tuple[str, Any]]]] = {}

        def prepare(self, func: Any) -> None:
            n_inputs = int(func.attrs["num_input"]) if func.attrs and "num_input" in func.attrs else None
            self.weights = set(func.params[n_inputs:]) if n_inputs is not None else set()
            self.bound, self.uses, self.chains = {}, {}, {}
            for block in func.body.blocks:
                for b in block.bindings:
                    if isinstance(b, relax.VarBinding):
                        self.bound[b.var] = b.value
                        for v in relax.analysis.free_vars(b.value):
                            self.uses[v] = self.uses.get(v, 0) + 1
            for v in relax.analysis.free_vars(func.body.body):
                self.uses[v] = self.uses.get(v, 0) + 1
            users = {}
            for var, value in self.bound.items():
                if op_name(value) in affine_ops and isinstance(value.args[0], relax.Var):
                    users[value.args[0]] = var
            for var, value in self.bound.items():
                if op_name(value) != "relax.nn.conv2d" or value.attrs.kernel_layout != "HWIO":
                    continue
                out_channels = _numel(value.args[1].ty) and int(value.args[1].ty.shape[-1])
                steps, cur = [], var
                while self.uses.get(cur) == 1 and cur in users:
                    nxt = users[cur]
                    operand = self.bound[nxt].args[1]
                    if not self.per_channel(operand, out_channels):
                        break
                    steps.append((op_name(self.bound[nxt]), operand))
                    cur = nxt
                # The chain's end must be a dataflow variable: it is re-emitted inside the block.
                if any(kind == "relax.multiply" for kind, _ in steps) and isinstance(cur, relax.DataflowVar):
                    self.chains[cur] = (value, steps)

        def per_channel(self, expr: Any, channels: int | None) -> bool:
            shape = _numel(expr.ty) is not None and [int(v) for v in expr.ty.shape]
            return bool(shape) and channels is not None and shape[-1] in (1, channels) \
                and all(d == 1 for d in shape[:-1]) and self.weight_only(expr)

        def weight_only(self, expr: Any) -> bool:
            """Computed from weights and constants only. A walk, not a recursion: an activation
            (a squeeze-excite scale) leads back through the whole network to its input."""
            stack, seen = [expr], set()
            while stack:
                e = stack.pop()
                if isinstance(e, tvm.ir.expr.Constant | relax.ShapeExpr) or e in self.weights:
                    continue
                if isinstance(e, relax.Var):
                    if e not in self.bound:
                        return False
                    if e not in seen:
                        seen.add(e)
                        stack.append(self.bound[e])
                elif isinstance(e, relax.Call):
                    stack.extend(e.args)
                elif isinstance(e, relax.Tuple):
                    stack.extend(e.fields)
                else:
                    return False
            return True

        def visit_var_binding_(self, binding: Any) -> None:
            chain = self.chains.get(binding.var)
            if chain is None:
                return super().visit_var_binding_(binding)
            conv, steps = chain
            x, w = (self.visit_expr(a) for a in conv.args)
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
            channels = int(w.ty.shape[-1])
            a = conv.attrs
            w = emit(relax.op.multiply(w, relax.op.reshape(scale, [channels]) if _numel(scale.ty) == channels
                                       else scale))
            out = relax.op.nn.conv2d(x, w, strides=a.strides, padding=a.padding, dilation=a.dilation,
                                     groups=a.groups, data_layout=a.data_layout, kernel_layout=a.kernel_layout,
                                     out_layout=a.out_layout, out_dtype=str(a.out_dtype) or None)
            if bias is not None:
                out = relax.op.add(emit(out), bias)
            self.set_var_remap(binding.var, emit(out, name_hint=binding.var.name))

    @tvm.ir.transform.module_pass(opt_level=0, name="FoldScaleIntoConv")
    def fold(mod: Any, ctx: Any) -> Any:
        folded = False
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
                mutator_ = Fold(mod)
                mutator_.prepare(func)
                if mutator_.chains:
                    mod[gv] = mutator_.visit_expr(func)
                    folded = True
        # The unfolded chains' bindings are now unused; DCE drops them (otherwise they would run).
        return relax.transform.DeadCodeElimination()(mod) if folded else mod

    return fold


def pack_weights(block: int, conv_block: Callable[[int, bool], int] | None = None) -> Any:
    """NHWC convolutions and dense layers read their weights in packed layouts,
    ``[O/block, KH, KW, I, block]`` and ``[N/block, K, block]``; ``conv_block(rows, dot)`` gives a
    convolution's block from its output rows (the register tile's row axis) and whether it is 1x1,
    when it depends on them.

    In HWIO (or a transposed dense weight, ``[K, N]``) the weights of one output-channel tile
    (``block`` channels, the CPU contraction rule's register tile) are 2 cache lines per input
    channel, ``O * 4`` bytes apart: 2 KB for 512 channels, 12 KB for BERT's 3072, which maps every
    line of the panel onto the same few L1 sets, so the deep layers of a ResNet ran at half the
    speed of the shallow ones. Packed, a tile's panel is one contiguous stream. Dense weights are
    packed only when they are weight parameters (or a transpose of one): packing an activation
    would cost a copy on every call. The packing is a weight-only ``layout_transform``, which
    LiftTransformParams moves to load time. Grouped convolutions and channel counts that are not
    a multiple of ``block`` keep HWIO.
    """
    import tvm
    from tvm import relax, te, topi
    from tvm.relax.expr_functor import PyExprMutator, mutator

    def conv(x: Any, wp: Any, strides: list[int], pad: list[int], dilation: list[int], out_dtype: str) -> Any:
        _, h, w, _ = (int(v) for v in x.shape)
        ob, kh, kw, ci, pb = (int(v) for v in wp.shape)
        top, left, bottom, right = pad
        if any(pad):
            x = topi.nn.pad(x, [0, top, left, 0], [0, bottom, right, 0], name="pad")
        oh = (h + top + bottom - (kh - 1) * dilation[0] - 1) // strides[0] + 1
        ow = (w + left + right - (kw - 1) * dilation[1] - 1) // strides[1] + 1
        rh, rw, rc = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw"), te.reduce_axis((0, ci), "rc")
        return te.compute(
            (x.shape[0], oh, ow, ob * pb),
            lambda n, y, z, o: te.sum(
                x[n, y * strides[0] + rh * dilation[0], z * strides[1] + rw * dilation[1], rc].astype(out_dtype)
                * wp[o // pb, rh, rw, rc, o % pb].astype(out_dtype), axis=[rh, rw, rc]),
            name="conv2d_nhwc_packed")

    def matmul(x: Any, wp: Any, out_dtype: str, rows: int | None = None) -> Any:
        """``rows``: compute this many rows (more than x has), reading x's last row for the extra
        ones; the caller slices them off."""
        nb, k, pb = (int(v) for v in wp.shape)
        r = te.reduce_axis((0, k), "rk")
        m = int(x.shape[-2]) if len(x.shape) >= 2 else None

        def row(i: Any) -> Any:
            return te.min(i, m - 1) if rows else i

        return te.compute(
            (*x.shape[:-2], rows or x.shape[-2], nb * pb) if len(x.shape) >= 2 else (nb * pb,),
            lambda *i: te.sum(x[(*i[:-2], row(i[-2]), r)].astype(out_dtype)
                              * wp[i[-1] // pb, r, i[-1] % pb].astype(out_dtype), axis=r),
            name="matmul_packed")

    @mutator
    class Pack(PyExprMutator):
        weights: set[Any] = set()

        def from_weights(self, expr: Any) -> bool:
            """A weight parameter, or a transpose of one (what the importers give dense layers)."""
            while isinstance(expr, relax.Var) and expr not in self.weights:
                bound = self.lookup_binding(expr)
                if not (isinstance(bound, relax.Call) and isinstance(bound.op, tvm.ir.Op)
                        and bound.op.name == "relax.permute_dims"):
                    return False
                expr = bound.args[0]
            return isinstance(expr, relax.Var) and expr in self.weights

        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.matmul":
                return self.pack_matmul(call)
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d"):
                return call
            a = call.attrs
            x, w = call.args
            shape = [int(v) for v in w.ty.shape] if _numel(w.ty) is not None else None
            out = _static_shape(call.ty)
            cblock = block
            if conv_block and out and len(out) == 4 and shape and len(shape) == 4:
                cblock = conv_block(out[2] if out[2] > 1 else out[1], shape[0] == shape[1] == 1)
            if (a.data_layout != "NHWC" or a.kernel_layout != "HWIO" or a.out_layout != "NHWC" or a.groups != 1
                    or shape is None or _numel(x.ty) is None or shape[3] % cblock or shape[3] < 2 * cblock):
                return call
            packed = self.builder_.emit(relax.op.layout_transform(
                w, lambda kh, kw, i, o: (o // cblock, kh, kw, i, o % cblock)))
            out_dtype = str(a.out_dtype) if str(a.out_dtype) else str(x.ty.dtype)
            return self.builder_.call_te(conv, x, packed, [int(v) for v in a.strides],
                                         [int(v) for v in a.padding], [int(v) for v in a.dilation],
                                         out_dtype or str(x.ty.dtype), primfunc_name_hint="conv2d_nhwc_packed")

        def pack_matmul(self, call: Any) -> Any:
            x, w = call.args
            shape = [int(v) for v in w.ty.shape] if _numel(w.ty) is not None else None
            if (shape is None or len(shape) != 2 or _numel(x.ty) is None or len(x.ty.shape) < 2
                    or shape[1] < 2 * block or not self.from_weights(w)):
                return call
            # A classifier's 1000 outputs are not a multiple of the tile: a narrower block (the
            # rule then uses narrower vectors) still turns its weight rows into one stream.
            n = shape[1]
            pb = next((b for b in (block, block // 2, block // 4) if b >= 4 and n % b == 0), None)
            # No block divides n (GPT-2's 50257-word LM head, a third of its FLOPs): the weight is
            # padded with zero columns to whole blocks at load time, the kernel computes the padded
            # width with full vectors, and the padding is sliced off its output. Unpadded, the
            # tail left the whole loop unvectorised: a scalar matmul.
            padded = pb is None
            pb = block if padded else pb
            packed = self.builder_.emit(relax.op.layout_transform(
                w, lambda k, n: (n // pb, k, n % pb), pad_value=0.0 if padded else None))
            # Rows with no divisor from 4 to 8 (ViT's 197 tokens) would leave a predicated last row
            # tile, and the predicate sits in every tile's inner loop (30 % slower at 197 rows
            # than at 200): whole tiles are computed, the extra rows re-reading the last row
            # (no bounds check, no copy), and sliced off.
            m = int(x.ty.shape[-2])
            rows = -(-m // 8) * 8 if m > 8 and max(d for d in range(1, 9) if m % d == 0) < 4 else None
            out_dtype = str(call.attrs.out_dtype) or str(x.ty.dtype)
            out = self.builder_.call_te(matmul, x, packed, out_dtype or str(x.ty.dtype), rows,
                                        primfunc_name_hint="matmul_packed")
            rank = len(x.ty.shape)
            if rows:
                out = relax.op.strided_slice(self.builder_.emit(out), axes=[rank - 2], begin=[0], end=[m])
            if padded:
                out = relax.op.strided_slice(self.builder_.emit(out), axes=[rank - 1], begin=[0], end=[n])
            return out

    @tvm.ir.transform.module_pass(opt_level=0, name="PackWeights")
    def pack(mod: Any, ctx: Any) -> Any:
        mutator_ = Pack(mod)
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                n_inputs = int(func.attrs["num_input"]) if func.attrs and "num_input" in func.attrs else None
                mutator_.weights = set(func.params[n_inputs:]) if n_inputs is not None else set()
                mutator_.builder_.update_func(gv, mutator_.visit_expr(func))
        return mutator_.builder_.get()

    return pack


def fuse_expansion_into_window() -> Any:
    """Join each 1x1 convolution whose output (over cpu_rules._FUSE_EXPANSION_BYTES) feeds only a
    window reduction into one fused function with it (runs between FuseOps and FuseTIR).

    An inverted-residual block (mobilenet_v2, mnasnet) expands channels 6x with a 1x1
    convolution, then runs a depthwise 3x3 over the expanded tensor: FuseOps keeps the two apart
    (two reductions), so the expanded tensor (4.8 MB at 112x112x96) makes a round trip through
    memory. Joined, cpu_rules' ExpandWindow rule computes it band by band inside the depthwise
    convolution's tiles.
    """
    import tvm
    from tvm import relax

    from tvmbench.compile import cpu_rules

    @tvm.ir.transform.module_pass(opt_level=0, name="FuseExpansionIntoWindow")
    def run(mod: Any, ctx: Any) -> Any:
        roles: dict[Any, str | None] = {}

        def role(expr: Any) -> str | None:
            if not (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.GlobalVar)):
                return None
            if expr.op not in roles:
                func = mod[expr.op]
                called = [mod[c.args[0]] for c in _calls(func, "relax.call_tir")] \
                    if isinstance(func, relax.Function) and "Primitive" in (func.attrs or {}) else []
                found = [r for r in map(cpu_rules.fusion_role, called) if r is not None]
                roles[expr.op] = found[0] if len(found) == 1 else None
            return roles[expr.op]

        out = tvm.IRModule(dict(mod.functions.items()))
        joined: dict[tuple[Any, Any], Any] = {}
        for gv, func in mod.functions.items():
            if not isinstance(func, relax.Function) or "Primitive" in (func.attrs or {}):
                continue
            uses: dict[Any, int] = {}
            for binding in _bindings(func):
                for var in _vars(binding.value):
                    uses[var] = uses.get(var, 0) + 1
            for var in _vars(func.body.body):
                uses[var] = uses.get(var, 0) + 1
            value = {b.var: b.value for b in _bindings(func)}
            fused: dict[Any, Any] = {}  # the window's var -> the expansion's call
            for b in _bindings(func):
                if role(b.value) != "window" or not isinstance(b.value.args[0], relax.Var):
                    continue
                first = b.value.args[0]
                numel = _numel(first.ty)
                if (role(value.get(first)) == "dot" and uses.get(first) == 1 and numel is not None
                        and numel * tvm.DataType(str(first.ty.dtype)).bits // 8 > cpu_rules._FUSE_EXPANSION_BYTES):
                    fused[b.var] = value[first]
            if not fused:
                continue
            skip = {c.args[0] for c in (value[v] for v in fused)}
            blocks = []
            for block in func.body.blocks:
                bindings = []
                for b in block.bindings:
                    if b.var in skip:
                        continue
                    if b.var in fused:
                        dot_call, window_call = fused[b.var], b.value
                        key = (dot_call.op, window_call.op)
                        if key not in joined:
                            joined[key] = _join_functions(out, mod[dot_call.op], mod[window_call.op],
                                                          dot_call.op.name_hint, window_call.op.name_hint)
                        b = relax.VarBinding(b.var, relax.Call(joined[key], [*dot_call.args, *window_call.args[1:]]))
                    bindings.append(b)
                blocks.append(type(block)(bindings))
            out[gv] = relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty,
                                     func.is_pure, func.attrs)
        return out

    return run


def _bindings(func: Any) -> list[Any]:
    return [b for block in func.body.blocks for b in block.bindings]


def _vars(expr: Any) -> list[Any]:
    from tvm import relax

    found: list[Any] = []
    relax.analysis.post_order_visit(expr, lambda e: found.append(e) if isinstance(e, relax.Var) else None)
    return found


def _calls(func: Any, op_name: str) -> list[Any]:
    import tvm
    from tvm import relax

    found: list[Any] = []
    relax.analysis.post_order_visit(
        func.body, lambda e: found.append(e) if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op)
        and e.op.name == op_name else None)
    return found


def _join_functions(mod: Any, first: Any, second: Any, first_name: str, second_name: str) -> Any:
    """Add to ``mod`` a primitive function computing ``second(first(a...), b...)`` from the
    bodies of both (FuseTIR then makes one PrimFunc of it); returns its GlobalVar."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    params = [relax.Var(p.name, p.ty) for p in [*first.params, *second.params[1:]]]
    remap = dict(zip([*first.params, *second.params[1:]], params, strict=True))

    @mutator
    class Substitute(PyExprMutator):
        def visit_var_(self, var: Any) -> Any:
            return remap.get(var, var)

        def visit_dataflow_var_(self, var: Any) -> Any:
            return remap.get(var, var)

    name = f"fused_{first_name.removeprefix('fused_')}_{second_name.removeprefix('fused_')}"
    bb = relax.BlockBuilder(mod)
    with bb.function(name, params, attrs=dict(first.attrs), private=True):
        with bb.dataflow():
            for func in (first, second):
                if func is second:
                    remap[second.params[0]] = remap[first.body.body]
                for b in _bindings(func):
                    remap[b.var] = bb.emit(Substitute().visit_expr(b.value))
            result = bb.emit_output(remap[second.body.body])
        gv = bb.emit_func_output(result)
    mod[gv] = bb.get()[gv]
    return gv


def _gelu(x: Any, tanh: bool) -> Any:
    """``x * (0.5 + 0.5 * erf(x / sqrt(2)))``, or the tanh approximation, as Relax ops."""
    from tvm import relax

    dtype = str(x.ty.dtype)

    def c(v: float) -> Any:
        return relax.const(v, dtype)

    if tanh:
        inner = relax.op.multiply(relax.op.add(x, relax.op.multiply(c(0.044715), relax.op.multiply(
            relax.op.multiply(x, x), x))), c(0.7978845608028654))
        shape = relax.op.tanh(inner)
    else:
        shape = relax.op.erf(relax.op.multiply(x, c(0.7071067811865476)))
    return relax.op.multiply(x, relax.op.add(c(0.5), relax.op.multiply(shape, c(0.5))))


def _static_shape(ty: Any) -> list[int] | None:
    try:
        return [int(d) for d in ty.shape]
    except (TypeError, AttributeError):
        return None


def _scalar_constant(expr: Any) -> float | None:
    """The value of a one-element constant tensor, else None."""
    import tvm

    if isinstance(expr, tvm.ir.expr.Constant) and expr.value.numpy().size == 1:
        return float(expr.value.numpy().reshape(()))
    return None


def _numel(ty: Any) -> int | None:
    import numpy as np

    try:
        return int(np.prod([int(v) for v in ty.shape]))
    except Exception:  # unknown or symbolic shape
        return None


def _backend(target: ResolvedTarget) -> Any:
    from tvm import relax

    return relax.backend.cuda.pipeline if target.kind == "cuda" else relax.backend.cpu_generic.pipeline


def simplify_passes(target: ResolvedTarget) -> list[Any]:
    from tvm import relax

    passes = _backend(target).library_dispatch_passes(target.tvm()) + [
        relax.transform.DecomposeOpsForInference(),
        bounded_take(),
        relax.transform.CanonicalizeBindings(),
    ]
    if target.kind == "llvm":
        # NHWC activations with HWIO weights put output channels innermost and contiguous in the
        # weights, which is what the CPU contraction rule vectorises over.
        passes += [cpu_friendly_arithmetic(), relax.transform.ConvertLayout(target.layouts),
                   relax.transform.CanonicalizeBindings(), fold_scale_into_conv(), winograd_conv3x3(target),
                   pack_weights(_weight_block(target), lambda rows, dot: _weight_block(target, rows, dot)),
                   relax.transform.CanonicalizeBindings()]
    elif target.layouts:  # --layout NHWC on CUDA (channels innermost, as tensor-core convolutions want)
        passes += [relax.transform.ConvertLayout(target.layouts), relax.transform.CanonicalizeBindings()]
    # Weight-only computations (layout transforms, transposes, batch-norm scale/shift) move to
    # main_transform_params, which the backend runs once at load time instead of on every call.
    passes.append(relax.transform.LiftTransformParams())
    return passes


FLAT_TRANSFORM = "transform_params_flat"


def flat_transform_params() -> Any:
    """Add ``transform_params_flat(w0, ..., wn)``: main_transform_params with the weights as
    separate arguments. TVM's RPC cannot pass a tuple, which is what main_transform_params takes,
    so a model on a remote device has its weights transformed there through this entry (called
    with the VM's stateful API, whose outputs come back one tensor at a time)."""
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name="FlatTransformParams")
    def add(mod: Any, ctx: Any) -> Any:
        names = {gv.name_hint: gv for gv in mod.get_global_vars()}
        gv = names.get("main_transform_params")
        if gv is None or FLAT_TRANSFORM in names or len(mod[gv].params) != 1:
            return mod
        fields = list(mod[gv].params[0].ty.fields)
        weights = [relax.Var(f"w{i}", ty) for i, ty in enumerate(fields)]
        bb = relax.BlockBuilder(mod)
        with bb.function(FLAT_TRANSFORM, weights):
            out = bb.emit(relax.Call(gv, [relax.Tuple(weights)]))
            bb.emit_func_output(out)
        return bb.get()

    return add


def _weight_block(target: ResolvedTarget, rows: int | None = None, dot: bool = False) -> int:
    """Output channels per packed weight block: the contraction rule's register tile, two fp32
    vectors, or one where the target's registers hold only a one-vector tile over ``rows`` output
    rows (AVX2 on a 7x7 feature map); ``dot``: a 1x1 convolution."""
    from tvmbench.compile.cpu_rules import _vector_lanes, packed_tile_vectors

    tvm_target = target.tvm()
    vectors = 2 if rows is None else packed_tile_vectors(tvm_target, rows, dot)
    return vectors * _vector_lanes(tvm_target, 32)


def legalize_passes(target: ResolvedTarget) -> list[Any]:
    from tvm import relax

    # On CPU, exp/tanh/erf (softmax, GELU) become TVM's polynomial approximations, which
    # vectorise; LLVM has no vector erf, so exact GELU was a scalar libm call per element (9 % of
    # BERT's time). Their error (~1e-7 relative) is far inside the fp32 output tolerance.
    fast_math = [relax.transform.FastMathTransform()] if target.kind == "llvm" else []
    return fast_math + [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        *([fuse_expansion_into_window()] if target.kind == "llvm" else []),
        relax.transform.FuseTIR(),
        flat_transform_params(),  # after FastMathTransform, which fails on calls of Relax functions
    ]


def _guarded(rule: Any) -> Any:
    """Wrap a DLight rule so that a rule crashing on a function it half-matches declines instead.

    TVM 0.27's CPU GEMV rule asserts inside its pattern analysis on some fused functions (one of
    mobilenet_v2's, for instance), which would abort the whole compile. Each rule builds its own
    schedule from the untouched function, so declining leaves the function as it was for the
    next rule.
    """
    from tvm.s_tir import dlight as dl

    class Guarded(dl.ScheduleRule):
        def apply(self, func: Any, target: Any, tunable: bool) -> Any:
            try:
                return rule.apply(func, target, tunable)
            except Exception:
                return None

    Guarded.__name__ = type(rule).__name__
    return Guarded()


def dlight_rules(target: ResolvedTarget) -> list[Any]:
    from tvm.s_tir import dlight as dl

    from tvmbench.compile import cpu_rules

    if target.kind == "cuda":
        rules = [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
    else:
        rules = [*cpu_rules.rules(), dl.cpu.GEMV(), dl.cpu.Reduction(), cpu_rules.fallback_rule()]
    return [_guarded(r) for r in rules]


def schedule_passes(target: ResolvedTarget, database: Any | None) -> list[Any]:
    from tvm import relax
    from tvm.s_tir import dlight as dl

    passes = []
    if database is not None:
        passes.append(relax.transform.MetaScheduleApplyDatabase(enable_warning=False))
    passes.append(dl.ApplyDefaultSchedule(*dlight_rules(target)))
    return passes


def lowering_passes(target: ResolvedTarget, cuda_graph: bool = False) -> list[Any]:
    backend = _backend(target)
    tvm_target = target.tvm()
    finalize = backend.finalize_passes(tvm_target)
    if not cuda_graph:
        finalize = [p for p in finalize if "CUDAGraph" not in p.info.name]
    return backend.dataflow_lower_passes(tvm_target) + finalize


def describe(target: ResolvedTarget, database: Any | None, cuda_graph: bool = False) -> list[str]:
    """Names of the passes in order, recorded in results so a reader knows what ran."""
    names = [p.info.name for p in simplify_passes(target) + legalize_passes(target)]
    if database is not None:
        names.append("MetaScheduleApplyDatabase")
    names.append("DLight(" + ",".join(type(r).__name__ for r in dlight_rules(target)) + ")")
    names += [p.info.name for p in lowering_passes(target, cuda_graph)]
    return names


def legalized(mod: Any, target: ResolvedTarget) -> Any:
    """Stages 1-2: the fused TIR functions the tuner extracts tasks from."""
    import tvm

    with target.tvm():
        return tvm.transform.Sequential(simplify_passes(target) + legalize_passes(target))(mod)


def per_inference(legal: Any) -> Any:
    """The legalized module without the lifted weight transforms: what runs on every inference
    (they run once at load and are not worth tuning trials). DeadCodeElimination alone keeps
    them: main_transform_params is public, hence an entry."""
    import tvm
    from tvm import relax

    mod = tvm.IRModule({gv: f for gv, f in legal.functions.items()
                        if gv.name_hint not in ("main_transform_params", FLAT_TRANSFORM)})
    return relax.transform.DeadCodeElimination(["main"])(mod)


def coverage(legal: Any, databases: list[Any]) -> tuple[int, list[int], int]:
    """How many per-inference kernels there are, how many each database has a workload for (the
    same normalised module MetaScheduleApplyDatabase queries with), and how many any of them has
    (counted here: TVM's UnionDatabase does not implement has_workload)."""
    import tvm
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    funcs = [f for f in per_inference(legal).functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    hits = [[db.has_workload(_normalize_mod(f)) for db in databases] for f in funcs]
    per = [sum(1 for h in hits if h[i]) for i in range(len(databases))]
    return len(funcs), per, sum(1 for h in hits if any(h))


def optimize(mod: Any, target: ResolvedTarget, database: Any | None = None,
             on_legalized: Any | None = None) -> Any:
    """Stages 1-3: scheduled functions, ready for VM lowering. ``on_legalized`` sees the module
    between stages 2 and 3 (the tuner's view of it)."""
    import contextlib

    import tvm

    mod = legalized(mod, target)
    if on_legalized is not None:
        on_legalized(mod)
    with target.tvm(), (database if database is not None else contextlib.nullcontext()):
        return tvm.transform.Sequential(schedule_passes(target, database))(mod)


def build(mod: Any, target: ResolvedTarget, database: Any | None = None, cuda_graph: bool = False,
          on_legalized: Any | None = None) -> Any:
    """Optimise and compile to a Relax VM executable."""
    import tvm
    from tvm import relax

    if target.kind == "cuda":
        from tvmbench.tune.build import import_cuda_tensor_intrin

        import_cuda_tensor_intrin()
    mod = optimize(mod, target, database, on_legalized)
    tvm_target = target.tvm()
    with tvm_target:
        lower = tvm.transform.Sequential(lowering_passes(target, cuda_graph))
        return relax.build(mod, tvm_target, relax_pipeline=lower)
