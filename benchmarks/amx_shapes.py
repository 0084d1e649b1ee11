"""One bf16 convolution on AMX tiles, by map rows and over its padded map flattened, side by side.

    .venv/bin/python benchmarks/amx_shapes.py 7,512,512,3,3,1 35,64,96,3,3,1 17,128,128,7,1,3

Each argument is ``H,C,O,KH,KW,PAD`` (an HxH NHWC map, C input and O output channels, a KHxKW window,
PAD on the window's sides that are wider than 1, stride 1, batch 1). Both forms are built as
``passes/pack_weights.py`` builds them (``packed_conv`` with the extra columns ``amx_columns``
adds; ``flat_conv``) and scheduled by ``rules/amx.py``, each kernel alone, without an epilogue
beyond the flattened form's own (the padding rows dropped); both outputs are checked against
PyTorch's convolution of the same bf16 values, then each is timed (the best of two runs of TVM's
``time_evaluator``, 5 repeats of 20 calls). Needs a CPU with AMX (``amx.usable``). This is what
``amx.FLAT_MAPS``'s choice (``_Pack.flat_map``) was read from; the choice itself is in the
whole-model A/Bs (``benchmarks/rule_ab.py M amx.FLAT_MAPS 0 --precision bf16``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

import ml_dtypes
import numpy as np
import torch
import tvm
from tvm import te

from tvmbench.compile import amx
from tvmbench.compile.rules.amx import Amx
from tvmbench.targets import resolve_target

pack = importlib.import_module("tvmbench.compile.passes.pack_weights")  # (the package exports the pass)


def _build(target: Any, tensors: list[Any]) -> Any:
    func = te.create_prim_func(tensors).with_attr("global_symbol", "main")
    sch = Amx().schedule(func, target.tvm())
    if sch is None:
        sys.exit(f"the AMX rule declined {tensors[-1].op.name}: not a shape AMX tiles take")
    return tvm.compile(sch.mod, target=target.tvm())


def _run(lib: Any, values: list[np.ndarray], out_shape: list[int]) -> tuple[np.ndarray, float]:
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(v, dev) for v in values] + [tvm.runtime.tensor(np.zeros(out_shape, "float32"), dev)]
    timer = lib.mod.time_evaluator("main", dev, number=20, repeat=5, min_repeat_ms=30)
    best = min(min(timer(*args).results) for _ in range(2))
    return args[-1].numpy(), best * 1e3


def measure(target: Any, spec: str, rng: np.random.Generator) -> str:
    """One line for ``spec``: both forms' times and worst differences from PyTorch."""
    h, c, o, kh, kw, p = (int(v) for v in spec.split(","))
    if kh * kw == 1 or c % 16 or o % amx.PACK:
        sys.exit(f"{spec}: the flattened form needs a window (1x1 is never flattened), C a multiple of 16, "
                 f"O of {amx.PACK}")
    pad = [p if kh > 1 else 0, p if kw > 1 else 0] * 2  # (top, left, bottom, right)
    x = rng.standard_normal((1, h, h, c)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((kh, kw, c, o)).astype(ml_dtypes.bfloat16)
    blocks = w.reshape(kh, kw, c // 2, 2, o // amx.PACK, amx.PACK).transpose(4, 0, 1, 2, 5, 3)  # (pack_conv's pairs)
    lined = blocks.reshape(o // amx.PACK, kh * kw, c // 2, amx.PACK, 2) if 1 in (kh, kw) else blocks
    ref = torch.nn.functional.conv2d(torch.tensor(x.astype("float32")).permute(0, 3, 1, 2),
                                     torch.tensor(w.astype("float32")).permute(3, 2, 0, 1), padding=(pad[0], pad[1]))
    ref = ref.permute(0, 2, 3, 1).numpy()
    ow = ref.shape[2]
    extra = pack.tile_columns(ow)
    xt = te.placeholder(x.shape, "bfloat16", name="x")
    wt, lt = (te.placeholder(v.shape, "bfloat16", name=n) for v, n in ((blocks, "w"), (lined, "lined")))
    rows_form = pack.packed_conv(xt, wt, [1, 1], [pad[0], pad[1], pad[2], pad[3] + extra], [1, 1], "float32")
    flat_form = pack.flat_conv(xt, lt, pad, [kh, kw], o, "float32")
    by_rows, t_rows = _run(_build(target, [xt, wt, rows_form]), [x, np.ascontiguousarray(blocks)],
                           [int(d) for d in rows_form.shape])
    flat, t_flat = _run(_build(target, [xt, lt, flat_form]), [x, np.ascontiguousarray(lined)], list(ref.shape))
    errors = [float(np.abs(got[:, :, :ow] - ref).max()) for got in (by_rows, flat)]
    return (f"{spec:18s} by rows {t_rows:.4f} ms  flattened {t_flat:.4f} ms  {t_rows / t_flat:.2f}x  "
            f"(max |diff| from PyTorch {errors[0]:.1e} / {errors[1]:.1e}, outputs up to {np.abs(ref).max():.0f})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shapes", nargs="+", help="H,C,O,KH,KW,PAD per convolution")
    args = parser.parse_args(argv)
    target = resolve_target("llvm")
    if not amx.usable(target.tvm()):
        sys.exit("this CPU has no AMX tiles (amx-bf16, amx-tile): nothing to compare")
    rng = np.random.default_rng(0)
    for spec in args.shapes:
        if len(spec.split(",")) != 6 or not spec.replace(",", "").isdigit():
            sys.exit(f"{spec}: expected H,C,O,KH,KW,PAD (six integers)")
        print(measure(target, spec, rng), flush=True)


if __name__ == "__main__":
    main()
