"""Bring a model into Relax: torch.export (zoo, .pt2, nn.Module) or the ONNX frontend (.onnx).

Parameters are always detached from the graph (``main(inputs..., weights...)``) so the compiled
library does not embed weights: the cache stays small and one library serves any weights.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from tvmbench.compile import recurrent
from tvmbench.compile.converters import CUSTOM_CONVERTERS, bool_mask_index, constant_masks
from tvmbench.errors import UnsupportedOperatorError, UserError, headline
from tvmbench.models import LoadedModel


@dataclass
class ImportedModel:
    mod: Any  # tvm.IRModule with main(inputs..., params...)
    params: list[Any]  # tvm.runtime.Tensor on the CPU, in main's parameter order
    num_inputs: int
    frontend: str  # "torch.export" or "onnx"
    route: str | None = None  # for ONNX files: which onnx_routes route imported it
    timings_s: dict[str, float] = field(default_factory=dict)  # export, import


def _unsupported(model: str, message: str) -> UnsupportedOperatorError | None:
    match = re.search(r"Unsupported function types? \[?([^\]]+)\]?", message) or re.search(
        r"not supported[^:]*: ?(.+)$", message.strip().splitlines()[-1]
    )
    if match is None:
        return None
    ops = match.group(1).strip()
    return UnsupportedOperatorError(
        f"TVM's Relax importer cannot convert op(s) {ops} of model {model}; the other frameworks still run "
        "(report it to apache/tvm, or export the model without that op)"
    )


def import_model(model: LoadedModel, recurrent_kernels: recurrent.Registers | None = None) -> ImportedModel:
    """``model`` in Relax. ``recurrent_kernels`` (CPU builds in fp32, ``recurrent.registers``): recurrent layers as one
    kernel each (``compile/recurrent.py``), not unrolled per time step (from ONNX files, which
    TVM's importer refuses otherwise, at all)."""
    from tvm import relax

    timings: dict[str, float] = {}
    route = None
    if model.onnx_path is not None:
        (mod, route), frontend = _import_onnx(model, timings, recurrent_kernels), "onnx"
    else:
        mod, frontend = _import_torch(model, timings, recurrent_kernels), "torch.export"
    mod, params = relax.frontend.detach_params(mod)
    return ImportedModel(mod=mod, params=list(params.get("main", [])), num_inputs=len(model.inputs),
                         frontend=frontend, route=route, timings_s=timings)


def export_program(model: LoadedModel) -> Any:
    """The model as a torch.export ExportedProgram (reused when the model came as a .pt2 file)."""
    import torch

    if model.exported is not None:
        return model.exported
    if model.module is None:
        raise UserError(f"{model.name} has no PyTorch module to export")
    try:
        with torch.no_grad():
            return torch.export.export(model.module, model.torch_inputs())
    except Exception as e:
        raise RuntimeError(f"torch.export failed for {model.name}: {type(e).__name__}: {headline(e)}") from e


def _eager_attention(module: Any) -> bool:
    """Switch the Hugging Face models inside ``module`` from SDPA to eager attention (the same
    arithmetic, written as matmul and softmax); whether any was switched. TVM's importer
    re-traces the exported program with its decompositions, and there the fake SDPA gives
    GPT-2's attention output above batch 1 strides its next ``view`` refuses ("Cannot view a
    tensor with shape [8, 128, 768] and strides (768, 6144, 1)"); eager attention does not. Only
    the TVM worker's own copy of the model is switched: PyTorch eager keeps SDPA."""
    switched = False
    for sub in module.modules():
        config = getattr(sub, "config", None)
        if hasattr(sub, "set_attn_implementation") and getattr(config, "_attn_implementation", None) == "sdpa":
            sub.set_attn_implementation("eager")
            switched = True
    return switched


def _import_torch(model: LoadedModel, timings: dict[str, float],
                  recurrent_kernels: recurrent.Registers | None = None) -> Any:
    from tvm.relax.frontend.torch import from_exported_program

    t0 = time.perf_counter()
    ep = export_program(model)
    timings["export"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    converters, decompose = CUSTOM_CONVERTERS, True
    keep = recurrent.undecomposed_ops(ep) if recurrent_kernels else []
    if keep:  # TVM would decompose with torch's default table, which unrolls recurrent layers per step
        ep, decompose = ep.run_decompositions(recurrent.decompositions(keep)), False
        converters = {**CUSTOM_CONVERTERS, **recurrent.converters(recurrent_kernels)}
    if constant_masks(ep):  # decomposed here, as TVM would, so the size checks dropped stay dropped
        ep = ep.run_decompositions() if decompose else ep
        decompose = False
        converters = {**converters, "index.Tensor": bool_mask_index(constant_masks(ep))}
    try:
        mod = from_exported_program(ep, keep_params_as_input=True, custom_convert_map=converters,
                                    run_ep_decomposition=decompose)
    except (AssertionError, ValueError, NotImplementedError) as e:
        if model.exported is None and model.module is not None and _eager_attention(model.module):
            return _import_torch(model, timings, recurrent_kernels)  # once: no SDPA is left to switch
        raise (_unsupported(model.name, str(e)) or e) from e
    timings["import"] = time.perf_counter() - t0
    return mod


def _import_onnx(model: LoadedModel, timings: dict[str, float],
                 recurrent_kernels: recurrent.Registers | None = None) -> tuple[Any, str]:
    """The ONNX file through the first route of ``onnx_routes.routes()`` that TVM imports with
    static shapes and no control flow (else the first that imports at all); a file no route
    imports is one line naming the node TVM stopped at. The importer has tvmbench's converters
    (``onnx_converters``), and with ``recurrent_kernels`` LSTM, GRU and RNN nodes too."""
    import onnx

    from tvmbench.compile.onnx_routes import failing_node, integer_initializers_as_constants, routes

    t0 = time.perf_counter()
    proto = integer_initializers_as_constants(onnx.load(str(model.onnx_path)))
    timings["load"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    first: BaseException | None = None
    imported: tuple[Any, str] | None = None
    for name, route in routes():
        try:
            mod = _from_onnx(route(proto, _shapes(model)) if route else proto, model, recurrent_kernels)
        except Exception as e:  # the next route may import it; the first error is the one to report
            if "OpNotImplemented" in type(e).__name__:
                raise _unsupported(model.name, str(e)) or e from e
            first = first or e
            continue
        imported = imported or (mod, name)
        if _settled(mod):
            imported = (mod, name)
            break
    timings["import"] = time.perf_counter() - t0
    if imported is not None:
        return imported
    assert first is not None
    unsupported = _unsupported(model.name, str(first)) if "not supported" in str(first) else None
    if unsupported:
        raise unsupported from first
    where = failing_node(first)
    node = f" at node {where[1]} ({where[0]})" if where else ""
    raise UnsupportedOperatorError(
        f"TVM's ONNX importer cannot import {model.name}{node}, as given or simplified "
        f"({', '.join(n for n, _ in routes()[1:])}): {headline(first)}") from first


def _shapes(model: LoadedModel) -> dict[str, list[int]]:
    return {n: list(a.shape) for n, a in model.inputs.items()}


def _from_onnx(proto: Any, model: LoadedModel, recurrent_kernels: recurrent.Registers | None) -> Any:
    import contextlib
    import io

    from tvm.relax.frontend.onnx import from_onnx

    from tvmbench.compile import onnx_converters

    extra = recurrent.onnx_converter_classes(recurrent_kernels) if recurrent_kernels and recurrent.ENABLED else {}
    dtypes = {n: str(a.dtype) for n, a in model.inputs.items()}
    # The importer prints every failing node's inputs (whole IR expressions) to stdout.
    with contextlib.redirect_stdout(io.StringIO()), onnx_converters.extended_importer(extra):
        return from_onnx(proto, shape_dict=_shapes(model), dtype_dict=dtypes, keep_params_in_input=True)


def _settled(mod: Any) -> bool:
    """Whether an imported module has static shapes and no control flow: with the inputs pinned,
    a shape computed at run time (a ``Range``, a ``NonZero`` of a constant) or an ``If`` on a
    constant is what the ``folded`` route turns into constants, and ConvertLayout or the VM's
    code generation fail on what it leaves (session 47's ONNX battery: unfold, a boolean mask)."""
    from tvm import relax

    main = mod["main"]
    if relax.analysis.defined_symbolic_vars(main):
        return False
    branches: list[Any] = []
    relax.analysis.post_order_visit(main.body, lambda e: isinstance(e, relax.If) and branches.append(e))
    return not branches
