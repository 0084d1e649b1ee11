"""Routes into TVM's ONNX importer: the file as given, then simplified the way users do by hand.

TVM's importer needs static shapes where ONNX files computed at run time from ``Shape`` nodes:
a ``Reshape`` after a ``Pad`` whose pads were computed from the input's size (Swin, any model
exported with ``torch.onnx.export(dynamo=False)``) fails with "Reshape expects the input tensor
to have known shape". With the input shapes pinned, those shape subgraphs are constants, and
folding them is what onnx-simplifier does. The routes are tried in order; the result names the
one that imported the file:

1. ``as given``.
2. ``folded``: the input shapes pinned, ONNX shape inference, ``Shape`` of a statically shaped
   tensor replaced by its value, every node whose inputs are all constants evaluated with ONNX's
   reference implementation, and an ``If`` on a constant condition replaced by its branch (the
   legacy exporter writes one around ``scatter_reduce``), repeated until nothing changes.
3. ``onnxruntime-basic``: ONNX Runtime's basic graph optimisations (constant folding and
   redundant-node removal, standard ONNX ops only) on the pinned model, saved to a file.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# Constant subgraphs larger than this are left to TVM (folding a weight transform here would
# only move the work from load time to import time and double the file in memory).
_FOLD_LIMIT = 1 << 22
# Integer initializers up to this many elements become constants (``integer_initializers_as_constants``).
_SHAPE_LIMIT = 4096


def integer_initializers_as_constants(proto: Any) -> Any:
    """``proto`` (changed in place) with its integer initializers, and any a graph output reads
    directly, as ``Constant`` nodes.

    TVM's importer makes every initializer a function parameter (tvmbench keeps the weights as
    inputs, for LiftTransformParams), so a shape, axes or index list stored as an initializer
    is unknown at import: torch's dynamo exporter stores them so, and every ``Expand``,
    ``Reshape`` or ``Tile`` after it had a run-time shape that ConvertLayout and FastMath
    could not take. ``Constant`` nodes are what the importer folds. (An output that is an
    initializer, ``torch.full_like`` exported, left the VM a parameter it never bound.)"""
    import onnx

    graph = proto.graph
    inputs = {i.name for i in graph.input}
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
    outputs = {o.name for o in graph.output}
    small = lambda i: int(np.prod(i.dims)) <= _SHAPE_LIMIT  # noqa: E731 - shapes and indices, not int8 weights
    move = [((i.data_type not in floats and small(i)) or i.name in outputs) and i.name not in inputs
            for i in graph.initializer]
    if not any(move):
        return proto
    moved = [i for i, m in zip(graph.initializer, move, strict=True) if m]
    kept = [i for i, m in zip(graph.initializer, move, strict=True) if not m]
    constants = [onnx.helper.make_node("Constant", [], [i.name], value=i) for i in moved]
    nodes = constants + list(graph.node)
    del graph.initializer[:], graph.node[:]
    graph.initializer.extend(kept)
    graph.node.extend(nodes)
    return proto


def pin_inputs(proto: Any, shapes: dict[str, list[int]]) -> Any:
    """A copy of ``proto`` whose graph inputs have the given static shapes."""
    import onnx

    pinned = onnx.ModelProto()
    pinned.CopyFrom(proto)
    for inp in pinned.graph.input:
        if inp.name in shapes:
            dims = inp.type.tensor_type.shape.dim
            del dims[:]
            for d in shapes[inp.name]:
                dims.add().dim_value = int(d)
    return pinned


def _static_shapes(proto: Any) -> dict[str, list[int]]:
    import onnx

    inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    graph = inferred.graph
    shapes = {}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        dims = vi.type.tensor_type.shape.dim
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape") and \
                all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = [d.dim_value for d in dims]
    return shapes


def _shape_value(node: Any, shape: list[int]) -> np.ndarray:
    attrs = {a.name: a.i for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    return np.array(shape[start:end], dtype=np.int64)


def _size(values: Any, name: str) -> int:
    """Elements of a known value, from an initializer's dims without converting it."""
    proto = getattr(values, "protos", {}).get(name)
    if proto is not None and not dict.__contains__(values, name):
        return int(np.prod(proto.dims))
    return int(values[name].size)


def _evaluate(node: Any, values: dict[str, np.ndarray], opset: Any) -> list[np.ndarray] | None:
    """The outputs of one node whose inputs are all known, by ONNX's reference implementation;
    None when it cannot be evaluated here (a subgraph, a custom domain, an error)."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    if node.domain not in ("", "ai.onnx") or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                                for a in node.attribute):
        return None
    if node.op_type in ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"):
        return None
    inputs = [i for i in node.input if i]
    if sum(_size(values, i) for i in inputs) > _FOLD_LIMIT:
        return None
    graph = onnx.helper.make_graph(
        [node], "fold", [onnx.helper.make_tensor_value_info(i, onnx.helper.np_dtype_to_tensor_dtype(values[i].dtype),
                                                           values[i].shape) for i in inputs],
        [onnx.helper.make_empty_tensor_value_info(o) for o in node.output])
    try:
        model = onnx.helper.make_model(graph, opset_imports=list(opset))
        outs = ReferenceEvaluator(model).run(None, {i: values[i] for i in inputs})
    except Exception:  # anything the reference cannot run stays in the graph
        return None
    if any(np.asarray(o).size > _FOLD_LIMIT for o in outs):
        return None
    return [np.asarray(o) for o in outs]


class _Constants(dict):
    """Known values by name: the initializers, converted to arrays only when a node reads them
    (a pass reads a few small ones; converting every weight on each of up to 64 passes would
    copy the whole model each time)."""

    def __init__(self, initializers: Any) -> None:
        super().__init__()
        self.protos = {i.name: i for i in initializers}

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in self.protos

    def __missing__(self, name: str) -> np.ndarray:
        from onnx import numpy_helper

        value = self[name] = numpy_helper.to_array(self.protos[name])
        return value


def _fold_once(proto: Any) -> tuple[Any, int]:
    """One pass of folding; returns the model and how many nodes it replaced by constants."""
    from onnx import numpy_helper

    shapes = _static_shapes(proto)
    graph = proto.graph
    values = _Constants(graph.initializer)
    folded: dict[str, np.ndarray] = {}
    kept, inlined = [], 0
    for node in graph.node:
        outs: list[np.ndarray] | None = None
        if node.op_type == "If" and node.input[0] in values:
            kept.extend(_branch(node, bool(np.asarray(values[node.input[0]]).reshape(-1)[0])))
            inlined += 1
            continue
        if node.op_type == "Constant":  # TVM reads Constant nodes itself: kept, but they feed folding
            attr = {a.name: a for a in node.attribute}
            if "value" in attr:
                values[node.output[0]] = numpy_helper.to_array(attr["value"].t)
        elif node.op_type == "Shape" and node.input[0] in shapes:
            outs = [_shape_value(node, shapes[node.input[0]])]
        elif node.input and all(i in values for i in node.input if i):
            outs = _evaluate(node, values, proto.opset_import)
        if outs is None:
            kept.append(node)
            continue
        for name, value in zip(node.output, outs, strict=False):
            values[name] = folded[name] = value
    if not folded and not inlined:
        return proto, 0
    used = {i for n in kept for i in _reads(n)} | {o.name for o in graph.output}
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(numpy_helper.from_array(v, name) for name, v in folded.items() if name in used)
    return proto, len(folded) + inlined


def _branch(node: Any, condition: bool) -> list[Any]:
    """The nodes of the branch an ``If`` takes, its outputs renamed to the ``If``'s by
    ``Identity`` nodes (ONNX names are unique across subgraphs, so the branch's own names stay)."""
    import onnx

    attrs = {a.name: a.g for a in node.attribute}
    branch = attrs["then_branch" if condition else "else_branch"]
    nodes = [onnx.helper.make_node("Constant", [], [i.name], value=i) for i in branch.initializer]
    nodes += list(branch.node)
    return nodes + [onnx.helper.make_node("Identity", [o.name], [name]) for o, name in zip(branch.output, node.output, strict=True)]


def fold_shapes(proto: Any, shapes: dict[str, list[int]]) -> Any:
    """Route 2: the model with its input shapes pinned and its constant subgraphs folded."""
    proto = pin_inputs(proto, shapes)
    # Each pass makes the shapes behind the folded values static, which the next pass folds
    # further: Swin-T's shape arithmetic settles after 16 passes (5 s).
    for _ in range(64):
        proto, count = _fold_once(proto)
        if not count:
            break
    return _without_dead_nodes(proto)


def _reads(node: Any) -> set[str]:
    """The names a node reads, including those its subgraphs (If, Loop) read from outside."""
    names = {i for i in node.input if i}
    for attr in node.attribute:
        for graph in [attr.g] if attr.HasField("g") else list(attr.graphs):
            for inner in graph.node:
                names |= _reads(inner)
    return names


def _without_dead_nodes(proto: Any) -> Any:
    """Drop the nodes (mostly ``Constant``) whose outputs nothing reads any more."""
    graph = proto.graph
    used = {o.name for o in graph.output}
    alive = []
    for node in reversed(graph.node):
        if any(o in used for o in node.output):
            alive.append(node)
            used.update(_reads(node))
    del graph.node[:]
    graph.node.extend(reversed(alive))
    return proto


def onnxruntime_basic(proto: Any, shapes: dict[str, list[int]]) -> Any:
    """Route 3: ONNX Runtime's basic-level optimisation of the pinned model, read back."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="tvmbench-onnx-") as tmp:
        src, out = Path(tmp) / "pinned.onnx", Path(tmp) / "optimized.onnx"
        onnx.save(pin_inputs(proto, shapes), str(src))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(out)
        options.log_severity_level = 3
        ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
        return onnx.load(str(out))


def routes() -> list[tuple[str, Callable[[Any, dict[str, list[int]]], Any] | None]]:
    """The routes in the order they are tried (ONNX Runtime's only when it is installed)."""
    found: list[tuple[str, Callable[[Any, dict[str, list[int]]], Any] | None]] = [
        ("as given", None), ("folded", fold_shapes)]
    try:
        import onnxruntime  # noqa: F401

        found.append(("onnxruntime-basic", onnxruntime_basic))
    except ImportError:
        pass
    return found


def failing_node(error: BaseException) -> tuple[str, str] | None:
    """The op type and node name TVM's importer was converting when ``error`` was raised (read
    from the traceback's ``_construct_nodes`` frame), or None."""
    tb = error.__traceback__
    found = None
    while tb is not None:
        node = tb.tb_frame.f_locals.get("node")
        if tb.tb_frame.f_code.co_name == "_construct_nodes" and hasattr(node, "op_type"):
            found = (node.op_type, node.name or "(unnamed)")
        tb = tb.tb_next
    return found
