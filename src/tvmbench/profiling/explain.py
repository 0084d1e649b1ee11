"""``tvmbench explain``: where TVM wins and loses against a peer, operator kind by operator kind.

Each framework is profiled in its own worker with its own profiler: TVM with the Relax VM's
instrument hook (each kernel's time inside the model, as ``tvmbench profile``), ONNX Runtime with
its session profiling, OpenVINO with its per-node performance counters, PyTorch with
``torch.profiler`` (self time per aten op), torch.compile with ``torch.profiler`` over a copy
compiled with Inductor's kernel profiling (self time per generated kernel and library call). Their operators are grouped by the same kinds
(``backends.base.OP_KINDS``: conv, matmul, norm, softmax, pool, layout, elementwise) and set side
by side. Each framework's end-to-end median is measured in the same worker without the profiler;
what its per-operator sum does not explain (the runtime's own work, the profiler's overhead) is
printed as such, so a reader can tell how far the breakdown can be trusted.

The two workers run at once and measure in alternating turns (``lockstep.Pacer``): profiled one
after the other, each side landed in whatever state a shared host was in at the time, and on the
2-vCPU EPYC VM, whose small parallel kernels run 2.5x slower in one state than in the other,
BERT's layer norms read 2.6x OpenVINO's in one run and 1.1-1.2x in the next.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from tvmbench.backends.base import OP_KINDS, BackendConfig, OpTime, weight_elements
from tvmbench.measure.lockstep import Pacer, Turns
from tvmbench.models import ModelOptions
from tvmbench.profiling.collect import ELEMENTWISE_OPS

PEERS = ("onnxruntime", "openvino", "pytorch", "torch_compile")

# tvmbench's operator kinds (profiling/collect.py) by the kinds all frameworks share.
_TVM_KINDS = {"dense": "matmul", "batch matmul": "matmul", "winograd transform": "conv", "reduction": "pool"}


def tvm_kind(kind: str) -> str:
    return "conv" if kind.startswith("conv2d") else _TVM_KINDS.get(kind, kind if kind in OP_KINDS else "elementwise")


@dataclass
class Breakdown:
    """One framework's per-operator profile and its end-to-end median, both in ms per inference.
    TVM's also has its kernel calls in execution order (``calls``), each kind's roofline bound
    (``bound_ms``: the least time the machine's measured peak and bandwidth allow for the work of
    that kind's kernels) and the roofline itself. The compute roof is the FMA throughput measured
    here (``measure/peak.py``: independent vector FMAs in registers on every thread), not a
    datasheet number and not a BLAS (which TVM's convolutions beat on Zen 5); each kernel's
    memory slope is the bandwidth of the nearest level that holds its bytes (``caches``, then
    memory: ``peak.Bandwidth``)."""

    framework: str
    end_to_end_ms: float
    ops: list[OpTime] = field(default_factory=list)
    calls: list[OpTime] = field(default_factory=list)
    bound_ms: dict[str, float] = field(default_factory=dict)
    roofline: dict[str, Any] | None = None

    @property
    def explained_ms(self) -> float:
        return sum(op.ms for op in self.ops)

    def per_kind(self) -> dict[str, float]:
        out = dict.fromkeys(OP_KINDS, 0.0)
        for op in self.ops:
            out[op.kind] = out.get(op.kind, 0.0) + op.ms
        return out

    def to_json(self) -> dict[str, Any]:
        doc = {"framework": self.framework, "end_to_end_ms": self.end_to_end_ms, "explained_ms": self.explained_ms,
               "per_kind_ms": self.per_kind(), "ops": [asdict(op) for op in self.ops]}
        if self.roofline:
            doc.update(roofline=self.roofline, bound_ms=self.bound_ms)
        return doc


@dataclass(frozen=True)
class ExplainJob:
    model: str
    options: ModelOptions
    framework: str
    backend: BackendConfig
    runs: int = 20
    warmup: int = 5
    turns: Turns | None = None  # lockstep: this worker's place in the turns the two frameworks take


def explain_job(job: ExplainJob, progress: Any = None) -> Breakdown:
    """Worker entry: prepare the framework, then time plain runs and its per-operator profile,
    in turns with the other framework's worker when ``job.turns`` is given (``lockstep.Pacer``)."""
    from tvmbench.profiling.kernels import plain_runs, prepared_backend

    say = progress or (lambda msg: None)
    backend = prepared_backend(job.framework, job.model, job.options, job.backend, say)
    # (TVM's kernels read before the turns begin: seconds of legalizing, which the other
    # framework's first turns, its plain runs, once shared the cores with)
    kernels = _kernels(backend, job) if job.framework in ("tvm", "tvm_untuned") else None
    pacer = Pacer(job.turns, rewarm=backend.run)
    try:
        if job.turns is not None:
            say("waiting for the other framework (lockstep)")
        pacer.arrive()
        if kernels is not None:
            say("end-to-end and per-kernel runs, alternating")
            result = _tvm_breakdown(backend, job, say, pacer, kernels)
        else:
            say("end-to-end runs")
            plain = plain_runs(backend, job.warmup, job.runs, pacer)
            say("per-operator profile")
            result = Breakdown(job.framework, statistics.median(plain) * 1e3, backend.op_profile(job.runs, pacer.profiled))
    finally:
        pacer.finish()
    backend.close()
    result.ops.sort(key=lambda op: -op.ms)
    return result


def _kernels(backend: Any, job: ExplainJob) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Each kernel of the TVM build by name: its PrimFunc and its features (``collect.features``)."""
    import tvm

    from tvmbench.compile import pipeline
    from tvmbench.profiling.collect import features

    legal = pipeline.per_inference(pipeline.legalized(backend.relax_module(), job.backend.target))
    return {gv.name_hint: (f, features(gv.name_hint, f)) for gv, f in legal.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc)}


def _tvm_breakdown(backend: Any, job: ExplainJob, say: Any, pacer: Pacer,
                   kernels: dict[str, tuple[Any, dict[str, Any]]]) -> Breakdown:
    """TVM's kernels inside the model, each with its kind, per kernel and per call in order, and
    each kind's roofline bound; VM builtins (allocation, shape functions) are the rest, reported
    as unexplained. The plain and the instrumented runs alternate (``interleaved_runs``), so the
    unexplained rest is not a change of the host's speed between the two."""
    from tvmbench.compile.rules.amx import peak_rate
    from tvmbench.measure.peak import measure_bandwidth, measure_compute_peak
    from tvmbench.profiling.kernels import interleaved_runs

    sequence: list[list[tuple[str, float]]] = []
    plain, per_run, calls = interleaved_runs(backend, job.warmup, job.runs, sequence, paced=pacer)
    end_to_end_ms = statistics.median(plain) * 1e3
    funcs = {name: kernels[name][0] for name in calls if name in kernels}
    feats = {name: kernels[name][1] for name in funcs}
    kinds = {name: tvm_kind(f["kind"]) for name, f in feats.items()}
    ops = [OpTime(name, feats[name]["kind"], kinds[name], statistics.median(r.get(name, 0.0) for r in per_run) * 1e3)
           for name in feats]
    in_order = [(i, name) for i, (name, _) in enumerate(sequence[0]) if name in feats]
    names = [name for _, name in in_order]
    per_call = [OpTime(name, feats[name]["kind"], kinds[name], statistics.median(run[i][1] for run in sequence) * 1e3,
                       order, *_shapes_as_layer(feats, names, order))
                for order, (i, name) in enumerate(in_order)]
    per_call = with_winograd_transforms(per_call, feats)
    say("the machine's roofline")
    peak, bandwidth = pacer.profiled(lambda: (measure_compute_peak(job.backend.threads),
                                              measure_bandwidth(job.backend.threads)))
    bound: dict[str, float] = {}
    for name, f in feats.items():  # (a bf16 dot-product kernel's roof: twice the FMA's, compile/bf16.py; AMX's: rules/amx.py)
        roof = peak_rate(funcs[name], job.backend.target) * peak.gflops
        least_s = max((f["flops"] or 0.0) / (roof * 1e9), f["bytes"] / (bandwidth.gbs_for(f["bytes"]) * 1e9))
        bound[kinds[name]] = bound.get(kinds[name], 0.0) + least_s * calls[name] * 1e3
    return Breakdown(job.framework, end_to_end_ms, ops, per_call, bound,
                     {"peak_gflops": peak.gflops, "bandwidth_gbs": bandwidth.gbs,
                      "caches": [asdict(c) for c in bandwidth.caches]})


def compare(tvm: Breakdown, peer: Breakdown) -> list[dict[str, Any]]:
    """Per kind: both frameworks' ms per inference, TVM's loss (positive: TVM slower), the ratio,
    and each one's % of the kind's roofline bound (the bound comes from TVM's kernels of that
    kind: the same math, unless a framework fused it into another kind), largest loss first."""
    ours, theirs = tvm.per_kind(), peer.per_kind()
    rows = []
    for k in OP_KINDS:
        if ours[k] <= 0 and theirs[k] <= 0:
            continue
        bound = tvm.bound_ms.get(k)
        rows.append({"kind": k, "tvm_ms": ours[k], "peer_ms": theirs[k], "tvm_loss_ms": ours[k] - theirs[k],
                     "ratio": ours[k] / theirs[k] if theirs[k] > 0 else None, "bound_ms": bound,
                     "tvm_percent_of_bound": 100 * bound / ours[k] if bound and ours[k] > 0 else None,
                     "peer_percent_of_bound": 100 * bound / theirs[k] if bound and theirs[k] > 0 else None})
    return sorted(rows, key=lambda r: -r["tvm_loss_ms"])


MATCHED_KINDS = ("conv", "matmul")


def match_layers(tvm: Breakdown, peer: Breakdown) -> dict[str, Any]:
    """TVM's convolution and matmul kernels paired with the peer's layers, one by one.

    TVM's fused kernels carry no layer names (the ONNX node names of ONNX Runtime and OpenVINO
    do: ``/layer1/layer1.0/conv1/Conv``), so a layer is recognised by its shapes: a TVM kernel
    pairs with a peer layer of the same output size (layouts differ, sizes do not), preferring
    the one whose weights are closest in size (TVM's packed, padded or Winograd-transformed
    weights are near, not equal), then the earliest in execution order. Two frameworks that run a
    residual block's branches in different orders still pair each branch with itself, since the
    branches' weights differ. A kernel that joins several layers pairs with the peer's layers
    between its neighbours' partners (``_pair_joined``), its peer time their sum. What finds no
    partner is counted in ``unmatched`` with the reason. A Winograd layer's TVM time is its
    product's and its transforms' (see ``_layers``). Returns
    ``{"layers": [...], "repeated": [...], "unmatched": {kind: reason}}``, layers by TVM's loss,
    largest first; ``repeated``: the same layers summed over a model's repeated blocks
    (``repeated_layers``)."""
    layers: list[dict[str, Any]] = []
    unmatched: dict[str, str] = {}
    in_order = sorted((op for op in peer.ops if op.order is not None), key=lambda op: op.order)
    for kind in MATCHED_KINDS:
        ours = _layers([c for c in tvm.calls if c.kind == kind])
        theirs = sorted((op for op in peer.ops if op.kind == kind), key=lambda op: (op.order is None, op.order))
        if not ours and not theirs:
            continue
        if any(op.out_elements is None for op in theirs):
            unmatched[kind] = f"{peer.framework}'s profile gives no output shapes to recognise its layers by"
            continue
        single = [a for a in ours if not joins_layers(a)]
        pairs, _ = _pair_by_shape(single, theirs)
        groups = [(a, [b]) for a, b in pairs] + [
            (a, _with_softmax(a, bs, peer.ops)) for a, bs in _pair_joined([a for a in ours if joins_layers(a)], pairs, theirs)]
        groups = [(a, _with_epilogue(a, bs, in_order)) for a, bs in groups]
        layers += [{"kind": kind, "tvm_kernel": a.layer, "peer_layer": " + ".join(b.layer for b in bs),
                    "tvm_ms": a.ms, "peer_ms": sum(b.ms for b in bs), "tvm_loss_ms": a.ms - sum(b.ms for b in bs)}
                   for a, bs in groups]
        left = (len(ours) - len(groups), len(theirs) - sum(op.kind == kind for _, bs in groups for op in bs))
        if left[0] or left[1]:
            unmatched[kind] = (f"{left[0]} of TVM's {len(ours)} {kind} kernels and {left[1]} of {peer.framework}'s "
                               f"{len(theirs)} {kind} layers have no partner of the same output size and near weight size")
    layers.sort(key=lambda r: -r["tvm_loss_ms"])
    return {"layers": layers, "repeated": repeated_layers(layers), "unmatched": unmatched}


def block_pattern(layer: str) -> str:
    """A layer's name with its repeated block's index left out: ``/encoder/layer.5/attention/
    query/MatMul`` -> ``/encoder/layer.*/attention/query/MatMul``, ResNet's ``/layer1/layer1.2/
    conv1/Conv`` -> ``/layer1/layer1.*/conv1/Conv`` (stages stay apart). Indices of ops within a
    block (``MatMul_1``) are kept: they are different layers."""
    import re

    return re.sub(r"\.\d+(?=[/.]|$)", ".*", layer)


def repeated_layers(layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Paired layers summed over a model's repeated blocks: one row per TVM kernel and peer
    layer pattern (``block_pattern``) that occurs more than once, with how many, by TVM's loss,
    largest first. A transformer's twelve fc1 layers are one row instead of twelve."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in layers:
        key = (r["kind"], r["tvm_kernel"], block_pattern(r["peer_layer"]))
        g = groups.setdefault(key, {"kind": key[0], "tvm_kernel": key[1], "peer_layer": key[2], "count": 0,
                                    "tvm_ms": 0.0, "peer_ms": 0.0, "tvm_loss_ms": 0.0})
        g["count"] += 1
        for k in ("tvm_ms", "peer_ms", "tvm_loss_ms"):
            g[k] += r[k]
    return sorted((g for g in groups.values() if g["count"] > 1), key=lambda g: -g["tvm_loss_ms"])


# Layers whose weights differ by more than this factor are not one layer (TVM's Winograd product
# holds 4x a 3x3 convolution's weights, packed ones a few padded channels more): ViT's attention,
# one kernel in TVM and a fused subgraph OpenVINO does not call a matmul, has an fc2's output size.
MAX_WEIGHT_RATIO = 8
MAX_WEIGHT_DISTANCE = math.log(MAX_WEIGHT_RATIO)
UNKNOWN_DISTANCE = MAX_WEIGHT_DISTANCE  # (unknown weights pair, after every known near one)


def joined_layers(call: OpTime) -> int:
    """How many of a model's layers of its kind a TVM kernel computes: its name lists the ops
    fused in it, and two convolutions or more are layers joined (MobileNet's expansion and
    depthwise convolution, ``rules/expand_window.py``); a joined attention holds two matmuls."""
    convs = call.layer.count("conv2d")
    return convs if convs >= 2 else 2 if "attention" in call.layer else 1


def joins_layers(call: OpTime) -> bool:
    """Whether a TVM kernel computes several layers (``joined_layers``)."""
    return joined_layers(call) > 1


def _pair_joined(joined: list[OpTime], pairs: list[tuple[OpTime, Any]],
                 theirs: list[OpTime]) -> list[tuple[OpTime, list[OpTime]]]:
    """Each kernel that joins several layers with the peer's layers it stands for: up to as many
    as it joins (``joined_layers``), the first not yet paired that run between the partners of
    the nearest paired kernels before and after it (execution order on both sides; joined
    kernels in a row take theirs in turn). Their output sizes differ from the joined kernel's
    (it writes only the last layer's output), so shapes cannot pair them; MobileNetV2's joined
    blocks had each paired with the projection of another block."""
    taken = {id(b) for _, b in pairs}
    found: list[tuple[OpTime, list[OpTime], float, float]] = []
    for a in sorted(joined, key=lambda c: c.order or 0):
        before = [b.order for t, b in pairs if (t.order or 0) < (a.order or 0) and b.order is not None]
        after = [b.order for t, b in pairs if (t.order or 0) > (a.order or 0) and b.order is not None]
        low, high = max(before, default=-1), min(after, default=float("inf"))
        mine = _up_to(joined_layers(a), [b for b in theirs if id(b) not in taken and b.order is not None
                                         and low < b.order < high])
        taken.update(id(b) for b in mine)
        found.append((a, mine, low, high))
    # A layer the peer runs just outside that window (ONNX Runtime computes an attention's scores
    # before the value projection, TVM after it) joins the nearest joined kernel that has room.
    for b in theirs:
        room = [f for f in found if sum(x.layers for x in f[1]) + b.layers <= joined_layers(f[0])]
        if id(b) in taken or b.order is None or not room:
            continue
        nearest = min(room, key=lambda f: max(f[2] - b.order, b.order - f[3], 0))
        nearest[1].append(b)
        taken.add(id(b))
    return [(a, sorted(mine, key=lambda b: b.order or 0)) for a, mine, _, _ in found if mine]


def _up_to(layers: int, candidates: list[OpTime]) -> list[OpTime]:
    """The first of ``candidates`` that together compute ``layers`` layers (each its ``layers``:
    OpenVINO's attention subgraph is both of an attention's matmuls, and it had taken two
    blocks' attentions for one of TVM's, leaving 17 of T5's unpaired)."""
    chosen: list[OpTime] = []
    for b in candidates:
        if sum(x.layers for x in chosen) + b.layers > layers:
            break
        chosen.append(b)
    return chosen


def _with_softmax(kernel: OpTime, partners: list[OpTime], ops: list[OpTime]) -> list[OpTime]:
    """A joined attention's partners with the peer's softmax between its two matmuls: TVM's
    kernel computes the softmax too, and ONNX Runtime runs it as a layer of another kind."""
    orders = [b.order for b in partners if b.order is not None]
    if "attention" not in kernel.layer or len(orders) < 2:
        return partners
    between = [op for op in ops if op.kind == "softmax" and op.order is not None and min(orders) < op.order < max(orders)]
    return sorted(partners + between, key=lambda b: b.order or 0)


def _with_epilogue(kernel: OpTime, partners: list[OpTime], in_order: list[OpTime]) -> list[OpTime]:
    """The partners with the peer's elementwise layers that run right after the last of them
    (before any layer of another kind), when TVM's kernel fused elementwise work into its
    epilogue (its name lists it): TVM keeps no elementwise kernels of its own in these models,
    and an EfficientNet excitation's multiplication into its map, which OpenVINO runs as a layer
    after the convolution, is in TVM's time (it read 2.5x OpenVINO's without it)."""
    tokens = {t.rstrip("0123456789") for t in kernel.layer.split("_")[1:]}
    last = max((b.order for b in partners if b.order is not None), default=None)
    if last is None or not tokens & ELEMENTWISE_OPS:
        return partners
    after = [op for op in in_order if op.order > last]
    trailing = list(itertools.takewhile(lambda op: op.kind == "elementwise", after))
    return partners + trailing


def _pair_by_shape(ours: list[OpTime], theirs: list[OpTime]) -> tuple[list[tuple[OpTime, OpTime]], tuple[int, int]]:
    """Each of ``ours`` (in execution order) with the free one of ``theirs`` of equal output size
    and nearest weight size (within MAX_WEIGHT_RATIO where both are known; sizes within about
    10 % count as equal), then nearest in relative position in the model (a depthwise convolution
    over 14x14x384 has the output and the weights, 3456, of MobileNetV2's 1x1 projection from 144
    to 24 channels over 56x56, a third of the model earlier), then earliest. A kernel left over
    then pairs with a free layer of output size within ``MAX_PADDING`` either way near its place
    in the model (channels padded on one side): the nearest in weights, then in output size.
    Returns the pairs and how many of each side were left over."""
    def distance(a: OpTime, b: OpTime) -> float:
        if not a.weight_elements or not b.weight_elements:
            return UNKNOWN_DISTANCE
        return abs(math.log(a.weight_elements / b.weight_elements))

    def position(ops: list[OpTime]) -> dict[int, float]:
        last = max((op.order for op in ops if op.order is not None), default=0) or 1
        return {id(op): (op.order or 0) / last for op in ops}

    where = {**position(ours), **position(theirs)}
    free = list(theirs)
    pairs = []
    for a in ours:
        candidates = [b for b in free if b.out_elements == a.out_elements and distance(a, b) <= MAX_WEIGHT_DISTANCE]
        if not candidates:
            continue
        best = min(candidates, key=lambda b: (round(distance(a, b), 1), abs(where[id(a)] - where[id(b)]),
                                              free.index(b)))
        free.remove(best)
        pairs.append((a, best))
    paired = {id(a) for a, _ in pairs}
    for a in [a for a in ours if id(a) not in paired]:  # padded channels: MobileNetV3's 72 computed as 80
        candidates = [b for b in free if a.out_elements and b.out_elements
                      and 1 / MAX_PADDING <= a.out_elements / b.out_elements <= MAX_PADDING
                      and distance(a, b) <= MAX_WEIGHT_DISTANCE
                      and abs(where[id(a)] - where[id(b)]) <= MAX_PADDED_GAP]
        if candidates:
            best = min(candidates, key=lambda b: (round(distance(a, b), 1),
                                                  round(abs(math.log(a.out_elements / b.out_elements)), 1),
                                                  abs(where[id(a)] - where[id(b)])))
            free.remove(best)
            pairs.append((a, best))
    return pairs, (len(ours) - len(pairs), len(free))


# A kernel left without an equal partner may have computed its layer over channels padded to
# whole vectors (``passes/pad_window_channels.py``, the contraction rule's channel slices:
# MobileNetV3's 72 as 80), and so may the peer (ONNX Runtime's NCHWc blocks: EfficientNet's 8
# squeezed channels as 16): it pairs with a free layer of up to this ratio of output sizes either
# way, no further than this share of the model from its place.
MAX_PADDING = 4.0
MAX_PADDED_GAP = 0.1


def _shapes_as_layer(feats: dict[str, dict[str, Any]], names: list[str], at: int) -> tuple[int | None, int | None]:
    """(output elements, weight elements) of the ``at``-th kernel call as the layer it computes,
    to pair with a peer's. A Winograd product's output is in the transformed domain ([alpha^2,
    tiles, C]: ResNet-50's 14x14x256 convolution as 16 x 49 x 256, the size of a 1x1 convolution's
    14x14x1024 output) and so are its weights (alpha^2 / 9 times a 3x3 kernel's): its output is
    the pixels of the next output transform's that reads it by its own channels, its weights
    9 / alpha^2 of its own. A contraction whose epilogue broadcasts it to a larger output (an
    EfficientNet block's excitation, 1x1x240, multiplied into its 28x28x240 map) is the layer
    it computes: it had paired with the 28x28x240 expansion layers of other blocks."""
    f = feats[names[at]]
    out = f["outputs"][0]["shape"] if f["outputs"] else None
    weights = weight_elements(tvm_kind(f["kind"]), [a["shape"] for a in f["inputs"]], out)
    contraction = f.get("contraction_out")
    if out is not None and contraction and math.prod(contraction) < math.prod(out):
        out = contraction  # an epilogue broadcast it: a squeeze-and-excitation's scales times the map
    if f["kind"] != "conv2d winograd" or out is None:
        return (math.prod(out) if out is not None else None), weights
    real = next((g.get("pixels_out") or g["outputs"][0]["shape"] for g in (feats[n] for n in names[at + 1:])
                 if g["kind"] == "winograd transform" and out in [a["shape"] for a in g["inputs"]]
                 and g["outputs"]), None)
    # (the transform may write a concatenation of several layers' outputs, GoogLeNet's inception
    # branches: the layer's own output is that map's pixels by its own channels; or, joined with
    # the next layer's input transform, no pixels at all: ``pixels_out``, what its output
    # transform's block writes inside it)
    return (math.prod(real[:-1]) * out[-1] if real is not None else None), (weights * 9 // out[0] if weights else None)


def _layers(calls: list[OpTime]) -> list[OpTime]:
    """TVM's calls as layers: a Winograd convolution's product kernel stands for the layer, with
    the time of its transforms where they were its own (``with_winograd_transforms``); the
    transform kernels are left out."""
    return [c for c in calls if c.op_type != "winograd transform"]


def with_winograd_transforms(calls: list[OpTime], feats: dict[str, dict[str, Any]]) -> list[OpTime]:
    """The calls, each Winograd product's time with its transforms' added: the nearest transform
    after it that reads its output (the output transform) and the nearest before it that writes
    its input (the input transform). A transform kernel counts once: one that fused a layer's
    output transform with the next layer's input transform stays with the first layer. Without
    them ResNet-50's 3x3 layers read 3.6x faster than OpenVINO's (0.124 against 0.465 ms) when
    the product is about half the layer."""
    import dataclasses

    def shapes(name: str, key: str) -> list[Any]:
        return [a["shape"] for a in feats[name][key]]

    def is_transform(q: int) -> bool:
        return feats[calls[q].layer]["kind"] == "winograd transform"

    taken: set[int] = set()
    out = list(calls)
    for p, call in enumerate(calls):
        if feats[call.layer]["kind"] != "conv2d winograd":
            continue
        product_in, product_out = shapes(call.layer, "inputs")[:1], shapes(call.layer, "outputs")[:1]
        after = next((q for q in range(p + 1, len(calls))
                      if is_transform(q) and product_out and product_out[0] in shapes(calls[q].layer, "inputs")), None)
        before = next((q for q in range(p - 1, -1, -1)
                       if is_transform(q) and product_in and product_in[0] in shapes(calls[q].layer, "outputs")), None)
        extra = 0.0
        for q in (after, before):
            if q is not None and q not in taken:
                taken.add(q)
                extra += calls[q].ms
        out[p] = dataclasses.replace(call, ms=call.ms + extra)
    return out
