"""Every form of ONNX's Resize (and Upsample) through TVM's ONNX importer, against ONNX Runtime.

    .venv/bin/python benchmarks/resize_forms.py [--stock]

Modes x coordinate transformations x nearest roundings x scales and sizes x antialiasing, opset
10's Resize, Upsample of opsets 7 and 9, ``axes``, ``keep_aspect_ratio_policy``, 3-d and 5-d
inputs: each one node on a random input, imported with tvmbench's converters
(``compile/onnx_converters.py``; ``--stock`` for TVM's own), built by ``tvm.compile`` and compared
with ONNX Runtime. A line per form (``ok``, ``FAIL`` with the largest error, ``SHAPE``, ``ERROR``
with TVM's reason, ``ORT-ERROR`` where ONNX Runtime refuses the form itself), then the counts.
"""
import collections
import contextlib
import itertools
import sys

import numpy as np
import onnxruntime as ort
import tvm
from onnx import TensorProto, helper
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from tvmbench.compile.onnx_converters import extended_importer

counts: collections.Counter = collections.Counter()

def model(shape, attrs, scales=None, sizes=None, opset=19):
    inits = [helper.make_tensor("roi", TensorProto.FLOAT, [0], [])]
    ins = ["x", "roi"]
    if scales is not None:
        inits.append(helper.make_tensor("scales", TensorProto.FLOAT, [len(scales)], scales))
        ins.append("scales")
    else:
        ins.append("")
        inits.append(helper.make_tensor("sizes", TensorProto.INT64, [len(sizes)], sizes))
        ins.append("sizes")
    node = helper.make_node("Resize", ins, ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])

def check(m, x):
    try:
        ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    except Exception as e:
        return "ORT-ERROR " + str(e).splitlines()[0][-60:]
    try:
        with (extended_importer() if EXT else contextlib.nullcontext()):
            mod = from_onnx(m, shape_dict={"x": list(x.shape)}, keep_params_in_input=False)
        ex = tvm.compile(mod, target="llvm")
        vm = relax.VirtualMachine(ex, tvm.cpu())
        out = vm["main"](tvm.runtime.tensor(x)).numpy()
    except Exception as e:
        return "ERROR " + str(e).splitlines()[0][:80]
    if out.shape != ref.shape:
        return f"SHAPE {out.shape} vs {ref.shape}"
    err = np.abs(out - ref).max()
    return "ok" if err < 1e-4 else f"FAIL {err:.3g}"

EXT = "--stock" not in sys.argv
x = np.random.default_rng(0).standard_normal((1, 2, 7, 9)).astype("float32")
for mode, coord, nm in itertools.product(["nearest", "linear", "cubic"],
        ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"],
        ["round_prefer_floor", "floor", "ceil", "round_prefer_ceil"]):
    if mode != "nearest" and nm != "round_prefer_floor":
        continue
    for label, kw in [("s2", dict(scales=[1, 1, 2.0, 2.0])), ("s1.5", dict(scales=[1, 1, 1.5, 1.5])),
                      ("s0.7", dict(scales=[1, 1, 0.7, 0.6])), ("size11x13", dict(sizes=[1, 2, 11, 13])),
                      ("size4x5", dict(sizes=[1, 2, 4, 5]))]:
        for aa in ([0, 1] if mode != "nearest" else [0]):
            attrs = dict(mode=mode, coordinate_transformation_mode=coord, nearest_mode=nm)
            if aa:
                attrs["antialias"] = 1
            r = check(model(list(x.shape), attrs, **kw), x)
            counts[r.split()[0]] += 1
            print(mode, coord, nm, label, "aa" if aa else "", r, flush=True)

extra = [
    ("opset10 nearest s1.5", model(list(x.shape), dict(mode="nearest"), scales=[1, 1, 1.5, 1.5]), x),
    ("opset10 linear s0.7", model(list(x.shape), dict(mode="linear"), scales=[1, 1, 0.7, 0.6]), x),
    ("opset10 nearest s0.5", model(list(x.shape), dict(mode="nearest"), scales=[1, 1, 0.5, 0.5]), x),
    ("opset10 nearest s2", model(list(x.shape), dict(mode="nearest"), scales=[1, 1, 2, 2]), x),
    ("axes [3,2] s", model(list(x.shape), dict(mode="linear", axes=[3, 2]), scales=[1.5, 0.7]), x),
    ("axes [-1] size", model(list(x.shape), dict(mode="cubic", axes=[-1]), sizes=[4]), x),
    ("keep not_larger", model(list(x.shape), dict(mode="linear", keep_aspect_ratio_policy="not_larger"), sizes=[1, 2, 14, 14]), x),
    ("keep not_smaller", model(list(x.shape), dict(mode="linear", keep_aspect_ratio_policy="not_smaller"), sizes=[1, 2, 14, 14]), x),
    ("channel scale", model(list(x.shape), dict(mode="nearest"), scales=[1, 2, 1, 1]), x),
    ("exclude_outside cubic", model(list(x.shape), dict(mode="cubic", exclude_outside=1), scales=[1, 1, 1.5, 0.7]), x),
    ("cubic a=-0.5 s1.5", model(list(x.shape), dict(mode="cubic", cubic_coeff_a=-0.5), scales=[1, 1, 1.5, 1.5]), x),
]
x3 = np.random.default_rng(1).standard_normal((2, 3, 11)).astype("float32")
x5 = np.random.default_rng(2).standard_normal((1, 2, 3, 5, 6)).astype("float32")
extra += [("3d linear s1.7", model(list(x3.shape), dict(mode="linear"), scales=[1, 1, 1.7]), x3),
          ("3d nearest s2", model(list(x3.shape), dict(mode="nearest"), scales=[1, 1, 2.0]), x3),
          ("5d linear s1.5", model(list(x5.shape), dict(mode="linear"), scales=[1, 1, 1.5, 1.5, 0.5]), x5),
          ("5d nearest sizes", model(list(x5.shape), dict(mode="nearest"), sizes=[1, 2, 6, 7, 9]), x5)]
for label, m, xx in extra:
    if label.startswith("opset10"):
        m.opset_import[0].version = 10
        del m.graph.node[0].input[1:]
        m.graph.node[0].input.append("scales")
    r = check(m, xx)
    counts[r.split()[0]] += 1
    print(label, r, flush=True)
def upsample(scales, mode, opset):
    inits = [] if opset == 7 else [helper.make_tensor("scales", TensorProto.FLOAT, [4], scales)]
    node = helper.make_node("Upsample", ["x"] + ([] if opset == 7 else ["scales"]), ["y"], mode=mode, **({"scales": scales} if opset == 7 else {}))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
for opset in (7, 9):
    for mode in ("nearest", "linear"):
        for sc in ([1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 1.5, 2.5]):
            r = check(upsample(sc, mode, opset), x)
            counts[r.split()[0]] += 1
            print("upsample", opset, mode, sc, r, flush=True)
print(", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=sys.stderr)
