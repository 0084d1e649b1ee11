"""Accumulating scatters (``index_add``, ``x[i] += v``, a graph network's message sums) without
a data race.

TVM 0.27's ``index_put`` with ``accumulate=True`` adds every value into its target inside one
parallel loop over the values (``topi/index_put.py``): two values aimed at one element race, and
an update is lost now and then. A graph's edges share destinations all the time, so GraphSAGE's
mean over neighbours came out up to 4 % wrong, differently from run to run. It also
materialises an int64 coordinate for every value (121 MB for Cora's 10 556 edges of 1 433
features).

Here a value's rows are added in the order PyTorch adds them, one row after another, and the
parallel tasks split the columns instead: no two tasks touch one element, and each task streams
whole runs of its columns. When the values are a gather of another tensor's rows (``x[src]``,
message passing's form) the kernel reads those rows itself, and the gathered copy is not made.
"""

from __future__ import annotations

from typing import Any

# parallel tasks over the columns: enough for two to four cores to share out evenly, each task's
# run of columns a whole number of cache lines (16 floats) where there are enough columns
TASKS = 8
LINE = 16


def _column_block(columns: int) -> int:
    block = -(-columns // TASKS)
    return min(columns, -(-block // LINE) * LINE)


def scatter_add_rows(index: Any, values: Any, gather: Any | None = None, data: Any | None = None,
                     rows: int | None = None) -> Any:
    """A TE extern: ``out = data`` ([B, N, A]; zeros of N = ``rows`` rows, written here rather than
    read, when ``data`` is None), then for each e in order
    ``out[b, index[e], :] += values[b, gather[e] if gather is given else e, :]``.

    Tasks are (b, a block of columns) pairs; each walks all of ``index`` serially, so updates to
    one element happen in one task, in PyTorch's order. Negative indices count from the end."""
    from tvm import te, tirx
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    batch, source_rows, columns = (int(v) for v in values.shape)
    rows = int(data.shape[1]) if data is not None else int(rows)
    count, size, dtype = int(index.shape[0]), batch * rows * int(values.shape[2]), values.dtype
    block = _column_block(columns)
    blocks = -(-columns // block)

    def gen_ir(idx: Any, val: Any, picks: Any | None, src: Any | None, out: Any) -> Any:
        with IRBuilder() as ib:
            with T.seq_scope():
                with T.parallel(0, size // LINE) as i:
                    with T.vectorized(0, LINE) as lane:
                        out[i * LINE + lane] = tirx.const(0, dtype) if src is None else src[i * LINE + lane]
                with T.serial(size // LINE * LINE, size) as i:
                    out[i] = tirx.const(0, dtype) if src is None else src[i]
                with T.parallel(0, batch * blocks) as task:
                    b, start = task // blocks, task % blocks * block
                    width = tirx.min(block, columns - start)
                    with T.serial(0, count) as e:
                        row = idx[e] + tirx.Cast(idx.dtype, idx[e] < 0) * rows
                        if picks is not None:
                            source = picks[e] + tirx.Cast(picks.dtype, picks[e] < 0) * source_rows
                        else:
                            source = e
                        to = (b * rows + row) * columns + start
                        at = (b * source_rows + source) * columns + start
                        with T.serial(0, width // LINE) as j:  # whole vectors, then the rest
                            with T.vectorized(0, LINE) as lane:
                                out[to + j * LINE + lane] = out[to + j * LINE + lane] + val[at + j * LINE + lane]
                        with T.serial(width // LINE * LINE, width) as j:
                            out[to + j] = out[to + j] + val[at + j]
            return ib.get()

    inputs = [t for t in (index, values, gather, data) if t is not None]

    def build(ins: Any, outs: Any) -> Any:
        ptrs = iter(T.buffer_proxy(p) for p in ins)
        idx, val = next(ptrs), next(ptrs)
        picks = next(ptrs) if gather is not None else None
        src = next(ptrs) if data is not None else None
        return gen_ir(idx, val, picks, src, T.buffer_proxy(outs[0]))

    shape = [batch, rows, columns]
    out_buf = tirx.decl_buffer(shape, dtype, "out_buf")
    return te.extern([shape], inputs, build, dtype=dtype, out_buffers=[out_buf], name="scatter_add_rows",
                     tag="scatter_add_rows")
