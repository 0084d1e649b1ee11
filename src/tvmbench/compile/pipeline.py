"""The Relax pass pipeline per target: composition only, like TVM's own ``relax/pipeline.py``.

TVM's default CPU pipeline (``tvm.compile(mod, "llvm")``) does no operator fusion, and its GPU
pipeline does not decompose batch-norm for inference. We use one pipeline shape for both, in four
stages, so that the functions the tuner extracts are exactly the functions this pipeline compiles
(tuning records match by structural hash):

1. simplify (``simplify_passes``, in order there): dataflow blocks, top-k by selection, library dispatch,
   batch-norm to scale/shift, and on CPU tvmbench's passes (``passes/``: layouts to NHWC/HWIO kept through
   what follows, Winograd, grouped and padded windows, bf16, weights packed per output-channel tile); last
   LiftTransformParams, which moves weight-only work (layout transforms, packing, transposes, batch-norm
   folding) into ``main_transform_params``, run once at load;
2. legalize and fuse: (on CPU, FastMath: TVM's FastMathTransform, softmax by reciprocal), LegalizeOps, AnnotateTIROpPattern,
   FoldConstant, FuseOps, (on CPU, FuseExpansionIntoWindow, FuseAttention), FuseTIR, (on CPU, EliminateCommonSubexpr,
   KeyLimits), FlatTransformParams, RewriteDataflowReshape;
3. schedules: a MetaSchedule database where given, then default rules for what it did not cover (tvmbench's CPU rules
   in ``rules/``, then DLight's; functions already scheduled are skipped); then LazySelect, so no ``Select`` loads
   memory its condition excludes (a tuned schedule's kernel read megabytes past its input without it);
4. VM lowering: TVM's own dataflow-lowering and finalisation passes for the target.

tvmbench's passes live in ``passes/`` (one module each), its rules in ``rules/``."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import tvm
from tvm import relax
from tvm.s_tir import dlight as dl

from tvmbench.compile import passes, tir
from tvmbench.compile.codegen import Built, build_in_parallel
from tvmbench.compile.names import FLAT_TRANSFORM
from tvmbench.compile.rules import default_rules
from tvmbench.compile.tiles import accumulator_budget, half_vectors_full_rate, vector_lanes
from tvmbench.targets import ResolvedTarget

# Bumped whenever the pipeline changes what it produces, so cached libraries are rebuilt.
PIPELINE_VERSION = "227"
# 0: identical kernel calls are not merged (``benchmarks/rule_ab.py M pipeline.DEDUPLICATE_CALLS 0``).
DEDUPLICATE_CALLS = 1
# 0: a grouped convolution's shift and activation stay after its reshape to NHWC (``passes/reshape_last.py``).
ELEMENTWISE_BEFORE_RESHAPE = 1
# 0: inverted residuals keep expanded channels that are not whole vectors (``passes/pad_window_channels.py``).
PAD_WINDOW_CHANNELS = 1
# 0: a reshape of a reshape stays two (TVM's RemoveRedundantReshape; docs/performance.md, session 70).
REDUNDANT_RESHAPES = 1


def _backend(target: ResolvedTarget) -> Any:
    return relax.backend.cuda.pipeline if target.kind == "cuda" else relax.backend.cpu_generic.pipeline


def simplify_passes(target: ResolvedTarget) -> list[Any]:
    """Stage 1."""
    # (dataflow blocks around run-time checks, one_hot's asserts: without them nothing is fused or
    # lifted, a mixture of experts 120 ms against 41; top-k before the library dispatch's sort)
    result = [relax.transform.ConvertToDataflow(), *([passes.top_k_by_selection()] if target.kind == "llvm" else [])]
    result += _backend(target).library_dispatch_passes(target.tvm()) + [
        relax.transform.DecomposeOpsForInference(),
        passes.bounded_take(),
        passes.convert_layout_guards(),  # before ConvertLayout, which some forms crash
        passes.unbroadcast_matmul(),
        relax.transform.CanonicalizeBindings(),
    ]
    if target.kind == "llvm":
        # (NHWC activations with HWIO weights: output channels innermost, what the CPU rules vectorise)
        result += [passes.cpu_friendly_arithmetic(), passes.pad_attention(target), passes.pad_softmax_rows(target),
                   passes.conv1d_as_conv2d(), passes.on_row_maps(), relax.transform.CanonicalizeBindings(),
                   passes.sub_pixel_conv_transpose(),  # (ConvertLayout read OnRowMaps' aliases as NCHW)
                   passes.instance_norms_as_group_norms(),
                   relax.transform.ConvertLayout(target.layouts), passes.conv3d_as_conv2d(), passes.dilated_bands(),
                   passes.keep_channels_last(),
                   passes.group_norm_by_channel(),
                   relax.transform.CanonicalizeBindings(), passes.fold_scale_into_conv(),
                   passes.winograd_conv3x3(target),  # (before GroupedConvNHWC: it takes wide groups)
                   passes.grouped_conv_nhwc(target),
                   *([passes.elementwise_before_reshape()] if ELEMENTWISE_BEFORE_RESHAPE else []),
                   *([passes.pad_window_channels(vector_lanes(target.tvm(), 32), half_vectors_full_rate(target.tvm()))]
                     if PAD_WINDOW_CHANNELS else []),
                   passes.bf16_dense(target),
                   # (--precision bf16 only: compile/bf16.py)
                   passes.pack_weights(target),
                   *([relax.transform.RemoveRedundantReshape()] if REDUNDANT_RESHAPES else []),
                   relax.transform.CanonicalizeBindings()]
    elif target.layouts:  # --layout NHWC on CUDA (channels innermost, as tensor-core convolutions want)
        result += [relax.transform.ConvertLayout(target.layouts), passes.keep_channels_last(),
                   relax.transform.CanonicalizeBindings()]
    # (after KeepChannelsLast, which moves a CNN's channel splits to NHWC whole)
    result.append(passes.slices_through_layout())
    # Weight-only computations (layout transforms, transposes, batch-norm scale/shift) move to
    # main_transform_params, which the backend runs once at load time instead of on every call.
    result.append(relax.transform.LiftTransformParams())
    return result


def legalize_passes(target: ResolvedTarget) -> list[Any]:
    """Stage 2."""
    # On CPU, exp/tanh/erf (softmax, GELU) become TVM's polynomial approximations, which
    # vectorise; LLVM has no vector erf, so exact GELU was a scalar libm call per element (9 % of
    # BERT's time). Their error (~1e-7 relative) is far inside the fp32 output tolerance.
    cpu = target.kind == "llvm"
    lanes, half = (vector_lanes(target.tvm(), 32), half_vectors_full_rate(target.tvm())) if cpu else (1, False)
    return [
        *([passes.fast_math()] if cpu else []),
        passes.fold_constants_numpy(),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        *([passes.fuse_expansion_into_window(tir.fuse_expansion_bytes(target.l2_bytes), lanes, half),
           passes.fuse_attention(lanes)] if cpu else []),
        relax.transform.FuseTIR(),
        # Identical kernel calls computed once: each layer of GPT-2 and BERT computed the same
        # mask from the same input (12 kernels, and 12 of KeyLimits' limits kernels after it).
        *([relax.transform.EliminateCommonSubexpr()] if cpu and DEDUPLICATE_CALLS else []),
        *([passes.key_limits(), passes.pack_keys(lanes, accumulator_budget(target.tvm()))] if cpu else []),
        passes.flat_transform_params(),  # after FastMath (TVM's FastMathTransform failed on calls of Relax functions)
        # A pure reshape becomes a view of its input, not a copy kernel. TVM runs this pass in its VM lowering,
        # after scheduling, where it no longer recognises a scheduled reshape (bert-base b8: 72 copies, 10.6 ms of 618).
        relax.transform.RewriteDataflowReshape(),
    ]


def dlight_rules(target: ResolvedTarget) -> list[Any]:
    """Stage 3's default rules, in the order they are tried."""
    return default_rules(target.kind)


def default_schedule(func: Any, target: ResolvedTarget) -> tuple[str | None, Any]:
    """(rule name, schedule) of the first default rule that applies to ``func``: the schedule
    stage 3 gives a kernel no tuning record covers; (None, None) when none applies."""
    from tvmbench.compile.knobs import reset_seen

    with target.tvm() as tvm_target:
        for rule in dlight_rules(target):
            reset_seen()  # a knob set records the knobs of the rule that applies, not of those declining
            sch = rule.apply(func, tvm_target, False)
            if isinstance(sch, list):
                sch = sch[0] if sch else None
            if sch is not None:
                return type(rule).__name__, sch
    return None, None


def schedule_passes(target: ResolvedTarget, database: Any | None) -> list[Any]:
    """Stage 3."""
    result = []
    if database is not None:
        result.append(relax.transform.MetaScheduleApplyDatabase(enable_warning=False))
    result.append(dl.ApplyDefaultSchedule(*dlight_rules(target)))
    result.append(passes.lazy_select)
    return result


def lowering_passes(target: ResolvedTarget, cuda_graph: bool = False) -> list[Any]:
    """Stage 4."""
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
    names.append(passes.lazy_select.info.name)
    names += [p.info.name for p in lowering_passes(target, cuda_graph)]
    return names


def legalized(mod: Any, target: ResolvedTarget) -> Any:
    """Stages 1-2: the fused TIR functions the tuner extracts tasks from."""
    with target.tvm():
        return tvm.transform.Sequential(simplify_passes(target) + legalize_passes(target))(mod)


def per_inference(legal: Any) -> Any:
    """The legalized module without the lifted weight transforms: what runs on every inference
    (they run once at load and are not worth tuning trials). DeadCodeElimination alone keeps
    them: main_transform_params is public, hence an entry."""
    mod = tvm.IRModule({gv: f for gv, f in legal.functions.items()
                        if gv.name_hint not in ("main_transform_params", FLAT_TRANSFORM)})
    return relax.transform.DeadCodeElimination(["main"])(mod)


def coverage(legal: Any, databases: list[Any]) -> tuple[int, list[int], int]:
    """How many per-inference kernels there are, how many each database has a workload for (the
    same normalised module MetaScheduleApplyDatabase queries with), and how many any of them has
    (counted here: TVM's UnionDatabase does not implement has_workload)."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    funcs = [f for f in per_inference(legal).functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    hits = [[db.has_workload(_normalize_mod(f)) for db in databases] for f in funcs]
    per = [sum(1 for h in hits if h[i]) for i in range(len(databases))]
    return len(funcs), per, sum(1 for h in hits if any(h))


def optimize(mod: Any, target: ResolvedTarget, database: Any | None = None,
             on_legalized: Any | None = None, on_stage: Any | None = None) -> Any:
    """Stages 1-3: scheduled functions, ready for VM lowering. ``on_legalized`` sees the module
    between stages 2 and 3 (the tuner's view of it); ``on_stage`` hears each stage's time."""
    say = on_stage or (lambda message: None)
    t0 = time.perf_counter()
    mod = legalized(mod, target)
    if on_stage is not None:  # counted only for the log: per_inference copies the module
        kernels = sum(1 for f in per_inference(mod).functions.values() if isinstance(f, tvm.tirx.PrimFunc))
        say(f"simplified, legalized and fused into {kernels} kernels ({time.perf_counter() - t0:.1f} s)")
    if on_legalized is not None:
        on_legalized(mod)
    t0 = time.perf_counter()
    with target.tvm(), (database if database is not None else contextlib.nullcontext()):
        mod = tvm.transform.Sequential(schedule_passes(target, database))(mod)
    say(f"scheduled ({'tuning records, then ' if database is not None else ''}tvmbench's default rules; "
        f"{time.perf_counter() - t0:.1f} s)")
    return mod


def build(mod: Any, target: ResolvedTarget, database: Any | None = None, cuda_graph: bool = False,
          on_legalized: Any | None = None, on_stage: Any | None = None, on_scheduled: Any | None = None) -> Built:
    """Optimise and compile to a Relax VM executable (kernels of a native CPU build compiled on
    every core: ``codegen.py``). ``on_stage`` hears each stage's time (``--verbose``);
    ``on_scheduled`` sees the scheduled module before it is lowered."""
    if target.kind == "cuda":
        from tvmbench.compile.intrinsics import import_tensor_intrin

        import_tensor_intrin("cuda")
    mod = optimize(mod, target, database, on_legalized, on_stage)
    if on_scheduled is not None:
        on_scheduled(mod)
    if on_stage is not None:
        on_stage("lowering for the VM and generating machine code")
    tvm_target = target.tvm()

    def build_vm(module: Any, tir_pipeline: str = "default") -> Any:
        with tvm_target:
            lower = tvm.transform.Sequential(lowering_passes(target, cuda_graph))
            return relax.build(module, tvm_target, relax_pipeline=lower, tir_pipeline=tir_pipeline)

    if target.kind == "llvm" and target.is_native:
        return build_in_parallel(mod, tvm_target, build_vm)
    return Built(build_vm(mod))
