"""The k largest (or smallest) entries of each row, by selection rather than a sort of the row.

TVM 0.27's CPU ``topk`` calls its runtime's ``tvm.contrib.sort.topk``, which sorts every row whole
on one thread: DGCNN's k = 20 nearest neighbours among 1024 points took 7.3 ms a layer, for 20 of
1024 entries a row (1.9 ms here).

Here rows are shared between parallel tasks, and each row is read once against the k-th best so
far, kept sorted in the output itself: an entry that beats it is inserted in place (k moves at
most), and random data inserts about k ln(n / k) times a row. Equal values keep their order along
the row (the lower index first, as ONNX's TopK and TVM's stable sort give); NaN counts as larger
than any number, as in PyTorch. The cost grows with k, so long selections stay with TVM's sort
(``passes/top_k.py``).
"""

from __future__ import annotations

from typing import Any


def _better(largest: bool, dtype: str) -> Any:
    """``better(a, b)``: a belongs before b (strictly, so that ties keep their order)."""
    from tvm import tirx

    def nan(x: Any) -> Any:
        return tirx.isnan(x) if "float" in dtype else tirx.const(False, "bool")

    if largest:
        return lambda a, b: tirx.Or(a > b, tirx.And(nan(a), tirx.Not(nan(b))))
    return lambda a, b: tirx.Or(a < b, tirx.And(nan(b), tirx.Not(nan(a))))


def top_k_rows(data: Any, k: int, largest: bool = True, index_dtype: str = "int64") -> Any:
    """A TE extern over ``data`` of [rows, n]: the k best entries of each row, best first, and their
    positions along the row, as ([rows, k] values, [rows, k] indices)."""
    from tvm import te, tirx
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    rows, n = (int(v) for v in data.shape)
    better = _better(largest, str(data.dtype))

    def insert(bufs: Any, slot: Any, row: Any, e: Any, end: Any) -> None:
        """Entry e of the row into the sorted slots [0, end], moving worse ones one slot down
        until it meets a better one (``slot``: a local counter; the read above slot 0 is clamped,
        as the condition's two sides are both evaluated)."""
        src, values, indices = bufs
        v, base = src[row * n + e], row * k
        slot[0] = end
        with T.While(tirx.all(slot[0] > 0, better(v, values[base + tirx.max(slot[0] - 1, 0)]))):
            values[base + slot[0]] = values[base + slot[0] - 1]
            indices[base + slot[0]] = indices[base + slot[0] - 1]
            slot[0] = slot[0] - 1
        values[base + slot[0]] = v
        indices[base + slot[0]] = tirx.Cast(index_dtype, e)

    def build(ins: Any, outs: Any) -> Any:
        bufs = [T.buffer_proxy(b) for b in (ins[0], *outs)]
        src, values = bufs[:2]
        with IRBuilder() as ib:
            with T.parallel(0, rows) as row:
                slot = T.buffer_proxy(T.alloc_buffer([1], "int32", scope="local"))
                with T.serial(0, k) as e:  # the first k fill the slots
                    insert(bufs, slot, row, e, e)
                with T.serial(k, n) as e:  # the rest only when they beat the k-th
                    with T.If(better(src[row * n + e], values[row * k + k - 1])):
                        with T.Then():
                            insert(bufs, slot, row, e, tirx.const(k - 1, "int32"))
            return ib.get()

    shape = [rows, k]
    bufs = [tirx.decl_buffer(shape, data.dtype, "values"), tirx.decl_buffer(shape, index_dtype, "indices")]
    return te.extern([shape, shape], [data], build, dtype=[data.dtype, index_dtype], out_buffers=bufs,
                     name="top_k_rows", tag="top_k_rows")
