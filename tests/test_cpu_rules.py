"""The default CPU schedules: which functions they claim, that they schedule them (no naive loop
left on the hot path), and that the scheduled code computes the same numbers."""

import importlib
import re
from pathlib import Path

import numpy as np
import pytest

from tvmbench.compile import import_model, pipeline, tiles
from tvmbench.compile.rules import Contraction, RowReduction, contraction
from tvmbench.models import ModelOptions, load_model
from tvmbench.targets import has_feature, resolve_target

from .mlp_model import assert_causal_rows_match

TARGET = resolve_target("llvm", gpu_query=lambda: None)
# Tests whose shapes and expected tiles were worked out in 16-lane vectors and 32 registers
# (AVX-512: a 47-wide row as a partial vector, 197 keys padded to 208, four-vector tiles) schedule
# for WIDE: this CPU where its vectors are 16 lanes, else an AVX-512 CPU (Zen 4), whose code is
# then built but not run here (WIDE_RUNS): the rules' decisions are checked on every host, the
# numbers where the code runs. An 8-lane, 16-register CPU (AVX2) rightly decides otherwise; its
# tiles are checked by ``test_avx2_build_tiles_for_16_registers_and_matches_pytorch``.
WIDE_RUNS = tiles.vector_lanes(TARGET.tvm(), 32) == 16
WIDE = TARGET if WIDE_RUNS else resolve_target({"kind": "llvm", "mcpu": "znver4"}, gpu_query=lambda: None)
ZEN4 = resolve_target({"kind": "llvm", "mcpu": "znver4"}, gpu_query=lambda: None)  # (AVX-512 BF16, no AMX)
SPR = resolve_target({"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2}, gpu_query=lambda: None)  # (AMX)
_IMPORTED: dict[str, tuple] = {}


def _imported_and_legalized(name, options, target=TARGET):
    """A zoo model's imported module and its legalized form, built once per module run (importing
    and legalizing mobilenet_v2 takes ~45 s, and two tests read it)."""
    key = f"{name}|{options!r}|{target.tvm()}"
    if key not in _IMPORTED:
        mod = import_model(load_model(name, options)).mod
        _IMPORTED[key] = (mod, pipeline.legalized(mod, target))
    return _IMPORTED[key]


def _te_func(build):
    from tvm import te

    return te.create_prim_func(build(te)).with_attr("global_symbol", "main")


def _run(func, *arrays, out_shape, target=TARGET, rule=None):
    """(output, scheduled script) of ``func`` scheduled by ``rule`` (Contraction) for ``target``
    and run on ``arrays``; the output is None where ``target``'s code cannot run on this CPU (WIDE
    on AVX2): it is built, not run."""
    import tvm

    rule = rule or Contraction()
    with target.tvm():
        sch = rule.schedule(func, target.tvm())
    assert sch is not None, f"the {type(rule).__name__} rule declined"
    lib = tvm.compile(sch.mod, target.tvm())
    if target is not TARGET:  # (WIDE on a CPU without 16-lane vectors)
        return None, sch.mod.script()
    args = [tvm.runtime.tensor(a) for a in arrays] + [tvm.runtime.tensor(np.zeros(out_shape, "float32"))]
    lib(*args)
    return args[-1].numpy(), sch.mod.script()


def _matches_torch_conv(func, x, w, out_shape, **conv):
    """Run ``func`` (an NHWC / HWIO convolution) scheduled by Contraction and check it against
    PyTorch's ``conv2d`` with ``conv`` (stride, padding, groups); returns the scheduled script."""
    import torch

    out, script = _run(func, x, w, out_shape=out_shape)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(w).permute(3, 2, 0, 1),
                                     **conv).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    return script


def _matmul_relu(m, k, n, transposed=False):
    def build(te):
        a = te.placeholder((m, k), name="A")
        b = te.placeholder((n, k) if transposed else (k, n), name="B")
        r = te.reduce_axis((0, k), name="k")
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * (b[j, r] if transposed else b[r, j]), axis=r), name="C")
        d = te.compute((m, n), lambda i, j: te.max(c[i, j], 0.0), name="D")
        return [a, b, d]

    return _te_func(build)


def _batch_matmul(b, m, k, n):
    def build(te):
        x = te.placeholder((b, m, k), name="A")
        w = te.placeholder((b, k, n), name="B")
        r = te.reduce_axis((0, k), name="k")
        return [x, w, te.compute((b, m, n), lambda p, i, j: te.sum(x[p, i, r] * w[p, r, j], axis=r), name="C")]

    return _te_func(build)


def test_weights_larger_than_the_targets_l2_run_channel_outer_but_batched_panels_up_to_1_mb(monkeypatch):
    # 640 KB of weights fit a 1 MB L2 (channel tiles inside the rows), not a 512 KB one (Zen 3:
    # each channel tile's panel kept while the rows are swept). Winograd's product keeps its
    # positions' 576 KB of panels spatial-outer on both. Where L3 is far (Intel's server cores),
    # weights over SPATIAL_OUTER_FAR_L3_SHARE of L2 run channel-outer: 640 KB of a 1.25 MB L2 do,
    # 256 KB do not.
    near, far = (resolve_target({"kind": "llvm", "mcpu": cpu, "num-cores": 2}, gpu_query=lambda: None).tvm()
                 for cpu in ("znver4", "icelake-server"))

    def order(func, l2, target=near):
        monkeypatch.setattr(contraction, "cpu_l2_bytes", lambda target: l2)
        with target:
            script = Contraction().schedule(func, target).mod.script()
        return re.search(r"for (\w+) in T\.parallel", script).group(1)

    matmul, product = _matmul_relu(64, 640, 256), _batch_matmul(36, 196, 64, 64)
    assert order(matmul, 1 << 20).startswith("ax0") and order(matmul, 512 << 10).startswith("ax1")
    assert order(product, 512 << 10) == order(product, 1 << 20)
    assert order(_matmul_relu(64, 1024, 512), 4 << 20).startswith("ax0")  # (a 4 MB L2: 2 MB fit)
    assert order(matmul, 1280 << 10, far).startswith("ax1")
    assert order(_matmul_relu(64, 256, 256), 1280 << 10, far).startswith("ax0")
    assert order(product, 1280 << 10, far) == order(product, 1 << 20)


@pytest.mark.parametrize("m, k, n", [(64, 48, 80), (1, 512, 1000), (197, 64, 96), (13, 7, 20), (20, 64, 197)])
def test_matmul_is_tiled_vectorised_parallel_and_correct(m, k, n):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), dtype="float32"), rng.standard_normal((k, n), dtype="float32")
    out, script = _run(_matmul_relu(m, k, n), a, b, out_shape=(m, n))
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
    assert "T.vectorized" in script and "T.unroll" in script
    if m * n >= 4096:
        assert "T.parallel" in script
    if n % 4:
        # No vector width divides n: the operand is copied padded to whole vectors, and the
        # ReLU reads the padded result as a separate loop.
        assert "B_pad" in script and ("T.vectorized(16)" in script or "T.vectorized(8)" in script)
    else:
        # The ReLU is applied on write-back from the accumulators, not in a second pass over memory.
        assert 'T.sblock("D")' not in script


def test_small_weights_put_the_output_channel_tiles_inside_the_parallel_loop():
    # 15 KB of weights stay in cache while the rows are swept once (rows outer); 2 MB do not, so
    # each channel tile's panel is kept while the rows are swept (channel tiles outer).
    # (1 MB, as large as one core's L2 on the Zen 4/5 hosts, counts as large: ResNet's 1024 <-> 256;
    # the bound is this machine's L2, or its far-L3 share on Intel's server cores.)
    from tvmbench.targets import near_l3

    bound = TARGET.l2_bytes * (1 if near_l3(TARGET.tvm()) else contraction.SPATIAL_OUTER_FAR_L3_SHARE)
    for m, k, n in ((64, 48, 80), (64, 1024, 512), (64, 1024, 256)):
        order = "ax0_0_ax1_0_fused" if k * n * 4 < bound else "ax1_0_ax0_0_fused"
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((m, k), dtype="float32"), rng.standard_normal((k, n), dtype="float32")
        out, script = _run(_matmul_relu(m, k, n), a, b, out_shape=(m, n))
        np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-3)
        assert f"for {order} in T.parallel" in script


def test_transposed_operand_is_declined():
    # B read as B[j, k]: vectorising over j would gather, so the rule must leave it to others.
    with TARGET.tvm():
        assert Contraction().schedule(_matmul_relu(32, 32, 32, transposed=True), TARGET.tvm()) is None


@pytest.mark.parametrize("stride, groups, ci", [(1, 1, 32), (2, 1, 32), (1, 32, 32), (2, 1, 3)])
def test_nhwc_convolution_matches_torch(stride, groups, ci):
    from tvm import topi

    n, h, w, co, kh = 1, 14, 14, 32 if groups > 1 else 48, 3

    def build(te):
        x = te.placeholder((n, h, w, ci), name="x")
        wt = te.placeholder((kh, kh, ci // groups, co), name="w")
        return [x, wt, topi.nn.conv(x, wt, stride, 1, 1, groups, "NHWC", "HWIO", "float32")]

    rng = np.random.default_rng(1)
    x, wt = rng.standard_normal((n, h, w, ci), dtype="float32"), rng.standard_normal((kh, kh, ci // groups, co), dtype="float32")
    ho = (h + 2 - kh) // stride + 1
    script = _matches_torch_conv(_te_func(build), x, wt, (n, ho, ho, co), stride=stride, padding=1, groups=groups)
    assert "T.vectorized" in script and "T.parallel" in script
    # A depthwise window (9 multiply-adds per output) reads the padding inline; a full
    # convolution keeps its padded copy, so its inner loop has no bounds check.
    assert ('T.sblock("pad_temp")' in script) == (groups == 1 and ci > 3)
    # A window of 9 (depthwise) or 27 (a 3-channel stem) runs unrolled, a longer reduction does not.
    window = kh * kh * ci // groups
    assert (window <= contraction.UNROLL_REDUCTION) == ("T.grid(3, 3" not in script)


def _depthwise(size: int, window: int, channels: int, seed: int):
    """(function, input, weights) of a depthwise ``window`` x ``window`` convolution with same
    padding over a ``size`` x ``size`` x ``channels`` NHWC map, random inputs."""
    from tvm import topi

    def build(te):
        x = te.placeholder((1, size, size, channels), name="x")
        wt = te.placeholder((window, window, 1, channels), name="w")
        return [x, wt, topi.nn.conv(x, wt, 1, window // 2, 1, channels, "NHWC", "HWIO", "float32")]

    rng = np.random.default_rng(seed)
    return (_te_func(build), rng.standard_normal((1, size, size, channels), dtype="float32"),
            rng.standard_normal((window, window, 1, channels), dtype="float32"))


@pytest.mark.parametrize("taps", [0, contraction.WINDOW_ROW_TAPS])
def test_a_long_depthwise_window_unrolls_its_taps_along_the_rows_and_matches_torch(monkeypatch, taps):
    """A 9x9 depthwise window (81 taps: too long to unroll whole) has its 9 taps along the tile's
    rows unrolled (WINDOW_ROW_TAPS), so neighbouring pixels share their input loads; 0 keeps
    them a loop."""
    monkeypatch.setattr(contraction, "WINDOW_ROW_TAPS", taps)
    func, x, wt = _depthwise(16, 9, 32, 3)
    script = _matches_torch_conv(func, x, wt, (1, 16, 16, 32), padding=4, groups=32)
    # (without, the window stays loops: a T.grid(9, 9), or on 16 registers a row loop annotated with
    # the window's rows and a column loop)
    assert ("in T.unroll(9):" in script) == bool(taps)


def test_taps_unrolled_over_inline_padding_are_kept_only_where_they_compile_without_spills(monkeypatch):
    """ConvNeXt's 7x7 depthwise window over 28x28 maps reads its padding inline; with its taps
    unrolled the bounds checks spill vectors to the stack (6 on the Zen 4 host, 1.5x slower
    alone), so it keeps them a loop (``taps_decide``) and stays exact. Where the unrolled taps
    compile without spills (another CPU's registers), they are kept."""
    import tvm_ffi

    from tvmbench.compile import codegen

    func, x, wt = _depthwise(28, 7, 192, 4)
    script = _matches_torch_conv(func, x, wt, (1, 28, 28, 192), padding=3, groups=192)
    assert "if_then_else" in script
    with TARGET.tvm():
        kept = Contraction().schedule(func, TARGET.tvm())
        monkeypatch.setattr(contraction, "stack_spills", lambda *a: 0)  # no check: the taps unrolled
        unrolled = Contraction().schedule(func, TARGET.tvm())
    same = tvm_ffi.structural_equal(kept.mod, unrolled.mod)
    assert same != bool(codegen.stack_spills(unrolled.mod["main"], TARGET.tvm()))


def test_a_window_as_large_as_its_map_skips_its_rows_of_taps_in_the_padding_and_matches_torch():
    """A 15x15 depthwise window over a 12x12 map (RepLKNet's 29x29 over 28x28, smaller) reads a
    padded copy; the rule marks the loop over the window's rows and ``passes/window_rows.py``
    runs its body only for rows inside the input. Built as a model's kernels are
    (``codegen.PIPELINE``), the output is PyTorch's."""
    import torch
    import tvm
    import tvm_ffi

    from tvmbench.compile.codegen import PIPELINE, lowering_context
    from tvmbench.compile.passes import window_rows

    conv, x, wt = _depthwise(12, 15, 32, 5)
    with TARGET.tvm():
        sch = Contraction().schedule(conv, TARGET.tvm())
    func = sch.mod["main"]
    assert window_rows.KEY in func.script()
    guards = []
    tvm_ffi.structural_walk(window_rows.skip_padding_rows(func).body, [(tvm.tirx.IfThenElse, guards.append)])
    assert len(guards) == 1
    with TARGET.tvm() as t, lowering_context():
        lib = tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=t, pipeline=PIPELINE)
    args = [tvm.runtime.tensor(a) for a in (x, wt, np.zeros((1, 12, 12, 32), "float32"))]
    lib["main"](*args)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(wt).permute(3, 2, 0, 1),
                                     padding=7, groups=32).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(args[-1].numpy(), ref, rtol=1e-4, atol=1e-4)


def test_max_pool_reads_its_padding_inline_and_matches_torch():
    import torch
    from tvm import topi

    def build(te):
        x = te.placeholder((1, 16, 16, 64), name="x")
        return [x, topi.nn.pool2d(x, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "max", layout="NHWC")]

    x = np.random.default_rng(2).standard_normal((1, 16, 16, 64), dtype="float32")
    out, script = _run(_te_func(build), x, out_shape=(1, 8, 8, 64))
    ref = torch.nn.functional.max_pool2d(torch.from_numpy(x).permute(0, 3, 1, 2), 3, 2, 1).permute(0, 2, 3, 1).numpy()
    np.testing.assert_array_equal(out, ref)
    assert "T.vectorized" in script and 'T.sblock("pad' not in script


@pytest.mark.parametrize("op,shape,tasks", [("max", (4, 1, 512, 512), 8), ("mean", (1, 64, 64, 512), 2)])
def test_a_reduction_over_a_tensor_larger_than_l2_streams_its_rows_in_order_and_stays_exact(op, shape, tasks):
    """PointNet's max over points (channels innermost, 32 MB) ran as Contraction's register tiles:
    each task read 128 bytes of every point's row, a new page each step (14 GB/s). StreamingReduction
    gives a task whole rows, or runs of at least 1 KB of them for enough tasks (a mean's division
    done per task), and declines a window, an input that fits L2 and one task's worth of channels."""
    from tvm import te as te_
    from tvm import topi

    from tvmbench.compile.rules import StreamingReduction

    def build(te):
        x = te.placeholder(shape, name="x")
        reduced = topi.max(x, axis=[1, 2]) if op == "max" else topi.sum(x, axis=[1, 2]) / (shape[1] * shape[2])
        return [x, reduced]

    x = np.random.default_rng(3).standard_normal(shape, dtype="float32")
    out, script = _run(_te_func(build), x, out_shape=(shape[0], shape[3]), rule=StreamingReduction())
    np.testing.assert_allclose(out, getattr(np, op)(x, axis=(1, 2)), rtol=1e-5, atol=1e-6)
    assert f"T.parallel({tasks})" in script and "T.vectorized" in script
    pool = te_.create_prim_func(
        (lambda x: [x, topi.nn.pool2d(x, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), "max", layout="NHWC")])(
            te_.placeholder((1, 128, 128, 64), name="x")))
    small = _te_func(lambda te: (lambda x: [x, topi.max(x, axis=[1, 2])])(te.placeholder((2, 16, 16, 64), name="x")))
    narrow = _te_func(lambda te: (lambda x: [x, topi.max(x, axis=[1, 2])])(te.placeholder((1, 64, 64, 256), name="x")))
    with TARGET.tvm():
        assert [StreamingReduction().schedule(f, TARGET.tvm()) for f in (pool, small, narrow)] == [None] * 3


def test_layer_norm_and_softmax_keep_vector_partial_sums_per_row():
    import tvm
    from tvm import topi

    def layer_norm(te):
        x = te.placeholder((1, 128, 96), name="x")
        g, b = te.placeholder((96,), name="g"), te.placeholder((96,), name="b")
        return [x, g, b, topi.nn.layer_norm(x, g, b, axis=[-1], epsilon=1e-5)]

    def softmax(axis):
        def build(te):
            x = te.placeholder((1, 4, 48, 64), name="x")
            return [x, topi.nn.softmax(x, axis=axis)]
        return build

    rng = np.random.default_rng(3)
    x3, g, b = (rng.standard_normal(s, dtype="float32") for s in ((1, 128, 96), (96,), (96,)))
    x4 = rng.standard_normal((1, 4, 48, 64), dtype="float32")
    mean, var = x3.mean(-1, keepdims=True), x3.var(-1, keepdims=True)
    e = np.exp(x4 - x4.max(-1, keepdims=True))
    cases = [(layer_norm, (x3, g, b), (x3 - mean) / np.sqrt(var + 1e-5) * g + b),
             (softmax(-1), (x4,), e / e.sum(-1, keepdims=True))]
    for build, inputs, ref in cases:
        with TARGET.tvm():
            sch = RowReduction().schedule(_te_func(build), TARGET.tvm())
        assert sch is not None, "the RowReduction rule declined"
        script = sch.mod.script()
        # Both reductions (mean and variance; maximum and sum) accumulate several vectors of
        # independent partial sums per row (an rfactor block, vectorised), folded to one vector
        # (a second), then to the row's value.
        assert script.count('_rf_rf_update"') == 2 and script.count('_rf_update"') == 4, script
        assert "T.parallel" in script and "T.vectorized" in script
        lib = tvm.compile(sch.mod, TARGET.tvm())
        args = [tvm.runtime.tensor(a) for a in inputs] + [tvm.runtime.tensor(np.zeros(ref.shape, "float32"))]
        lib(*args)
        np.testing.assert_allclose(args[-1].numpy(), ref, rtol=1e-4, atol=1e-5)
    # Reducing a strided axis would gather into the vector lanes: left to DLight.
    with TARGET.tvm():
        assert RowReduction().schedule(_te_func(softmax(2)), TARGET.tvm()) is None


def test_a_transpose_reads_its_input_in_tiles_of_vector_width_rows_and_stays_exact():
    """BERT's keys transposed for attention (``out[h, d, s] = x[s, h * 64 + d]``): the loop over
    ``d``, which walks along the input's rows, runs inside the vector axis's outer loop, so one tile
    of rows serves every ``d`` (rules/base._transpose_tiles: 4x faster alone); a plain copy keeps
    its order and reads no such knob."""
    import re

    import tvm

    from tvmbench.compile.knobs import knob_set
    from tvmbench.compile.rules import Injective

    def transpose(te):
        x = te.placeholder((128, 768), name="x")
        return [x, te.compute((12, 64, 128), lambda h, d, s: x[s, h * 64 + d] * 0.125, name="T")]

    def copy(te):
        x = te.placeholder((128, 768), name="x")
        return [x, te.compute((128, 768), lambda s, c: x[s, c] * 0.125, name="C")]

    x = np.random.default_rng(4).standard_normal((128, 768), dtype="float32")
    with TARGET.tvm(), knob_set() as seen:
        sch = Injective().schedule(_te_func(transpose), TARGET.tvm())
    assert seen.values() == {"transpose_tile": True}
    script = sch.mod.script()
    # the parallel loop holds h and the tile of s; d runs inside it, the lanes of s innermost
    assert re.search(r"T.parallel\(\d+\):\s*for \w+ in range\(64\):\s*for \w+ in T.vectorized", script), script
    lib = tvm.compile(sch.mod, TARGET.tvm())
    out = tvm.runtime.tensor(np.zeros((12, 64, 128), "float32"))
    lib(tvm.runtime.tensor(x), out)
    np.testing.assert_array_equal(out.numpy(), (x * 0.125).T.reshape(12, 64, 128))
    with TARGET.tvm(), knob_set() as seen:
        Injective().schedule(_te_func(copy), TARGET.tvm())
    assert "transpose_tile" not in seen.values()


def test_rows_with_a_partial_last_vector_run_as_plain_row_loops_and_stay_exact():
    """A group norm over 799 samples per channel (a speech front end) has rows of 49 vectors and
    7 floats, and its reduction a unit group axis: RowReduction declined, and DLight's rule ran
    it with predicated vector loops, which TVM scalarises whole (its GELU scalar: 46 % of the
    model at batch 8). Taken as plain loops over each row (rows in parallel), it matches NumPy;
    rfactor over such a split would drop the split's predicate and read past the row, so no
    partial-sum block appears. A short odd row (3 vectors) is still declined."""
    import tvm
    from tvm import topi

    def group_norm(width):
        def build(te):
            x = te.placeholder((2, 8, width), name="x")
            g, b = te.placeholder((8,), name="g"), te.placeholder((8,), name="b")
            return [x, g, b, topi.nn.group_norm(x, g, b, 8, 1, [2], 1e-5)]
        return build

    rng = np.random.default_rng(4)
    x, g, b = (rng.standard_normal(s, dtype="float32") for s in ((2, 8, 799), (8,), (8,)))
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    ref = (x - mean) / np.sqrt(var + 1e-5) * g[:, None] + b[:, None]
    with WIDE.tvm():
        sch = RowReduction().schedule(_te_func(group_norm(799)), WIDE.tvm())
        assert RowReduction().schedule(_te_func(group_norm(47)), WIDE.tvm()) is None
    assert sch is not None, "the RowReduction rule declined"
    script = sch.mod.script()
    assert "T.parallel" in script and "_rf" not in script
    lib = tvm.compile(sch.mod, WIDE.tvm())
    if not WIDE_RUNS:
        return
    args = [tvm.runtime.tensor(a) for a in (x, g, b)] + [tvm.runtime.tensor(np.zeros(ref.shape, "float32"))]
    lib(*args)
    np.testing.assert_allclose(args[-1].numpy(), ref, rtol=1e-4, atol=1e-4)


def test_a_boolean_intermediate_is_not_stored_as_a_vector():
    """A boolean mask computed apart from its consumer (Swin3D at 16 frames: its consumer is a
    slice with no rows, so the mask's blocks are not inlined) was vectorised by the injective
    rule, and TVM's LLVM codegen cannot store a bool vector ("RHS's dtype is int8x8"): the model
    did not compile. Bool blocks are left scalar; Swin3D's kernel (``data/swin3d_slice_scatter.py``)
    builds."""
    import importlib.util

    import tvm

    from tvmbench.compile.rules import Injective

    path = Path(__file__).with_name("data") / "swin3d_slice_scatter.py"
    spec = importlib.util.spec_from_file_location("swin3d_slice_scatter", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with TARGET.tvm():
        sch = Injective().schedule(module.main, TARGET.tvm())
    assert sch is not None
    tvm.compile(sch.mod, TARGET.tvm())


@pytest.mark.parametrize(
    "name, options",
    [
        # 64 px: at 32 px the last stage is 1x1 and the global mean degenerates into a copy.
        ("resnet18", ModelOptions(image_size=64)),
        ("mobilenet_v2", ModelOptions(image_size=64)),
        ("bert-base-uncased", ModelOptions(seq_length=16, config_overrides={"num_hidden_layers": 1})),
        # 197 tokens: attention's [64, 197] operand has no vector width dividing it (padded), and
        # the dense layers' GELU epilogue uses its input twice.
        ("google/vit-base-patch16-224", ModelOptions(config_overrides={"num_hidden_layers": 1})),
        # The LM head's 50257 outputs: the weight is padded to whole blocks and the output sliced.
        ("gpt2", ModelOptions(seq_length=16, config_overrides={"n_layer": 1})),
    ],
)
def test_every_conv_matmul_and_pool_of_a_model_is_claimed(name, options):
    import tvm

    imported, mod = _imported_and_legalized(name, options)
    claimed, hot = [], []
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        label = gv.name_hint
        if any(op in label for op in ("conv2d", "matmul", "pool", "winograd_product")):
            hot.append(label)
            with TARGET.tvm():
                if Contraction().schedule(func, TARGET.tvm()) is not None:
                    claimed.append(label)
    assert hot and sorted(claimed) == sorted(hot)
    # After the whole schedule stage nothing is left unscheduled.
    scheduled = pipeline.optimize(imported, TARGET)
    left = [gv.name_hint for gv, f in scheduled.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and not f.attrs.get("tirx.is_scheduled", False)]
    assert left == []


def test_an_lm_head_padded_to_whole_blocks_takes_the_widest_tile():
    """GPT-2's LM head has 50257 outputs, a multiple of no block, so its weight is padded with
    zero columns. Padded to blocks of one tile's half (1571 of 32 on AVX-512: odd), the widest
    tile, which spans two such blocks, did not divide it and the head ran in half-width tiles
    (about 10 % slower alone in bf16); padded to blocks of the widest tile it takes that. For Zen 4
    on every host: Zen 5 breaks the tie of two and four vectors towards two (``tiles.TWO_VECTOR_TIES``)."""
    import tvm

    from tvmbench.compile.knobs import knob_set

    zen4 = resolve_target({"kind": "llvm", "mcpu": "znver4"}, gpu_query=lambda: None)
    _, mod = _imported_and_legalized("gpt2", ModelOptions(seq_length=16, config_overrides={"n_layer": 1}), zen4)
    heads = [f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
             and "matmul_packed" in gv.name_hint and int(f.params[-1].ty.shape[-1]) == 50257]
    assert len(heads) == 1
    with knob_set() as knobs, zen4.tvm():
        assert Contraction().schedule(heads[0], zen4.tvm()) is not None
    assert knobs.values()["vectors"] == 4


def _host_dense_block(n: int, m: int) -> int:
    """The host's packed block for a dense layer of ``n`` outputs over ``m`` rows."""
    from tvmbench.compile.passes.pack_weights import dense_block

    return dense_block(n, m, tiles.weight_block(TARGET), tiles.sixteen_registers(TARGET.tvm()))[0]


def test_weight_transforms_are_lifted_out_of_main():
    mod = pipeline.legalized(import_model(load_model("resnet18", ModelOptions(image_size=32))).mod, TARGET)
    assert "main_transform_params" in [gv.name_hint for gv in mod.get_global_vars()]
    shapes = [tuple(int(d) for d in p.ty.shape) for p in mod["main"].params[1:]]
    # main receives the stem's weights already packed ([O/32, KH, KW, I, 32] from OIHW): the
    # transpose and the packing ran at load time.
    block = tiles.weight_block(TARGET)
    assert (64 // block, 7, 7, 3, block) in shapes and (64, 3, 7, 7) not in shapes


def test_dense_weights_are_packed_at_load_and_activation_matmuls_are_not():
    model = load_model("bert-base-uncased", ModelOptions(seq_length=16, config_overrides={"num_hidden_layers": 1}))
    mod = pipeline.legalized(import_model(model).mod, TARGET)
    names = [gv.name_hint for gv in mod.get_global_vars()]
    block = _host_dense_block(768, 16)  # (three vectors on AVX2: 24)
    shapes = [tuple(int(d) for d in p.ty.shape) for p in mod["main"].params[1:]]
    # The dense layers' [K, N] weights arrive packed as [N / block, K, block] ...
    assert (768 // block, 768, block) in shapes and (3072 // block, 768, block) in shapes
    assert (768 // block, 3072, block) in shapes
    assert sum(n.startswith("fused_matmul_packed") for n in names) >= 3
    # ... while attention's Q x K^T and P x V multiply activations: packing them would copy on
    # every call, so they stay plain matmuls (joined with the softmax between them).
    attention = [mod[n] for n in names if n.startswith("fused_attention")]
    assert len(attention) == 1 and "packed" not in attention[0].script()


def test_relu6_and_batchnorm_division_fold_into_the_convolution_epilogue():
    # 64 px: at 32 px the last layers are 1x1, where the divisor is as large as the tensor and stays.
    _, mod = _imported_and_legalized("mobilenet_v2", ModelOptions(image_size=64))
    names = [gv.name_hint for gv in mod.get_global_vars()]
    # No transpose -> clip -> transpose around each ReLU6, no vector division per output element.
    assert not [n for n in names if "clip" in n or "divide" in n]
    convs = [n for n in names if n.startswith("fused_conv2d")]
    assert convs and any(n.endswith("maximum_minimum") or "_maximum" in n for n in convs)


def test_vector_width_and_register_budget_follow_the_isa():
    import tvm

    def lanes_budget(spec):
        t = tvm.target.Target(spec)
        return tiles.vector_lanes(t, 32), tiles.accumulator_budget(t)

    # TVM 0.27's llvm_get_vector_width says 512 bits for AVX2 CPUs; the rules must not trust it.
    assert lanes_budget({"kind": "llvm", "mcpu": "haswell"}) == (8, tiles.MAX_ACCUMULATORS_16_REGS)
    assert lanes_budget({"kind": "llvm", "mcpu": "znver3"}) == (8, tiles.MAX_ACCUMULATORS_16_REGS)
    assert lanes_budget({"kind": "llvm", "mcpu": "skylake-avx512"}) == (16, tiles.MAX_ACCUMULATORS)
    assert lanes_budget({"kind": "llvm", "mtriple": "aarch64-linux-gnu"}) == (4, tiles.MAX_ACCUMULATORS)
    # 16 registers: two vectors over at most 6 rows, or one vector over a 7-row axis.
    budget = tiles.MAX_ACCUMULATORS_16_REGS
    assert tiles.register_tile(56, [2, 1], budget) == (2, 4)
    assert tiles.register_tile(7, [2, 1], budget) == (1, 7)
    # 14 rows: two vectors over a predicated 5 (15 rows computed, not 6's 18) for a window (3x3)
    # and, measured again in session 76, for a plain dot product over channels (1x1, Winograd
    # products) too; 32 registers' dot penalty would take one vector over 7.
    assert tiles.register_tile(14, [2, 1], budget) == (2, 5)
    assert tiles.register_tile(14, [2, 1], budget, tiles.predicated_percent(budget, dot=True)) == (2, 5)
    assert tiles.register_tile(14, [2, 1], budget, tiles.PREDICATED_DOT_TILE_PERCENT) == (1, 7)
    assert tiles.predicated_percent(tiles.MAX_ACCUMULATORS, dot=True) == tiles.PREDICATED_DOT_TILE_PERCENT
    assert tiles.predicated_percent(budget, dot=False) is None
    # 32 registers: always two vectors, as many rows as divide (up to 8), whatever the penalty.
    for percent in (None, tiles.PREDICATED_DOT_TILE_PERCENT):
        assert tiles.register_tile(7, [2, 1], tiles.MAX_ACCUMULATORS, percent) == (2, 7)
        assert tiles.register_tile(14, [2, 1], tiles.MAX_ACCUMULATORS, percent) == (2, 7)
        assert tiles.register_tile(56, [2, 1], tiles.MAX_ACCUMULATORS, percent) == (2, 8)


AVX2 = resolve_target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2}, gpu_query=lambda: None)


def _matches_pytorch_on(target, model) -> None:
    """``model`` built for ``target`` (run on this host) gives PyTorch's outputs."""
    from tvmbench.backends import BackendConfig
    from tvmbench.backends.pytorch import PyTorchBackend
    from tvmbench.backends.tvm import TVMBackend
    from tvmbench.measure import accuracy

    cfg = BackendConfig(target=target, threads=2)
    tvm_b, ref_b = TVMBackend(cfg), PyTorchBackend(cfg)
    tvm_b.prepare(model)
    ref_b.prepare(model)
    tvm_b.run()
    ref_b.run()
    result = accuracy.compare(tvm_b.outputs(), ref_b.outputs(), accuracy.tolerance_for("float32"))
    assert result["passed"], result


@pytest.mark.skipif(not has_feature(TARGET.tvm(), "avx2"), reason="this CPU cannot run AVX2 code")
def test_avx2_build_tiles_for_16_registers_and_matches_pytorch():
    # 112 px: layer3 runs on 7x7 maps (its stride-2 convolution in one-vector tiles, weights
    # packed by 8 channels), the earlier layers on 28x28 and 14x14 (two-vector tiles, packed by
    # 16), layer2's 1x1 downsampling convolution on 14x14 too (two vectors over a predicated 5
    # rows: a dot product's predicated tile on 16 registers, PREDICATED_DOT_TILE_PERCENT_16_REGS).
    # The stride-1 3x3 convolutions run as Winograd products, all in two-vector tiles: over 49
    # tiles in layers 1 and 2 (a predicated 5 rows), over layer 3's 16 (2x2 tiles of the 7x7 map).
    model = load_model("resnet18", ModelOptions(image_size=112))
    mod = pipeline.legalized(import_model(model).mod, AVX2)
    shapes = [tuple(int(d) for d in p.ty.shape) for p in mod["main"].params[1:]]
    assert (256 // 8, 3, 3, 128, 8) in shapes and (128 // 16, 3, 3, 64, 16) in shapes
    assert (128 // 16, 1, 1, 64, 16) in shapes
    assert (36, 64 // 16, 64, 16) in shapes and (16, 128 // 16, 128, 16) in shapes and (16, 256 // 16, 256, 16) in shapes
    conv = next(f for gv, f in mod.functions.items() if gv.name_hint.startswith("fused_conv2d_nhwc_packed"))
    with AVX2.tvm():
        script = Contraction().schedule(conv, AVX2.tvm()).mod.script()
    assert "T.vectorized(T.int64(8))" in script and "T.vectorized(T.int64(16))" not in script

    _matches_pytorch_on(AVX2, model)


def test_on_16_registers_whole_rows_of_three_beat_a_predicated_tile_where_they_load_less():
    """111-pixel rows (squeezenet1_1's stem: 3 x 37) on AVX2 take 2 vectors x 3 whole rows, not a
    predicated 5 (EXACT_ROWS_16_REGS; 1.46x faster alone); 14 rows, whose whole tile would be 2
    rows, keep the predicated 5; 32 registers keep theirs."""
    pct = tiles.predicated_percent(tiles.MAX_ACCUMULATORS_16_REGS, False)
    assert tiles.register_tile(111, [2, 1], tiles.MAX_ACCUMULATORS_16_REGS, pct) == (2, 3)
    assert tiles.register_tile(14, [2, 1], tiles.MAX_ACCUMULATORS_16_REGS, pct) == (2, 5)
    assert tiles.register_tile(111, [2, 1], tiles.MAX_ACCUMULATORS, None) == (2, 7)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tiles, "EXACT_ROWS_16_REGS", False)
        assert tiles.register_tile(111, [2, 1], tiles.MAX_ACCUMULATORS_16_REGS, pct) == (2, 5)


def test_on_16_registers_a_tile_of_the_whole_vector_axis_takes_two_whole_rows_where_they_tie():
    """RegNet's grouped 3x3 over 14x14 maps on AVX2 (a group of 24 channels: 3 vectors, 14 = 2 x 7
    columns) takes 3 vectors x 2 whole rows, not a predicated 3 (TWO_ROWS_ACCUMULATORS_16_REGS:
    1.06x faster alone); 3 vectors of a wider axis keep the predicated 3 (resnet50's Winograd
    products ran 0.77x as fast as 2 rows), 2 vectors their predicated 5 (2 x 2 holds 4
    accumulators), and 32 registers their 7."""
    budget = tiles.MAX_ACCUMULATORS_16_REGS
    assert tiles.register_tile(14, [3], budget, axis_vectors=3) == (3, 2)
    assert tiles.register_tile(14, [3], budget, axis_vectors=9) == (3, 3)
    assert tiles.register_tile(14, [2], budget, axis_vectors=2) == (2, 5)
    assert tiles.register_tile(14, [3], tiles.MAX_ACCUMULATORS, axis_vectors=3) == (3, 7)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tiles, "TWO_ROWS_ACCUMULATORS_16_REGS", 99)
        assert tiles.register_tile(14, [3], budget, axis_vectors=3) == (3, 3)


def test_a_dense_layer_over_rows_that_3_divides_takes_four_vectors_by_3_whole_rows_on_16_registers():
    """231 rows (batch 3 x 77 tokens = 3 x 7 x 11) have no divisor from 4 to 6: on AVX2 the dense
    layer takes 4 vectors x 3 whole rows (WHOLE_ROWS_UNDER_4: 1.3-2.3x faster alone than the one
    vector x 11 rows it took, whose rows 12 KB apart share an L1 set), also where its weight panel
    outgrows L1 (FEW_ROWS_WINDOWS_ONLY: a single reduction loop keeps its tile). Either flag off
    and the tile is not four vectors by 3. 24 rows keep two vectors x 6 whole rows (4 x 3 lost
    1-2 % in densenet121 and googlenet at batch 3)."""
    from tvmbench.compile.knobs import knob_set

    k, n = 768, 768  # (bert-base's query projection; weights past L2: a wide tile)

    def tile(m):
        def dense(te):
            a, w = te.placeholder((m, k), name="A"), te.placeholder((n // 16, k, 16), name="W")
            r = te.reduce_axis((0, k), name="k")
            return [a, w, te.compute((m, n), lambda i, j: te.sum(a[i, r] * w[j // 16, r, j % 16], axis=r),
                                     name="matmul_packed")]

        with knob_set() as seen:
            pipeline.default_schedule(_te_func(dense), AVX2)
        return seen.values()["vectors"], seen.values()["rows"]

    # (four-vector tiles only: a wider tile's 3 rows stay predicated, as on 32 registers before)
    assert tiles.row_tile(231, 3, 4) == (3, False) and tiles.row_tile(231, 3, 6)[1] and tiles.row_tile(231, 6, 2)[1]
    assert tile(231) == (4, 3) and tile(24) == (2, 6)
    for flag, module in (("WHOLE_ROWS_UNDER_4", tiles), ("FEW_ROWS_WINDOWS_ONLY", contraction)):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(module, flag, False)
            assert tile(231) != (4, 3), flag


@pytest.mark.skipif(not has_feature(TARGET.tvm(), "avx2"), reason="this CPU cannot run AVX2 code")
def test_a_dense_layer_on_16_registers_packs_three_vector_blocks_over_rows_by_4_and_matches_pytorch():
    """On AVX2 a dense layer whose outputs three vectors divide is packed in blocks of 24 for a
    3 x 4 register tile (THREE_VECTOR_DENSE_16_REGS: 12 FMAs per 7 loads against 2 x 4's 8 per 6),
    its rows computed in whole tiles of 4 (THREE_VECTOR_ROWS_BY_4: 30 -> 32); the AVX-512 build
    keeps blocks of two vectors over 30 rows. The AVX2 build matches PyTorch."""
    import sys

    import tvm

    from tvmbench.compile.knobs import knob_set

    model = load_model(str(Path(__file__).with_name("mlp_model.py")) + ":build_dense_96", ModelOptions())

    def dense(target):
        legal = pipeline.per_inference(pipeline.legalized(import_model(model).mod, target))
        (f,) = [f for gv, f in legal.functions.items() if isinstance(f, tvm.tirx.PrimFunc) and "matmul" in gv.name_hint]
        with knob_set() as seen:
            pipeline.default_schedule(f, target)
        weight = next(tuple(int(d) for d in p.ty.shape) for p in f.params if len(p.ty.shape) == 3)
        computed = "sblock_alloc_buffer((T.int64(32), T.int64(96)))" in f.script()  # (rows 30 -> 32)
        return weight, computed, (seen.values()["vectors"], seen.values()["rows"])

    assert dense(AVX2) == ((4, 64, 24), True, (3, 4))
    assert dense(resolve_target("llvm -mcpu=znver4", gpu_query=lambda: None))[:2] == ((3, 64, 32), False)
    pw = sys.modules["tvmbench.compile.passes.pack_weights"]  # (the package exports the pass under its name)
    for flag, weight in (("THREE_VECTOR_DENSE_16_REGS", (6, 64, 16)), ("THREE_VECTOR_ROWS_BY_4", (4, 64, 24))):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(pw, flag, False)
            assert dense(AVX2)[:2] == (weight, False), flag

    _matches_pytorch_on(AVX2, model)


@pytest.mark.skipif(not has_feature(TARGET.tvm(), "avx2"), reason="this CPU cannot run AVX2 code")
def test_an_attention_output_tile_on_16_registers_stays_within_the_accumulator_budget_and_matches_pytorch():
    """37 tokens, heads of 64 on AVX2 (ViT's shape): keys padded to 40 (5 vectors) take one-vector
    score tiles over tasks of 8 query rows; the output tile over the head's 8 vectors is then 4
    rows x 2 vectors (OUTPUT_TILE_IN_BUDGET), not 8 x 2, 16 accumulators of 16 registers (ViT-B/16's
    attention 1.23x faster in the model). The AVX2 build matches PyTorch."""
    import tvm

    from tvmbench.compile.rules import attention

    model = load_model(str(Path(__file__).with_name("mlp_model.py")) + ":build_attention_37_heads_of_64")

    def output_tiles():
        legal = pipeline.per_inference(pipeline.legalized(import_model(model).mod, AVX2))
        (f,) = [f for gv, f in legal.functions.items()
                if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint.startswith("fused_attention")]
        with AVX2.tvm():
            sch = attention.Attention().schedule(f, AVX2.tvm())
        blocks = [b for b in sch.get_child_blocks(sch.get_sblock("root")) if sch.get(b).name_hint.startswith("matmul")
                  and sch.get(b).name_hint.endswith("_update")]
        return [tuple(int(sch.get(loop).extent) for loop in sch.get_loops(b)[-3:-1]) for b in blocks]

    assert output_tiles() == [(8, 1), (4, 2)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(attention, "OUTPUT_TILE_IN_BUDGET", False)
        assert output_tiles() == [(8, 1), (8, 2)]
    _matches_pytorch_on(AVX2, model)


def _attention_tiles(model, target) -> tuple[list[tuple[int, int]], list[int]]:
    """The (rows, vectors) register tiles of ``model``'s joined attention scheduled for
    ``target`` (scores, then output), and the shape of its packed keys."""
    import tvm

    legal = pipeline.per_inference(pipeline.legalized(import_model(model).mod, target))
    (f,) = [f for gv, f in legal.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint.startswith("fused_attention")]
    rule, sch = pipeline.default_schedule(f, target)
    assert rule == "Attention"
    blocks = [b for b in sch.get_child_blocks(sch.get_sblock("root")) if sch.get(b).name_hint.startswith("matmul")
              and sch.get(b).name_hint.endswith("_update")]
    return [tuple(int(sch.get(loop).extent) for loop in sch.get_loops(b)[-3:-1]) for b in blocks], \
        [int(d) for d in f.params[1].shape]


@pytest.mark.skipif(not has_feature(TARGET.tvm(), "avx2"), reason="this CPU cannot run AVX2 code")
def test_attention_score_tiles_on_16_registers_take_4_rows_of_2_vectors_and_match_pytorch(monkeypatch):
    """128 keys (16 vectors on AVX2, 8 on AVX-512): on 16 registers a task takes 4 query rows x 2
    vectors of keys (SIXTEEN_REGISTER_SCORE_VECTORS), where 4 vectors took 2 rows; its keys are
    packed in panels of 16, and its output tile is 4 rows x 2 vectors. AVX-512 keeps 4 x 4. The
    AVX2 build matches PyTorch on the first 64 query rows, whose tasks (KeyLimits) stop before the
    NaN last token, which the causal mask hides."""
    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend
    from tvmbench.compile.rules import attention

    model = load_model(str(Path(__file__).with_name("mlp_model.py")) + ":build_causal_attention")
    assert _attention_tiles(model, AVX2) == ([(4, 2), (4, 2)], [2, 128 // 16, 32, 16])
    avx512 = resolve_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}, gpu_query=lambda: None)
    assert _attention_tiles(model, avx512)[0][0] == (4, 4)
    monkeypatch.setattr(attention, "SIXTEEN_REGISTER_SCORE_VECTORS", 0)
    assert _attention_tiles(model, AVX2) == ([(2, 4), (2, 4)], [2, 128 // 32, 32, 32])
    monkeypatch.undo()
    backend = TVMBackend(BackendConfig(target=AVX2, threads=2))
    backend.prepare(model)
    backend.run()
    assert_causal_rows_match(model, backend.outputs())


def _depthwise_3x3(batch: int, size: int, channels: int):
    """A TE builder of a 3x3 depthwise convolution over a ``size`` x ``size`` NHWC map (no padding)."""
    def build(te):
        x = te.placeholder((batch, size + 2, size + 2, channels), name="x")
        w = te.placeholder((3, 3, channels), name="w")
        kh, kw = te.reduce_axis((0, 3), name="kh"), te.reduce_axis((0, 3), name="kw")
        return [x, w, te.compute((batch, size, size, channels), lambda n, h, c, k: te.sum(
            x[n, h + kh, c + kw, k] * w[kh, kw, k], axis=[kh, kw]), name="depthwise")]

    return build


def _pointwise(batch: int, size: int, ci: int, co: int):
    """A TE builder of a 1x1 convolution ``ci`` -> ``co`` over a ``size`` x ``size`` NHWC map."""
    def build(te):
        x, w = te.placeholder((batch, size, size, ci), name="x"), te.placeholder((ci, co), name="w")
        r = te.reduce_axis((0, ci), name="r")
        return [x, w, te.compute((batch, size, size, co), lambda n, h, c, k: te.sum(x[n, h, c, r] * w[r, k], axis=r),
                                 name="pointwise")]

    return build


def _default_tile(build, target=AVX2):
    """((vectors, rows), schedule) of the default rules' schedule of a TE builder's function."""
    from tvmbench.compile.knobs import knob_set

    with knob_set() as seen:
        _, sch = pipeline.default_schedule(_te_func(build), target)
    return (seen.values()["vectors"], seen.values()["rows"]), sch


def test_a_predicated_tile_whose_window_is_unrolled_holds_at_most_9_accumulators_on_16_registers(monkeypatch):
    """A 3x3 depthwise convolution over 97-pixel rows (mobilenet_v2 at 193 px: no divisor) on AVX2
    takes 2 vectors x a predicated 4 rows, not 5: with its window unrolled the 2 x 5 tile spilled
    (PREDICATED_WINDOW_ACCUMULATORS_16_REGS); a 1x1 convolution over 32 channels and the same rows
    (its reduction not unrolled) keeps 5."""
    depthwise, pointwise = _depthwise_3x3(1, 97, 32), _pointwise(1, 97, 32, 32)
    assert _default_tile(depthwise)[0] == (2, 4) and _default_tile(pointwise)[0] == (2, 5)
    monkeypatch.setattr(tiles, "PREDICATED_WINDOW_ACCUMULATORS_16_REGS", tiles.PREDICATED_ACCUMULATORS_16_REGS)
    assert _default_tile(depthwise)[0] == (2, 5)
    assert tiles.register_tile(97, [3], 12, None, predicated_cap=9) == (3, 3)


def test_a_1x1_convolution_over_7_pixel_rows_takes_two_vectors_of_whole_rows_on_16_registers(monkeypatch):
    """7-pixel rows on AVX2: the 12-accumulator budget left one vector x 7 (7 FMAs per 8 loads);
    two vectors x 7 (14 accumulators, WHOLE_ROW_ACCUMULATORS_16_REGS) ran mnasnet1_0's and
    resnet50's 1x1 convolutions over 7x7 maps 1.15-1.18x faster alone. A depthwise window over the
    same rows and 32 registers keep their tiles. Built here, the result matches numpy."""
    import tvm

    pointwise = _pointwise(3, 7, 64, 128)
    two, sch = _default_tile(pointwise)
    assert two == (2, 7) and _default_tile(_depthwise_3x3(1, 7, 128))[0] != (2, 7)
    assert _default_tile(pointwise, ZEN4)[0][0] * 7 <= tiles.MAX_ACCUMULATORS
    if has_feature(TARGET.tvm(), "avx2"):
        rng = np.random.default_rng(5)
        x, w = rng.standard_normal((3, 7, 7, 64), dtype="float32"), rng.standard_normal((64, 128), dtype="float32")
        args = [tvm.runtime.tensor(a) for a in (x, w, np.zeros((3, 7, 7, 128), "float32"))]
        tvm.compile(sch.mod, AVX2.tvm())(*args)
        np.testing.assert_allclose(args[-1].numpy(), x @ w, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(contraction, "WHOLE_ROW_ACCUMULATORS_16_REGS", 0)
    assert _default_tile(pointwise)[0] == (1, 7)


@pytest.mark.skipif(not has_feature(TARGET.tvm(), "avx2"), reason="this CPU cannot run AVX2 code")
def test_a_predicated_tile_on_16_registers_holds_few_enough_accumulators_not_to_spill():
    """A Winograd product over 37 x 37 tiles (1369 rows: no divisor, so a predicated tile) on
    AVX2: with PREDICATED_ACCUMULATORS_16_REGS it takes at most that many accumulators, and its
    reduction loop keeps them in registers (no ymm register stored to the stack); uncapped (12),
    the 2 x 6 tile spills. Exact either way. Over 17 rows the narrower tile would compute 20 rows
    against 18: there the 2 x 6 tile stays (PREDICATED_SPARE_ROWS)."""
    import tvm
    from tvm import te

    from tvmbench.compile import codegen
    from tvmbench.compile.knobs import knob_set

    def product(m, k, n):
        a = te.placeholder((4, m, k), name="A")
        w = te.placeholder((4, n // 16, k, 16), name="W")
        r = te.reduce_axis((0, k), name="k")
        c = te.compute((4, m, n), lambda b, i, j: te.sum(a[b, i, r] * w[b, j // 16, r, j % 16], axis=r),
                       name="winograd_product")
        return te.create_prim_func([a, w, c]).with_attr("global_symbol", "main")

    with knob_set() as seen:
        pipeline.default_schedule(product(17, 256, 64), AVX2)
    assert (seen.values()["vectors"], seen.values()["rows"]) == (2, 6)
    m, k, n = 1369, 32, 64
    func = product(m, k, n)
    rng = np.random.default_rng(12)
    x, wt = rng.standard_normal((4, m, k), dtype="float32"), rng.standard_normal((4, n // 16, k, 16), dtype="float32")
    ref = np.einsum("bik,bjkl->bijl", x, wt).reshape(4, m, n)
    spills = {}
    for cap in (tiles.PREDICATED_ACCUMULATORS_16_REGS, 12):
        with pytest.MonkeyPatch.context() as mp, knob_set() as seen:
            mp.setattr(tiles, "PREDICATED_ACCUMULATORS_16_REGS", cap)
            _, sch = pipeline.default_schedule(func, AVX2)
        values = seen.values()
        assert values["vectors"] * values["rows"] <= cap and m % values["rows"], values
        with codegen.lowering_context():
            lib = tvm.tirx.build(tvm.IRModule({"main": sch.mod["main"]}), target=AVX2.tvm(), pipeline=codegen.PIPELINE)
        spills[cap] = len(re.findall(r"%ymm\d+, -?\d*\(%rsp\)", lib.inspect_source("asm")))
        out = tvm.runtime.tensor(np.zeros((4, m, n), "float32"))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(wt), out)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)
    assert spills[tiles.PREDICATED_ACCUMULATORS_16_REGS] == 0 and spills[12] > 0, spills


def _assert_matches_torch(model, module, *x):
    """The model built for this machine's target gives the torch module's output for ``x``."""
    import torch

    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend

    backend = TVMBackend(BackendConfig(target=TARGET, threads=2))
    backend.prepare(model)
    backend.run()
    with torch.no_grad():
        np.testing.assert_allclose(backend.outputs()[0], module(*map(torch.from_numpy, x)).numpy(), rtol=1e-4, atol=1e-4)


class _GroupedBlock:
    """ResNeXt's and RegNet's bottleneck middle: 1x1 conv, grouped 3x3 conv with batch norm and
    ReLU, 1x1 conv (as a torch module, built on demand)."""

    @staticmethod
    def build(channels, groups, stride):
        import torch

        return torch.nn.Sequential(
            torch.nn.Conv2d(16, channels, 1), torch.nn.ReLU(),
            torch.nn.Conv2d(channels, channels, 3, stride, 1, groups=groups, bias=False),
            torch.nn.BatchNorm2d(channels), torch.nn.ReLU(), torch.nn.Conv2d(channels, 16, 1)).eval()


LANES = tiles.vector_lanes(TARGET.tvm(), 32)


@pytest.mark.parametrize("channels, groups, stride, inner", [(128, 32, 1, True), (64, 4, 2, False),
                                                             (5 * LANES, 2, 1, False)])
def test_grouped_convolution_has_a_vector_axis_and_matches_torch(channels, groups, stride, inner, monkeypatch):
    """32 groups of 4 channels vectorise over the groups (inputs in [Ci, G] order, which the 1x1
    convolution before them writes itself); 4
    groups of 16 over a group's channels (the former's register tile over a group's 4 output
    channels stacked over output columns: ``contraction._crossed``); 2 groups of two and a half vectors over a group's
    channels padded to three vectors (RegNet's widths), the padding sliced off; the last two with
    their weights packed per group, the batch norm's shift and the ReLU fused into the kernel
    ahead of the output's reshape to NHWC. Either way the Contraction rule claims the kernel (vectorised
    and parallel) instead of the fallback, its register tiles in the channels form run along the
    map's columns (not its rows, as long: ROW_TIE_INNER), the strided window over 16-channel
    groups reads its padding inline (SPARSE_WINDOW) where the target has 32 vector registers, and
    the model matches PyTorch."""
    import torch

    from tvmbench.compile.passes import grouped_conv
    from tvmbench.compile.passes.grouped_conv import groups_inner, padded_group
    from tvmbench.compile.tir import uses
    from tvmbench.models.base import LoadedModel

    assert groups_inner(groups, channels // groups, LANES) is inner
    padded = padded_group(channels // groups, LANES) != channels // groups
    assert padded is (channels == 5 * LANES)
    torch.manual_seed(0)
    module = _GroupedBlock.build(channels, groups, stride)
    x = np.random.default_rng(0).standard_normal((1, 16, 12, 12), dtype="float32")
    model = LoadedModel(name="grouped", family="cnn", inputs={"x": x}, module=module, options=ModelOptions())
    imported = import_model(model)
    mod = pipeline.legalized(imported.mod, TARGET)
    grouped = [f for gv, f in mod.functions.items() if "conv2d_grouped" in gv.name_hint]
    assert len(grouped) == 1
    if inner:  # the 1x1 convolutions around it write and read the [Ci, G] order themselves (their
        # weights permuted at load time): no transpose of the activations to it or back
        transposes = [gv.name_hint for gv in pipeline.per_inference(mod).functions if "transpose" in gv.name_hint]
        monkeypatch.setattr(grouped_conv, "PERMUTE_PRODUCER", 0)
        before = [gv.name_hint for gv in pipeline.per_inference(pipeline.legalized(imported.mod, TARGET)).functions
                  if "transpose" in gv.name_hint]
        monkeypatch.undo()
        assert len(transposes) == len(before) - 2, (transposes, before)
    if not inner:  # the batch norm's shift and the ReLU in the convolution's kernel, before the
        # output's reshape to NHWC, not in a kernel after it (reshape_last.py; the groups form's
        # transpose takes them either way)
        names = [gv.name_hint for gv in mod.functions]
        assert any("conv2d_grouped" in n and "relu" in n for n in names), names
        assert not any("reshape" in n and "relu" in n for n in names), names
    # the channels form reads its weights packed per group, [G, Co/B, KH, KW, Ci, B]
    assert any(len(p.shape) == 6 for p in grouped[0].params) is not inner
    with TARGET.tvm():
        found = contraction.match(grouped[0], TARGET.tvm())
        row_var = found.block.iter_vars[found.m_axis].var  # (the groups form's rows: a group's channels)
        assert uses(found.block.writes[0].region[2].min, row_var) is not inner  # [n, y, x, ...]: the columns
        sch = Contraction().schedule(grouped[0], TARGET.tvm())
    assert sch is not None
    script = sch.mod.script()
    assert "T.vectorized" in script and "T.parallel" in script
    if inner:  # rows over a group's 4 output channels stacked over output columns, in one vector,
        # the cores splitting the map (CROSSED_STACKS, _crossed_tile); without, no stack
        from tvmbench.compile.knobs import knob_set

        for crossed in (0, 1):
            monkeypatch.setattr(contraction, "CROSSED_STACKS", crossed)
            with TARGET.tvm(), knob_set({}) as ks:
                Contraction().schedule(grouped[0], TARGET.tvm())
            chosen = ks.values()
            stacked = (chosen["rows"], chosen["vectors"], chosen.get("row_stack", 1) > 1, chosen.get("spatial_outer"))
            assert stacked == (4, 1, True, True) if crossed else not stacked[2], chosen
    if stride == 2:  # 144 taps, 26 multiply-adds per input element: no copy of the padded input
        # on 32 vector registers; on 16 (AVX2) the copy, whose loads carry no bounds check
        copied = tiles.accumulator_budget(TARGET.tvm()) <= tiles.MAX_ACCUMULATORS_16_REGS
        assert ('T.sblock("pad")' in script) is copied, script
        monkeypatch.setattr(contraction, "SPARSE_INLINE_16_REGS", True)
        with TARGET.tvm():
            inline = Contraction().schedule(grouped[0], TARGET.tvm()).mod.script()
        monkeypatch.undo()
        assert 'T.sblock("pad")' not in inline
    if padded:  # whole vectors in the tile, the slice in the same kernel
        assert f"T.vectorized(T.int64({LANES}))" in script, script
        assert int(grouped[0].params[-1].ty.shape[-1]) == channels // groups
    _assert_matches_torch(model, module, x)


def _small_cnn_parallel_extents(batch):
    """The parallel loop extent of every convolution, pooling and matmul kernel of a small CNN
    (3x3, strided, 1x1, depthwise and grouped convolutions, pooling, a dense head) at ``batch``."""
    import re

    import torch
    import tvm

    from tvmbench.models.base import LoadedModel

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, 2, 1), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, 1, 1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 1), torch.nn.Conv2d(64, 64, 3, 1, 1, groups=64), torch.nn.Conv2d(64, 64, 3, 1, 1, groups=4),
        torch.nn.MaxPool2d(2), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 32)).eval()
    x = np.random.default_rng(0).standard_normal((batch, 3, 32, 32), dtype="float32")
    model = LoadedModel(name="small", family="cnn", inputs={"x": x}, module=module, options=ModelOptions())
    scheduled = pipeline.optimize(import_model(model).mod, TARGET)
    extents = {}
    for gv, func in scheduled.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc) or not any(
                k in gv.name_hint for k in ("conv2d", "winograd_product", "pool", "matmul", "mean")):
            continue
        script = func.script()
        found = [int(n) for n in re.findall(r"T\.parallel\((?:T\.int64\()?(\d+)", script)]
        extents[gv.name_hint] = (max(found, default=1), script)
    return extents


def test_batch_8_kernels_are_parallel_over_the_batch():
    """At batch 8 every convolution, pooling and dense kernel uses the batch: in its parallel
    loop (8 times the batch-1 extent, or at least 8 tasks), or, where one image leaves a single
    row (the dense head, the global mean), as the 8 rows of its register tile; never a loop over
    batch-1 kernels."""
    import re

    def unrolls_rows(script, rows):
        return re.search(rf"T\.unroll\((?:T\.int64\()?{rows}\b", script)

    one, eight = _small_cnn_parallel_extents(1), _small_cnn_parallel_extents(8)
    assert set(one) == set(eight) and len(one) >= 6, (one, eight)
    for name, (extent, script) in eight.items():
        parallel = extent == 8 * one[name][0] or (one[name][0] == 1 and extent >= 8)
        # the 8 rows split between the register tile (r rows; 4 on 16-register AVX2 and on Zen 4,
        # whose tiles have at most 7 rows) and the tasks (which may also split the channels: 8 rows
        # x 2 channel tiles on a 2-core AVX-512 host; 2 row blocks x the batch-1 channel tasks)
        tiled = any(unrolls_rows(script, r) and (extent * r == 8 * one[name][0] or (
            extent * r >= 8 * one[name][0] and not unrolls_rows(one[name][1], r))) for r in (2, 4, 8))
        assert parallel or tiled, (name, one[name][0], extent)
    assert any(extent == 8 * one[name][0] for name, (extent, _) in eight.items() if "conv2d" in name)


def test_fire_module_concat_and_a_1000_class_convolution_are_tiled_and_match_torch():
    """SqueezeNet's shape: a 3x3 branch (Winograd) concatenated with a 1x1 branch keeps the
    Winograd output transform's tiled schedule (the concat is its own loop), and a 1x1
    convolution to 1000 classes (no block divides 1000) reads zero-padded packed weights."""
    import torch

    from tvmbench.models.base import LoadedModel

    class Fire(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.squeeze = torch.nn.Conv2d(32, 32, 1)
            self.e1, self.e3 = torch.nn.Conv2d(32, 64, 1), torch.nn.Conv2d(32, 64, 3, padding=1)
            self.head = torch.nn.Conv2d(128, 1000, 1)

        def forward(self, x):
            s = torch.relu(self.squeeze(x))
            return self.head(torch.cat([torch.relu(self.e1(s)), torch.relu(self.e3(s))], 1)).mean((2, 3))

    torch.manual_seed(0)
    module = Fire().eval()
    x = np.random.default_rng(0).standard_normal((1, 32, 16, 16), dtype="float32")
    model = LoadedModel(name="fire", family="cnn", inputs={"x": x}, module=module, options=ModelOptions())
    imported = import_model(model)
    scheduled = pipeline.optimize(imported.mod, TARGET)
    scripts = {gv.name_hint: f.script() for gv, f in scheduled.functions.items() if hasattr(f, "script")}
    output = [s for name, s in scripts.items() if "winograd_output" in name and "concatenate" in name]
    assert output and "T.parallel" in output[0] and "T.unroll" in output[0]
    assert [name for name in scripts if "conv2d_nhwc_packed" in name and "strided_slice" in name]
    _assert_matches_torch(model, module, x)


def _dense_block():
    """DenseNet's shape: a stem convolution, then three layers, each a pre-activation batch norm
    (random statistics) and ReLU over the concatenation of every earlier output, a 1x1 and a 3x3
    convolution."""
    import torch

    from tvmbench.models.base import LoadedModel

    class Block(torch.nn.Module):
        def __init__(self, channels=32, growth=16, layers=3):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, channels, 3, padding=1)
            self.layers = torch.nn.ModuleList(torch.nn.Sequential(
                torch.nn.BatchNorm2d(channels + i * growth), torch.nn.ReLU(),
                torch.nn.Conv2d(channels + i * growth, 4 * growth, 1, bias=False),
                torch.nn.BatchNorm2d(4 * growth), torch.nn.ReLU(),
                torch.nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)) for i in range(layers))

        def forward(self, x):
            features = [self.stem(x)]
            for layer in self.layers:
                features.append(layer(torch.cat(features, 1)))
            return torch.cat(features, 1)

    torch.manual_seed(0)
    module = Block()
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    module = module.eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8), dtype="float32")
    return LoadedModel(name="dense", family="cnn", inputs={"x": x}, module=module, options=ModelOptions()), module, x


def test_dense_block_concat_is_a_vector_loop_per_input_and_the_kernels_build_on_two_threads(monkeypatch):
    """The concatenation a DenseNet layer reads is partitioned at its inputs' boundaries (one
    vector loop per input, not a chain of selects in every lane) and its batch norm is one
    multiply-add (FoldScaleIntoConv's chains with no convolution before them); the batch norms' constant
    arithmetic is folded in NumPy before legalization (none left for FoldConstant to compile);
    the kernels are compiled on two threads into one library, which matches torch; lowering
    simplifies each segment to one input before CompactBufferAllocation, and the kernels carry no
    argument checks while the model's own input is still checked (codegen.py)."""
    import torch
    import tvm

    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend, transform_params
    from tvmbench.compile import codegen, passes
    from tvmbench.compile.ir import op_name

    model, module, x = _dense_block()
    imported = import_model(model)
    scheduled = pipeline.optimize(imported.mod, TARGET)
    # concat + batch norm + ReLU kernels: parameters are the inputs, the output and two per-channel
    # vectors (the batch norm folded into a scale and a shift at load time: FoldScaleIntoConv)
    concats = {gv.name_hint: (len(f.params) - 3, f.script()) for gv, f in scheduled.functions.items()
               if "concatenate" in gv.name_hint and "relu" in gv.name_hint}
    assert sorted(n for n, _ in concats.values()) == [1, 2, 3], list(concats)
    assert not [n for n in concats if "subtract" in n] and all(n.count("multiply") == 1 for n in concats), list(concats)
    for name, (inputs, script) in concats.items():
        assert script.count("T.vectorized") >= inputs, (name, inputs, script)

    def constant_calls(mod):
        consts = {b.var for f in mod.functions.values() if hasattr(f, "body") and hasattr(f.body, "blocks")
                  for block in f.body.blocks for b in block.bindings
                  if isinstance(b.value, tvm.ir.expr.Constant)}
        tensors = (tvm.ir.expr.Constant, tvm.relax.Var)
        return [b.value for f in mod.functions.values() if hasattr(f, "body") and hasattr(f.body, "blocks")
                for block in f.body.blocks for b in block.bindings
                if op_name(b.value) and any(isinstance(a, tensors) for a in b.value.args) and all(
                    isinstance(a, tvm.ir.expr.Constant) or a in consts
                    for a in b.value.args if isinstance(a, tensors))]

    with TARGET.tvm():
        simplified = tvm.transform.Sequential(pipeline.simplify_passes(TARGET))(imported.mod)
        assert constant_calls(simplified)
        assert not constant_calls(passes.fold_constants_numpy()(simplified))

    split, parts = codegen.split_kernels, []
    monkeypatch.setattr(codegen, "MIN_KERNELS_PER_SHARD", 2)
    monkeypatch.setattr(codegen, "split_kernels", lambda mod, n: parts.append(split(mod, 2)[1]) or split(mod, 2))
    backend = TVMBackend(BackendConfig(target=TARGET, threads=2))
    backend.prepare(model)
    backend.run()
    assert len(parts) == 1 and len(parts[0]) == 2 and all(len(p.functions) >= 2 for p in parts[0])
    with torch.no_grad():
        np.testing.assert_allclose(backend.outputs()[0], module(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-4)

    # Lowering: once blocks are opaque and simplified, each input's segment of the partitioned
    # concat reads that input alone (no select chain left for CompactBufferAllocation).
    three = next(f for name, f in scheduled.functions.items()
                 if "concatenate" in name.name_hint and "relu" in name.name_hint and len(f.params) - 3 == 3)
    assert "if_then_else" in three.script()
    lowered = codegen.opaque_and_simplified()(tvm.IRModule({"k": three.with_attr("global_symbol", "k")}))
    assert "if_then_else" not in lowered.script()
    # The kernels carry no argument checks (the VM checks the model's inputs itself, below).
    library = backend.info["library"]
    assert b"Mismatched type on argument" not in Path(library).read_bytes()
    vm = tvm.relax.VirtualMachine(tvm.runtime.load_module(library), tvm.cpu())
    params = transform_params(vm, [tvm.runtime.tensor(p) for p in imported.params])
    for wrong in (np.zeros((1, 3, 8, 9), "float32"), x.astype("float64")):
        with pytest.raises(Exception, match="ErrorContext.*param"):
            vm["main"](tvm.runtime.tensor(wrong), *params)


@pytest.mark.parametrize("keys, padded, wide", [(197, 208, True), (60, 64, False)])
def test_a_padding_inside_a_vector_keeps_its_condition_in_that_vector_alone(keys, padded, wide):
    """ViT's keys transposed for attention and padded from 197 to 208: the condition on the
    vectorised axis made TVM run every vector lane by lane, a branch per lane (47 us alone; 11 us
    with the vector loop split around the one vector that holds the cut). The lowered kernel keeps
    one conditional store path, two vector loops of whole vectors, and the right numbers; so does
    a cut whose gcd with the vector is 4 (Whisper's 1500 keys), which in 4-wide vectors lost the
    transpose's tiles of rows (75 -> 227 us)."""
    import tvm
    from tvm import te

    from tvmbench.compile import codegen

    x = te.placeholder((keys, 128), name="x")
    out = te.compute((2, 64, padded), lambda h, d, j: te.if_then_else(
        te.all(j >= 0, j < keys), x[te.min(j, keys - 1), h * 64 + d] * 0.5, 0.0), name="keys")
    func = te.create_prim_func([x, out])
    target = WIDE if wide else TARGET
    _, sch = pipeline.default_schedule(func, target)
    script = sch.mod["main"].script()
    lanes = tiles.vector_lanes(target.tvm(), 32)
    assert len(re.findall(rf"T\.vectorized\((T\.int64\()?{lanes}\)", script)) == 2, script
    assert script.count("_partition") >= 2, script
    mod = tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")})
    assert codegen.opaque_and_simplified()(mod).script().count("if_then_else") == 1
    with codegen.lowering_context():
        lib = tvm.tirx.build(mod, target=target.tvm(), pipeline=codegen.PIPELINE)
    if wide and not WIDE_RUNS:
        return
    data = np.random.default_rng(0).standard_normal((keys, 128)).astype("float32")
    result = tvm.runtime.tensor(np.zeros((2, 64, padded), "float32"))
    lib["main"](tvm.runtime.tensor(data), result)
    expected = np.zeros((2, 64, padded), "float32")
    expected[:, :, :keys] = 0.5 * data.reshape(keys, 2, 64).transpose(1, 2, 0)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("kind", ["matmul", "conv"])
def test_default_schedule_knobs_round_trip_and_every_move_builds_a_correct_kernel(kind):
    """The default rule's choices as tuning knobs (compile/knobs.py): the values the default build
    read rebuild exactly the default kernel, and each Droplet move (one knob to an adjacent legal
    value) builds a different kernel that still computes the same numbers."""
    import torch
    import tvm
    import tvm_ffi
    from tvm import topi

    from tvmbench.compile.knobs import knob_set
    from tvmbench.tuning.droplet import KnobSpace

    rng = np.random.default_rng(3)
    if kind == "matmul":
        func, shape = _matmul_relu(64, 48, 80), (64, 80)
        args = [rng.standard_normal((64, 48), dtype="float32"), rng.standard_normal((48, 80), dtype="float32")]
        ref = np.maximum(args[0] @ args[1], 0)
    else:
        def build(te):
            x = te.placeholder((1, 14, 14, 32), name="x")
            wt = te.placeholder((3, 3, 32, 48), name="w")
            return [x, wt, topi.nn.conv(x, wt, 1, 1, 1, 1, "NHWC", "HWIO", "float32")]

        func, shape = _te_func(build), (1, 14, 14, 48)
        args = [rng.standard_normal((1, 14, 14, 32), dtype="float32"), rng.standard_normal((3, 3, 32, 48), dtype="float32")]
        ref = torch.nn.functional.conv2d(torch.from_numpy(args[0]).permute(0, 3, 1, 2),
                                         torch.from_numpy(args[1]).permute(3, 2, 0, 1), padding=1).permute(0, 2, 3, 1).numpy()
    _, plain = pipeline.default_schedule(func, TARGET)
    with knob_set() as seen:
        _, recorded = pipeline.default_schedule(func, TARGET)
    assert {"vectors", "rows", "spatial_outer"} <= {k.name for k in seen.seen}
    assert ("unroll_window" in {k.name for k in seen.seen}) == (kind == "matmul")  # a 48-long reduction; 288 is not
    with knob_set(seen.values()):
        _, rebuilt = pipeline.default_schedule(func, TARGET)
    assert tvm_ffi.structural_equal(plain.mod, recorded.mod) and tvm_ffi.structural_equal(plain.mod, rebuilt.mod)
    space = KnobSpace(func, TARGET, timer=None, on_measured=None, known={})
    moves = [m for position in range(space.knob_count()) for m in space.neighbours(space.start, position)]
    assert len(moves) >= 3
    for move in moves:
        sch = space.build(move)[0]
        assert sch is not None and not tvm_ffi.structural_equal(sch.mod, plain.mod), move
        lib = tvm.compile(sch.mod, TARGET.tvm())
        out = tvm.runtime.tensor(np.zeros(shape, "float32"))
        lib(*[tvm.runtime.tensor(a) for a in args], out)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4, err_msg=str(move))


def test_a_linear_layer_on_a_strided_input_reads_one_packed_weight_not_a_copy_per_batch():
    """PyTorch gives a linear layer on a non-contiguous 3-D input (attention's output) as a
    matmul of ``broadcast_to`` operands, which made the weights one copy per batch element, read
    unpacked (passes/matmul_broadcast.py). After the pipeline no broadcast is left, the kernel
    reads the weight packed per register tile over the input's rows flattened (``FLATTEN_ROWS``:
    a 2-D ``[30, 64]``, not ``[3, 10, 64]``), and the model still matches PyTorch."""
    import torch
    import tvm

    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend
    from tvmbench.compile.ir import calls

    model = load_model(f"{__file__.rsplit('/', 1)[0]}/mlp_model.py:build_tokens_first")
    imported = import_model(model)
    assert calls(imported.mod["main"], "relax.broadcast_to")  # the pattern is there to remove
    mod = pipeline.legalized(imported.mod, TARGET)
    kernels = {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert not any("broadcast" in name for name in kernels), sorted(kernels)
    dense = [f.script() for name, f in kernels.items() if name.startswith("fused_matmul")]
    assert [[int(d) for d in f.params[0].ty.shape] for n, f in kernels.items() if n.startswith("fused_matmul")] \
        == [[30, 64]]
    block = _host_dense_block(96, 10)  # 96 output columns, packed per register tile
    assert len(dense) == 1 and "T.int64(3), T.int64(64), T.int64(96)" not in dense[0]
    assert f"T.Buffer((T.int64({96 // block}), T.int64(64), T.int64({block}))" in dense[0]
    backend = TVMBackend(BackendConfig(target=TARGET, threads=2))
    backend.prepare(model)
    backend.run()
    x = model.inputs[next(iter(model.inputs))]
    with torch.no_grad():
        ref = model.module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(backend.outputs()[0], ref, rtol=1e-4, atol=1e-4)


@pytest.fixture
def l2_of_1mb(monkeypatch):
    """This machine's L2 taken as 1 MB per core: the rules' choices some tests check were measured
    for it (Zen 4/5), and a host with more (the Xeon VM's 2 MB) keeps their weights in L2 and runs
    them spatial-outer."""
    from tvmbench import targets

    monkeypatch.setattr(targets, "host_l2_bytes", lambda: 1 << 20)


def test_a_large_input_under_large_weights_is_tiled_in_row_blocks_and_stays_correct(l2_of_1mb):
    """Channel-outer tiles (weights over 1 MB) over an input larger than ROW_BLOCK_BYTES go in
    blocks of ROW_BLOCK_ROWS rows, so the input is not read again from memory for every channel
    tile (bert-base at batch 8, vgg16 at batch 8: rules/contraction.py); the numbers stay right."""
    from tvmbench.compile.knobs import knob_set

    m, k, n = 1024, 256, 1088  # input 1 MB, weights 1.1 MB
    func = _matmul_relu(m, k, n)
    with knob_set() as seen:
        _, sch = pipeline.default_schedule(func, TARGET)
    values = seen.values()
    assert values["spatial_outer"] is False
    tiles_ = m // values["rows"]
    assert values["row_block"] * values["rows"] == contraction.ROW_BLOCK_ROWS and values["row_block"] < tiles_
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((m, k), dtype="float32"), rng.standard_normal((k, n), dtype="float32")
    out, script = _run(func, a, b, out_shape=(m, n))
    assert script.count("T.parallel") == 1
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-3)


def test_a_long_reduction_under_large_weights_is_swept_in_blocks_and_stays_correct():
    """Channel-outer tiles that sweep more than REDUCTION_BLOCK_INPUT_BYTES of input over a weight
    panel larger than REDUCTION_PANEL_BYTES split the reduction into blocks whose panel fits (the
    largest divisor), each block swept over all the channel tile's rows, which keep their sums in a
    buffer between blocks; the numbers stay right. A small input keeps one block."""
    import re

    from tvmbench.compile.knobs import knob_set

    m, k, n = 512, 1536, 704  # weights 4.3 MB: channel tiles outer; each sweeps 3 MB of input
    func = _matmul_relu(m, k, n)
    with knob_set() as seen:
        pipeline.default_schedule(func, WIDE)
    values = seen.values()
    assert values["spatial_outer"] is False
    block = values["reduction_block"]
    assert block < k and k % block == 0 and 2 * block >= contraction.REDUCTION_PANEL_BYTES // (
        values["vectors"] * 4 * tiles.vector_lanes(WIDE.tvm(), 32))
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((m, k), dtype="float32"), rng.standard_normal((k, n), dtype="float32")
    out, script = _run(func, a, b, out_shape=(m, n), target=WIDE)
    assert script.count("T.parallel") == 1
    # the reduction's blocks outside the row tiles, the block's steps inside them
    assert re.search(rf"T.grid\({k // block}, {-(-m // values['rows'])}, ", script), script
    if out is not None:
        np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-3)
    with knob_set() as seen:
        pipeline.default_schedule(_matmul_relu(64, k, n), WIDE)  # 393 KB of input
    assert seen.values()["reduction_block"] == k


def test_where_l3_is_far_an_input_over_half_a_core_l2_is_swept_in_reduction_blocks():
    """Each core sweeps a channel tile's whole input once per tile; on Intel's server cores an
    input that shares L2 with the panel comes from L3 at the memory's speed (bert-large's 4096 ->
    1024 layer on the Xeon VM: 7.07 -> 3.60 ms per call in blocks, the model 1.11-1.21x). There
    an input over REDUCTION_BLOCK_FAR_L3_L2 of one core's L2 (1 MB assumed for a named CPU) goes
    in reduction blocks; on AMD's Zen, whose L3 is near, only one over REDUCTION_BLOCK_INPUT_BYTES."""
    import tvm

    from tvmbench.compile.knobs import knob_set
    from tvmbench.targets import near_l3

    far, near = (resolve_target({"kind": "llvm", "mcpu": cpu, "num-cores": 2}, gpu_query=lambda: None)
                 for cpu in ("sapphirerapids", "znver4"))
    assert not near_l3(far.tvm()) and near_l3(near.tvm()) and near_l3(tvm.target.Target({"kind": "llvm"}))
    k = 1536
    blocks = {}
    for name, target in (("far", far), ("near", near)):
        with knob_set() as seen:
            pipeline.default_schedule(_matmul_relu(128, k, 704), target)  # 768 KB of input, a 384 KB panel
        blocks[name] = seen.values()["reduction_block"]
    assert blocks["near"] == k and blocks["far"] < k and k % blocks["far"] == 0, blocks


def _packed_matmul(m, k, n, lanes=32, bf16=False):
    """A matmul over weights packed as pack_weights lays them out: ``[n / lanes, k, lanes]``, or
    in bf16 (``--precision bf16``) ``[n / lanes, k / 2, lanes, 2]``, pairs of steps adjacent, the
    sums in fp32."""
    def build(te):
        if bf16:
            a = te.placeholder((m, k), name="A", dtype="bfloat16")
            w = te.placeholder((n // lanes, k // 2, lanes, 2), name="W", dtype="bfloat16")
            r = te.reduce_axis((0, k), name="k")
            return [a, w, te.compute((m, n), lambda i, j: te.sum(
                a[i, r].astype("float32") * w[j // lanes, r // 2, j % lanes, r % 2].astype("float32"), axis=r),
                name="C")]
        a = te.placeholder((m, k), name="A")
        w = te.placeholder((n // lanes, k, lanes), name="W")
        r = te.reduce_axis((0, k), name="k")
        return [a, w, te.compute((m, n), lambda i, j: te.sum(a[i, r] * w[j // lanes, r, j % lanes], axis=r), name="C")]

    return _te_func(build)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_channel_outer_tile_prefetches_the_next_panel_with_its_accumulators_on_the_stack(
        monkeypatch, l2_of_1mb, precision):
    """Channel-outer tiles over packed weights (1.5 MB here) are marked for
    passes/prefetch.py, and the native lowering puts a prefetch of the next channel tile's panel
    in the reduction loop; the tile's 16 accumulators (1024 bytes) stay on the stack
    (passes/stack_buffers.py), not in TVM's workspace pool, which would have kept them in memory
    across the prefetch. The numbers stay right; the knob off leaves no prefetch, the stack pass
    off brings the pool back. In bf16 the tile is the dot product's, which reads the weights
    through its own buffer, and they are packed in pairs: until session 98 no bf16 tile
    prefetched (inception_v3's 448 -> 384 3x3 convolution over 8x8, weights from memory, alone
    287 us without, 220 with)."""
    import ml_dtypes
    import tvm

    from tvmbench.compile import codegen
    from tvmbench.compile.knobs import knob_set
    from tvmbench.compile.passes import prefetch, stack_buffers

    bf16 = precision == "bf16"
    m, k, n = 64, 1024 if bf16 else 512, 768
    target, runs = (ZEN4, HOST_BF16) if bf16 else (WIDE, WIDE_RUNS)
    rng = np.random.default_rng(8)
    a, w = rng.standard_normal((m, k), dtype="float32"), rng.standard_normal((n // 32, k, 32), dtype="float32")
    if bf16:  # (the reference from the rounded values; the weights' pairs of steps adjacent)
        a, w = (x.astype(ml_dtypes.bfloat16).astype("float32") for x in (a, w))
    args = [a, w] if not bf16 else [a.astype(ml_dtypes.bfloat16),
                                    w.reshape(n // 32, k // 2, 2, 32).transpose(0, 1, 3, 2).astype(ml_dtypes.bfloat16)]

    def build(overrides):
        with target.tvm(), knob_set(overrides) as seen:
            sch = Contraction().schedule(_packed_matmul(m, k, n, bf16=bf16), target.tvm())
        mod = tvm.IRModule({"main": sch.mod["main"]})
        with codegen.lowering_context():
            lib = tvm.tirx.build(mod, target=target.tvm(), pipeline=codegen.PIPELINE)
        if runs:
            out = tvm.runtime.tensor(np.zeros((m, n), "float32"))
            lib["main"](*(tvm.runtime.tensor(x) for x in args), out)
            ref = a @ w.transpose(1, 0, 2).reshape(k, n)
            np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-3)
        return seen.values(), sch.mod.script(), lib.inspect_source("ll")

    values, script, ir = build({})
    assert values["spatial_outer"] is False and values["prefetch"] == 1
    assert values["vectors"] * values["rows"] == 16, values  # (a 1024-byte accumulator buffer)
    assert prefetch.KEY in script
    assert not bf16 or "dpbf16ps" in ir, "no bf16 dot product"
    assert "@llvm.prefetch" in ir
    assert "load ptr, ptr @__TVMBackendAllocWorkspace" not in ir
    _, _, ir = build({"prefetch": 0})
    assert "@llvm.prefetch" not in ir
    monkeypatch.setattr(stack_buffers, "STACK_BUFFER_BYTES", 0)
    _, _, ir = build({})
    assert "load ptr, ptr @__TVMBackendAllocWorkspace" in ir


@pytest.mark.parametrize("extent, rows", [(13, 7), (17, 6), (27, 7), (71, 6), (39, 7), (16, 8), (7, 7), (10, 5)])
def test_a_row_tile_divides_its_axis_or_wastes_least_when_predicated(extent, rows):
    """Exact divisors from 4 up (or the whole axis) need no predicate; otherwise the predicated
    tile is the one that computes fewest masked rows for its FMAs per load (13 as 7 + 6, not
    8 + 5), and never has 8 rows (39 as 5 x 7 + 4, not 4 x 8 + 7: the conditional row of 8 spills)."""
    chosen, predicated = tiles.row_tile(extent, 12)
    assert chosen == rows and predicated == (extent % rows != 0)
    if predicated:
        assert chosen <= tiles.PREDICATED_MAX_ROWS
        computed = -(-extent // chosen) * chosen
        assert computed <= -(-extent // tiles.PREDICATED_MAX_ROWS) * tiles.PREDICATED_MAX_ROWS


def test_a_stem_convolution_is_one_vector_wide_on_avx512_and_two_on_avx2():
    """A first layer (3x3 over 3 input channels, the window unrolled whole) gets a one-vector
    tile on AVX-512, where it ran 1.7-1.8x faster alone, and keeps two on AVX2, where one lost;
    either way it computes the convolution."""
    from tvm import topi

    from tvmbench.compile.knobs import knob_set

    def build(te):
        x = te.placeholder((1, 17, 17, 3), name="x")
        wt = te.placeholder((3, 3, 3, 32), name="w")
        return [x, wt, topi.nn.conv(x, wt, 2, 1, 1, 1, "NHWC", "HWIO", "float32")]

    func = _te_func(build)
    avx512 = resolve_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}, gpu_query=lambda: None)
    for target, vectors in ((avx512, 1), (AVX2, 2)):
        with knob_set() as seen:
            pipeline.default_schedule(func, target)
        assert seen.values()["vectors"] == vectors, target.config
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((1, 17, 17, 3), dtype="float32"), rng.standard_normal((3, 3, 3, 32), dtype="float32")
    _matches_torch_conv(func, x, w, (1, 9, 9, 32), stride=2, padding=1)


def test_a_depthwise_tile_leaves_registers_for_its_window_weights_on_avx512():
    """A 3x3 depthwise convolution over two vectors of channels holds 18 weight vectors across
    its tile: on AVX-512 its rows stop where accumulators and weights fill the 32 registers (4
    rows of a 112-pixel map, not 8), a pooling window (no weights) keeps 8, and the convolution is
    still computed."""
    from tvm import topi

    from tvmbench.compile.knobs import knob_set

    def depthwise(te):
        x = te.placeholder((1, 6, 112, 32), name="x")
        wt = te.placeholder((3, 3, 1, 32), name="w")
        return [x, wt, topi.nn.conv(x, wt, 1, 1, 1, 32, "NHWC", "HWIO", "float32")]

    def pool(te):
        x = te.placeholder((1, 6, 112, 32), name="x")
        return [x, topi.nn.pool2d(x, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), "max", layout="NHWC")]

    avx512 = resolve_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}, gpu_query=lambda: None)
    func = _te_func(depthwise)
    with knob_set() as seen:
        pipeline.default_schedule(func, avx512)
    v = seen.values()
    assert (v["vectors"], v["rows"]) == (2, 4)
    assert v["rows"] * v["vectors"] + 9 * v["vectors"] <= contraction.DEPTHWISE_REGISTERS - 2
    with knob_set() as seen:
        pipeline.default_schedule(_te_func(pool), avx512)
    assert seen.values()["rows"] == 8
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((1, 6, 112, 32), dtype="float32"), rng.standard_normal((3, 3, 1, 32), dtype="float32")
    _matches_torch_conv(func, x, w, (1, 6, 112, 32), padding=1, groups=32)


@pytest.mark.skipif(not has_feature(TARGET.tvm(), "avx2"), reason="this CPU cannot run AVX2 code")
def test_a_depthwise_tile_on_16_registers_takes_one_vector_over_whole_rows_not_predicated_ones():
    """A 3x3 depthwise convolution over 14-pixel rows on AVX2: two vectors would take a predicated
    5 rows (15 computed for 14), one vector takes 7 whole rows; every depthwise FMA reads its own
    input vector, so the second vector brings no reuse (DEPTHWISE_WHOLE_ROWS_16_REGS). Over 28
    pixels, where 4 rows are whole, the tile keeps two vectors. The convolution is still computed."""
    from tvm import topi

    from tvmbench.compile.knobs import knob_set

    def depthwise(width):
        def build(te):
            x = te.placeholder((1, 4, width, 64), name="x")
            wt = te.placeholder((3, 3, 1, 64), name="w")
            return [x, wt, topi.nn.conv(x, wt, 1, 1, 1, 64, "NHWC", "HWIO", "float32")]
        return _te_func(build)

    def tile(func):
        with knob_set() as seen:
            pipeline.default_schedule(func, AVX2)
        return seen.values()["vectors"], seen.values()["rows"]

    assert tile(depthwise(14)) == (1, 7)
    assert tile(depthwise(28)) == (2, 4)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(contraction, "DEPTHWISE_WHOLE_ROWS_16_REGS", False)
        assert tile(depthwise(14)) == (2, 5)
    import torch
    import tvm

    _, sch = pipeline.default_schedule(depthwise(14), AVX2)
    lib = tvm.compile(sch.mod, AVX2.tvm())
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((1, 4, 14, 64), dtype="float32"), rng.standard_normal((3, 3, 1, 64), dtype="float32")
    out = tvm.runtime.tensor(np.zeros((1, 4, 14, 64), "float32"))
    lib(tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(w).permute(3, 2, 0, 1),
                                     padding=1, groups=64).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


def _conv1x1_nhwc(size, c_in, c_out):
    def build(te):
        x = te.placeholder((1, size, size, c_in), name="X")
        w = te.placeholder((1, 1, c_in, c_out), name="W")
        rc = te.reduce_axis((0, c_in), name="rc")
        y = te.compute((1, size, size, c_out), lambda n, h, v, o: te.sum(x[n, h, v, rc] * w[0, 0, rc, o], axis=rc),
                       name="Y")
        return [x, w, y]

    return _te_func(build)


@pytest.mark.parametrize("size, stack", [(3, 3), (4, 2), (5, 1), (8, 1)])
def test_a_small_map_stacks_its_rows_into_one_register_tile_and_stays_correct(size, stack):
    """A map row shorter than STACK_ROWS_BELOW that fits the tile whole gets more map rows stacked
    on it (inception_v3's 3x3 maps at 160 px: 3 rows x 3, three times fewer sweeps over the
    weights); a height that no stack within MAX_STACKED_ROWS divides (5x5) or a row long enough
    by itself (8) keeps one row."""
    from tvmbench.compile.knobs import knob_set

    func = _conv1x1_nhwc(size, 64, 96)
    with knob_set() as seen:
        pipeline.default_schedule(func, WIDE)
    values = seen.values()
    assert values.get("row_stack", 1) == stack
    assert values["rows"] * values.get("row_stack", 1) <= contraction.MAX_STACKED_ROWS
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, size, size, 64), dtype="float32")
    w = rng.standard_normal((1, 1, 64, 96), dtype="float32")
    out, _ = _run(func, x, w, out_shape=(1, size, size, 96), target=WIDE)
    if out is not None:
        np.testing.assert_allclose(out, np.einsum("nhwc,co->nhwo", x, w[0, 0]), rtol=1e-4, atol=1e-4)


def test_an_odd_count_of_output_vectors_takes_tiles_of_its_divisor_not_single_vectors():
    """40 output channels (five 8-lane vectors, which no two-vector tile divides) over 25-pixel
    rows are tiled five vectors wide (mnasnet's 1x1 convolutions ran one vector over 5 rows: 5
    accumulators); with ODD_AXIS_VECTORS off they fall back to one vector. Exact either way."""
    from tvmbench.compile.knobs import knob_set

    func = _conv1x1_nhwc(25, 72, 40)
    width = tiles.vector_width(40, tiles.vector_lanes(WIDE.tvm(), 32))
    vectors = {}
    for odd in (contraction.ODD_AXIS_VECTORS, 0):
        with pytest.MonkeyPatch.context() as mp, knob_set() as seen:
            mp.setattr(contraction, "ODD_AXIS_VECTORS", odd)
            pipeline.default_schedule(func, WIDE)
        vectors[odd] = seen.values()["vectors"]
    assert vectors == {contraction.ODD_AXIS_VECTORS: 40 // width, 0: 1}, vectors
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 25, 25, 72), dtype="float32")
    w = rng.standard_normal((1, 1, 72, 40), dtype="float32")
    out, _ = _run(func, x, w, out_shape=(1, 25, 25, 40), target=WIDE)
    if out is not None:
        np.testing.assert_allclose(out, np.einsum("nhwc,co->nhwo", x, w[0, 0]), rtol=1e-4, atol=1e-4)


def test_a_gemv_tile_spans_two_packed_weight_blocks_and_stays_correct():
    """A single-row product over a packed weight (a classifier at batch 1) takes four vectors,
    two packed blocks, so each thread streams two weight panels at once."""
    from tvm import te

    from tvmbench.compile.knobs import knob_set
    from tvmbench.compile.passes.pack_weights import packed_matmul

    lanes = tiles.vector_lanes(TARGET.tvm(), 32)
    k, n, block = 256, 192, 2 * lanes  # the packing's block: a two-vector tile
    x, wp = te.placeholder((1, k), name="x"), te.placeholder((n // block, k, block), name="w")
    func = te.create_prim_func([x, wp, packed_matmul(x, wp, "float32")]).with_attr("global_symbol", "main")
    with knob_set() as seen:
        pipeline.default_schedule(func, TARGET)
    assert seen.values()["vectors"] * lanes == 2 * block
    rng = np.random.default_rng(3)
    a, w = rng.standard_normal((1, k), dtype="float32"), rng.standard_normal((k, n), dtype="float32")
    packed = w.reshape(k, n // block, block).transpose(1, 0, 2).copy()
    out, _ = _run(func, a, packed, out_shape=(1, n))
    np.testing.assert_allclose(out, a @ w, rtol=1e-4, atol=1e-3)


def test_a_gemv_over_an_odd_count_of_vectors_takes_its_widest_tile_not_one_vector():
    """A single-row product over 40 outputs (five 8-lane vectors: no two- or four-vector tile
    divides them; a classifier's 1000 classes are 125) takes the five-vector tile, five
    independent accumulators, not one vector (one chain of dependent FMAs) as the first legal
    count; with SINGLE_ROW_WIDEST off, one vector. Exact either way."""
    from tvmbench.compile.knobs import knob_set

    func = _matmul_relu(1, 64, 40)
    width = tiles.vector_width(40, tiles.vector_lanes(TARGET.tvm(), 32))
    vectors = {}
    for widest in (True, False):
        with pytest.MonkeyPatch.context() as mp, knob_set() as seen:
            mp.setattr(contraction, "SINGLE_ROW_WIDEST", widest)
            pipeline.default_schedule(func, TARGET)
        vectors[widest] = seen.values()["vectors"]
    assert vectors == {True: 40 // width, False: 1}, vectors
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((1, 64), dtype="float32"), rng.standard_normal((64, 40), dtype="float32")
    out, _ = _run(func, a, b, out_shape=(1, 40))
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size, vectors, rows", [(5, 4, 5), (7, 2, 7)])
def test_large_weights_on_a_small_map_take_four_vector_tiles_over_whole_rows(size, vectors, rows, l2_of_1mb):
    """Channel-outer tiles over more than 1 MB of packed weights are four vectors wide (two
    packed blocks: twice the FMAs per input broadcast, two weight streams) where the row axis
    splits into whole tiles of at most 6 rows (a 5x5 map: 5 rows); a 7-row axis keeps two
    vectors over 7 rows rather than a predicated tile (resnet50 at 160 px 1.09x, rules/contraction.py)."""
    from tvm import te

    from tvmbench.compile.knobs import knob_set
    from tvmbench.compile.passes.pack_weights import packed_conv

    lanes = tiles.vector_lanes(WIDE.tvm(), 32)  # (32 registers: on 16, four-vector tiles of 5 rows do not fit)
    c_in, c_out, block = 512, 640, 2 * lanes
    x = te.placeholder((1, size, size, c_in), name="x")
    wp = te.placeholder((c_out // block, 1, 1, c_in, block), name="w")
    func = te.create_prim_func([x, wp, packed_conv(x, wp, [1, 1], [0, 0, 0, 0], [1, 1], "float32")])
    func = func.with_attr("global_symbol", "main")
    with knob_set() as seen:
        pipeline.default_schedule(func, WIDE)
    assert (seen.values()["vectors"], seen.values()["rows"]) == (vectors, rows)
    rng = np.random.default_rng(11)
    a = rng.standard_normal((1, size, size, c_in), dtype="float32")
    w = rng.standard_normal((c_in, c_out), dtype="float32")
    packed = w.reshape(c_in, c_out // block, block).transpose(1, 0, 2)[:, None, None].copy()
    out, _ = _run(func, a, packed, out_shape=(1, size, size, c_out), target=WIDE)
    if out is not None:
        np.testing.assert_allclose(out, np.einsum("nhwc,co->nhwo", a, w), rtol=1e-4, atol=1e-3)


def _packed_conv_knobs(mcpu: str | None, map_hw: tuple[int, int], c_in: int, c_out: int, window: int = 1,
                      overrides: dict | None = None) -> tuple[dict, object]:
    """The knob values the contraction rule picks for a packed convolution (``window`` x
    ``window``, padded to keep the map) on ``mcpu`` (None: this machine), and the schedule."""
    from tvm import te

    from tvmbench.compile.knobs import knob_set
    from tvmbench.compile.passes.pack_weights import packed_conv

    target = TARGET if mcpu is None else resolve_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2},
                                                         gpu_query=lambda: None)
    block = 32
    x = te.placeholder((1, *map_hw, c_in), name="x")
    wp = te.placeholder((c_out // block, window, window, c_in, block), name="w")
    func = te.create_prim_func([x, wp, packed_conv(x, wp, [1, 1], [window // 2] * 4, [1, 1], "float32")])
    func = func.with_attr("global_symbol", "main")
    with knob_set(overrides) as seen:
        _, sch = pipeline.default_schedule(func, target)
    return seen.values(), sch


def _packed_conv_tile(mcpu: str, map_hw: tuple[int, int], c_in: int, c_out: int, window: int = 1) -> tuple[int, int]:
    """(vectors, rows) the contraction rule picks for a packed convolution on ``mcpu`` (schedule
    only: nothing is built or run)."""
    values, _ = _packed_conv_knobs(mcpu, map_hw, c_in, c_out, window)
    return values["vectors"], values["rows"]


@pytest.mark.parametrize("mcpu, tile", [("znver5", (2, 8)), ("skylake-avx512", (4, 4))])
def test_four_vector_tiles_must_hold_more_accumulators_on_zen5(mcpu, tile):
    """On Zen 5 a tile of four vectors over 4 rows (16 accumulators) gives way to two vectors over
    8 (16 too): bert-large's 4096 -> 1024 dense ran 1.14x faster alone, the model 1.08-1.10x
    (tiles.TWO_VECTOR_TIES). Other CPUs keep the four-vector tile (the Xeon host measured it
    faster); a 5-row axis keeps it on Zen 5 too (the test above, 20 accumulators against 10)."""
    assert _packed_conv_tile(mcpu, (16, 8), 3072, 768) == tile


@pytest.mark.parametrize("mcpu, width, rows", [("znver5", 56, 7), ("znver5", 64, 8), ("skylake-avx512", 56, 8),
                                              ("znver4", 56, 7)])
def test_zen5_tiles_take_7_rows_where_7_divides_the_row_axis(mcpu, width, rows):
    """Zen 5's tiles are 7 rows where 7 divides the row axis (resnet50's 56-pixel rows) and 8
    elsewhere (a 128-row dense layer): tiles.SEVEN_ROWS_WHERE_THEY_DIVIDE; Zen 4's are 7 at most
    (ZEN4_MAX_ROWS), other CPUs' 8."""
    assert _packed_conv_tile(mcpu, (4, width), 64, 64) == (2, rows)


def test_a_tile_whose_weight_panel_outgrows_l2_takes_fewer_vectors_over_more_rows(monkeypatch):
    """A 3x3 convolution over 512 channels (4608 deep) on a 28x28 map: a tile of four vectors over
    4 rows reads a 1.2 MB panel, from L3 for every row tile; two vectors over 7 rows read 590 KB
    from L2 (DeepLabV3-ResNet50's dilated convolution 1.17-1.26x faster alone, the model 1.016x:
    PANEL_L2_BYTES). Over 256 channels the four-vector panel fits and stays."""
    assert _packed_conv_tile("skylake-avx512", (28, 28), 512, 512, window=3) == (2, 7)
    assert _packed_conv_tile("skylake-avx512", (28, 28), 256, 512, window=3) == (4, 4)
    monkeypatch.setattr(contraction, "PANEL_L2_BYTES", 0)
    assert _packed_conv_tile("skylake-avx512", (28, 28), 512, 512, window=3) == (4, 4)


def test_a_window_whose_panel_outgrows_l2_under_short_row_tiles_is_swept_in_channel_blocks(monkeypatch):
    """A 3x3 convolution over 512 channels on a 4x4 map (DeepLabV3's ASPP bands): four vectors over
    4 rows read a 1.2 MB panel from L3 for every row tile; its channels go in blocks of 256
    (WINDOW_BLOCK_CHANNELS: 1.1-1.3x faster alone, the model 1.033-1.040x), each swept over the
    rows with the sums kept between blocks. A 7x7 map's 7-row tiles keep one block
    (WINDOW_BLOCK_ROWS: wide_resnet50_2's 13 % slower in blocks), and so does a panel that fits
    (WINDOW_BLOCKS). Forced into blocks of 128 on this machine, the numbers stay right."""
    import torch
    import tvm

    assert _packed_conv_knobs("skylake-avx512", (4, 4), 512, 64, 3)[0]["reduction_block"] == 256
    assert _packed_conv_knobs("skylake-avx512", (7, 7), 512, 64, 3)[0]["reduction_block"] == 512
    assert _packed_conv_knobs("skylake-avx512", (4, 4), 384, 128, 3)[0]["reduction_block"] == 384  # (884 KB)
    monkeypatch.setattr(contraction, "WINDOW_BLOCKS", 0)
    assert "reduction_block" not in _packed_conv_knobs("skylake-avx512", (4, 4), 512, 64, 3)[0]
    monkeypatch.undo()
    # (scheduled as for that 1 MB-L2 CPU: a 2 MB L2 keeps these weights and runs them spatial-outer)
    values, sch = _packed_conv_knobs("skylake-avx512", (4, 4), 512, 64, 3, {"reduction_block": 128})
    assert values["reduction_block"] == 128
    lib = tvm.compile(sch.mod, TARGET.tvm())
    rng = np.random.default_rng(12)
    x, w = rng.standard_normal((1, 4, 4, 512), dtype="float32"), rng.standard_normal((3, 3, 512, 64), dtype="float32")
    packed = w.reshape(3, 3, 512, 2, 32).transpose(3, 0, 1, 2, 4).copy()
    args = [tvm.runtime.tensor(a) for a in (x, packed, np.zeros((1, 4, 4, 64), "float32"))]
    lib(*args)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(w).permute(3, 2, 0, 1),
                                     padding=1).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(args[-1].numpy(), ref, rtol=1e-4, atol=1e-3)


def _sliced_conv(c_out: int, kept: int):
    """A 1x1 convolution 24 -> ``c_out`` channels (packed in blocks of 32) on a 14x14 map whose
    epilogue (bias, ReLU) keeps the first ``kept`` channels: a padded output sliced."""
    import tvm

    from tvmbench.compile.passes.pack_weights import packed_conv

    def build(te):
        x, w = te.placeholder((1, 14, 14, 24), name="x"), te.placeholder((c_out // 32, 1, 1, 24, 32), name="w")
        b = te.placeholder((kept,), name="b")
        conv = packed_conv(x, w, [1, 1], [0, 0, 0, 0], [1, 1], "float32")
        return [x, w, b, te.compute((1, 14, 14, kept), lambda n, i, j, c: tvm.tirx.Max(
            conv[n, i, j, c] + b[c], tvm.tirx.const(0.0, "float32")), name="epilogue")]

    return _te_func(build)


@pytest.mark.parametrize("c_out, kept, lanes", [(96, 80, 16), (192, 168, 8)])
def test_an_epilogue_over_a_slice_of_padded_channels_follows_each_tile(monkeypatch, c_out, kept, lanes):
    """80 channels computed as 96 (mnasnet's, mobilenet_v3's) or a group of 168 as 192 (RegNet's):
    the epilogue over the kept channels runs after each tile, in vectors that divide them (16,
    8), instead of as a second pass over the padded output (CHANNEL_SLICES: mnasnet1_0 1.08x,
    mobilenet_v3_large 1.04-1.05x), and the short reduction is then not unrolled whole (LLVM
    kept its broadcasts on the stack: 2x slower). Off, the epilogue is a loop nest of its own.
    Built on this machine, the numbers match."""
    from tvmbench.compile.knobs import knob_set

    avx512 = resolve_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}, gpu_query=lambda: None)
    func = _sliced_conv(c_out, kept)
    with knob_set({}) as knobs:
        _, sch = pipeline.default_schedule(func, avx512)
    script = sch.mod.script()
    assert knobs.values()["channel_slices"] and not knobs.values()["unroll_window"]
    assert script.count("T.parallel") == 1 and f"T.vectorized({lanes})" in script, script
    monkeypatch.setattr(contraction, "CHANNEL_SLICES", False)
    _, sch = pipeline.default_schedule(func, avx512)
    assert sch.mod.script().count("T.parallel") == 2
    monkeypatch.undo()
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((1, 14, 14, 24), dtype="float32"), rng.standard_normal((24, c_out), dtype="float32")
    b = rng.standard_normal(kept, dtype="float32")
    packed = w.reshape(1, 1, 24, c_out // 32, 32).transpose(3, 0, 1, 2, 4).copy()
    out, _ = _run(func, x, packed, b, out_shape=(1, 14, 14, kept))
    np.testing.assert_allclose(out, np.maximum(x @ w[:, :kept] + b, 0), rtol=1e-4, atol=1e-4)


def _excitation(ci: int, co: int, hw: int):
    """A squeeze-excitation's second 1x1 convolution (``ci`` -> ``co`` over a pooled [2, 1, 1, ci]),
    its bias and sigmoid, times a [2, hw, hw, co] feature map: the epilogue broadcasts."""
    def build(te):
        x, w = te.placeholder((2, 1, 1, ci), name="x"), te.placeholder((ci, co), name="w")
        b, fmap = te.placeholder((co,), name="b"), te.placeholder((2, hw, hw, co), name="fmap")
        k = te.reduce_axis((0, ci), name="k")
        conv = te.compute((2, 1, 1, co), lambda n, i, j, c: te.sum(x[n, i, j, k] * w[k, c], axis=k), name="conv")
        biased = te.compute(conv.shape, lambda n, i, j, c: conv[n, i, j, c] + b[c], name="biased")
        gate = te.compute(conv.shape, lambda n, i, j, c: 1.0 / (1.0 + te.exp(-biased[n, i, j, c])), name="gate")
        return [x, w, b, fmap, te.compute(fmap.shape, lambda n, i, j, c: gate[n, 0, 0, c] * fmap[n, i, j, c],
                                          name="scaled")]

    return _te_func(build)


def test_an_epilogue_that_broadcasts_computes_its_steps_before_the_broadcast_once_per_output(monkeypatch):
    """A squeeze-excitation's sigmoid computed in the write-back, once per image and channel, and
    only the product over the feature map (SMALL_EPILOGUE); with it off, the exponential is
    computed once per element of the map. Same numbers."""
    import re

    func = _excitation(32, 64, 7)

    def exp_in_the_product(script: str) -> bool:
        return "exp" in next(line for line in script.splitlines() if re.match(r"\s*scaled\[", line))

    _, sch = pipeline.default_schedule(func, TARGET)
    assert not exp_in_the_product(sch.mod.script()) and "exp" in sch.mod.script()
    monkeypatch.setattr(contraction, "SMALL_EPILOGUE", 0)
    _, sch = pipeline.default_schedule(func, TARGET)
    assert exp_in_the_product(sch.mod.script())
    monkeypatch.undo()
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 1, 1, 32), dtype="float32"), rng.standard_normal((32, 64), dtype="float32")
    b, fmap = rng.standard_normal(64, dtype="float32"), rng.standard_normal((2, 7, 7, 64), dtype="float32")
    out, _ = _run(func, x, w, b, fmap, out_shape=fmap.shape)
    gate = 1 / (1 + np.exp(-(x @ w + b)))
    np.testing.assert_allclose(out, gate * fmap, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("k, depth", [(768, 4), (48, 4), (30, 2), (31, 1)])
def test_the_innermost_reduction_is_unrolled_by_a_depth_that_divides_it_and_stays_correct(k, depth):
    """A long reduction (a matmul's K) runs UNROLL_DEPTH steps per loop iteration where that
    divides it (the largest of 2 and 4 that does), none where nothing does; same numbers."""
    import re

    from tvmbench.compile.knobs import knob_set

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, k), dtype="float32"), rng.standard_normal((k, 128), dtype="float32")
    with knob_set({}) as knobs:
        out, script = _run(_matmul_relu(64, k, 128), a, b, out_shape=(64, 128))
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
    assert knobs.values()["unroll_depth"] == depth
    steps = rf"in range\({k // depth}\):\s*for \w+ in T.unroll\({depth}\)" if depth > 1 else rf"in range\({k}\)"
    assert re.search(steps, script), script


def _legalized_on_zen4_and_skylake(module, x):
    """A small model of ``module`` on ``x`` and its legalized module on two AVX-512 CPUs: znver4,
    whose 8-lane FMAs reach the 16-lane peak (half vectors), and skylake-avx512 (not)."""
    from tvmbench.models.base import LoadedModel

    model = LoadedModel(name="small", family="cnn", inputs={"x": x}, module=module, options=ModelOptions())
    imported = import_model(model)
    legalized = []
    for mcpu, half in (("znver4", True), ("skylake-avx512", False)):
        target = resolve_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2}, gpu_query=lambda: None)
        legalized.append((half, target, pipeline.legalized(imported.mod, target)))
    return model, legalized


def test_output_channels_of_three_vectors_take_three_vector_tiles_not_padding():
    """144 output channels (nine 16-lane vectors) are packed in blocks of three vectors and tiled
    three vectors wide instead of padded to 160; on Zen 4 (whose 256-bit FMAs reach the same peak
    as 512-bit ones), 72 (nine 8-lane vectors) in blocks of three 8-lane vectors instead of padded
    to 96; elsewhere 72 stays padded. No padded channel is computed or sliced off, and the model
    matches PyTorch on this machine's target."""
    import torch

    from tvmbench.compile.knobs import knob_set

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(32, 144, 1), torch.nn.ReLU(), torch.nn.Conv2d(144, 72, 1),
                                 torch.nn.ReLU()).eval()
    x = np.random.default_rng(0).standard_normal((1, 32, 14, 14), dtype="float32")
    model, legalized = _legalized_on_zen4_and_skylake(module, x)
    for half, target, mod in legalized:
        blocks = {int(p.ty.shape[3]): int(p.ty.shape[4]) for gv, f in mod.functions.items()
                  if "conv2d_nhwc_packed" in gv.name_hint for p in f.params if len(p.ty.shape) == 5}
        assert blocks == {32: 48, 144: 24 if half else 32}, (target, blocks)
        kernels = {gv.name_hint: f for gv, f in mod.functions.items() if "conv2d_nhwc_packed" in gv.name_hint}
        assert sum("strided_slice" in name for name in kernels) == (0 if half else 1), list(kernels)
        with target.tvm():
            for f in kernels.values():
                with knob_set() as knobs:
                    assert Contraction().schedule(f, target.tvm()) is not None
                assert knobs.values()["vectors"] == 3 or not half, knobs.values()
    _assert_matches_torch(model, module, x)


def test_an_inverted_residual_over_partial_vectors_runs_over_zero_channels_to_whole_vectors():
    """24 -> 72 -> 24 (mnasnet's blocks; 72 channels are 4.5 16-lane vectors): on Skylake's
    AVX-512 the expansion, the depthwise convolution and the projection run over 80 channels, the
    8 added ones zero (``passes/pad_window_channels.py``); on Zen 4, whose 8-lane FMAs reach the
    peak, they keep 72. So do MobileNetV3's blocks, whose hard-swish uses each activation twice and
    whose squeeze-excite scales the depthwise output (120 -> 128, at batch 2 so the scale has a
    batch axis), and a window over 40 channels fed directly by the padded block's projection
    (MobileNetV1's pointwise-then-depthwise: each conv's weights padded on both sides). A block
    whose depthwise output is added to a full-size tensor from outside it is left alone (88). The
    model matches PyTorch on this machine's target."""
    import torch

    torch.manual_seed(0)

    def block(mid: int) -> list:
        return [torch.nn.Conv2d(24, mid, 1), torch.nn.BatchNorm2d(mid), torch.nn.ReLU6(),
                torch.nn.Conv2d(mid, mid, 3, padding=1, groups=mid), torch.nn.BatchNorm2d(mid), torch.nn.ReLU6(),
                torch.nn.Conv2d(mid, 24, 1)]

    class Excited(torch.nn.Module):  # MobileNetV3's: hard-swish, and a squeeze-excite on the window
        def __init__(self) -> None:
            super().__init__()
            self.expand, self.window, self.project = block(120)[0], block(120)[3], block(120)[6]
            self.squeeze, self.excite = torch.nn.Conv2d(120, 32, 1), torch.nn.Conv2d(32, 120, 1)

        def forward(self, x):
            y = torch.nn.functional.hardswish(self.window(torch.nn.functional.hardswish(self.expand(x))))
            scale = torch.nn.functional.hardsigmoid(self.excite(torch.relu(self.squeeze(y.mean((2, 3), keepdim=True)))))
            return self.project(y * scale)

    class Escaping(torch.nn.Module):  # the window's output meets a tensor the block did not make
        def __init__(self) -> None:
            super().__init__()
            self.expand, self.window, self.project = block(88)[0], block(88)[3], block(88)[6]
            self.other = torch.nn.Conv2d(24, 88, 1)

        def forward(self, x):
            return self.project(self.window(torch.relu(self.expand(x))) + self.other(x))

    module = torch.nn.Sequential(*block(72)[:-1], torch.nn.Conv2d(72, 40, 1), torch.nn.ReLU(),
                                 torch.nn.Conv2d(40, 40, 3, padding=1, groups=40), torch.nn.Conv2d(40, 24, 1),
                                 Excited(), Escaping()).eval()
    x = np.random.default_rng(0).standard_normal((2, 24, 8, 8), dtype="float32")
    model, legalized = _legalized_on_zen4_and_skylake(module, x)
    for half, target, mod in legalized:
        windows = sorted(int(f.params[1].ty.shape[3]) for gv, f in pipeline.per_inference(mod).functions.items()
                         if "conv2d" in gv.name_hint and len(f.params) > 1 and len(f.params[1].ty.shape) == 4 and int(f.params[1].ty.shape[2]) == 1
                         and int(f.params[1].ty.shape[0]) == 3)  # (the depthwise kernels' HWIO weights)
        assert windows == ([40, 72, 88, 120] if half else [48, 80, 88, 128]), (target, windows)
    _assert_matches_torch(model, module, x)


def test_a_window_over_58_channels_runs_over_64_even_where_half_vectors_are_fast(monkeypatch):
    """ShuffleNetV2's branch (1x1 to 58 channels, depthwise 3x3, 1x1) ran its depthwise
    convolution in vectors of 2 lanes on Zen 4 (58 = 2 x 29), where PadWindowChannels did not run
    (half vectors are fast there). It now pads to whole half vectors there (``HALF_VECTORS``):
    64 channels on Zen 4 as on Skylake; without it Zen 4 keeps 58. The model matches PyTorch on
    this machine's target."""
    import importlib

    import torch

    pad = importlib.import_module("tvmbench.compile.passes.pad_window_channels")
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(24, 58, 1), torch.nn.BatchNorm2d(58), torch.nn.ReLU(),
                                 torch.nn.Conv2d(58, 58, 3, padding=1, groups=58), torch.nn.BatchNorm2d(58),
                                 torch.nn.Conv2d(58, 58, 1), torch.nn.ReLU()).eval()
    x = np.random.default_rng(0).standard_normal((1, 24, 12, 12), dtype="float32")

    def windows(mod):  # (the depthwise kernel's HWIO weights' channels)
        return [int(f.params[1].ty.shape[3]) for gv, f in pipeline.per_inference(mod).functions.items()
                if "conv2d" in gv.name_hint and len(f.params) > 1 and len(f.params[1].ty.shape) == 4
                and int(f.params[1].ty.shape[2]) == 1 and int(f.params[1].ty.shape[0]) == 3]

    model, legalized = _legalized_on_zen4_and_skylake(module, x)
    assert [windows(mod) for _, _, mod in legalized] == [[64], [64]]
    monkeypatch.setattr(pad, "HALF_VECTORS", 0)
    _, (zen4, *_) = _legalized_on_zen4_and_skylake(module, x)
    assert windows(zen4[2]) == [58]
    monkeypatch.undo()
    _assert_matches_torch(model, module, x)


def test_output_channels_narrower_than_a_block_are_packed_padded_where_half_vectors_are_slow():
    """24 output channels (three 8-lane vectors) are packed as one 32-channel block of two 16-lane
    vectors on Skylake's AVX-512, and 40 (five) as one 48-channel block of three, the padded
    channels sliced off; on Zen 4, whose 8-lane FMAs reach the peak, they stay in HWIO. The model
    matches PyTorch on this machine's target."""
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(32, 24, 1), torch.nn.ReLU(), torch.nn.Conv2d(24, 40, 1)).eval()
    x = np.random.default_rng(0).standard_normal((1, 32, 14, 14), dtype="float32")
    model, legalized = _legalized_on_zen4_and_skylake(module, x)
    for half, _, mod in legalized:
        convs = [(gv.name_hint, f) for gv, f in pipeline.per_inference(mod).functions.items() if "conv2d" in gv.name_hint]
        assert all(("conv2d_nhwc_packed" in name and "strided_slice" in name) is not half for name, _ in convs), convs
        weights = sorted([int(d) for d in f.params[1].ty.shape] for _, f in convs)
        assert weights == ([[1, 1, 24, 40], [1, 1, 32, 24]] if half else [[1, 1, 1, 24, 48], [1, 1, 1, 32, 32]]), weights
    _assert_matches_torch(model, module, x)


def test_a_convolution_to_fewer_than_four_channels_is_packed_in_one_vector_of_padded_channels():
    """A 3x3 convolution to 2 channels (RAFT's flow head) and one to 1 (FCOS's centerness): the
    contraction rule's vector axis needs 4, so in HWIO they ran on the fallback schedule one
    multiply-add at a time. Packed as one 16-lane block of zero channels, the rule tiles them
    and the padding is sliced off inside the kernel; the model matches PyTorch."""
    import torch

    class Heads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.flow, self.centerness = torch.nn.Conv2d(32, 2, 3, padding=1), torch.nn.Conv2d(32, 1, 3, padding=1)

        def forward(self, x):
            return self.flow(x) + self.centerness(x)

    torch.manual_seed(0)
    module = Heads().eval()
    x = np.random.default_rng(0).standard_normal((1, 32, 12, 12), dtype="float32")
    model, legalized = _legalized_on_zen4_and_skylake(module, x)
    _, target, mod = legalized[1]
    convs = {gv.name_hint: f for gv, f in pipeline.per_inference(mod).functions.items() if "conv2d" in gv.name_hint}
    assert sorted([int(d) for d in f.params[1].ty.shape] for f in convs.values()) == [[1, 3, 3, 32, 16]] * 2, convs
    assert [pipeline.default_schedule(f, target)[0] for f in convs.values()] == ["Contraction"] * 2
    _assert_matches_torch(model, module, x)


def test_a_batched_product_over_seven_computed_columns_takes_a_zero_column_and_a_vector():
    """MViT's relative-position products (``[56, 448, 96] x [56, 96, 7]``): no vector width divides
    7 columns, so the contraction rule took none and the product ran on the fallback schedule.
    The computed operand is padded to 8 columns, the product tiled over 8-lane vectors and the
    extra column sliced off inside the kernel; the model matches PyTorch."""
    import torch

    from tvmbench.models.base import LoadedModel

    class RelPos(torch.nn.Module):
        def forward(self, q, table):
            return torch.matmul(q, torch.relu(table))

    model = LoadedModel(name="relpos", family="cnn", module=RelPos().eval(), options=ModelOptions(), inputs={
        "q": np.random.default_rng(0).standard_normal((4, 48, 24), dtype="float32"),
        "table": np.random.default_rng(1).standard_normal((4, 24, 7), dtype="float32")})
    mod = pipeline.per_inference(pipeline.legalized(import_model(model).mod, TARGET))
    (name, product), = [(gv.name_hint, f) for gv, f in mod.functions.items() if "matmul" in gv.name_hint]
    assert "strided_slice" in name and [int(d) for d in product.params[1].ty.shape] == [4, 24, 8], name
    assert pipeline.default_schedule(product, TARGET)[0] == "Contraction"
    _assert_matches_torch(model, model.module, model.inputs["q"], model.inputs["table"])


def _per_tile(func, values):
    """``values(realize, loads)`` (expressions over the loops of a scheduled kernel: ``realize``
    its ``_update`` block, ``loads`` the buffer loads in its loops and block, block variables
    replaced by their bindings) evaluated at each iteration of the parallel tile loop, inner
    loops at 0, in the order the iterations run."""
    import tvm
    import tvm_ffi
    from tvm import tirx

    realizes, loops, loads = [], [], []
    tvm_ffi.structural_walk(func.body, [(tvm.s_tir.SBlockRealize, realizes.append), (tirx.For, loops.append),
                                        (tvm.ir.expr.TensorLoad, loads.append)])
    (realize,) = [r for r in realizes if r.block.name_hint.endswith("_update")]
    binding = {iv.var: v for iv, v in zip(realize.block.iter_vars, realize.iter_values, strict=True)}
    loads = [(load.source.name, [tvm_ffi.structural_map(i, (tirx.Var, lambda v: binding.get(v, v)))
                                 for i in load.indices]) for load in loads]
    exprs = values(realize, loads)
    (tile_loop,) = [f for f in loops if f.kind == tirx.ForKind.PARALLEL and "_update" in f.script()]
    analyzer, out = tvm.sym.Analyzer(), []
    for i in range(int(tile_loop.extent)):
        at = {f.loop_var: tirx.IntImm("int64", i if f.loop_var.same_as(tile_loop.loop_var) else 0) for f in loops}
        out.append([int(analyzer.simplify(tvm_ffi.structural_map(e, (tirx.Var, lambda v, at=at: at.get(v, v)))))
                    for e in exprs])
    return out


def _groups_in_turn(func, groups):
    """The group each iteration of a scheduled grouped convolution's parallel tile loop computes."""
    def group(realize, _):
        (axis,) = [i for i, iv in enumerate(realize.block.iter_vars) if int(iv.dom.extent) == groups]
        return [realize.iter_values[axis]]

    return [g for g, in _per_tile(func, group)]


def _parallel_extents(func):
    """The extents of a scheduled kernel's parallel loops."""
    import tvm_ffi
    from tvm import tirx

    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)])
    return [int(f.extent) for f in loops if f.kind == tirx.ForKind.PARALLEL]


def _panels_prefetched(func, weights, tiles):
    """Per iteration of a grouped convolution's tile loop (``prefetch.prefetch_next_panel``
    applied): the weight panel it reads (``g * tiles + channel tile``, from its packed weights
    ``[G, tiles * blocks, ...]``) and the one its first prefetch reaches."""
    from tvm import tirx

    from tvmbench.compile.passes import prefetch

    panel, blocks = int(np.prod(weights[1:])) // tiles, weights[1] // tiles

    def panels(_, loads):
        (read,) = [ix for _, ix in loads if len(ix) == len(weights)]
        ahead = next(ix for name, ix in loads if name.endswith("_flat"))
        return [read[0] * tiles + tirx.floordiv(read[1], blocks), tirx.floordiv(ahead[0], panel)]

    return _per_tile(prefetch.prefetch_next_panel(func), panels)


def test_winograd_products_give_each_core_the_tiles_its_transforms_touch():
    """A Winograd product whose tiles' data outweighs its weights splits its tiles into
    ``ROW_CHUNKS`` contiguous ranges outside the tile positions (``_row_chunks``), so the parallel
    loop's static halves give each core, for every position, the tiles its input transform wrote
    and its output transform reads: a 32 -> 96 product (spatial-outer) and a 96 -> 96 one
    (channel-outer, 1.3 MB of weights, still prefetching its position's next panel) over a 56x56
    map's 196 tiles. Over an 18x18 map's 25 tiles (a partial register tile) the positions stay
    outermost. The model matches PyTorch on this machine's target."""
    import torch

    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend
    from tvmbench.compile.knobs import knob_set
    from tvmbench.compile.passes import prefetch
    from tvmbench.models.base import LoadedModel

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Conv2d(32, 96, 3, padding=1), torch.nn.Conv2d(96, 96, 3, padding=1)
            self.c = torch.nn.Conv2d(32, 32, 3, padding=1)

        def forward(self, x, y):
            return self.b(torch.relu(self.a(x))), self.c(y)

    torch.manual_seed(0)
    module = Net().eval()
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((1, 32, e, e), dtype="float32") for e in (56, 18))
    model = LoadedModel(name="winograd-chunks", family="cnn", inputs={"x": x, "y": y}, module=module,
                        options=ModelOptions())
    target = resolve_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}, gpu_query=lambda: None)
    mod = pipeline.legalized(import_model(model).mod, target)
    seen = {}
    for gv, func in mod.functions.items():
        if not gv.name_hint.startswith("winograd_product"):
            continue
        weights = [int(d) for d in func.params[1].ty.shape]  # [positions, Co/B, Ci, B]
        tiles_, positions = int(func.params[0].ty.shape[1]), weights[0]
        with target.tvm(), knob_set() as knobs:
            sch = Contraction().schedule(func, target.tvm())
        values = knobs.values()
        # (per iteration of the parallel loop: the position and the first tile of its register tile)
        runs = _per_tile(sch.mod["main"], lambda realize, _: list(realize.iter_values[:2]))
        half = len(runs) // 2
        chunks = seen[(weights[2], weights[1] * weights[3], tiles_)] = values.get("row_chunks", 0)
        if chunks:
            for share, first in ((runs[:half], 0), (runs[half:], tiles_ // 2)):
                assert {p for p, _ in share} == set(range(positions))
                assert min(t for _, t in share) == first and max(t for _, t in share) < first + tiles_ // 2, share
        else:
            assert runs[half - 1][0] < positions // 2 <= runs[half][0], runs
        if not values["spatial_outer"]:
            assert values["prefetch"] == 1
            panels = _per_tile(prefetch.prefetch_next_panel(sch.mod["main"]), lambda _, loads: [
                next(ix for n, ix in loads if len(ix) == 4)[0], next(ix for n, ix in loads if n.endswith("_flat"))[0]])
            per_position = int(np.prod(weights[1:]))
            assert all(read * per_position <= ahead < (read + 1) * per_position for read, ahead in panels), panels[:4]
    assert seen == {(32, 96, 196): 2, (96, 96, 196): 2, (32, 32, 25): 0}, seen
    backend = TVMBackend(BackendConfig(target=TARGET, threads=2))
    backend.prepare(model)
    backend.run()
    with torch.no_grad():
        expected = module(torch.from_numpy(x), torch.from_numpy(y))
    for got, want in zip(backend.outputs(), expected, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


def test_wide_groups_take_register_tiles_that_fill_the_registers(monkeypatch):
    """On AVX-512 (Skylake's 16 lanes), RegNet's group widths: a group of one vector (16 channels)
    over 28-pixel rows takes a tile of 14 rows, not 7 (7 accumulators hid too little of the FMA
    latency: ONE_VECTOR_ROWS); seven vectors (112, 451 KB of weights a group) over 14x14 maps one
    vector over 14 rows: the widest tile the registers allow, 7 vectors x 2 rows (counting the 7
    weight vectors it holds: WEIGHTS_HELD_FROM), would read its panel from L2 at the L2's rate
    (FEW_ROWS); fifteen (240) three vectors x 7 rows, not five x 2 (every odd divisor is offered); 176 channels
    (eleven vectors, prime: one-vector tiles only) pads to twelve. Where the weights do not fit
    and the tiles run channel-outer, each group's tiles run together (BATCH_FIRST), not every
    group's in turn along each image row, and each tile prefetches its group's next panel. The
    model matches PyTorch on this machine's target. (Winograd's grouped rewrite off: it would take
    the stride-1 ones; the direct kernel serves the strided ones and groups under 48 channels.)"""
    import torch

    from tvmbench.compile.knobs import knob_set
    from tvmbench.compile.passes import winograd
    from tvmbench.models.base import LoadedModel

    torch.manual_seed(0)
    monkeypatch.setattr(winograd, "GROUPED", False)

    def grouped(cin, channels, groups, stride):
        return [torch.nn.Conv2d(cin, channels, 1), torch.nn.ReLU(),
                torch.nn.Conv2d(channels, channels, 3, stride, 1, groups=groups, bias=False), torch.nn.ReLU()]

    module = torch.nn.Sequential(*grouped(16, 32, 2, 1), *grouped(32, 448, 4, 2), *grouped(448, 480, 2, 1),
                                 *grouped(480, 352, 2, 2), torch.nn.Conv2d(352, 16, 1)).eval()
    x = np.random.default_rng(0).standard_normal((1, 16, 28, 28), dtype="float32")
    model = LoadedModel(name="regnet-like", family="cnn", inputs={"x": x}, module=module, options=ModelOptions())
    target = resolve_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}, gpu_query=lambda: None)
    mod = pipeline.legalized(import_model(model).mod, target)
    tiles_, widths, funcs = {}, {}, {}
    for gv, func in mod.functions.items():
        if "conv2d_grouped" in gv.name_hint:
            (weights,) = [[int(d) for d in p.ty.shape] for p in func.params if len(p.ty.shape) == 6]
            with target.tvm(), knob_set() as knobs:  # [G, Co/B, KH, KW, Ci, B]
                sch = Contraction().schedule(func, target.tvm())
            assert sch is not None
            tiles_[weights[4]] = (knobs.values()["vectors"], knobs.values()["rows"])
            widths[weights[4]], funcs[weights[4]] = weights[1] * weights[5], func
            groups = _groups_in_turn(sch.mod["main"], weights[0])
            changes = sum(a != b for a, b in zip(groups, groups[1:], strict=False))
            # (channel-outer: a group at a time; spatial-outer, the weights fitting: the groups in the rows)
            assert (changes == weights[0] - 1) is not knobs.values()["spatial_outer"], (gv.name_hint, groups)
            if weights[4] == 240:  # (channel-outer, 4 MB of weights: each tile prefetches the next panel)
                assert knobs.values()["spatial_outer"] is False and knobs.values()["prefetch"] == 1
                tiles_per_group = 240 // (16 * knobs.values()["vectors"])
                panels = _panels_prefetched(sch.mod["main"], weights, tiles_per_group)
                assert all(ahead == (read + 1 if (read + 1) % tiles_per_group else read) for read, ahead in panels), panels
    assert tiles_[16] == (1, 14) and tiles_[112] == (1, 14) and tiles_[240] == (3, 7), tiles_
    assert widths == {16: 16, 112: 112, 240: 240, 176: 192}, widths
    monkeypatch.setattr(contraction, "FEW_ROWS", 0)
    with target.tvm(), knob_set() as knobs:
        Contraction().schedule(funcs[112], target.tvm())
    assert (knobs.values()["vectors"], knobs.values()["rows"]) == (7, 2), knobs.values()
    _assert_matches_torch(model, module, x)


def test_groups_narrower_than_a_cache_line_take_turns_inside_each_column_tile(monkeypatch):
    """A strided grouped convolution over groups of 8 fp32 channels (regnet_y_400mf's: 32 bytes,
    two groups to a cache line), its weights fitting (spatial-outer tiles): consecutive tiles
    compute the groups of one column tile in turn, so the two halves of each input line are read
    together (GROUPS_INSIDE_ROWS), where each group's own tiles along the row ran one after
    another with the option off. Groups of 16 (whole lines) keep their row of tiles together.
    With SERIAL_FP32 the strided one's parallel iterations are its column tiles (a quarter as
    many), each copying its padded window once for the 4 groups it runs in turn. The model
    matches PyTorch on this machine's target. (Winograd's grouped rewrite off: it would take the
    stride-1 one.)"""
    import torch

    from tvmbench.compile.passes import winograd
    from tvmbench.models.base import LoadedModel

    torch.manual_seed(0)
    monkeypatch.setattr(winograd, "GROUPED", False)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 1), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, 2, 1, groups=4), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 32, 3, 1, 1, groups=2)).eval()
    x = np.random.default_rng(0).standard_normal((1, 16, 56, 56), dtype="float32")
    model = LoadedModel(name="narrow-groups", family="cnn", inputs={"x": x}, module=module, options=ModelOptions())
    target = resolve_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}, gpu_query=lambda: None)
    mod = pipeline.legalized(import_model(model).mod, target)
    funcs = {int(func.params[0].ty.shape[-1]): func for gv, func in mod.functions.items() if "conv2d_grouped" in gv.name_hint}
    assert sorted(funcs) == [8, 16], list(funcs)

    def parallel(func):
        with target.tvm():
            body = Contraction().schedule(func, target.tvm()).mod["main"]
        return _parallel_extents(body), "local" in body.script()

    for serial in (0, contraction.SERIAL_FP32 or 32 << 10):
        monkeypatch.setattr(contraction, "SERIAL_FP32", serial)
        (extent8,), copied8 = parallel(funcs[8])
        assert (extent8 * (4 if serial else 1), copied8) == (448, bool(serial)), (serial, extent8)
        assert parallel(funcs[16]) == ([112], False)  # (2 groups x 28 rows x 2 column tiles)
    monkeypatch.setattr(contraction, "SERIAL_FP32", 0)  # (tiles over the groups, for _groups_in_turn)
    for value in (64, 0):
        monkeypatch.setattr(contraction, "GROUPS_INSIDE_ROWS", value)
        for width, func in funcs.items():
            groups = 32 // width
            with target.tvm():
                sch = Contraction().schedule(func, target.tvm())
            turns = _groups_in_turn(sch.mod["main"], groups)
            in_turn = all(int(b) == (int(a) + 1) % groups for a, b in zip(turns, turns[1:], strict=False))
            assert in_turn == (value and width == 8), (value, width, turns[:8])
    monkeypatch.setattr(contraction, "GROUPS_INSIDE_ROWS", 64)
    monkeypatch.setattr(contraction, "SERIAL_FP32", 32 << 10)
    _assert_matches_torch(model, module, x)


def test_a_group_of_three_whole_vectors_is_packed_whole_and_tiled_three_vectors_wide(monkeypatch):
    """RegNet's groups of 48 channels on Skylake's 16-lane AVX-512 (regnet_x_3_2gf): the weights
    packed in one block per group, not in three blocks of one vector, so the tiles are three
    vectors x 7 rows instead of one vector x 14 (5-17 % slower alone on Zen 5). The model matches
    PyTorch on this machine's target. (Winograd's grouped rewrite off: it takes this stride-1 one;
    the direct kernel serves regnet_x_3_2gf's strided ones.)"""
    import torch

    from tvmbench.compile.knobs import knob_set
    from tvmbench.compile.passes import winograd
    from tvmbench.models.base import LoadedModel

    torch.manual_seed(0)
    monkeypatch.setattr(winograd, "GROUPED", False)
    module = _GroupedBlock.build(96, 2, 1)
    x = np.random.default_rng(0).standard_normal((1, 16, 14, 14), dtype="float32")
    model = LoadedModel(name="small", family="cnn", inputs={"x": x}, module=module, options=ModelOptions())
    target = resolve_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}, gpu_query=lambda: None)
    mod = pipeline.legalized(import_model(model).mod, target)
    (func,) = [f for gv, f in mod.functions.items() if "conv2d_grouped" in gv.name_hint]
    (weights,) = [[int(d) for d in p.ty.shape] for p in func.params if len(p.ty.shape) == 6]
    assert weights[1:2] + weights[5:] == [1, 48], weights  # [G, Co/B, KH, KW, Ci, B]
    with target.tvm(), knob_set() as knobs:
        assert Contraction().schedule(func, target.tvm()) is not None
    assert (knobs.values()["vectors"], knobs.values()["rows"]) == (3, 7), knobs.values()
    _assert_matches_torch(model, module, x)


def test_groups_of_three_vectors_keep_their_width_in_three_vector_tiles():
    """RegNet's groups of 24 channels (three 8-lane vectors) on Zen 4 are packed in blocks of 24
    and tiled three vectors wide, instead of padded to 32 and sliced; on Intel's AVX-512 they stay
    padded. The model matches PyTorch on this machine's target."""
    import torch

    from tvmbench.compile.knobs import knob_set

    torch.manual_seed(0)
    module = _GroupedBlock.build(72, 3, 1)
    x = np.random.default_rng(0).standard_normal((1, 16, 14, 14), dtype="float32")
    model, legalized = _legalized_on_zen4_and_skylake(module, x)
    for half, target, mod in legalized:
        (name, func), = [(gv.name_hint, f) for gv, f in mod.functions.items() if "conv2d_grouped" in gv.name_hint]
        assert ("strided_slice" in name) is not half, name
        (weights,) = [p for p in func.params if len(p.ty.shape) == 6]  # [G, Co/B, KH, KW, Ci, B]
        assert int(weights.ty.shape[-1]) == (24 if half else 32)
        with target.tvm(), knob_set() as knobs:
            assert Contraction().schedule(func, target.tvm()) is not None
        assert (knobs.values()["vectors"] == 3) is half, knobs.values()
    _assert_matches_torch(model, module, x)



@pytest.mark.skipif(not has_feature(TARGET.tvm(), "avx2"), reason="this CPU cannot run AVX2 code")
def test_groups_of_three_vectors_over_7_columns_take_a_predicated_tile_of_4_on_16_registers(monkeypatch):
    """RegNet's groups of 24 channels (three 8-lane vectors) over a 7x7 map on AVX2: 3 vectors
    over a predicated 4 of the 7 columns (12 accumulators, tiles.SHORT_AXIS_VECTORS), not one
    vector over all 7 (regnet_x_1_6gf's last stage 1.37x faster alone); off, one vector x 7. Two
    vectors, and three of a wider axis, keep 1 x 7 (``register_tile``). The AVX2 build matches
    PyTorch, the masked column included."""
    import torch

    from tvmbench.compile.knobs import knob_set
    from tvmbench.compile.passes import winograd
    from tvmbench.models.base import LoadedModel

    torch.manual_seed(0)
    monkeypatch.setattr(winograd, "GROUPED", False)
    module = _GroupedBlock.build(48, 2, 1)
    x = np.random.default_rng(0).standard_normal((1, 16, 7, 7), dtype="float32")
    model = LoadedModel(name="small", family="cnn", inputs={"x": x}, module=module, options=ModelOptions())
    mod = pipeline.legalized(import_model(model).mod, AVX2)
    (func,) = [f for gv, f in mod.functions.items() if "conv2d_grouped" in gv.name_hint]

    def tile():
        with AVX2.tvm(), knob_set() as knobs:
            assert Contraction().schedule(func, AVX2.tvm()) is not None
        return knobs.values()["vectors"], knobs.values()["rows"]

    assert tile() == (3, 4)
    assert tiles.register_tile(7, [2, 1], tiles.MAX_ACCUMULATORS_16_REGS, axis_vectors=2) == (1, 7)
    assert tiles.register_tile(7, [3, 1], tiles.MAX_ACCUMULATORS_16_REGS, axis_vectors=6) == (1, 7)  # (part of the axis)
    monkeypatch.setattr(tiles, "SHORT_AXIS_VECTORS", 0)
    assert tile() == (1, 7)
    monkeypatch.undo()
    monkeypatch.setattr(winograd, "GROUPED", False)
    _matches_pytorch_on(AVX2, model)


BF16_NET = f"{Path(__file__).parent}/mlp_model.py:build_bf16"
HOST_BF16 = "avx512_bf16" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else False


@pytest.mark.parametrize("name, stems, dotted_kinds", [
    (BF16_NET, 2, ["conv2d", "conv2d", "conv2d", "conv2d", "matmul"]),
    (BF16_NET, 4, ["conv2d", "conv2d", "conv2d", "matmul"]),
    # (Winograd: the 18x18 maps' products; direct: the 9x9 one (under winograd.BF16_MIN_EDGE),
    # the two stride-2 ones (9x9 outputs in whole tiles over 10 columns), the 5x5 one and the one
    # over 16 channels to 32, two vectors: bf16_dense.MIN_CONV_VECTORS)
    ("build_winograd", 4, ["conv2d"] * 5 + ["winograd", "winograd"]),
])
def test_bf16_dense_layers_and_convolutions_run_one_dot_product_per_pair_and_the_rest_stays_fp32(
        monkeypatch, name, stems, dotted_kinds):
    """--precision bf16 (compile/bf16.py): the convolutions over an even number of input channels,
    the dense layers and the Winograd products read bf16 pairs and call the vdpbf16ps wrapper once
    per 16 lanes x 2 steps, and so does the stem (3 channels: pairs of window columns) where it
    has ``bf16_dense.BF16_STEMS`` vectors of outputs (its 32 outputs: with 2, not 4); the
    depthwise convolution and the dense layer with fewer outputs than PackWeights packs (40) stay
    fp32, and no kernel reads bf16 without the dot product. Built for a Zen 4 target, so it holds
    on any host."""
    import importlib

    import tvm

    from tvmbench.compile.bf16 import LLVM_FUNCTION
    from tvmbench.compile.names import WINOGRAD_INPUT
    from tvmbench.compile.precision import apply_precision
    from tvmbench.compile.tir import reads_bf16

    monkeypatch.setattr(importlib.import_module("tvmbench.compile.passes.bf16_dense"), "BF16_STEMS", stems)

    target = resolve_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, gpu_query=lambda: None)
    path = name if ":" in name else f"{Path(__file__).parent}/mlp_model.py:{name}"
    mod = apply_precision(import_model(load_model(path)).mod, "bf16", target)
    legal = pipeline.per_inference(pipeline.legalized(mod, target))
    kernels = {gv.name_hint: f for gv, f in legal.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    dotted, transforms = [], []
    for kernel, func in kernels.items():
        rule, sch = pipeline.default_schedule(func, target)
        if sch is not None and LLVM_FUNCTION in sch.mod.script():
            dotted.append(kernel)
        if sch is not None and WINOGRAD_INPUT in sch.mod.script():
            # (the input transform writes the product's bf16 operand itself: as a loop of its own
            # the cast split the work unlike the transform, rules.winograd.INLINE_CAST)
            transforms.append(str(sch.get(sch.get_sblock(WINOGRAD_INPUT)).writes[0].source.dtype))
    assert transforms == (["bfloat16"] * 2 if name == "build_winograd" else []), transforms
    kinds = sorted(next(k for k in ("conv2d", "matmul", "winograd") if k in n) for n in dotted)
    assert kinds == dotted_kinds, dotted
    # (no bf16 product left to a path without the dot product; a layout kernel may copy bf16
    # values: the tokens' transpose, cast, then reshaped to the dense layer's 2-D rows)
    slow = [n for n, f in kernels.items() if reads_bf16(f, reductions=True) and n not in dotted]
    assert not slow, slow


@pytest.mark.parametrize("keep", [1, 0])
def test_a_bf16_build_joins_an_expansion_into_its_window_in_fp32_or_in_bf16(monkeypatch, keep):
    """An inverted-residual block's 1x1 expansion (16 -> 96 channels at 60x60, 1.4 MB: over a
    1 MB L2) is joined into its depthwise convolution under --precision bf16 as in fp32: kept in
    fp32 (``bf16_dense.KEEP_JOINED_EXPANSIONS``, with BF16_JOINED_EXPANSIONS 0) or rounded to
    bf16 (0: before ExpandWindow took bf16 pairs, such an expansion ran alone and wrote its output
    to memory)."""
    import importlib

    import tvm

    from tvmbench.compile.passes import fuse_expansion
    from tvmbench.compile.precision import apply_precision
    from tvmbench.compile.tir import reads_bf16

    bf16_dense = importlib.import_module("tvmbench.compile.passes.bf16_dense")  # (the package exports the pass)
    monkeypatch.setattr(fuse_expansion, "PROJECTIONS", False)
    monkeypatch.setattr(bf16_dense, "KEEP_JOINED_EXPANSIONS", keep)
    monkeypatch.setattr(bf16_dense, "BF16_JOINED_EXPANSIONS", 0)
    target = resolve_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, gpu_query=lambda: None)
    assert target.l2_bytes == 1 << 20
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_expand_stride1")
    legal = pipeline.per_inference(pipeline.legalized(apply_precision(import_model(model).mod, "bf16", target), target))
    kernels = {gv.name_hint: f for gv, f in legal.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    joined = [n for n in kernels if n.count("conv2d") == 2]
    assert len(joined) == 1, list(kernels)
    assert reads_bf16(kernels[joined[0]]) == (not keep)
    # (the projection's 24 outputs, over one vector of the dot product: bf16 either way)
    assert sum(reads_bf16(f) for n, f in kernels.items() if "conv2d" in n) == (1 if keep else 2), list(kernels)


@pytest.mark.parametrize("residuals, l2", [(2, None), (0, None), (1, 2 << 20), (2, 2 << 20)])
def test_a_bf16_residual_stream_is_stored_once_in_bf16(monkeypatch, residuals, l2):
    """A feature map that a bf16 convolution and a residual add both read is written once, in
    bf16, and the add widens it (``bf16_dense.BF16_RESIDUALS``: 2 at any size, 1 where its fp32
    bytes are over L2: the 48x48x128 map's 1.2 MB are over Zen 4's 1 MB, not over the Xeon VM's
    2 MB, set as the size the passes take for L2); before, its producer wrote it in fp32
    (resnet50's 3.2 MB block outputs) and the add read that."""
    import importlib

    import tvm

    from tvmbench.compile import tir
    from tvmbench.compile.precision import apply_precision

    bf16_dense = importlib.import_module("tvmbench.compile.passes.bf16_dense")  # (the package exports the pass)
    monkeypatch.setattr(bf16_dense, "BF16_RESIDUALS", residuals)
    monkeypatch.setattr(tir, "FUSE_EXPANSION_BYTES", l2)
    target = resolve_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, gpu_query=lambda: None)
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_residual")
    on = residuals == 2 or residuals == 1 and l2 is None
    legal = pipeline.per_inference(pipeline.legalized(apply_precision(import_model(model).mod, "bf16", target), target))
    fp32_readers = sorted(gv.name_hint for gv, f in legal.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
                          and any([int(d) for d in p.ty.shape] == [1, 48, 48, 128] and str(p.ty.dtype) == "float32"
                                  for p in f.params[:-1]))
    # (on: only the model's output, read by its transpose back to NCHW; off: that, the two adds'
    # residuals and a kernel of its own that casts the stem's output for the first block)
    assert len(fp32_readers) == (1 if on else 4), fp32_readers
    assert ("cast" in " ".join(fp32_readers)) is not on, fp32_readers


@pytest.mark.parametrize("least", [48, 0])
def test_a_bf16_3x3_over_few_channels_on_a_map_over_l2_stays_direct(monkeypatch, least):
    """Under --precision bf16 a 3x3 convolution over fewer than BF16_MIN_CHANNELS input channels
    whose input map is over L2 stays direct (inception_v3's 32 -> 32 at 147x147): its Winograd
    product is short and the fp32 transforms' traffic is the larger part. More channels on the
    same map, or the same channels on a map within L2, still take Winograd."""
    import importlib

    from tvmbench.compile.precision import apply_precision

    winograd = importlib.import_module("tvmbench.compile.passes.winograd")
    monkeypatch.setattr(winograd, "BF16_MIN_CHANNELS", least)
    target = resolve_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, gpu_query=lambda: None)
    assert target.l2_bytes == 1 << 20  # (Zen 4's, named: the 96x96x32 map's 1.2 MB is over it)
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_few_channel_winograd")
    legal = pipeline.legalized(apply_precision(import_model(model).mod, "bf16", target), target)
    products = [gv.name_hint for gv in legal.get_global_vars() if gv.name_hint.startswith("winograd_product")]
    assert len(products) == (2 if least else 3), products


@pytest.mark.parametrize("span", [1, 0])
def test_a_bf16_tile_over_few_rows_is_four_vectors_wide(monkeypatch, span):
    """A bf16 convolution's register tile over a 55-column map has 5 rows; with two vectors its 10
    accumulators left vdpbf16ps waiting (squeezenet1_1's fire modules, 1.26x faster alone at four
    vectors): it spans two packed weight blocks, four vectors (``contraction.SPAN_PAIRS``)."""
    from tvmbench.compile.knobs import knob_set
    from tvmbench.compile.precision import apply_precision

    monkeypatch.setattr(contraction, "SPAN_PAIRS", span)
    # (direct, as squeezenet1_1's were before Winograd took 16-channel inputs into whole vectors)
    monkeypatch.setattr(importlib.import_module("tvmbench.compile.passes.winograd"), "_MIN_WHOLE_VECTOR_CHANNELS", 32)
    target = resolve_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, gpu_query=lambda: None)
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_short_rows")
    legal = pipeline.legalized(apply_precision(import_model(model).mod, "bf16", target), target)
    (conv,) = [f for gv, f in legal.functions.items() if "conv2d_nhwc_packed" in gv.name_hint]
    with target.tvm(), knob_set() as knobs:
        assert Contraction().schedule(conv, target.tvm()) is not None
    assert (knobs.values()["vectors"], knobs.values()["rows"]) == ((4, 5) if span else (2, 5)), knobs.values()


def test_a_bf16_stem_pairs_window_columns_but_a_patch_embedding_stays_fp32():
    """Stems over an NCHW image with 64 outputs read bf16 in pairs of window columns
    (``bf16_dense.BF16_STEMS``), a 7x7 one, AlexNet's 11x11 and a 4x4 one without padding, each
    with the dot product, but not a 16x16 patch embedding (over ``BF16_STEM_WINDOW``: a ViT's ran
    0.585x in bf16 pairs before the cast was a stage of its own, then level). Without padding no
    pad casts the image: the cast must stay a stage of its own, or the dot product, which reads a
    bf16 buffer, fails and the kernel falls to DLight (ConvNeXt's)."""
    from tvmbench.compile.bf16 import LLVM_FUNCTION
    from tvmbench.compile.precision import apply_precision
    from tvmbench.compile.tir import reads_bf16

    target = resolve_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, gpu_query=lambda: None)
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_patch_stems")
    legal = pipeline.per_inference(pipeline.legalized(apply_precision(import_model(model).mod, "bf16", target), target))
    convs = [f for gv, f in legal.functions.items() if "conv2d" in gv.name_hint]
    windows = sorted((int(f.params[1].ty.shape[2]), reads_bf16(f, reductions=True)) for f in convs)
    assert windows == [(4, True), (7, True), (11, True), (16, False)], windows
    dotted = [LLVM_FUNCTION in pipeline.default_schedule(f, target)[1].mod.script() for f in convs
              if reads_bf16(f, reductions=True)]
    assert dotted == [True, True, True], dotted


def test_the_bf16_check_reads_kernels_without_a_root_block():
    """RoBERTa's position ids come from a cumsum that TVM legalizes into one opaque block with no
    root (TOPI's generic scan, as printed from the failing build): the bf16 check
    (``bf16.bf16_kernels``) failed on it, and the whole bf16 build with it."""
    import tvm
    from tvm.script import tirx as T

    from tvmbench.compile.bf16 import bf16_kernels
    from tvmbench.compile.tir import reads_bf16

    @T.prim_func(s_tir=True)
    def cumsum(lv1: T.Buffer((1, 128), "int32"), out: T.Buffer((1, 128), "int32")):
        with T.sblock("cumsum_generic"):
            T.reads()
            T.writes()
            out[0, 0] = lv1[0, 0]
            for i in range(127):
                out[0, i + 1] = out[0, i] + lv1[0, i + 1]

    assert not reads_bf16(cumsum) and not reads_bf16(cumsum, reductions=True)
    assert bf16_kernels(tvm.IRModule({"cumsum": cumsum})) == []


def test_a_bf16_convolution_to_one_vector_of_outputs_runs_on_amx_tiles_or_the_dot_product():
    """A 1x1 convolution to 16 channels is one AMX tile wide: on a CPU with AMX it reads bf16 and
    calls the tile function (``bf16_dense.MIN_CONV_VECTORS_AMX``); on Zen 5 and Zen 4 it reads
    bf16 and its tiles are the dot product (``MIN_CONV_VECTORS``; Zen 4 kept it fp32 until session
    102). Schedules only."""
    import tvm

    from tvmbench.compile import amx, bf16
    from tvmbench.compile.precision import apply_precision

    path = f"{Path(__file__).parent}/mlp_model.py:build_bf16_squeeze"
    for cpu, squeeze in (("sapphirerapids", "amx"), ("znver5", "dot"), ("znver4", "dot")):
        target = resolve_target({"kind": "llvm", "mcpu": cpu, "num-cores": 2}, gpu_query=lambda: None)
        legal = pipeline.per_inference(pipeline.legalized(
            apply_precision(import_model(load_model(path)).mod, "bf16", target), target))
        narrow = [gv.name_hint for gv, f in legal.functions.items()
                  if isinstance(f, tvm.tirx.PrimFunc) and "conv2d" in gv.name_hint
                  and int(f.params[-1].ty.shape[-1]) == 16]
        assert len(narrow) == 1, (cpu, [gv.name_hint for gv in legal.functions])
        rule, sch = pipeline.default_schedule(legal[narrow[0]], target)
        called = amx.LLVM_FUNCTION if squeeze == "amx" else bf16.LLVM_FUNCTION
        assert narrow[0] in bf16.bf16_kernels(legal) and called in sch.mod.script(), (cpu, rule)


def test_bf16_products_on_a_cpu_with_amx_run_on_tiles_and_compile():
    """On a CPU with AMX (Sapphire Rapids) the bf16 products whose rows and channels fit AMX tiles
    call the tile function (``compile/amx.py``): a 1x1 convolution, a strided 3x3 one (its window
    inside the tile), a dense layer over 37 rows (padded with zero rows by PackWeights: a prime
    has no tile), a 7x7 stem over 3 channels (a window row per product) and a 3x3 convolution
    from 48 channels (read as 64 in its padded copy: ``amx.PAD_DEPTH``) to 48 (padded to 64), direct where Zen 4 takes it to Winograd,
    both over 14x14 maps in pairs of output rows, and over the strided one's 7x7 map a 3x3 and a 7x1
    convolution over the padded map flattened (16-row tiles across map rows); the dense layer's
    weights streamed, the next panel asked into L2 (``amx.PREFETCH_PANEL``); the convolution over 8
    input channels keeps the dot product, and on Zen 4 (no AMX) every product does. The kernels compile for that CPU on any
    x86 host (they run only on one with AMX: the bf16 tests that run builds cover them there)."""
    import tvm

    from tvmbench.compile import amx, bf16
    from tvmbench.compile.precision import apply_precision
    from tvmbench.compile.rules import amx as amx_rule

    path = f"{Path(__file__).parent}/mlp_model.py:build_bf16_tiles"
    called = {}
    for cpu in ("sapphirerapids", "znver4"):
        target = resolve_target({"kind": "llvm", "mcpu": cpu, "num-cores": 2}, gpu_query=lambda: None)
        mod = apply_precision(import_model(load_model(path)).mod, "bf16", target)
        legal = pipeline.per_inference(pipeline.legalized(mod, target))
        for gv, func in legal.functions.items():
            if gv.name_hint not in bf16.bf16_kernels(legal):
                continue
            rule, sch = pipeline.default_schedule(func, target)
            script = sch.mod.script()
            called[cpu, gv.name_hint] = "amx" if amx.LLVM_FUNCTION in script else (
                "dot" if bf16.LLVM_FUNCTION in script else rule)
            # (profiles and rooflines take each kernel's % of peak against its own arithmetic)
            assert amx_rule.peak_rate(func, target) == {"amx": amx_rule.PEAK_RATE, "dot": 2.0}[called[cpu, gv.name_hint]]
            if cpu == "sapphirerapids" and called[cpu, gv.name_hint] == "amx" and "matmul" in gv.name_hint:
                lib = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}),
                                  target=target.tvm())
                asm = lib.mod.inspect_source("asm")
                # (its weights outweigh its input: the tiles run channel-outer, and the first of
                # the three row tiles over a panel asks the next one into L2)
                assert "tdpbf16ps" in asm and "prefetcht1" in asm
    amx_kernels = sorted(n for (cpu, n), how in called.items() if cpu == "sapphirerapids" and how == "amx")
    assert len(amx_kernels) == 7 and sum("matmul" in n for n in amx_kernels) == 1, called
    assert sorted(how for (cpu, _), how in called.items() if cpu == "sapphirerapids") == ["amx"] * 7 + ["dot"], called
    assert {how for (cpu, _), how in called.items() if cpu == "znver4"} == {"dot"}, called
    winograd = {cpu for cpu, n in called if "winograd" in n}
    assert winograd == {"znver4"}, called
    # (the 14x14 maps' rows are one tile each: two output rows make the two A tiles)
    assert any("_p1_" in name for name in amx._registered), sorted(amx._registered)
    # (the 7x7 map flattened: 9 columns with the 3x3 window's padding, its window rows 9 apart; the
    # 7x1 window's taps 7 apart, a map without column padding)
    assert [n for n in amx._registered if "_n" in n] == ["tvmbench_amx_bf16_1x16x64_s1_w1_p0_f0_n3"], amx._registered
    assert {n for n in amx._registered if n.endswith(("_f9", "_f7"))} == {
        "tvmbench_amx_bf16_2x16x64_s1_w3x3_p0_f9", "tvmbench_amx_bf16_2x16x96_s1_w7_p0_f7"}  # (80 read as 96: PAD_DEPTH), sorted(amx._registered)


@pytest.mark.parametrize("window_factor, maps", [(4.0, 1), (1.0, 1), (4.0, 0)])
def test_an_amx_convolution_runs_row_outer_unless_its_weights_outweigh_its_input_by_the_window_factor(
        monkeypatch, window_factor, maps):
    """A bf16 convolution with a window, or a 1x1 over a map, on AMX tiles runs row-outer (each
    core the rows the layer before wrote) unless its weights outweigh its input by
    ``amx.CHANNEL_OUTER_WINDOW``: a 3x3 over 28x28 with 1.3x its input in weights row-outer, a 3x3
    over 14x14 with 9x channel-outer, a 1x1 over 14x14 with 2.6x row-outer; at the factor of
    dense layers (1.0) all three channel-outer, and the 1x1 too without ``CHANNEL_OUTER_MAPS``."""
    from tvmbench.compile import bf16
    from tvmbench.compile.knobs import knob_set
    from tvmbench.compile.precision import apply_precision
    from tvmbench.compile.rules import amx as amx_rule

    monkeypatch.setattr(amx_rule, "CHANNEL_OUTER_WINDOW", window_factor)
    monkeypatch.setattr(amx_rule, "CHANNEL_OUTER_MAPS", maps)
    target = SPR
    mod = apply_precision(import_model(load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_windows")).mod,
                          "bf16", target)
    legal = pipeline.per_inference(pipeline.legalized(mod, target))
    outer = {}
    for gv, func in legal.functions.items():
        if gv.name_hint in bf16.bf16_kernels(legal):
            with knob_set() as seen:
                pipeline.default_schedule(func, target)
            knobs = {k.name: k.default for k in seen.seen}
            weights = [int(d) for d in func.params[1].shape]  # (packed: [N/32, KH, KW, input channels / 2, 32, 2])
            outer[weights[1], weights[3] * 2] = knobs["amx_channel_outer"]
    # (by window and input channels; the strided 1x1, weights under its input: row-outer)
    assert outer == {(3, 128): window_factor == 1.0, (3, 256): True, (1, 128): False,
                     (1, 256): window_factor == 1.0 or not maps}, outer


def test_amx_tile_knobs_round_trip_and_every_move_builds_a_tile_kernel_with_the_same_numbers():
    """A bf16 dense layer's AMX tile choices as tuning knobs (``tvmbench tune --precision bf16``:
    Droplet searches around them): rows per A tile (the divisors of the row axis from
    ``amx.MIN_ROWS`` to 16), one or two A tiles, channel- or row-outer, and the next panel asked
    into L2. The values the default build read rebuild the default kernel; every move builds a
    different kernel on tiles that, where this CPU has AMX, computes the default's numbers."""
    import ml_dtypes
    import tvm
    import tvm_ffi

    from tvmbench.compile import amx, bf16
    from tvmbench.compile.knobs import knob_set
    from tvmbench.compile.precision import apply_precision
    from tvmbench.tuning.droplet import KnobSpace

    target = SPR
    mod = apply_precision(import_model(load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_tiles")).mod,
                          "bf16", target)
    legal = pipeline.per_inference(pipeline.legalized(mod, target))
    func = next(f for gv, f in legal.functions.items() if gv.name_hint in bf16.bf16_kernels(legal) and "matmul" in gv.name_hint)
    _, plain = pipeline.default_schedule(func, target)
    with knob_set() as seen:
        pipeline.default_schedule(func, target)
    assert {"amx_rows", "amx_channel_outer", "amx_prefetch_panel"} <= {k.name for k in seen.seen}, seen.seen
    with knob_set(seen.values()):
        _, rebuilt = pipeline.default_schedule(func, target)
    assert tvm_ffi.structural_equal(plain.mod, rebuilt.mod)
    space = KnobSpace(func, target, timer=None, on_measured=None, known={})
    moves = [m for position in range(space.knob_count()) for m in space.neighbours(space.start, position)]
    assert len(moves) >= 3, moves

    def run(sch):
        main = sch.mod["main"].with_attr("global_symbol", "main")
        lib = tvm.compile(tvm.IRModule({"main": main}), target=target.tvm())
        assert "tdpbf16ps" in lib.mod.inspect_source("asm")
        if not amx.usable(resolve_target("llvm", gpu_query=lambda: None).tvm()):
            return None
        rng = np.random.default_rng(0)
        args = [tvm.runtime.tensor(rng.standard_normal([int(d) for d in b.shape]).astype(
            ml_dtypes.bfloat16 if b.dtype == "bfloat16" else b.dtype)) for b in main.params]  # (0.27: a parameter is its buffer)
        lib["main"](*args)
        return args[-1].numpy().astype("float32")

    expected = run(plain)
    for move in moves:
        sch = space.build(move)[0]
        assert sch is not None and not tvm_ffi.structural_equal(sch.mod, plain.mod), move
        got = run(sch)
        if expected is not None:
            np.testing.assert_allclose(got, expected, rtol=1e-2, atol=1e-2, err_msg=str(move))


@pytest.mark.skipif(not HOST_BF16, reason="this CPU has no AVX-512 BF16 (vdpbf16ps): bf16 builds cannot run here")
@pytest.mark.parametrize("name", [BF16_NET, f"{Path(__file__).parent}/mlp_model.py:build_winograd",
                                  f"{Path(__file__).parent}/mlp_model.py:build_bf16_residual",
                                  f"{Path(__file__).parent}/mlp_model.py:build_bf16_tiles"])
def test_bf16_build_matches_pytorch_at_the_bf16_tolerance_and_rounds_unlike_fp32(name):
    import torch

    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend
    from tvmbench.measure import accuracy

    model = load_model(name)
    with torch.no_grad():
        ref = model.module(*[torch.from_numpy(v) for v in model.inputs.values()])
    ref = [r.numpy() for r in (ref if isinstance(ref, tuple) else (ref,))]
    outs = {}
    for precision in ("bf16", "fp32"):
        backend = TVMBackend(BackendConfig(target=TARGET, threads=2, options={"precision": precision}))
        backend.prepare(model)
        backend.run()
        outs[precision] = backend.outputs()
    check = accuracy.compare(outs["bf16"], ref, accuracy.tolerance_for("bfloat16"))
    assert check["passed"], check
    errors = {p: max(np.abs(o - r).max() for o, r in zip(outs[p], ref, strict=True)) for p in outs}
    assert errors["bf16"] > 20 * errors["fp32"], errors  # (bf16 rounding happened)


def test_a_matmul_no_rule_takes_is_named_in_a_compile_warning(monkeypatch):
    """A matmul or convolution no rule takes ends on the fallback schedule: right outputs, one
    multiply-add at a time, many times slower (densenet161's bf16 Winograd product at 193 px,
    0.09x of OpenVINO, session 97, found only by a zoo sweep). The build names such kernels in its
    warnings (``vector_check.py``), also from the cache; a build the rules take says nothing."""
    from tvmbench.compile import compile_model

    imported = import_model(load_model(f"{Path(__file__).parent}/mlp_model.py:build_gemm"))
    with monkeypatch.context() as m:
        m.setattr(contraction, "choose_tile", lambda found, target: None)  # (Contraction declines)
        warnings = compile_model(imported, TARGET, use_cache=False).warnings
        (warning,) = warnings
        assert warning.startswith("2 matmul or convolution kernel(s) (67 MFLOP per inference) multiply and add "
                                  "one element at a time"), warning
        assert "fused_matmul_packed_add_relu" in warning and "fused_matmul_packed1_add1" in warning, warning
        assert compile_model(imported, TARGET).warnings == warnings  # (from the cache: its meta.json)
    assert compile_model(imported, TARGET, use_cache=False).warnings == []  # (and the cache holds this one)


@pytest.mark.skipif(not HOST_BF16, reason="this CPU has no AVX-512 BF16 (vdpbf16ps): bf16 builds cannot be made here")
def test_a_bf16_kernel_left_without_the_dot_product_is_named_in_a_compile_warning(monkeypatch):
    """A kernel that reads bf16 but misses the dot product runs correct and many times slower:
    the build says which (with the Contraction rule declining, DLight takes the bf16 net's dense
    layers and convolutions), in the compile warnings and again from the cache; none without.
    On an Intel CPU without AMX every bf16 build also says it may be slower than fp32 (its dot
    product issues at half the FMAs' rate: resnet50 0.73x on a Sapphire Rapids-class VM before
    AMX tiles took its products); on Zen 4/5 and with AMX none does."""
    import dataclasses

    from tvmbench.compile import amx, compile_model
    from tvmbench.compile.bf16 import slower_than_fp32
    from tvmbench.compile.precision import apply_precision

    intel, zen = (resolve_target({"kind": "llvm", "mcpu": cpu}, gpu_query=lambda: None).tvm()
                  for cpu in ("cooperlake", "znver4"))
    assert "slower than fp32" in slower_than_fp32(intel) and slower_than_fp32(zen) is None
    spr = resolve_target({"kind": "llvm", "mcpu": "sapphirerapids"}, gpu_query=lambda: None)
    assert slower_than_fp32(spr.tvm()) is None  # (AMX)
    # (on a host with AMX its tiles would take the products the dot product is kept from: AMX off
    # and out of the target, so that Contraction declining leaves them to DLight here too)
    monkeypatch.setattr(amx, "usable", lambda target: False)
    target = resolve_target({**TARGET.config, "mattr": [f for f in TARGET.config.get("mattr", []) if "amx" not in f]})
    here = [slower_than_fp32(target.tvm())] if slower_than_fp32(target.tvm()) else []
    model = load_model(BF16_NET)
    imported = import_model(model)
    imported = dataclasses.replace(imported, mod=apply_precision(imported.mod, "bf16", target))
    with monkeypatch.context() as m:
        m.setattr(contraction, "choose_tile", lambda found, target: None)
        warnings = compile_model(imported, target, use_cache=False).warnings
        warning, scalar = [w for w in warnings if w not in here]
        assert "without the bf16 dot product" in warning and "conv2d" in warning, warning
        # (and the net's fp32 stem and classifier, left to the fallback: test_a_matmul_no_rule_takes...)
        assert "one element at a time" in scalar and "fused_matmul" in scalar, scalar
        assert warnings == [*here, warning, scalar]
        assert compile_model(imported, target).warnings == warnings  # (from the cache: its meta.json)
    assert compile_model(imported, target, use_cache=False).warnings == here  # (and the cache holds this one)


def test_bf16_on_a_cpu_without_avx512_bf16_is_one_line():
    from tvmbench.compile.precision import apply_precision
    from tvmbench.errors import UserError

    target = resolve_target({"kind": "llvm", "mcpu": "skylake-avx512"}, gpu_query=lambda: None)
    with pytest.raises(UserError, match="AVX-512 BF16.*skylake-avx512"):
        apply_precision(import_model(load_model(BF16_NET)).mod, "bf16", target)


def test_an_output_transform_joined_to_the_next_input_transform_runs_by_tiles(monkeypatch):
    """A kernel holding one Winograd convolution's output transform, its epilogue (bias, residual
    add, ReLU) and the next convolution's input transform computes the output by tiles, its
    positions unrolled and the epilogue inlined (``winograd.JOINED_TILES``): two parallel loops
    (output tiles, input tiles: the next input's padding inlined, ``winograd.INLINE_PAD``), the
    first over the 5 x 5 tiles of a 19 x 19 map (a partial last tile), not one elementwise loop per
    block over its 361 pixels.
    The model matches PyTorch on this machine's target."""
    import torch
    from tvm import tirx

    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend
    from tvmbench.compile.names import WINOGRAD_INPUT, WINOGRAD_OUTPUT
    from tvmbench.compile.rules import Winograd, winograd
    from tvmbench.models.base import LoadedModel

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.Conv2d(32, 32, 3, padding=1)

        def forward(self, x):
            return self.b(torch.relu(self.a(x) + x))

    torch.manual_seed(0)
    module = Net().eval()
    x = np.random.default_rng(0).standard_normal((1, 32, 19, 19), dtype="float32")
    model = LoadedModel(name="winograd-joined", family="cnn", inputs={"x": x}, module=module, options=ModelOptions())
    mod = pipeline.legalized(import_model(model).mod, TARGET)
    (func,) = [f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)
               and {WINOGRAD_INPUT, WINOGRAD_OUTPUT} <= set(re.findall(r'T\.sblock\("(\w+)"\)', f.script()))]

    def parallel_extents(joined):
        monkeypatch.setattr(winograd, "JOINED_TILES", joined)
        with TARGET.tvm():
            sch = Winograd().schedule(func, TARGET.tvm())
        return _parallel_extents(sch.mod["main"])

    assert sorted(parallel_extents(1)) == [25, 25], parallel_extents(1)
    assert 19 * 19 in parallel_extents(0)
    monkeypatch.setattr(winograd, "JOINED_TILES", 1)
    backend = TVMBackend(BackendConfig(target=TARGET, threads=2))
    backend.prepare(model)
    backend.run()
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(backend.outputs()[0], expected, rtol=1e-4, atol=1e-4)



def test_a_window_over_rows_that_3_divides_takes_two_vectors_and_fused_row_blocks_take_no_reduction_blocks():
    """On AVX2, four vectors x 3 whole rows (WHOLE_ROWS_UNDER_4, measured on dense layers) are for
    a single reduction loop: a 5x5 window over 39-pixel rows takes two vectors (alexnet's at 320
    px: 4 x 3 spilled in its inner loop and ran 1.7x slower in the model). With the windows' flag
    on, four again. And no reduction blocks inside blocks of rows fused from several axes."""
    import sys

    import tvm

    from tvmbench.compile.knobs import knob_set

    model = load_model(str(Path(__file__).with_name("mlp_model.py")) + ":build_window_over_39_rows", ModelOptions())
    legal = pipeline.per_inference(pipeline.legalized(import_model(model).mod, AVX2))
    conv = next(f for gv, f in legal.functions.items() if isinstance(f, tvm.tirx.PrimFunc) and "conv2d" in gv.name_hint)

    def knobs(overrides=None):
        with knob_set(overrides) as ks:
            pipeline.default_schedule(conv, AVX2)
        return ks.values()

    assert knobs()["vectors"] == 2
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys.modules["tvmbench.compile.rules.contraction"], "WINDOW_WHOLE_ROWS_UNDER_4", True)
        assert (knobs()["vectors"], knobs()["rows"]) == (4, 3)

    # Blocks of rows fused from several axes take no reduction blocks (their write-back would
    # cover whole images, and tasks wrote rows others were still summing): not even as a knob.

    assert knobs({"spatial_outer": False, "row_block": 13}).get("row_block") == 13
    assert "reduction_block" not in knobs({"spatial_outer": False, "row_block": 13, "reduction_block": 16})
    assert "reduction_block" in knobs({"spatial_outer": False})


@pytest.mark.parametrize("builder,switch", [("build_odd_stem", "SPILLS_DECIDE_UNROLL"),
                                            ("build_whole_stem", "SPILLS_DECIDE_CHANNEL_WINDOWS")])
def test_a_stem_tile_whose_unrolled_window_spills_runs_the_window_as_a_loop_on_16_registers(builder, switch):
    """On AVX2 a stem's 2 x 4 tile with its 3x3x3 window unrolled compiles to ymm stores to the
    stack (LLVM keeps accumulators there), and with the window a loop to none: the rule compiles
    both and keeps the loop. Over 11-pixel rows the tile is predicated (SPILLS_DECIDE_UNROLL);
    over 16 (mobilenet_v2's stem in small: 32 channels, padding, ReLU6) it is whole, asked because
    the window reads several channels (SPILLS_DECIDE_CHANNEL_WINDOWS). Without the switch the
    window is unrolled. Its knobs say so and rebuild it; a tuner's override of ``unroll_window``
    is taken as it is. Matches PyTorch."""
    import sys

    import tvm
    import tvm_ffi

    from tvmbench.compile.codegen import stack_spills
    from tvmbench.compile.knobs import knob_set

    model = load_model(str(Path(__file__).with_name("mlp_model.py")) + f":{builder}", ModelOptions())
    legal = pipeline.per_inference(pipeline.legalized(import_model(model).mod, AVX2))
    stem = next(f for gv, f in legal.functions.items() if isinstance(f, tvm.tirx.PrimFunc) and "conv2d" in gv.name_hint)

    def schedule(overrides=None):
        with knob_set(overrides) as ks:
            _, sch = pipeline.default_schedule(stem, AVX2)
        return sch, ks.values()

    chosen, values = schedule()
    unrolled, forced = schedule({"unroll_window": True})
    columns = int(stem.params[-1].ty.shape[2])  # (NHWC) the rows of the tile's row axis
    assert values["rows"] == 4 and bool(columns % 4) == (switch == "SPILLS_DECIDE_UNROLL")  # predicated or whole
    assert not values["unroll_window"] and forced["unroll_window"]
    with AVX2.tvm() as target:
        assert stack_spills(chosen.mod["main"], target) == 0 < stack_spills(unrolled.mod["main"], target)
    assert tvm_ffi.structural_equal(schedule(values)[0].mod, chosen.mod)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys.modules["tvmbench.compile.rules.contraction"], switch, False)
        assert schedule()[1]["unroll_window"]
    _matches_pytorch_on(AVX2, model)


def test_a_pointwise_convolution_over_7_pixel_rows_on_16_registers_runs_as_a_dense_layer_and_matches_pytorch():
    """On AVX2 a 1x1 convolution over rows that 4 does not divide (7x7 maps) is computed as a
    dense layer over its pixels flattened (CONV_AS_DENSE: blocks of three vectors, 3 x 4 tiles,
    where the convolution took 1 vector x 7 rows), its bias, ReLU and residual add in the dense
    kernel's epilogue (no kernel of their own); the expansion that feeds a depthwise window stays
    a convolution (FuseExpansionIntoWindow may join it). Off, on AVX-512, or over 10-pixel rows
    (which the convolution's own 2 x 5 tiles divide), none is. A classifier's 1000 outputs, which
    only half blocks divide, run padded to blocks of three vectors. Both match PyTorch."""
    import sys

    import tvm

    models = str(Path(__file__).with_name("mlp_model.py"))
    model = load_model(models + ":build_pointwise_7x7", ModelOptions())

    def kernels(target, model=model):
        legal = pipeline.per_inference(pipeline.legalized(import_model(model).mod, target))
        return sorted(gv.name_hint for gv, f in legal.functions.items() if isinstance(f, tvm.tirx.PrimFunc))

    names = kernels(AVX2)
    dense = [n for n in names if "matmul_packed" in n]
    assert len(dense) == 2 and all("add" in n for n in dense) and any("relu" in n for n in dense), names
    assert sum("add" in n and "matmul" not in n and "conv2d" not in n for n in names) == 0, names  # (epilogues fused)
    assert sum("conv2d_nhwc_packed" in n for n in names) == 1, names  # (the expansion)
    assert not any("matmul" in n for n in kernels(resolve_target("llvm -mcpu=znver4", gpu_query=lambda: None)))
    assert not any("matmul" in n for n in kernels(AVX2, load_model(models + ":build_pointwise_10x10", ModelOptions())))
    classifier = load_model(models + ":build_pointwise_classifier", ModelOptions())
    assert any("matmul_packed" in n and "strided_slice" in n and "relu" in n for n in kernels(AVX2, classifier))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys.modules["tvmbench.compile.passes.pack_weights"], "CONV_AS_DENSE_OVER_HALF_BLOCKS", False)
        assert not any("matmul" in n for n in kernels(AVX2, classifier))
        mp.setattr(sys.modules["tvmbench.compile.passes.pack_weights"], "CONV_AS_DENSE", False)
        assert not any("matmul" in n for n in kernels(AVX2))

    _matches_pytorch_on(AVX2, model)
    _matches_pytorch_on(AVX2, classifier)


def _bf16_outputs(model, monkeypatch, cache):
    """``model``'s outputs from a bf16 build made now, in the compile cache ``cache`` (the cache's
    key knows no monkeypatched constant)."""
    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend

    monkeypatch.setenv("TVMBENCH_CACHE", str(cache))
    backend = TVMBackend(BackendConfig(target=TARGET, threads=2, options={"precision": "bf16"}))
    backend.prepare(model)
    backend.run()
    return backend.outputs()


def _bf16_kernels(model, target):
    """The kernels of ``model``'s bf16 build for ``target``, by name (schedules not applied)."""
    import tvm

    from tvmbench.compile.precision import apply_precision

    legal = pipeline.per_inference(pipeline.legalized(apply_precision(import_model(model).mod, "bf16", target), target))
    return {gv.name_hint: f for gv, f in legal.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}


def _bf16_switched(monkeypatch, tmp_path, switch, builder, module="bf16_dense"):
    """For ``<module>.<switch>`` 1, then 0 (a module of ``compile/passes``): (the value, the kernels
    of ``mlp_model.<builder>``'s bf16 build for Zen 4), for the caller's assertions; on a host that
    runs bf16 both builds' outputs are then checked against PyTorch's."""
    import importlib

    switched = importlib.import_module(f"tvmbench.compile.passes.{module}")  # (the package exports the pass)
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:{builder}")
    target = resolve_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, gpu_query=lambda: None)
    outs = []
    for value in (1, 0):
        monkeypatch.setattr(switched, switch, value)
        yield value, _bf16_kernels(model, target)
        if HOST_BF16:
            outs.append(_bf16_outputs(model, monkeypatch, tmp_path / str(value)))
    _assert_bf16_matches_pytorch(model, outs)


def _assert_bf16_matches_pytorch(model, outs):
    """Each of ``outs`` (a bf16 build's outputs) matches PyTorch's at bf16's tolerance."""
    if not outs:
        return
    import torch

    from tvmbench.measure import accuracy

    with torch.no_grad():
        out = model.module(*[torch.from_numpy(v) for v in model.inputs.values()])
    reference = [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]
    for got in outs:
        check = accuracy.compare(got, reference, accuracy.tolerance_for("bfloat16"))
        assert check["passed"], check


def test_a_bf16_max_pool_reads_the_bf16_copy_of_its_input_and_gives_the_same_numbers(monkeypatch, tmp_path):
    """Under --precision bf16 a max pool whose output only a bf16 convolution reads pools the bf16
    copy of its input (``bf16_dense.BF16_POOLS``), keeping its running maximum in fp32: the stem
    writes its ReLU output once, in bf16, and no kernel reads it in fp32; a branch's pool over a
    pooled map reads the copy the other branch's convolution reads. Rounding is monotonic, so on a
    host that runs bf16 the outputs are the same numbers, to the bit, as pooling in fp32."""
    import importlib


    bf16_dense = importlib.import_module("tvmbench.compile.passes.bf16_dense")  # (the package exports the pass)
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_pools")
    target = resolve_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, gpu_query=lambda: None)
    outs = {}
    for value in (1, 0):
        monkeypatch.setattr(bf16_dense, "BF16_POOLS", value)
        kernels = _bf16_kernels(model, target)
        pooled = {n: str(f.params[0].ty.dtype) for n, f in kernels.items() if "max_pool2d" in n}
        assert len(pooled) == 2 and set(pooled.values()) == {"bfloat16" if value else "float32"}, pooled
        stem_fp32 = [n for n, f in kernels.items() if any([int(d) for d in p.ty.shape] == [1, 64, 64, 64]
                                                          and str(p.ty.dtype) == "float32" for p in f.params)]
        assert len(stem_fp32) == (0 if value else 2), stem_fp32  # (off: the stem writes it, the pool reads it)
        if HOST_BF16:
            outs[value] = _bf16_outputs(model, monkeypatch, tmp_path / str(value))
    if HOST_BF16:
        np.testing.assert_array_equal(outs[0][0], outs[1][0])


def test_bf16_convolutions_pack_one_vector_blocks_and_pointwise_ones_over_odd_rows_run_as_dense(monkeypatch, tmp_path):
    """Under --precision bf16 without AMX a convolution to 16 channels is packed in blocks of 16
    (``pack_weights.BF16_ONE_VECTOR_BLOCKS``; 0: 32, half of them zeros, sliced off), and a 1x1
    convolution over 13-pixel rows runs as a dense layer over its pixels, which a tile of 4 divides
    (``BF16_CONV_AS_DENSE``; 0: a convolution over 14 columns, sliced). Both builds match PyTorch
    on a host that runs bf16."""
    import importlib

    pack = importlib.import_module("tvmbench.compile.passes.pack_weights")
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_narrow_fire")
    target = resolve_target({"kind": "llvm", "mcpu": "znver5", "num-cores": 2}, gpu_query=lambda: None)
    outs = []
    for value in (1, 0):
        monkeypatch.setattr(pack, "BF16_ONE_VECTOR_BLOCKS", value)
        monkeypatch.setattr(pack, "BF16_CONV_AS_DENSE", value)
        kernels = _bf16_kernels(model, target)
        convs = {n: f for n, f in kernels.items() if "conv2d_nhwc_packed" in n}
        assert len(convs) == (1 if value else 2), sorted(kernels)
        assert sum("matmul_packed" in n for n in kernels) == (1 if value else 0), sorted(kernels)
        narrow = [f for f in convs.values() if int(f.params[-1].ty.shape[-1]) == 16]
        blocks = [int(p.ty.shape[-2]) for f in narrow for p in f.params if len(p.ty.shape) == 6]
        assert blocks == [16 if value else 32], blocks
        if HOST_BF16:
            outs.append(_bf16_outputs(model, monkeypatch, tmp_path / str(value)))
    _assert_bf16_matches_pytorch(model, outs)


def test_bf16_convolutions_over_13_pixel_rows_take_tiles_of_13_rows_and_no_extra_columns(monkeypatch, tmp_path):
    """Under --precision bf16 a convolution over 13-pixel rows, or a Winograd product over 13 x 13
    tiles (no tile from 4 to 8 divides them, and a tile of bf16 pairs has no predicated form), is
    computed over its 13 columns or 169 tiles in tiles of two vectors x 13 rows
    (``tiles.LONG_PAIR_ACCUMULATORS``: 26 accumulators); with 0 over 14 columns in tiles of 7,
    sliced off, and 176 tiles. A product to 48 channels (a three-vector tile, which 13 rows would
    not fit) keeps the extra tiles either way: no kernel falls to another rule. On a host that runs
    bf16 the long tiles' build matches PyTorch."""
    from tvmbench.compile.knobs import knob_set

    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_13_rows")
    target = resolve_target({"kind": "llvm", "mcpu": "znver5", "num-cores": 2}, gpu_query=lambda: None)
    outs = []
    for value in (26, 0):
        monkeypatch.setattr(tiles, "LONG_PAIR_ACCUMULATORS", value)
        tiled, sliced = {}, set()  # (output shape: {(rule, vectors, rows)}) of the convolutions and products
        for name, f in _bf16_kernels(model, target).items():
            if "conv2d_nhwc_packed" in name or "winograd_product" in name:
                with target.tvm(), knob_set() as knobs:
                    rule, _ = pipeline.default_schedule(f, target)
                shape = tuple(int(d) for d in f.params[-1].ty.shape)
                tiled.setdefault(shape, set()).add((str(rule), knobs.values().get("vectors"),
                                                    knobs.values().get("rows")))
                if shape[1:3] == (13, 13):
                    sliced.add("strided_slice" in name)
        assert tiled == ({(1, 13, 13, 32): {("Contraction", 2, 13)}, (36, 169, 32): {("Contraction", 2, 13)},
                          (36, 176, 48): {("Contraction", 3, 8)}} if value else
                         {(1, 13, 13, 32): {("Contraction", 2, 7)}, (36, 176, 32): {("Contraction", 2, 8)},
                          (36, 176, 48): {("Contraction", 3, 8)}}), tiled
        assert sliced == {not value}, sliced
        if HOST_BF16 and value:  # (the padded build's path is the one every other bf16 test runs)
            outs.append(_bf16_outputs(model, monkeypatch, tmp_path / str(value)))
    _assert_bf16_matches_pytorch(model, outs)


def test_a_bf16_map_an_average_pool_reads_is_stored_once_in_bf16(monkeypatch, tmp_path):
    """Under --precision bf16 a feature map read by bf16 convolutions and by an average pool (an
    Inception block's ``branch_pool``) is written once, in bf16, and the average pool widens it
    (``bf16_dense.BF16_POOL_READERS``); a max pool before such a block then pools bf16 too. With
    0 both pools read fp32. On a host that runs bf16 the outputs match PyTorch's either way."""
    for value, kernels in _bf16_switched(monkeypatch, tmp_path, "BF16_POOL_READERS", "build_bf16_pool_branch"):
        pools = {n: str(f.params[0].ty.dtype) for n, f in kernels.items() if "pool2d" in n}
        assert len(pools) == 2 and set(pools.values()) == {"bfloat16" if value else "float32"}, pools


def test_a_bf16_squeeze_excitations_map_is_stored_in_bf16_and_widened_by_its_two_readers(monkeypatch, tmp_path):
    """Under --precision bf16 the feature map a squeeze-excitation reads twice (its mean, and the
    product by the excitation, rounded for the projection) is written in bf16 by the depthwise
    convolution's kernel, and both readers widen it (``bf16_excitation.ENABLED``); with 0 it is
    written in fp32 and both read fp32. On a host that runs bf16 the outputs match PyTorch's
    either way."""
    for value, kernels in _bf16_switched(monkeypatch, tmp_path, "ENABLED", "build_excitation", "bf16_excitation"):
        maps = {n: [str(p.ty.dtype) for p in f.params if [int(d) for d in p.ty.shape] == [2, 14, 14, 32]]
                for n, f in kernels.items()}
        (mean,) = [n for n in maps if n.startswith("mean")]
        fp32 = sum(dtypes.count("float32") for dtypes in maps.values())
        # (fp32 maps left: the expansion's output and the depthwise window's input; with 0 also the
        # window's output, and the mean's and the product's inputs)
        assert maps[mean] == ["bfloat16" if value else "float32"] and fp32 == (2 if value else 5), maps


def test_a_bf16_residual_branch_is_stored_in_bf16_and_widened_by_the_add(monkeypatch, tmp_path):
    """Under --precision bf16 the operand of a residual add that one bf16 convolution computes and
    only the add reads (the path computed first: the kernel of the other takes the add) is
    written in bf16 and widened inside the add's kernel (``bf16_dense.BF16_BRANCHES``); with 0 it
    is written in fp32. On a host that runs bf16 the outputs match PyTorch's either way."""
    for value, kernels in _bf16_switched(monkeypatch, tmp_path, "BF16_BRANCHES", "build_bf16_branch"):
        block = {n: [str(p.ty.dtype) for p in f.params if [int(d) for d in p.ty.shape] == [1, 32, 32, 128]]
                 for n, f in kernels.items() if "conv2d" in n}
        block = {n: dtypes for n, dtypes in block.items() if dtypes}
        # (the branch's writer and the add's kernel, which reads it and writes the block's output)
        assert sorted(block.values()) == ([["bfloat16"], ["bfloat16", "float32"]] if value
                                          else [["float32"], ["float32", "float32"]]), block


def test_a_bf16_concatenation_only_a_cast_reads_concatenates_bf16_parts(monkeypatch, tmp_path):
    """Under --precision bf16 a concatenation that only a bf16 convolution reads (a fire module's
    two expand outputs) is made of its parts cast: each expand convolution writes bf16 and the
    concatenation copies bf16 (``bf16_dense.CAST_BEFORE_CONCATS``); with 0 it concatenates fp32
    and casts after. On a host that runs bf16 the outputs match PyTorch's either way."""
    for value, kernels in _bf16_switched(monkeypatch, tmp_path, "CAST_BEFORE_CONCATS", "build_bf16_fire"):
        # (the parts the concatenation's kernel reads; the Winograd 3x3's output kernel may be it)
        parts = [str(p.ty.dtype) for n, f in kernels.items() if "concat" in n
                 for p in f.params if [int(d) for d in p.ty.shape] == [1, 28, 28, 64]]
        assert parts and set(parts) == {"bfloat16" if value else "float32"}, parts


def test_a_joined_bf16_expansion_runs_on_the_dot_product_where_its_channels_are_whole_vectors(monkeypatch, tmp_path):
    """Under --precision bf16 an inverted residual's 1x1 expansion joined into its depthwise
    window (96 channels at 60x60: bands of rows whose halo the map's edges clip) reads bf16 and
    its register tiles are ``vdpbf16ps`` (``bf16_dense.BF16_JOINED_EXPANSIONS``); with 0 it stays
    fp32 in the joined kernel. On a host that runs bf16 the outputs match PyTorch's."""
    from tvmbench.compile import bf16

    for value, kernels in _bf16_switched(monkeypatch, tmp_path, "BF16_JOINED_EXPANSIONS", "build_expand_stride1"):
        assert _joined_expansion(kernels, ZEN4, bf16.LLVM_FUNCTION) == (("bfloat16", True) if value else ("float32", False))


def _joined_expansion(kernels, target, function):
    """(The weights' dtype, whether its schedule calls ``function``) of the one kernel of ``kernels``
    that joins an expansion into its window, which ExpandWindow (or WindowProject) schedules."""
    found = {n: f for n, f in kernels.items() if "conv2d_nhwc_packed" in n and "_conv2d" in n.split("packed", 1)[1]}
    assert len(found) == 1, sorted(kernels)
    (name, func), = found.items()
    rule, sch = pipeline.default_schedule(func, target)
    assert rule in ("ExpandWindow", "WindowProject"), (name, rule)
    return str(func.params[1].ty.dtype), function in sch.mod["main"].script()


def test_half_vector_blocks_of_bf16_pairs_are_three_half_vectors_or_one_over_a_few():
    """Zen 4's blocks of bf16 pairs for outputs that are whole half vectors, not whole vectors:
    24 channels where they divide (72, 168), blocks of 8 over at most five half vectors (40), none
    over more (mnasnet1_3's 56, 104 and 248 channels, which one-half-vector blocks tiled one half
    vector wide, the model 0.92x), none for whole vectors (48), nor on a CPU whose half vectors
    are slow or that has AMX; a joined expansion takes blocks of 24 only."""
    from tvmbench.compile.passes.pack_weights import half_pair_block

    def block(channels, joined=False, half=True, amx=False):
        return half_pair_block(channels, joined, half, amx)

    assert [block(c) for c in (24, 72, 168, 40, 56, 104, 248, 48)] == [24, 24, 24, 8, None, None, None, None]
    assert [block(72, joined=True), block(40, joined=True), block(72, half=False), block(72, amx=True)] == \
        [24, None, None, None]


def test_bf16_convolutions_over_half_vectors_run_the_half_width_dot_product_on_zen4(monkeypatch, tmp_path):
    """mnasnet's 72 channels (not whole vectors of the dot product's 16 lanes, 3 x 24) joined into
    their window read bf16 on Zen 4, whose half vectors run at the full rate: weights in pairs of
    24-channel blocks, the tiles 256-bit ``vdpbf16ps`` (``bf16_dense.BF16_HALF_EXPANSIONS``; 0:
    fp32). Zen 5, whose half vectors are slow, pads them to 80 (``pad_window_channels``) and runs
    the 512-bit one. The projection to 24 channels runs in half vectors too, in one 24-channel
    block (``pack_weights.BF16_HALF_BLOCKS``; 0: padded to 32, sliced off). On a host that runs
    bf16 the outputs match PyTorch's."""
    import importlib

    from tvmbench.compile import bf16

    pack_weights = importlib.import_module("tvmbench.compile.passes.pack_weights")  # (the package exports the pass)

    def projection(kernels):  # (its packed weights' shape, whether its schedule calls the half-width function)
        (func,) = [f for n, f in kernels.items() if "conv2d_nhwc_packed" in n and "_conv2d" not in n.split("packed", 1)[1]]
        return [int(d) for d in func.params[1].ty.shape], bf16.LLVM_HALF_FUNCTION in \
            pipeline.default_schedule(func, ZEN4)[1].mod["main"].script()

    znver5 = resolve_target({"kind": "llvm", "mcpu": "znver5", "num-cores": 2}, gpu_query=lambda: None)
    wide = load_model(f"{Path(__file__).parent}/mlp_model.py:build_expand_72")
    assert _joined_expansion(_bf16_kernels(wide, znver5), znver5, bf16.LLVM_HALF_FUNCTION)[1] is False
    for value, kernels in _bf16_switched(monkeypatch, tmp_path, "BF16_HALF_EXPANSIONS", "build_expand_72"):
        assert _joined_expansion(kernels, ZEN4, bf16.LLVM_HALF_FUNCTION) == (("bfloat16", True) if value
                                                                            else ("float32", False))
        weights = [[int(d) for d in p.ty.shape] for f in kernels.values() for p in f.params if len(p.ty.shape) == 6]
        assert ([3, 1, 1, 8, 24, 2] in weights) == bool(value), weights
        assert projection(kernels) == ([1, 1, 1, 36, 24, 2], True)
    monkeypatch.setattr(pack_weights, "BF16_HALF_BLOCKS", 0)
    assert projection(_bf16_kernels(wide, ZEN4)) == ([1, 1, 1, 36, 32, 2], False)


def test_a_depthwise_convolution_reads_a_large_input_only_it_reads_as_bf16(monkeypatch, tmp_path):
    """Under --precision bf16 a depthwise convolution whose fp32 input (a stem's 96x96x32, 1.2 MB:
    over a 1 MB L2) nothing else reads reads that input's bf16 copy, widened in its own kernel,
    and the stem writes bf16 (``bf16_dense.BF16_WINDOW_INPUTS``); with 0 both stay fp32. The window
    runs alone (its projection to 24 channels reads bf16: not joined) on Zen 5 and Zen 4 (which
    kept such projections fp32 and joined them, WindowProject, until session 102). On a host that
    runs bf16 the outputs match PyTorch's either way."""
    import importlib

    bf16_dense = importlib.import_module("tvmbench.compile.passes.bf16_dense")  # (the package exports the pass)
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_window_project")
    outs = []
    for value in (1, 0):
        monkeypatch.setattr(bf16_dense, "BF16_WINDOW_INPUTS", value)
        for mcpu, rule in (("znver5", "Contraction"), ("znver4", "Contraction")):
            target = resolve_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2}, gpu_query=lambda: None)
            kernels = _bf16_kernels(model, target)
            (stem,) = [f for n, f in kernels.items() if n.startswith("fused_conv2d_nhwc_packed_add")]
            (window,) = [f for n, f in kernels.items() if n.startswith("fused_conv2d_add")]
            dtype = "bfloat16" if value else "float32"
            assert (str(stem.params[-1].ty.dtype), str(window.params[0].ty.dtype)) == (dtype, dtype), sorted(kernels)
            assert pipeline.default_schedule(window, target)[0] == rule
        if HOST_BF16:
            outs.append(_bf16_outputs(model, monkeypatch, tmp_path / str(value)))
    _assert_bf16_matches_pytorch(model, outs)


def test_a_bf16_squeeze_excite_block_builds_and_rounds_no_sum_before_its_bias(tmp_path, monkeypatch):
    """Under --precision bf16 for Zen 5 every kernel of a mobilenet_v3 block with a squeeze-excite
    builds: the scale's epilogue, partitioned at the projection input's padding (72 of 80
    channels), stores vectors of bf16 zeros, which TVM's legalisation left bf16 (the build failed;
    ``bf16_casts.scalar_constant_stores``). The excitation's 1x1 convolutions (a 1x1 map, their
    biases' shape) are not taken for residual branches: no kernel rounds their sums before the
    bias. On a host that runs bf16 the outputs match PyTorch's."""
    import tvm

    from tvmbench.compile import codegen

    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_squeeze_excite")
    target = resolve_target({"kind": "llvm", "mcpu": "znver5", "num-cores": 2}, gpu_query=lambda: None)
    kernels = _bf16_kernels(model, target)
    # (the padded store: the product's cast is in the kernel ``passes/bf16_excitation.py`` writes)
    assert any(re.search(r"_pad\d*_multiply\d*(_cast\d*)?$", n) for n in kernels), sorted(kernels)
    assert not [n for n in kernels if re.search(r"strided_slice\d*_cast\d*_add", n)], sorted(kernels)
    for func in kernels.values():
        _, sch = pipeline.default_schedule(func, target)
        with codegen.lowering_context():
            tvm.tirx.build(tvm.IRModule({"main": (sch.mod["main"] if sch else func).with_attr("global_symbol", "main")}),
                           target=target.tvm(), pipeline=codegen.PIPELINE)
    if HOST_BF16:
        _assert_bf16_matches_pytorch(model, [_bf16_outputs(model, monkeypatch, tmp_path)])


HOST_AMX = "amx_tile" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else False


def test_amx_weights_over_l2_run_channel_outer_in_blocks_of_rows(monkeypatch, tmp_path):
    """On AMX a dense layer whose weights are larger than L2 runs channel-outer even where its
    input is larger still (``CHANNEL_OUTER_OVER_L2``: row-outer, every row tile read all the
    weights again), and over that input in blocks of rows whose input fits ROW_BLOCK_BYTES (the
    weights read once per block): 4 MB of input in 32 row tiles of 32 rows, blocks of 8 tiles.
    Without either, row-outer, one block. On a host with AMX the outputs are the same bits
    blocked or not, and match PyTorch's."""
    from tvmbench.compile.precision import apply_precision
    from tvmbench.compile.rules import amx as amx_rule

    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_streamed")
    target = SPR
    legal = pipeline.per_inference(pipeline.legalized(apply_precision(import_model(model).mod, "bf16", target), target))
    name, func = next((gv.name_hint, f) for gv, f in legal.functions.items() if "matmul" in gv.name_hint)
    seen, outs = {}, {}
    for over_l2, block_bytes in ((1, 1 << 20), (0, 1 << 20), (1, 0)):
        monkeypatch.setattr(amx_rule, "CHANNEL_OUTER_OVER_L2", over_l2)
        monkeypatch.setattr(amx_rule, "ROW_BLOCK_BYTES", block_bytes)
        found, _ = amx_rule._matched(func, target.tvm())
        outer = amx_rule._channel_outer(found)
        trace = str(pipeline.default_schedule(func, target)[1].trace)
        seen[over_l2, block_bytes] = (outer, "factors=[None, 8]" in trace)
        if HOST_AMX and outer:
            outs[block_bytes] = _bf16_outputs(model, monkeypatch, tmp_path / str(block_bytes))
    assert seen == {(1, 1 << 20): (True, True), (0, 1 << 20): (False, False), (1, 0): (True, False)}, (name, seen)
    _assert_bf16_matches_pytorch(model, list(outs.values()))
    if outs:
        np.testing.assert_array_equal(outs[1 << 20][0], outs[0][0])


def test_an_amx_convolution_in_blocks_of_rows_writes_back_tile_by_tile():
    """A 3x3 convolution whose weights are over L2 runs channel-outer in blocks of rows
    (``rules/amx.py``'s ``_row_blocks``) on AMX tiles, each tile writing back its own 28 x 32
    outputs: no loop inside the parallel tile loop spans the output's channels or images. (Blocks
    cut from the row loops fused could not be tensorized, and the kernel fell back to the dot
    product: vgg16's convolutions 10x slower at batch 8.)"""
    import tvm
    import tvm_ffi

    from tvmbench.compile import amx
    from tvmbench.compile.rules import amx as amx_rule

    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_streamed_conv")
    target = SPR
    func = next(f for n, f in _bf16_kernels(model, target).items() if "conv2d" in n)
    assert amx_rule._channel_outer(amx_rule._matched(func, target.tvm())[0])
    rule, sch = pipeline.default_schedule(func, target)
    assert amx.LLVM_FUNCTION in sch.mod.script() and "factors=[None, " in str(sch.trace), rule
    loops, extents = [], []
    tvm_ffi.structural_walk(sch.mod["main"].body, [(tvm.tirx.For, loops.append)])
    for tile_loop in (f for f in loops if f.kind == tvm.tirx.ForKind.PARALLEL and "tvmbench_amx" in str(f.annotations)):
        tvm_ffi.structural_walk(tile_loop.body, [(tvm.tirx.For, lambda f: extents.append(int(f.extent)))])
    assert extents and max(extents) <= 32, sorted(set(extents))


def test_an_amx_dense_layer_over_rows_of_short_tiles_is_padded_to_pairs_of_whole_tiles(monkeypatch, tmp_path):
    """On AMX a bf16 dense layer over 200 rows, whose tiles would be 10 rows (20 per pair of
    weight tiles loaded), is padded with zero rows to 224, pairs of tiles of 16
    (``amx.PAIR_ROWS``); with 0 it keeps its 200 rows. On a host with AMX the outputs match
    PyTorch's either way."""
    import tvm

    from tvmbench.compile import amx
    from tvmbench.compile.precision import apply_precision

    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_short_tiles")
    target = SPR
    outs = []
    for pair_rows in (amx.PAIR_ROWS, 0):
        monkeypatch.setattr(amx, "PAIR_ROWS", pair_rows)
        legal = pipeline.per_inference(pipeline.legalized(apply_precision(import_model(model).mod, "bf16", target),
                                                          target))
        name, func = next((gv.name_hint, f) for gv, f in legal.functions.items()
                          if isinstance(f, tvm.tirx.PrimFunc) and "matmul" in gv.name_hint)
        assert int(func.params[0].ty.shape[0]) == (224 if pair_rows else 200), name
        assert amx.LLVM_FUNCTION in pipeline.default_schedule(func, target)[1].mod.script(), name
        if HOST_AMX:
            outs.append(_bf16_outputs(model, monkeypatch, tmp_path / str(pair_rows)))
    _assert_bf16_matches_pytorch(model, outs)


def test_an_amx_tile_function_loads_the_tile_configuration_only_where_the_threads_is_another(monkeypatch, tmp_path):
    """The tile function reads the thread's tile configuration back (``sttilecfg``) and loads its
    own only where that differs (``amx.KEEP_CONFIG``; ``ldtilecfg`` on every call cost 45-80 ns,
    a third of a short tile's time); with 0, on every call. On a host with AMX the model of seven
    tile kernels of five configurations, each call following one of another, gives the same bits
    both ways: a kernel never runs under another's configuration."""
    import tvm

    from tvmbench.compile import amx, bf16
    from tvmbench.compile.precision import apply_precision

    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_tiles")
    target = SPR
    legal = pipeline.per_inference(pipeline.legalized(apply_precision(import_model(model).mod, "bf16", target), target))
    name = next(n for n in bf16.bf16_kernels(legal) if "matmul" in n)
    outs = {}
    for keep in (1, 0):
        monkeypatch.setattr(amx, "KEEP_CONFIG", keep)
        sch = pipeline.default_schedule(legal[name], target)[1]
        asm = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}),
                          target=target.tvm()).mod.inspect_source("asm")
        assert "ldtilecfg" in asm and ("sttilecfg" in asm) == bool(keep)
        if HOST_AMX:
            outs[keep] = _bf16_outputs(model, monkeypatch, tmp_path / str(keep))
    for one, other in zip(outs.get(1, []), outs.get(0, []), strict=True):
        np.testing.assert_array_equal(one, other)


def test_a_bf16_rounding_is_the_cpus_instruction_and_a_padded_copy_rounds_nothing(monkeypatch):
    """A kernel's fp32 -> bf16 rounding of 16 lanes is ``vcvtneps2bf16`` (``passes/bf16_round.py``),
    not TVM's six integer instructions, and a padded copy of bf16 values (widened, the padding
    selected, rounded back: what each AMX convolution makes of its input) selects the bf16 bits
    themselves, with neither. On a host with AVX-512 BF16 both give TVM's bits: round to nearest
    even, ties included, for values across fp32's range."""
    import importlib

    import ml_dtypes
    import tvm
    from tvm import s_tir, te

    from tvmbench.compile import codegen

    bf16_round = importlib.import_module("tvmbench.compile.passes.bf16_round")
    x = te.placeholder((64,), "float32", name="x")
    w = te.placeholder((64,), "bfloat16", name="w")
    y = te.compute((64,), lambda i: te.max(x[i] * 2.0, -1e30).astype("bfloat16"), name="y")
    z = te.compute((80,), lambda i: te.if_then_else(i < 64, w[tvm.te.min(i, 63)].astype("float32"), 0.0)
                   .astype("bfloat16"), name="z")
    kernels = {}
    for name, args in (("y", [x, y]), ("z", [w, z])):
        sch = s_tir.Schedule(te.create_prim_func(args).with_attr("global_symbol", "main"))
        sch.vectorize(sch.split(sch.get_loops(sch.get_sblock(name))[0], [None, 16])[1])
        kernels[name] = sch.mod
    rng = np.random.default_rng(0)
    halfway = ((rng.integers(100, 150, 32, dtype=np.uint32) << 23 | rng.integers(0, 128, 32, dtype=np.uint32) << 16
                | 0x8000).view(np.float32) / 2)  # (ties, before the * 2; normal numbers: the instruction flushes denormals)
    values = np.concatenate([halfway, rng.standard_normal(24).astype("float32") * 1e3,
                             np.float32([0, -0.0, 1e-30, 3e38, -3e38, 1, -1, 65504])]).astype("float32")
    spr = resolve_target({"kind": "llvm", "mcpu": "sapphirerapids"}, gpu_query=lambda: None)
    for on in (1, 0):
        monkeypatch.setattr(bf16_round, "ROUND_BY_INSTRUCTION", on)
        for name, mod in kernels.items():
            for target in (spr, TARGET) if HOST_BF16 else (spr,):
                with codegen.lowering_context():
                    lib = tvm.tirx.build(mod, target=target.tvm(), pipeline=codegen.PIPELINE)
                asm = lib.inspect_source("asm")
                assert ("vcvtneps2bf16" in asm) == bool(on and name == "y"), (name, on)
                assert ("vpsrld" in asm) == (not on and name == "y"), (name, on)  # (the integer rounding's shift)
                if target is not TARGET:
                    continue
                inputs = values if name == "y" else values.astype(ml_dtypes.bfloat16)
                out = tvm.runtime.tensor(np.ones(64 if name == "y" else 80, ml_dtypes.bfloat16))
                lib["main"](tvm.runtime.tensor(inputs), out)
                got = out.numpy().view(np.uint16)
                if name == "y":  # (ml_dtypes: round to nearest even)
                    with np.errstate(over="ignore"):  # (3e38 * 2: infinity, as in the kernel)
                        expected = np.maximum(values * 2, np.float32(-1e30)).astype(ml_dtypes.bfloat16)
                    np.testing.assert_array_equal(got, expected.view(np.uint16))
                else:
                    np.testing.assert_array_equal(got[:64], inputs.view(np.uint16))
                    assert not got[64:].any()


def test_amx_convolutions_over_half_steps_read_zero_channels_and_flattened_sums_start_at_zero(monkeypatch, tmp_path):
    """On AMX tiles a bf16 3x3 convolution that copies its input into a padded buffer anyway reads
    48 or 80 input channels as 64 or 96 (``amx.PAD_DEPTH``: whole steps of 32, zero weights for
    the added channels); the one over a flattened map, whose sums are rows of its output, starts
    them with ``tilezero`` (``tile_sums.FLAT_SUMS``). Checked on the schedules and the code for
    Sapphire Rapids; on a host with AMX, the outputs match PyTorch at bf16's tolerance either way,
    and FLAT_SUMS changes no bit."""
    import importlib

    import tvm

    from tvmbench.compile import amx, codegen
    from tvmbench.compile.precision import apply_precision
    from tvmbench.compile.rules import amx as amx_rule

    tile_sums = importlib.import_module("tvmbench.compile.passes.tile_sums")
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_deep")
    target = SPR
    outs = {}
    for pad_depth, flat_sums in ((1, 1), (0, 0), (1, 0)):
        monkeypatch.setattr(amx, "PAD_DEPTH", pad_depth)
        monkeypatch.setattr(tile_sums, "FLAT_SUMS", flat_sums)
        legal = pipeline.per_inference(pipeline.legalized(apply_precision(import_model(model).mod, "bf16", target),
                                                          target))
        seen = {}
        for func in legal.functions.values():
            found = amx_rule._matched(func, target.tvm()) if isinstance(func, tvm.tirx.PrimFunc) else None
            if found is None:
                continue
            rule, sch = pipeline.default_schedule(func, target)
            mod = tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")})
            with codegen.lowering_context():
                asm = tvm.tirx.build(mod, target=target.tvm(), pipeline=codegen.PIPELINE).inspect_source("asm")
            seen[found[1][6] > 0] = (found[0].extents[-1], "tilezero" in asm)  # (flattened: the map's width)
        assert seen == {False: (64 if pad_depth else 48, True), True: (96 if pad_depth else 80, bool(flat_sums))}, seen
        if HOST_AMX:
            outs[pad_depth, flat_sums] = _bf16_outputs(model, monkeypatch, tmp_path / f"{pad_depth}{flat_sums}")
    _assert_bf16_matches_pytorch(model, list(outs.values()))
    if outs:
        for one, other in zip(outs[1, 1], outs[1, 0], strict=True):
            np.testing.assert_array_equal(one, other)


def test_an_amx_tile_whose_call_is_its_whole_reduction_starts_its_sums_at_zero(monkeypatch, tmp_path):
    """Where a tile's reduction is one call of the tile function (a 3x3 window inside the tile, a
    1x1's channels), the zeroing of its sums in memory is dropped after lowering and the call
    starts them with ``tilezero`` (``passes/tile_sums.py``); with ``SUMS_FROM_ZERO`` 0 every sum
    is zeroed in memory and loaded. On a host with AMX the model gives the same bits both ways."""
    import importlib

    import tvm

    from tvmbench.compile import codegen
    from tvmbench.compile.precision import apply_precision

    tile_sums = importlib.import_module("tvmbench.compile.passes.tile_sums")
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_windows")
    target = SPR
    legal = pipeline.per_inference(pipeline.legalized(apply_precision(import_model(model).mod, "bf16", target), target))
    outs = {}
    for on in (1, 0):
        monkeypatch.setattr(tile_sums, "SUMS_FROM_ZERO", on)
        zeroed = []
        for func in legal.functions.values():
            rule, sch = pipeline.default_schedule(func, target) if isinstance(func, tvm.tirx.PrimFunc) else (None, None)
            if rule != "Amx":
                continue
            mod = tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")})
            with codegen.lowering_context():
                asm = tvm.tirx.build(mod, target=target.tvm(), pipeline=codegen.PIPELINE).inspect_source("asm")
            assert "tdpbf16ps" in asm
            zeroed.append("tilezero" in asm)
        assert zeroed == [bool(on)] * 4, zeroed  # (the 14x14 maps paired: two map rows, zeroed by two loops)
        if HOST_AMX:
            outs[on] = _bf16_outputs(model, monkeypatch, tmp_path / str(on))
    for one, other in zip(outs.get(1, []), outs.get(0, []), strict=True):
        np.testing.assert_array_equal(one, other)


def test_a_rule_that_raises_declines_and_says_why_in_the_debug_log(caplog):
    """A rule whose schedule raises (a primitive TVM refuses) declines, so the next rule takes the
    kernel, and the error is logged at debug level with the rule's and the kernel's names: an
    AMX schedule refused this way once fell back to the dot product unseen, 10x slower."""
    import logging

    import tvm
    from tvm.script import tirx as T

    from tvmbench.compile.rules.base import Rule, guarded

    class Refused(Rule):
        def schedule(self, func, target):
            raise ValueError("ScheduleError: the bindings can not be blockized")

    @T.prim_func(s_tir=True)
    def copy(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
        T.func_attr({"global_symbol": "copy_kernel"})
        for i in range(8):
            with T.sblock("b"):
                vi = T.axis.remap("S", [i])
                b[vi] = a[vi]

    with caplog.at_level(logging.DEBUG, logger="tvmbench.compile.rules.base"):
        assert guarded(Refused()).apply(copy, tvm.target.Target("llvm"), False) is None
    assert "Refused declined copy_kernel after an error: ScheduleError: the bindings can not be blockized" \
        in caplog.text, caplog.text


def test_a_bf16_attention_reads_bf16_q_k_v_and_runs_both_products_on_the_dot_product(monkeypatch, tmp_path):
    """Under --precision bf16 a joined attention reads q, k and v as bf16, written so by the
    transposes that split the heads, and rounds its probabilities (``passes/bf16_attention.py``):
    both products are ``vdpbf16ps`` over pairs of rows interleaved in registers
    (``bf16.DOT_16x2_ROWS``), the softmax stays fp32. With 0, on an AMX target (whose dot product
    issues at half its FMAs' rate), and where the probabilities are an output too (the products
    then stay apart, where no rule tiles bf16 operands), it stays fp32. Where the dot product cannot
    be put on the tiles (here: the intrinsic swapped for the packed-pairs one) the rule computes
    the bf16 operands widened on vector FMAs instead, no product left without vectors. 45 tokens
    padded to 48, heads of 12 (v padded to 16 columns); on a host that runs bf16 the outputs match
    PyTorch's both ways. Under a causal mask the task's key loops are marked for the key limits
    either way (in bf16 they had read the score tile's width off the pair's loop: 16 times too
    wide, so the attention skipped nothing)."""
    import importlib

    from tvmbench.compile import bf16
    from tvmbench.compile.tir import reads_bf16
    from tvmbench.compile.vector_check import scalar_products

    bf16_attention = importlib.import_module("tvmbench.compile.passes.bf16_attention")
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_attention_45_heads_of_12")

    def attention(target):
        (func,) = [f for n, f in _bf16_kernels(model, target).items() if n.startswith("fused_attention")]
        return func

    outs = []
    for value in (1, 0):
        monkeypatch.setattr(bf16_attention, "ENABLED", value)
        func = attention(ZEN4)
        dtypes = [str(p.ty.dtype) for p in func.params]
        assert dtypes.count("bfloat16") == 3 * value, dtypes  # (q, k, v; the mask and output fp32)
        rule, sch = pipeline.default_schedule(func, ZEN4)
        script = sch.mod["main"].script()
        assert rule == "Attention" and script.count(f'"{bf16.LLVM_ROWS_FUNCTION}"') == 2 * value, script
        causal = load_model(f"{Path(__file__).parent}/mlp_model.py:build_causal_attention")
        (masked,) = [f for n, f in _bf16_kernels(causal, ZEN4).items() if n.startswith("fused_attention")]
        assert "tvmbench.key_limits_task" in pipeline.default_schedule(masked, ZEN4)[1].mod["main"].script()
        if HOST_BF16:
            outs.append(_bf16_outputs(model, monkeypatch, tmp_path / str(value)))
    _assert_bf16_matches_pytorch(model, outs)
    monkeypatch.setattr(bf16_attention, "ENABLED", 1)
    assert "bfloat16" not in [str(p.ty.dtype) for p in attention(SPR).params]
    scores_out = load_model(f"{Path(__file__).parent}/mlp_model.py:build_attention_scores_out")
    kernels = _bf16_kernels(scores_out, ZEN4)
    assert [n for n, f in kernels.items() if reads_bf16(f, reductions=True)] == [n for n in kernels if "packed" in n]
    monkeypatch.setattr(bf16, "DOT_16x2_ROWS", bf16.DOT_16x2)
    rule, sch = pipeline.default_schedule(func := attention(ZEN4), ZEN4)
    assert rule == "Attention" and bf16.LLVM_FUNCTION not in sch.mod["main"].script()
    assert str(func.params[0].ty.dtype) == "bfloat16" and not scalar_products(sch.mod["main"])
    assert scalar_products(func)  # (the check can fail: the unscheduled products have no vectors)


def test_a_bf16_value_widened_inside_a_bound_cast_operand_keeps_its_value():
    """BindCastOperands (``passes/bf16_casts.py``) binds a bf16 store's operand that holds a
    ``Let`` to a variable; a bf16 value widened inside that operand (a residual stored in bf16,
    added back after a SiLU: torchvision's EfficientNetV2 under --precision bf16) must widen by
    its bits: TVM legalises the bf16 arithmetic of stores, not of a ``LetStmt``'s value, and the
    widening became a numeric conversion of the 16 bits as an integer (outputs off by 5e4)."""
    import ml_dtypes
    import tvm
    from tvm import s_tir, te, tirx

    from tvmbench.compile import codegen

    x = te.placeholder((64,), "float32", name="x")
    r = te.placeholder((64,), "bfloat16", name="r")
    v = tirx.Var("v", "float32")
    y = te.compute((64,), lambda i: (tirx.Let(v, x[i] * 0.5, v * v) + r[i].astype("float32")).astype("bfloat16"),
                   name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, r, y]).with_attr("global_symbol", "main"))
    sch.vectorize(sch.split(sch.get_loops(sch.get_sblock("y"))[0], [None, 16])[1])
    with codegen.lowering_context():
        lib = tvm.tirx.build(sch.mod, target=TARGET.tvm(), pipeline=codegen.PIPELINE)
    rng = np.random.default_rng(0)
    xs, rs = rng.standard_normal(64).astype("float32"), rng.standard_normal(64).astype(ml_dtypes.bfloat16)
    out = tvm.runtime.tensor(np.zeros(64, ml_dtypes.bfloat16))
    lib["main"](tvm.runtime.tensor(xs), tvm.runtime.tensor(rs), out)
    expected = ((xs * 0.5) ** 2 + rs.astype("float32")).astype(ml_dtypes.bfloat16).astype("float32")
    np.testing.assert_allclose(out.numpy().astype("float32"), expected, rtol=1e-2, atol=1e-2)


def test_bf16_grouped_convolutions_run_the_dot_product_over_pairs_of_each_groups_channels(monkeypatch, tmp_path):
    """Under --precision bf16 a grouped convolution in the ``channels`` form (a vector over a
    group's output channels: RegNet's, ResNeXt's wide stages) reads bf16 pairs of each group's input
    channels, the weights packed ``[G, Co/B, KH, KW, Ci/2, B, 2]``, directly (12x12 maps, under
    ``winograd.BF16_MIN_EDGE``; stride 2, groups of 56 padded to 64) or as a Winograd product
    (16x16); both call the dot product, and so do groups of 8 (half vectors:
    ``test_bf16_groups_of_eight_channels_run_the_dot_product_in_half_vectors``). No kernel reads
    bf16 without the dot product. With
    ``grouped_conv.BF16_GROUPS`` and ``winograd.BF16_GROUPED_PRODUCT`` 0, and on an AMX target,
    every grouped convolution stays fp32. On a host that runs bf16 the outputs match PyTorch's.
    (RegNets had run 0.73-0.96x of OpenVINO's bf16 with these in fp32.)"""
    import importlib

    from tvmbench.compile.bf16 import LLVM_FUNCTION
    from tvmbench.compile.tir import reads_bf16

    grouped_conv = importlib.import_module("tvmbench.compile.passes.grouped_conv")
    winograd = importlib.import_module("tvmbench.compile.passes.winograd")
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_grouped_winograd")
    outs = []
    for value in (1, 0):
        monkeypatch.setattr(grouped_conv, "BF16_GROUPS", value)
        monkeypatch.setattr(winograd, "BF16_GROUPED_PRODUCT", value)
        kernels = _bf16_kernels(model, ZEN4)
        scheduled = {n: pipeline.default_schedule(f, ZEN4)[1] for n, f in kernels.items()}
        dotted = sorted(n for n, sch in scheduled.items() if sch is not None and LLVM_FUNCTION in sch.mod.script())
        grouped = sorted(n for n in kernels if "conv2d_grouped" in n)
        assert len(grouped) == 3, list(kernels)  # (12x12, the narrow groups, stride 2)
        wanted = sorted(grouped + [n for n in kernels if "product" in n])
        assert dotted == (wanted if value else []), (dotted, list(kernels))
        assert all(len(kernels[n].params[1].shape) == 7 for n in grouped) or not value
        slow = [n for n, f in kernels.items() if reads_bf16(f, reductions=True) and n not in dotted]
        assert not slow, slow
        if HOST_BF16 and value:  # (the fp32 grouped kernels' outputs: test_grouped_3x3_convolutions_...)
            outs.append(_bf16_outputs(model, monkeypatch, tmp_path))
    _assert_bf16_matches_pytorch(model, outs)
    monkeypatch.setattr(grouped_conv, "BF16_GROUPS", 1)
    monkeypatch.setattr(winograd, "BF16_GROUPED_PRODUCT", 1)
    assert not [n for n, f in _bf16_kernels(model, SPR).items() if ("grouped" in n or "product" in n) and reads_bf16(f)]


def test_a_bf16_product_whose_rows_no_tile_of_its_vectors_divides_takes_whole_rows(monkeypatch, tmp_path):
    """A tile of bf16 pairs has no predicated form: a Winograd product over 49 tiles and 5 vectors
    takes rows that divide 49 and calls the dot product, where 5 vectors x 4 rows failed to
    tensorize and left the kernel to the fallback schedule (raft_small in bf16: 90 of 137 ms).
    On a host that runs bf16 the outputs match PyTorch's."""
    import importlib

    from tvmbench.compile.bf16 import LLVM_FUNCTION
    from tvmbench.compile.knobs import knob_set

    contraction = importlib.import_module("tvmbench.compile.rules.contraction")
    model = load_model(f"{Path(__file__).parent}/mlp_model.py:build_bf16_five_vector_winograd")
    (product,) = [f for n, f in _bf16_kernels(model, ZEN4).items() if "winograd_product" in n]
    assert [int(d) for d in product.params[2].shape] == [36, 49, 80]
    with ZEN4.tvm(), knob_set() as chosen:
        rule, sch = pipeline.default_schedule(product, ZEN4)
    assert LLVM_FUNCTION in sch.mod.script() and 49 % chosen.values()["rows"] == 0, chosen.values()
    monkeypatch.setattr(contraction, "PAIRS_WHOLE_ROWS", False)
    rule, sch = pipeline.default_schedule(product, ZEN4)
    assert sch is None or LLVM_FUNCTION not in sch.mod.script()
    monkeypatch.setattr(contraction, "PAIRS_WHOLE_ROWS", True)
    _assert_bf16_matches_pytorch(model, [_bf16_outputs(model, monkeypatch, tmp_path)] if HOST_BF16 else [])


def test_bf16_groups_of_three_half_vectors_are_padded_to_whole_vectors_of_pairs(monkeypatch, tmp_path):
    """Under --precision bf16 on Zen 4, RegNet's groups of 24 channels (three half vectors, which
    fp32 tiles keep whole there) are padded to 32, whole 16-lane vectors of the dot product: the
    grouped kernel reads bf16 pairs, ``[G, Co/32, KH, KW, Ci/2, 32, 2]``, and calls it. With
    ``grouped_conv.BF16_PADDED_GROUPS`` 0 the kernel stays fp32 in blocks of 24 (``[G, 1, KH, KW,
    24, 24]``). On a host that runs bf16 the outputs match PyTorch's. (regnet_x_1_6gf 1.25x in
    bf16 on Zen 4.)"""
    import importlib

    import torch

    from tvmbench.compile.bf16 import LLVM_FUNCTION
    from tvmbench.models.base import LoadedModel

    grouped_conv = importlib.import_module("tvmbench.compile.passes.grouped_conv")
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1, 16, 12, 12), dtype="float32")
    model = LoadedModel(name="grouped", family="cnn", inputs={"x": x}, module=_GroupedBlock.build(72, 3, 1),
                        options=ModelOptions())
    for value in (1, 0):
        monkeypatch.setattr(grouped_conv, "BF16_PADDED_GROUPS", value)
        kernels = _bf16_kernels(model, ZEN4)
        (name,) = [n for n in kernels if "conv2d_grouped" in n]
        weights = kernels[name].params[1]
        assert ([int(d) for d in weights.ty.shape[-2:]], str(weights.ty.dtype)) == (
            ([32, 2], "bfloat16") if value else ([24, 24], "float32")), weights.ty
        assert (LLVM_FUNCTION in pipeline.default_schedule(kernels[name], ZEN4)[1].mod.script()) == bool(value)
    if HOST_BF16:
        monkeypatch.setattr(grouped_conv, "BF16_PADDED_GROUPS", 1)
        _assert_bf16_matches_pytorch(model, [_bf16_outputs(model, monkeypatch, tmp_path)])


def test_bf16_groups_of_eight_channels_run_the_dot_product_in_half_vectors(monkeypatch, tmp_path):
    """Under --precision bf16 on Zen 4, whose half-width vectors run at the full rate, groups of 8
    channels (regnet_y_400mf's) read bf16 pairs of their input channels, the weights packed
    ``[G, 1, KH, KW, Ci/2, 8, 2]``, and call the 256-bit dot product (``bf16.DOT_8x2``); each
    parallel iteration (a column tile: 6 of them) copies its padded window once for the 3 groups
    it then computes in turn (``contraction.GROUPS_SERIAL``; 0: 18 iterations, a group each). With
    ``grouped_conv.BF16_HALF_GROUPS`` 0, and on a target whose half vectors run at half the rate
    (Sapphire Rapids), the kernel stays fp32 over HWIO weights. On a host that runs bf16 the
    outputs match PyTorch's."""
    import importlib

    import torch

    from tvmbench.compile.bf16 import LLVM_HALF_FUNCTION
    from tvmbench.models.base import LoadedModel

    grouped_conv = importlib.import_module("tvmbench.compile.passes.grouped_conv")
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1, 16, 12, 12), dtype="float32")
    model = LoadedModel(name="grouped", family="cnn", inputs={"x": x}, module=_GroupedBlock.build(24, 3, 2),
                        options=ModelOptions())
    for value, target in ((1, ZEN4), (0, ZEN4), (1, SPR)):
        monkeypatch.setattr(grouped_conv, "BF16_HALF_GROUPS", value)
        kernels = _bf16_kernels(model, target)
        (name,) = [n for n in kernels if "conv2d_grouped" in n]
        weights = kernels[name].params[1]
        half = value and target is ZEN4
        assert ([int(d) for d in weights.ty.shape], str(weights.ty.dtype)) == (
            ([3, 1, 3, 3, 4, 8, 2], "bfloat16") if half else ([3, 3, 8, 3, 8], "float32")), weights.ty
        with target.tvm():
            sch = pipeline.default_schedule(kernels[name], target)[1]
        assert (LLVM_HALF_FUNCTION in sch.mod.script()) == bool(half)
        if half:
            for serial in (0, 1):
                monkeypatch.setattr(contraction, "GROUPS_SERIAL", serial)
                with target.tvm():
                    parallel = _parallel_extents(pipeline.default_schedule(kernels[name], target)[1].mod["main"])
                assert parallel == ([6] if serial else [18]), (serial, parallel)
    if HOST_BF16:
        monkeypatch.setattr(grouped_conv, "BF16_HALF_GROUPS", 1)
        _assert_bf16_matches_pytorch(model, [_bf16_outputs(model, monkeypatch, tmp_path)])


def test_a_bf16_strided_grouped_convolution_copies_its_padded_window_under_each_tile(monkeypatch, tmp_path):
    """Under --precision bf16 on Zen 4 a stride-2 grouped convolution whose tile spans a group's
    output channels (RegNet's groups of 16) copies the padded window each tile reads under the
    tile loop, into a buffer that compiles to the stack (no workspace call per tile), instead of
    a pass over the whole padded input before it (``contraction.PAD_UNDER_TILE_BYTES``;
    regnet_y_3_2gf's stride-2 grouped convolutions 1.2-1.5x at batch 8). A stride-1 one keeps the
    pass, which copies each pixel's groups as one run where a group is at most one vector
    (``contraction.FUSE_TAIL_WIDTH``: 2 x 16 channels, not 16 per group). On a host that runs
    bf16 the outputs of both match PyTorch's."""
    import torch
    import tvm

    from tvmbench.models.base import LoadedModel
    from tvmbench.tuning.build import fast_build

    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1, 16, 20, 20), dtype="float32")  # (a parallel copy)
    models, default = {}, contraction.PAD_UNDER_TILE_BYTES
    for stride in (2, 1):
        model = LoadedModel(name="grouped", family="cnn", inputs={"x": x}, module=_GroupedBlock.build(32, 2, stride),
                            options=ModelOptions())
        kernels = _bf16_kernels(model, ZEN4)
        (name,) = [n for n in kernels if "conv2d_grouped" in n]
        for value, expected in ((default, stride == 2), (0, False)):
            monkeypatch.setattr(contraction, "PAD_UNDER_TILE_BYTES", value)
            sch = pipeline.default_schedule(kernels[name], ZEN4)[1]
            pad_loop = sch.get(sch.get_loops(sch.get_sblock("pad"))[0])
            under_tile = any(sch.get(loop).same_as(pad_loop) for loop in
                             sch.get_loops(sch.get_sblock("conv2d_grouped_update_o")))
            assert under_tile == expected, (stride, value)
            if under_tile:
                lib = fast_build(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}),
                                 ZEN4.tvm(), None)
                lambdas = [f for f in lib.inspect_source("ll").split("\ndefine ") if "tvm_parallel_lambda" in f[:200]]
                assert lambdas and not any("TVMBackendAllocWorkspace" in f for f in lambdas)
        models[stride] = model
    width = contraction.FUSE_TAIL_WIDTH
    for value, run in ((width, 32), (0, 16)):  # (stride 1: the pass, in runs)
        monkeypatch.setattr(contraction, "FUSE_TAIL_WIDTH", value)
        sch = pipeline.default_schedule(kernels[name], ZEN4)[1]
        copy = [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("pad"))]
        assert copy[0].kind == tvm.tirx.ForKind.PARALLEL and np.prod([int(loop.extent) for loop in copy[1:]]) == run
    if HOST_BF16:
        monkeypatch.setattr(contraction, "PAD_UNDER_TILE_BYTES", default)
        monkeypatch.setattr(contraction, "FUSE_TAIL_WIDTH", width)
        for stride, model in models.items():
            _assert_bf16_matches_pytorch(model, [_bf16_outputs(model, monkeypatch, tmp_path / str(stride))])


def test_a_bf16_grouped_convolution_over_the_groups_reads_a_pair_in_every_lane(monkeypatch, tmp_path):
    """Under --precision bf16 the ``groups`` form (32 groups of 4: a vector over the groups, as
    ResNeXt's first stages) reads its input as bf16 pairs of each group's channels, ``[N, H, W,
    Ci/2, G, 2]``, which the 1x1 convolution before it writes in that order itself (no transpose
    kernel), and its weights ``[KH, KW, Ci/2, Co, G, 2]``: one ``vdpbf16ps`` over two vector
    operands (``bf16.DOT_16x2_BOTH``) per 16 groups and pair, no bf16 product without it. With
    ``grouped_conv.BF16_GROUPS_INNER`` 0 it stays fp32. On a host that runs bf16 the outputs match
    PyTorch's."""
    import importlib

    import torch

    from tvmbench.compile.bf16 import LLVM_BOTH_FUNCTION
    from tvmbench.compile.tir import reads_bf16
    from tvmbench.models.base import LoadedModel

    grouped_conv = importlib.import_module("tvmbench.compile.passes.grouped_conv")
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1, 16, 12, 12), dtype="float32")
    model = LoadedModel(name="grouped", family="cnn", inputs={"x": x}, module=_GroupedBlock.build(128, 32, 1),
                        options=ModelOptions())
    transposes = []
    for value in (1, 0):
        monkeypatch.setattr(grouped_conv, "BF16_GROUPS_INNER", value)
        kernels = _bf16_kernels(model, ZEN4)
        (name,) = [n for n in kernels if "conv2d_grouped" in n]
        operand = kernels[name].params[0]
        assert ([int(d) for d in operand.ty.shape], str(operand.ty.dtype)) == (
            ([1, 12, 12, 2, 32, 2], "bfloat16") if value else ([1, 12, 12, 4, 32], "float32"))
        transposes.append(sum("transpose" in n for n in kernels))  # (the image's and the output's layout)
        if value:
            scheduled = {n: pipeline.default_schedule(f, ZEN4)[1] for n, f in kernels.items()}
            assert LLVM_BOTH_FUNCTION in scheduled[name].mod.script()
            slow = [n for n, f in kernels.items() if reads_bf16(f, reductions=True)
                    and "tvmbench_dpbf16ps" not in scheduled[n].mod.script()]
            assert not slow, slow
    assert transposes[0] == transposes[1] <= 2, transposes
    if HOST_BF16:
        monkeypatch.setattr(grouped_conv, "BF16_GROUPS_INNER", 1)
        _assert_bf16_matches_pytorch(model, [_bf16_outputs(model, monkeypatch, tmp_path)])
