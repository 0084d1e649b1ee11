"""Recurrent layers (``nn.GRU``, ``nn.LSTM``, ``nn.RNN``) as one kernel per layer on CPU.

torch.export's decompositions unroll a recurrent layer into a matrix product and a few gate
kernels per time step, and TVM runs each as its own VM call with its own allocations: a
bidirectional GRU over 200 steps was 396 matrix-product calls and 800 VM allocations, 0.95 ms of
a speech front end whose whole ONNX Runtime time was 0.52 ms (docs/performance.md, "Models the
zoo does not have"). ONNX Runtime runs one kernel per layer; so does this:

- the input's contribution to every gate, for all steps and both directions, is one matrix
  product before the loop (``x @ W_ih^T + b``), which the Contraction rule schedules like any
  dense layer;
- one hand-scheduled ``call_tir`` runs the recurrence (``scan_kernel``): when ``W_hh`` fits L2,
  a parallel loop over (direction, batch row) -- the recurrences are independent -- and inside it
  the time loop, the state in a per-thread buffer; past L2, the time loop outside and each step's
  gate columns split between the threads (``_split``). Each step's ``h @ W_hh^T`` runs in
  register tiles (``_gate_product``), then the cell update, vectorised.

Gate rows are padded to whole vectors of the target (``Registers``) in the weights (zero rows
keep zero state, see ``plan``), so every vector loop is whole; the weight re-layouts depend on
parameters only, and LiftTransformParams moves them to load time. The exponentials are FastMath's
polynomial written out (``passes.fast_math.exp_expr``): LLVM has no vector ``exp``, and a libm
call per gate element per step would cost more than the matrix product.

Only CPU builds in fp32 take this route (``registers``): the kernel is scheduled for a CPU, and a
GPU build decomposes the layers as before. Forms outside it (an LSTM with ``proj_size``) decompose
too: ``undecomposed_ops`` says which ops a program may keep. TVM's ONNX importer has no recurrent
converter at all; ``onnx_converter_classes`` are these for the import.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from tvmbench.compile.ir import static_shape
from tvmbench.compile.onnx_converters import refuse
from tvmbench.compile.passes.fast_math import exp_expr
from tvmbench.compile.tir import FLOPS_ATTR

# Off: recurrent layers decompose per time step as torch.export writes them (for A/Bs:
# ``benchmarks/rule_ab.py``).
ENABLED = True
# A layer's ``W_hh`` past this many bytes (per direction) is read from beyond L2 every step: its
# gate columns are split between the threads each step (``_split``), else each recurrence runs
# on one thread (``_independent``).
_SPLIT_BYTES = 256 * 1024
# Gate columns per gate and task in ``_split`` (at most).
_SPLIT_COLUMNS = 64
# Batch rows of a register tile of the state's product (``_gate_product``), at most.
_TILE_ROWS = 8
# Gates per cell type, in PyTorch's weight order.
_GATES = {"gru": 3, "lstm": 4, "rnn_tanh": 1, "rnn_relu": 1}


def _ops() -> dict[str, Any]:
    import torch

    aten = torch.ops.aten
    return {"gru": aten.gru.input, "lstm": aten.lstm.input, "rnn_tanh": aten.rnn_tanh.input,
            "rnn_relu": aten.rnn_relu.input}


def _cell_of(node: Any) -> str | None:
    return next((cell for cell, op in _ops().items() if node.target is op), None)


def _covered(node: Any) -> bool:
    """Whether the one-kernel form computes this recurrent node exactly: float32, static shapes,
    and the parameters PyTorch writes without ``proj_size`` (2 or 4 per layer and direction)."""
    cell = _cell_of(node)
    params, has_biases, layers, bidirectional = node.args[2], node.args[3], node.args[4], node.args[7]
    per = 4 if has_biases else 2
    val = node.args[0].meta.get("val")
    return (cell is not None and val is not None and str(val.dtype) == "torch.float32"
            and all(isinstance(d, int) for d in val.shape)
            and len(params) == layers * (2 if bidirectional else 1) * per)


def undecomposed_ops(exported: Any) -> list[Any]:
    """The recurrent ops of ``exported`` to keep whole for ``convert``: every kind present, when
    every node of it is covered (a program keeps or decomposes a kind as a whole)."""
    if not ENABLED:
        return []
    nodes = [n for n in exported.graph.nodes if n.op == "call_function" and _cell_of(n)]
    ops = _ops()
    kinds = {_cell_of(n) for n in nodes}
    return [ops[k] for k in sorted(kinds) if all(_covered(n) for n in nodes if _cell_of(n) == k)]


def decompositions(keep: list[Any]) -> Any:
    """torch.export's default decomposition table less the ops ``keep`` (``undecomposed_ops``)."""
    import torch

    table = torch.export.default_decompositions()
    for op in keep:
        table.pop(op, None)
    return table


def _sigmoid(x: Any) -> Any:
    from tvm import tirx

    one = tirx.const(1.0, "float32")
    return one / (one + exp_expr(-x))


def _tanh(x: Any) -> Any:
    from tvm import tirx

    one, xv = tirx.const(1.0, "float32"), tirx.Var("t", "float32")  # (x is read twice: bound once)
    return tirx.Let(xv, x, one - tirx.const(2.0, "float32") / (exp_expr(xv + xv) + one))


class Registers(NamedTuple):
    """The CPU's vector registers, which the scan kernel's padding and register tiles follow."""

    lanes: int  # fp32 lanes of one vector register
    accumulators: int  # vector accumulators a register tile may hold


def registers(target: Any) -> Registers | None:
    """The target's ``Registers``; None for a GPU (which keeps the unrolled form)."""
    from tvmbench.compile.tiles import accumulator_budget, vector_lanes

    if target.kind != "llvm":
        return None
    return Registers(vector_lanes(target.tvm(), 32), accumulator_budget(target.tvm()))


class Plan(NamedTuple):
    """How one layer's kernel is laid out (``plan``), shared by the kernel and the converter that
    lays out its weights."""

    lanes: int
    gates: int
    padded: int  # columns per gate: ``hidden`` rounded up to whole vectors (``plan``)
    width: int  # columns per gate and task: ``padded``, or a slice of it when split
    split: bool  # each step's columns split between the threads (``_split``)
    tile_rows: int  # batch rows of a register tile (``_gate_product``)
    tile_vectors: int  # vectors of gate columns of a register tile

    @property
    def chunks(self) -> int:
        return self.padded // self.width

    @property
    def tile_cols(self) -> int:
        return self.tile_vectors * self.lanes

    @property
    def tiles(self) -> int:
        return self.gates * self.width // self.tile_cols


def plan(cell: str, hidden: int, batch: int, regs: Registers) -> Plan:
    """The layer's ``Plan``. Columns are padded to whole vectors; the padded rows' weights and
    biases are zero, so their state stays zero (a GRU keeps ``h = n/2 + h/2`` at 0, an LSTM
    ``c = c/2`` and ``h = tanh(0)/2`` at 0) and never reaches a real column (the product runs
    over the ``hidden`` real inputs). ``W_hh`` past ``_SPLIT_BYTES`` is split in tasks of at most
    ``_SPLIT_COLUMNS`` columns per gate; a tile holds up to ``_TILE_ROWS`` batch rows (when split:
    unsplit, each recurrence is one row) and as many vectors as the accumulators allow."""
    lanes, gates = regs.lanes, _GATES[cell]
    padded = -(-hidden // lanes) * lanes
    split = gates * padded * hidden * 4 > _SPLIT_BYTES
    width = max(w for w in range(lanes, min(padded, _SPLIT_COLUMNS) + 1, lanes) if padded % w == 0) if split else padded
    tile_rows = _divisor_at_most(batch if split else 1, _TILE_ROWS)
    tile_vectors = _divisor_at_most(gates * width // lanes, max(1, regs.accumulators // tile_rows))
    return Plan(lanes, gates, padded, width, split, tile_rows, tile_vectors)


def _divisor_at_most(n: int, most: int) -> int:
    return max(d for d in range(1, min(n, most) + 1) if n % d == 0)


def scan_kernel(cell: str, steps: int, batch: int, directions: int, hidden: int, batch_first: bool,
                regs: Registers, reverse: tuple[bool, ...] = (False, True)) -> Any:
    """The PrimFunc of one recurrent layer's time loop (see the module docstring). Arguments:
    ``xg`` (the input's gate contributions, ``[T, B, D, G, Hp]``, or ``[B, T, ...]`` when batch
    first), ``whh`` (``W_hh`` tile-major, ``[D, chunks, tiles, H(k), tile columns]``: the columns
    of a task (chunk), ``(gate, column)`` flattened, in register tiles, each tile's weights one
    contiguous block streamed over k), ``bhn`` (GRU only: ``b_hh``'s new-gate part, ``[D, Hp]``,
    which the reset gate scales), ``h0`` (and ``c0``), ``[D, B, H]``; outputs ``y`` (``[T, B, D,
    H]`` or ``[B, T, D, H]``), ``hn`` (and ``cn``). Direction ``d`` runs from the last step when
    ``reverse[d]``. Two loop nests, ``_independent`` and ``_split`` (``plan``)."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    lay, f32 = plan(cell, hidden, batch, regs), "float32"
    seq = (batch, steps) if batch_first else (steps, batch)
    lstm, gru = cell == "lstm", cell == "gru"
    with IRBuilder() as ib, T.prim_func():
        T.func_name(f"{cell}_scan")
        # (FLOPs: the state's products; the gate arithmetic, ~30 per gate element, not counted)
        flops = 2 * steps * directions * batch * lay.gates * hidden * hidden
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True, FLOPS_ATTR: flops})
        xg = T.arg("xg", T.buffer((*seq, directions, lay.gates, lay.padded), f32))
        whh = T.arg("whh", T.buffer((directions, lay.chunks, lay.tiles, hidden, lay.tile_cols), f32))
        bhn = T.arg("bhn", T.buffer((directions, lay.padded), f32)) if gru else None
        states0 = [T.arg(n, T.buffer((directions, batch, hidden), f32)) for n in ("h0", "c0")[: 1 + lstm]]
        y = T.arg("y", T.buffer((*seq, directions, hidden), f32))
        states_n = [T.arg(n, T.buffer((directions, batch, hidden), f32)) for n in ("hn", "cn")[: 1 + lstm]]
        bufs = _Buffers(xg, whh, bhn, states0, y, states_n)
        layer = _Layer(cell, steps, batch, directions, hidden, batch_first, tuple(reverse[:directions]), lay)
        (_split if lay.split else _independent)(T, layer, bufs)
    return ib.get()


class _Layer(NamedTuple):
    cell: str
    steps: int
    batch: int
    directions: int
    hidden: int
    batch_first: bool
    reverse: tuple[bool, ...]
    plan: Plan

    def row(self, b: Any, s: Any, d: Any) -> tuple[Any, Any]:
        """The (batch, step) index pair of step ``s`` of direction ``d`` (a reverse one runs
        from the last step) in the order the layer's tensors have them."""
        from tvm import tirx

        back = self.steps - 1 - s
        t = (back if all(self.reverse) else s if not any(self.reverse)
             else tirx.Select(d == self.reverse.index(True), back, s))
        return (b, t) if self.batch_first else (t, b)


class _Buffers(NamedTuple):
    xg: Any
    whh: Any
    bhn: Any
    states0: list[Any]
    y: Any
    states_n: list[Any]


def _independent(T: Any, layer: _Layer, bufs: _Buffers) -> None:  # noqa: N803
    """Small ``W_hh`` (L2-resident): each (direction, batch row) recurrence runs its whole time
    loop on one thread, its state in a thread-local buffer; one fork-join for the layer."""
    lay, f32 = layer.plan, "float32"
    loop = T.parallel if layer.directions * layer.batch > 1 else T.serial
    with loop(0, layer.directions * layer.batch) as db:
        d, b = db // layer.batch, db % layer.batch
        state = T.alloc_buffer((2, lay.padded), f32, scope="local")
        acc = T.alloc_buffer((1, lay.gates, lay.padded), f32, scope="local")
        for i in range(2):
            with T.serial(0, lay.padded) as j:
                T.buffer_store(state, _initial(bufs.states0, i, d, b, j, layer.hidden), [i, j])
        with T.serial(0, layer.steps) as s:
            row = layer.row(b, s, d)
            _gate_product(T, acc, lay, 1, layer.hidden, lambda _b, k: state[0, k],
                          lambda tile, k, c: bufs.whh[d, 0, tile, k, c])
            _update(T, layer.cell, lay.padded, lay.lanes, lambda g, j: bufs.xg[(*row, d, g, j)],
                    lambda g, j: acc[0, g, j], lambda j: bufs.bhn[d, j], lambda i, j: state[i, j],
                    lambda i, j, v: T.buffer_store(state, v, [i, j]))
            with T.serial(0, layer.hidden) as j:
                T.buffer_store(bufs.y, state[0, j], [*row, d, j])
        for i, out in enumerate(bufs.states_n):
            with T.serial(0, layer.hidden) as j:
                T.buffer_store(out, state[i, j], [d, b, j])


def _split(T: Any, layer: _Layer, bufs: _Buffers) -> None:  # noqa: N803
    """Large ``W_hh`` (past L2, read from L3 or memory every step): every step splits the gate
    columns between the threads (``plan.width`` per gate a task, all batch rows together, so
    each weight is read once per step for the whole batch), a fork-join per step. The hidden
    state is double-buffered (the step reads all of the previous one); the LSTM cell is
    column-local and updated in place."""
    hidden, dirs, batch, lay, f32 = layer.hidden, layer.directions, layer.batch, layer.plan, "float32"
    state = T.alloc_buffer((3, dirs, batch, lay.padded), f32)  # h (even steps), h (odd steps), c
    for i in range(2):
        with T.grid(dirs, batch, lay.padded) as (d, b, j):
            T.buffer_store(state, _initial(bufs.states0, i, d, b, j, hidden), [i * 2, d, b, j])
    with T.serial(0, layer.steps) as s:
        old, new = s % 2, 1 - s % 2
        with T.parallel(0, dirs * lay.chunks) as dc:
            d, chunk, col = dc // lay.chunks, dc % lay.chunks, dc % lay.chunks * lay.width
            acc = T.alloc_buffer((batch, lay.gates, lay.width), f32, scope="local")
            _gate_product(T, acc, lay, batch, hidden, lambda b, k: state[old, d, b, k],
                          lambda tile, k, c: bufs.whh[d, chunk, tile, k, c])
            with T.serial(0, batch) as b:
                row = layer.row(b, s, d)
                _update(T, layer.cell, lay.width, lay.lanes, lambda g, j: bufs.xg[(*row, d, g, col + j)],
                        lambda g, j: acc[b, g, j], lambda j: bufs.bhn[d, col + j],
                        lambda i, j: state[(old if i == 0 else 2), d, b, col + j],
                        lambda i, j, v: T.buffer_store(state, v, [new if i == 0 else 2, d, b, col + j]))
                with T.serial(0, lay.width) as j, T.If(col + j < hidden), T.Then():
                    T.buffer_store(bufs.y, state[new, d, b, col + j], [*row, d, col + j])
    last = layer.steps % 2
    for i, out in enumerate(bufs.states_n):
        with T.grid(dirs, batch, hidden) as (d, b, j):
            T.buffer_store(out, state[last if i == 0 else 2, d, b, j], [d, b, j])


def _initial(states0: list[Any], i: int, d: Any, b: Any, j: Any, hidden: int) -> Any:
    """State ``i`` (h, c) of column ``j`` at the start: the given one, zero in padded columns."""
    from tvm import tirx

    zero = tirx.const(0.0, "float32")
    if i >= len(states0):
        return zero
    return tirx.if_then_else(j < hidden, states0[i][d, b, tirx.min(j, hidden - 1)], zero)


def _gate_product(T: Any, acc: Any, lay: Plan, rows: int, hidden: int, h: Any, w: Any) -> None:  # noqa: N803
    """``acc[b, g, j] = sum_k h(b, k) * W[k, (g, j)]`` in register tiles of ``lay.tile_rows`` batch
    rows x ``lay.tile_vectors`` vectors of columns: each tile accumulates in registers over every
    k (``h[b, k]`` broadcast, a weight vector loaded once for the tile's rows; ``w(tile, k,
    column)`` reads the tile's contiguous block) and is written once. Accumulating in ``acc``
    itself loaded and stored every vector at every k: an LSTM at batch 8 ran its steps at 33 % of
    the peak, store-bound, slower than the unrolled form."""
    from tvm import tirx

    lanes, tr, tv = lay.lanes, lay.tile_rows, lay.tile_vectors
    with T.grid(rows // tr, lay.tiles) as (bo, tile):
        regs = T.alloc_buffer((tr, tv, lanes), "float32", scope="local")
        with T.unroll(0, tr) as bi, T.unroll(0, tv) as v, T.vectorized(0, lanes) as ji:
            T.buffer_store(regs, tirx.const(0.0, "float32"), [bi, v, ji])
        with T.serial(0, hidden) as k, T.unroll(0, tr) as bi, T.unroll(0, tv) as v, T.vectorized(0, lanes) as ji:
            T.buffer_store(regs, regs[bi, v, ji] + h(bo * tr + bi, k) * w(tile, k, v * lanes + ji), [bi, v, ji])
        with T.unroll(0, tr) as bi, T.unroll(0, tv) as v, T.vectorized(0, lanes) as ji:
            col = tile * lay.tile_cols + v * lanes + ji  # (gate, column) flattened
            T.buffer_store(acc, regs[bi, v, ji], [bo * tr + bi, col // lay.width, col % lay.width])


def _update(T: Any, cell: str, width: int, lanes: int, xg: Any, acc: Any, bhn: Any, state: Any, store: Any) -> None:  # noqa: N803
    """One step's cell update of ``width`` columns from the gates (PyTorch's equations, its gate
    order): ``xg(g, j)`` and ``acc(g, j)`` the input's and the state's parts of gate ``g``,
    ``state(i, j)`` reads h (0) or c (1), ``store(i, j, value)`` writes it."""
    from tvm import tirx

    one = tirx.const(1.0, "float32")
    with T.serial(0, width // lanes) as jo, T.vectorized(0, lanes) as ji:
        j = jo * lanes + ji
        gate = lambda g: xg(g, j) + acc(g, j)  # noqa: E731
        if cell == "gru":
            z = tirx.Var("z", "float32")  # (used twice: bound once, as a Let may define its variable only once)
            n = _tanh(xg(2, j) + _sigmoid(gate(0)) * (acc(2, j) + bhn(j)))
            store(0, j, tirx.Let(z, _sigmoid(gate(1)), (one - z) * n + z * state(0, j)))
        elif cell == "lstm":
            store(1, j, _sigmoid(gate(1)) * state(1, j) + _sigmoid(gate(0)) * _tanh(gate(2)))
            store(0, j, _sigmoid(gate(3)) * _tanh(state(1, j)))  # (the new cell: stored just above)
        else:
            store(0, j, _tanh(gate(0)) if cell == "rnn_tanh" else tirx.max(gate(0), tirx.const(0.0, "float32")))


def _per_gate_padded(bb: Any, w: Any, gates: int, hidden: int, padded: int) -> Any:
    """``w`` (``[gates * hidden, ...]``) with each gate's rows padded with zeros to ``padded``."""
    from tvm import relax

    w = bb.normalize(w)
    rest = [int(d) for d in w.ty.shape][1:]
    w = relax.op.reshape(w, [gates, hidden, *rest])
    if padded != hidden:
        w = relax.op.nn.pad(w, [0, 0, 0, padded - hidden] + [0, 0] * len(rest))
    return bb.emit(relax.op.reshape(w, [gates * padded, *rest]))


def _gate_bias(bb: Any, cell: str, b_ih: Any, b_hh: Any, gates: int, hidden: int, padded: int) -> tuple[Any, Any]:
    """(the bias added to the input's gate contributions, GRU's new-gate ``b_hh`` or None): every
    ``b_hh`` joins ``b_ih`` except a GRU's new gate, which its reset gate scales."""
    from tvm import relax

    if b_ih is None:
        return None, None
    if cell != "gru":
        return _per_gate_padded(bb, relax.op.add(b_ih, b_hh), gates, hidden, padded), None
    hh = relax.op.concat([relax.op.strided_slice(b_hh, [0], [0], [2 * hidden]),
                          relax.op.zeros([hidden], b_hh.ty.dtype)], 0)
    new_gate = relax.op.strided_slice(b_hh, [0], [2 * hidden], [3 * hidden])
    return (_per_gate_padded(bb, relax.op.add(b_ih, hh), gates, hidden, padded),
            _per_gate_padded(bb, new_gate, 1, hidden, padded))


def _tile_major(w: Any, lay: Plan, hidden: int) -> Any:
    """One direction's padded ``W_hh`` (``[G * Hp, H]``) as the kernel reads it: ``[chunks, tiles,
    H, tile columns]``, a task's ``(gate, column)`` pairs flattened and cut into register tiles."""
    from tvm import relax

    w = relax.op.reshape(w, [lay.gates, lay.chunks, lay.width, hidden])
    w = relax.op.reshape(relax.op.permute_dims(w, [1, 0, 2, 3]), [lay.chunks, lay.tiles, lay.tile_cols, hidden])
    return relax.op.permute_dims(w, [0, 1, 3, 2])


def _layer(bb: Any, regs: Registers, cell: str, x: Any, weights: list[list[Any]], states: list[Any],
           batch_first: bool, reverse: tuple[bool, ...] = (False, True)) -> Any:
    """One layer (all its directions; PyTorch's weights ``[w_ih, w_hh(, b_ih, b_hh)]`` each) as
    the input product and one ``scan_kernel`` call; the call's (y, hn[, cn])."""
    from tvm import relax

    (n0, n1, width), dirs = [int(d) for d in x.ty.shape], len(weights)
    hidden, dtype = int(weights[0][1].ty.shape[1]), x.ty.dtype
    steps, batch = (n1, n0) if batch_first else (n0, n1)
    lay = plan(cell, hidden, batch, regs)
    gates, padded = lay.gates, lay.padded
    w_ih = relax.op.concat([_per_gate_padded(bb, w[0], gates, hidden, padded) for w in weights], 0)
    xg = relax.op.matmul(relax.op.reshape(x, [n0 * n1, width]), relax.op.permute_dims(w_ih))
    biases = [_gate_bias(bb, cell, *(w[2:] or [None, None]), gates, hidden, padded) for w in weights]
    if biases[0][0] is not None:
        xg = relax.op.add(xg, relax.op.concat([b for b, _ in biases], 0))
    xg = bb.emit(relax.op.reshape(xg, [n0, n1, dirs, gates, padded]))
    whh = [_tile_major(_per_gate_padded(bb, w[1], gates, hidden, padded), lay, hidden) for w in weights]
    args = [xg, bb.emit(relax.op.stack(whh, 0) if dirs > 1 else relax.op.expand_dims(whh[0], 0))]
    if cell == "gru":
        bhn = [b if b is not None else relax.op.zeros([padded], dtype) for _, b in biases]
        args.append(bb.emit(relax.op.reshape(relax.op.concat(bhn, 0), [dirs, padded])))
    kernel = scan_kernel(cell, steps, batch, dirs, hidden, batch_first, regs, reverse)
    gvar = bb.add_func(kernel, f"{cell}_scan")
    outs = [relax.TensorType([n0, n1, dirs, hidden], dtype)] + [relax.TensorType([dirs, batch, hidden], dtype)] * len(states)
    return bb.emit(relax.call_tir(gvar, args + states, outs))


def convert(regs: Registers, node: Any, importer: Any) -> Any:
    """``aten.gru/lstm/rnn_tanh/rnn_relu.input`` (kept whole by ``decompositions``) as one
    ``scan_kernel`` call per layer; the op's tuple (output, h_n[, c_n])."""
    from tvm import relax

    bb, cell = importer.block_builder, _cell_of(node)
    x = importer.env[node.args[0]]
    hx = node.args[1] if cell == "lstm" else [node.args[1]]
    h0 = [importer.env[h] for h in hx]
    params = [importer.env[p] for p in node.args[2]]
    has_biases, layers, bidirectional, batch_first = node.args[3], node.args[4], node.args[7], node.args[8]
    dirs, per = 2 if bidirectional else 1, 4 if has_biases else 2
    finals: list[list[Any]] = [[] for _ in h0]
    for layer in range(layers):
        weights = [params[(layer * dirs + d) * per:(layer * dirs + d + 1) * per] for d in range(dirs)]
        states = [bb.emit(relax.op.strided_slice(h, [0], [layer * dirs], [(layer + 1) * dirs])) for h in h0]
        call = _layer(bb, regs, cell, x, weights, states, batch_first)
        n0, n1 = (int(x.ty.shape[i]) for i in range(2))
        x = bb.emit(relax.op.reshape(relax.TupleGetItem(call, 0), [n0, n1, dirs * int(weights[0][1].ty.shape[1])]))
        for i, final in enumerate(finals):
            final.append(relax.TupleGetItem(call, i + 1))
    outs = [bb.emit(relax.op.concat(f, 0) if len(f) > 1 else f[0]) for f in finals]
    return bb.emit(relax.Tuple([x, *outs]))


def converters(regs: Registers) -> dict[str, Any]:
    """``custom_convert_map`` entries, keyed as torch.export names the ops."""
    return {f"{cell}.input": functools.partial(convert, regs) for cell in _GATES}


# ONNX's gate order, as PyTorch's gates: PyTorch's gate k is ONNX's gate ``_ONNX_GATES[cell][k]``
# (LSTM: ONNX i, o, f, c; PyTorch i, f, g, o. GRU: ONNX z, r, h; PyTorch r, z, n).
_ONNX_GATES = {"LSTM": [0, 2, 3, 1], "GRU": [1, 0, 2], "RNN": [0]}
_ONNX_DEFAULT_ACTIVATIONS = {"LSTM": (b"Sigmoid", b"Tanh", b"Tanh"), "GRU": (b"Sigmoid", b"Tanh"), "RNN": (b"Tanh",)}


def _onnx_cell(op: str, attr: dict[str, Any], inputs: list[Any]) -> str:
    """The scan kernel's cell for an ONNX recurrent node; the unsupported-op error for the forms
    it does not compute (clipping, coupled gates, peepholes, per-sequence lengths, other
    activations, GRU's reset applied before the product)."""
    acts = tuple(a.capitalize() if isinstance(a, bytes) else a.encode().capitalize() for a in attr.get("activations", ()))
    dirs = 2 if attr.get("direction", b"forward") == b"bidirectional" else 1
    defaults = _ONNX_DEFAULT_ACTIVATIONS[op] * dirs
    cell = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn_tanh"}[op]
    if op == "RNN" and acts in ((b"Relu",) * dirs,):
        cell, acts = "rnn_relu", defaults
    for bad, why in ((acts and acts != defaults, f"activations {acts}"), ("clip" in attr, "clip"),
                     (attr.get("input_forget", 0), "input_forget"),
                     (op == "GRU" and not attr.get("linear_before_reset", 0), "linear_before_reset=0"),
                     (len(inputs) > 7 and inputs[7] is not None, "peepholes"),
                     (len(inputs) > 4 and inputs[4] is not None, "sequence_lens")):
        if bad:
            refuse(op, why)
    return cell


def _onnx_weights(bb: Any, op: str, w: Any, r: Any, b: Any, d: int, hidden: int) -> list[Any]:
    """Direction ``d``'s ONNX weights as PyTorch's ``[w_ih, w_hh(, b_ih, b_hh)]``, gates reordered."""
    import numpy as np
    from tvm import relax

    order = _ONNX_GATES[op]
    rows = len(order) * hidden

    def reordered(t: Any) -> Any:
        rest = [int(v) for v in bb.normalize(t).ty.shape][1:]
        t = relax.op.take(relax.op.reshape(t, [len(order), hidden, *rest]), relax.const(np.array(order, "int64")), axis=0)
        return bb.emit(relax.op.reshape(t, [rows, *rest]))

    mine = lambda t: relax.op.take(t, relax.const(d, "int64"), axis=0)  # noqa: E731
    out = [reordered(mine(w)), reordered(mine(r))]
    if b is not None:  # ONNX's B: [Wb, Rb] in one row per direction
        out += [reordered(relax.op.strided_slice(mine(b), [0], [i * rows], [(i + 1) * rows])) for i in range(2)]
    return out


def _onnx_check_shapes(bb: Any, op: str, inputs: list[Any], dirs: int, rows: int, hidden: int, width: int,
                       state: list[int]) -> None:
    """The unsupported-op error, naming the input, where a recurrent node's inputs disagree with
    its ``hidden_size`` (torch's dynamo exporter writes an LSTM with ``proj_size`` so; the
    kernel would fail later with a type mismatch)."""
    expected = {1: [dirs, rows, width], 2: [dirs, rows, hidden], 3: [dirs, 2 * rows], 5: state, 6: state}
    names = {1: "W", 2: "R", 3: "B", 5: "initial_h", 6: "initial_c"}
    for i, want in expected.items():
        if len(inputs) > i and inputs[i] is not None:
            got = static_shape(bb.normalize(inputs[i]).ty)
            if got is not None and list(got) != want:
                refuse(op, f"{names[i]} of shape {list(got)} where hidden_size {hidden} needs {want}")


def _onnx_convert(regs: Registers, op: str, bb: Any, inputs: list[Any], attr: dict[str, Any]) -> Any:
    """An ONNX ``LSTM``/``GRU``/``RNN`` node as one ``scan_kernel`` call: (Y, Y_h[, Y_c]) in
    ONNX's layouts (Y ``[T, D, B, H]``, or ``[B, T, D, H]`` with ``layout=1``)."""
    from tvm import relax

    cell = _onnx_cell(op, attr, inputs)
    x, w, r = inputs[:3]
    shape = static_shape(bb.normalize(x).ty)
    if shape is None or str(x.ty.dtype) != "float32":
        refuse(op, f"{x.ty.dtype} input of shape {x.ty.shape}: float32 with static shapes only")
    b = inputs[3] if len(inputs) > 3 else None
    direction = attr.get("direction", b"forward")
    dirs, hidden, batch_first = (2 if direction == b"bidirectional" else 1), int(attr["hidden_size"]), attr.get("layout", 0) == 1
    n0, n1 = shape[:2]
    batch = n0 if batch_first else n1
    _onnx_check_shapes(bb, op, inputs, dirs, len(_ONNX_GATES[op]) * hidden, hidden, shape[2],
                       [batch, dirs, hidden] if batch_first else [dirs, batch, hidden])
    states = []
    for i in (5, 6)[: 1 + (cell == "lstm")]:
        given = inputs[i] if len(inputs) > i else None
        if given is None:
            given = relax.op.zeros([dirs, batch, hidden], "float32")
        elif batch_first:  # [B, D, H]
            given = relax.op.permute_dims(given, [1, 0, 2])
        states.append(bb.emit(given))
    weights = [_onnx_weights(bb, op, w, r, b, d, hidden) for d in range(dirs)]
    reverse = (direction == b"reverse", True)
    call = _layer(bb, regs, cell, x, weights, states, batch_first, reverse)
    y = relax.TupleGetItem(call, 0)  # [T, B, D, H] or [B, T, D, H]
    outs = [bb.emit(y if batch_first else relax.op.permute_dims(y, [0, 2, 1, 3]))]
    for i in range(len(states)):
        final = relax.TupleGetItem(call, i + 1)  # [D, B, H]
        outs.append(bb.emit(relax.op.permute_dims(final, [1, 0, 2]) if batch_first else final))
    return relax.Tuple(outs)


def onnx_converter_classes(regs: Registers) -> dict[str, type]:
    """Converters for ONNX ``LSTM``, ``GRU`` and ``RNN``, which TVM 0.27's importer has none of
    (every ONNX file with a recurrent layer was refused); ``onnx_converters.extended_importer``
    puts them in its table."""
    from tvm.relax.frontend.onnx import onnx_frontend

    def converter(op: str) -> type:
        def impl(cls: Any, bb: Any, inputs: list[Any], attr: dict[str, Any], params: Any) -> Any:
            return _onnx_convert(regs, op, bb, inputs, attr)

        return type(op, (onnx_frontend.OnnxOpConverter,), {"_impl_v1": classmethod(impl)})

    return {op: converter(op) for op in _ONNX_GATES}
