"""PackKeys: a joined attention's keys written in the panels its score tiles read.

The Attention rule (``rules/attention.py``) computes a task's scores in tiles of ``T`` keys (its
score vectors): for each tile it reads, for every one of the head dimension's ``d`` steps, the
``T`` keys of that step's row of ``k`` (``[.., d, keys]``, as the model's transpose wrote it). Those
``d`` pieces lie a whole row of keys apart: Whisper's 1536 keys put them 6 KB apart, 64 streams of
256 bytes per tile, which the cache's prefetchers do not follow. Timed alone, Whisper-tiny's
attention ran 10 % faster with ``k`` in panels ``[.., keys / T, d, T]``, each tile's keys one
contiguous 16 KB block (BERT at 512 tokens 10 %, ViT 4-5 %, BERT at 128 tokens 4 %).

So after FuseTIR, where a joined attention's ``k`` is the output of a kernel without reductions
(the reshape/transpose that splits the heads) used by that attention alone, both kernels get the
buffer's layout transformed (``transform_layout``): the producer writes the panels, the attention
reads them. Everything else about both kernels stays; the rules schedule them as before.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax, s_tir, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import bindings, builder_pass, drop_uncalled, use_counts
from tvmbench.compile.rules.attention import score_tile_keys
from tvmbench.compile.tir import (
    as_int,
    attention_blocks,
    buffer_shape,
    is_product_sum,
    product_operands,
    reduction_kinds,
)

# Off: keys stay as the model's transpose wrote them (for A/Bs: ``benchmarks/rule_ab.py``).
ENABLED = True
# Function attribute marking a kernel whose keys are packed (so it is not packed twice).
PACKED = "tvmbench.packed_keys"


def key_operand(func: Any) -> int | None:
    """The parameter index of a joined attention's ``k`` (the second operand of its first product
    sum, indexed ``[.., reduced, key]``), None when ``func`` is no joined attention or its keys
    are read otherwise."""
    if not isinstance(func, tirx.PrimFunc) or PACKED in (func.attrs or {}):
        return None
    blocks = attention_blocks(func)
    if blocks is None:
        return None
    scores = next((b for b in blocks if b.reads and is_product_sum(b)), None)
    if scores is None:
        return None
    reduced = [iv.var for iv in scores.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    store = scores.body
    by_buffer = {p: i for i, p in enumerate(func.params)}  # (TVM 0.27: a parameter is its buffer)
    for load in product_operands(scores) or ():
        if load.source in by_buffer and len(load.indices) >= 2 and len(reduced) == 1 \
                and load.indices[-2].same_as(reduced[0]) and load.indices[-1].same_as(store.indices[-1]):
            return by_buffer[load.source]
    return None


def _index_map(rank: int, tile: int) -> Any:
    """``[.., d, keys]`` -> ``[.., keys / tile, d, tile]``."""
    return tirx.IndexMap.from_func(lambda *i: [*i[:-2], i[-1] // tile, i[-2], i[-1] % tile], ndim=rank)


def packed(func: Any, param: int, tile: int) -> Any:
    """``func`` with parameter ``param`` (``[.., d, keys]``) laid out in panels of ``tile`` keys."""
    sch = s_tir.Schedule(func)
    buffer = func.params[param]
    for block_rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(block_rv)
        if any(r.source.same_as(buffer) for r in [*block.reads, *block.writes]):
            sch.transform_layout(block_rv, buffer, _index_map(len(buffer.shape), tile))
            return sch.mod["main"].with_attr(PACKED, True)
    raise ValueError(f"no block of {func} accesses parameter {param}")


@mutator
class _PackKeys(PyExprMutator):
    def __init__(self, mod: Any, lanes: int, budget: int) -> None:
        super().__init__(mod)
        self.mod, self.lanes, self.budget = mod, lanes, budget
        self.call_tir = tvm.ir.Op.get("relax.call_tir")
        self.keys: dict[Any, tuple[int, int] | None] = {}  # attention kernel -> (k's parameter, tile)
        self.producers: dict[Any, int] = {}  # binding var of a k to pack -> tile
        self.attentions: dict[Any, tuple[int, int]] = {}  # binding var of an attention call -> (k, tile)
        self.made: dict[tuple[Any, int], Any] = {}  # (kernel, tile) -> its packed version

    def find(self, func: Any) -> None:
        """Which calls of ``func`` to rewrite (``before``, ahead of the mutation)."""
        bound, uses = {b.var: b.value for b in bindings(func)}, use_counts(func)
        for var, value in bound.items():
            found = self._attention(value)
            if found is None:
                continue
            param, tile = found
            k = value.args[1].fields[param]
            if uses.get(k) == 1 and self._injective_call(bound.get(k)):
                self.producers[k] = tile
                self.attentions[var] = (param, tile)

    def _attention(self, value: Any) -> tuple[int, int] | None:
        if not self._tir_call(value):
            return None
        gv = value.args[0]
        if gv not in self.keys:
            func, self.keys[gv] = self.mod[gv], None
            param = key_operand(func)
            if param is not None and param < len(value.args[1].fields):
                keys = as_int(buffer_shape(func.params[param])[-1])
                tile = score_tile_keys(keys, self.lanes, self.budget) if keys else 0
                if tile and keys % tile == 0 and keys > tile:
                    self.keys[gv] = (param, tile)
        return self.keys[gv]

    def _tir_call(self, value: Any) -> bool:
        return isinstance(value, relax.Call) and value.op.same_as(self.call_tir) and isinstance(value.args[1], relax.Tuple)

    def _injective_call(self, value: Any) -> bool:
        """A call of a kernel without reductions writing one tensor (a layout kernel)."""
        return self._tir_call(value) and isinstance(value.ty, relax.TensorType) \
            and reduction_kinds(self.mod[value.args[0]]) == []

    def _packed_kernel(self, gv: Any, param: int, tile: int) -> Any:
        if (gv, tile) not in self.made:
            self.made[(gv, tile)] = self.builder_.add_func(packed(self.mod[gv], param, tile), gv.name_hint + "_key_panels")
        return self.made[(gv, tile)]

    def visit_var_binding_(self, binding: Any) -> None:
        var, value = binding.var, binding.value
        if var not in self.producers and var not in self.attentions:
            return super().visit_var_binding_(binding)
        args = [self.visit_expr(a) for a in value.args[1].fields]
        rest = [self.visit_expr(a) for a in value.args[2:]]
        if var in self.producers:
            tile = self.producers[var]
            *lead, d, keys = (int(n) for n in value.ty.shape)
            gv = self._packed_kernel(value.args[0], len(args), tile)
            ty = [relax.TensorType([*lead, keys // tile, d, tile], value.ty.dtype)]
        else:
            param, tile = self.attentions[var]
            gv, ty = self._packed_kernel(value.args[0], param, tile), value.ty_args
        new = relax.Call(value.op, [gv, relax.Tuple(args), *rest], value.attrs, ty)
        self.set_var_remap(var, self.builder_.emit(new, name_hint=var.name))


def pack_keys(lanes: int, budget: int) -> Any:
    """The pass (module docstring), for vectors of ``lanes`` floats and register tiles of
    ``budget`` accumulators (``tiles.accumulator_budget``: the score tiles' keys depend on it)."""
    return builder_pass(lambda mod: _PackKeys(mod, lanes, budget), "PackKeys",
                        before=lambda m, func: m.find(func) if ENABLED else None,
                        after=lambda m, mod: drop_uncalled(mod, [gv for gv, _ in m.made]))  # (the replaced kernels)
