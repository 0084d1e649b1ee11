"""FlatTransformParams: ``transform_params_flat(w0, ..., wn)``, main_transform_params with the
weights as separate arguments.

TVM's RPC cannot pass a tuple, which is what main_transform_params takes, so a model on a remote
device has its weights transformed there through this entry (called with the VM's stateful API,
whose outputs come back one tensor at a time).
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

from tvmbench.compile.names import FLAT_TRANSFORM


def flat_transform_params() -> Any:
    """The pass (see the module's docstring)."""

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
