"""Swin3D-T's ``slice_scatter`` kernel at 16 frames of 224 px (legalized, unscheduled; session 47):
boolean window masks over a slice with no rows, computed apart from their consumer."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(lv113: T.Buffer((T.int64(0), T.int64(49), T.int64(56)), "float32"), lv111: T.Buffer((T.int64(0), T.int64(49), T.int64(49)), "float32"), T_where: T.Buffer((T.int64(0), T.int64(49), T.int64(56)), "float32")):
    T.func_attr({"op_pattern": 8, "tirx.noalias": True})
    # with T.sblock("root"):
    T_full = T.sblock_alloc_buffer((T.int64(56),), "bool")
    T_arange = T.sblock_alloc_buffer((T.int64(56),), "int64")
    T_less = T.sblock_alloc_buffer((T.int64(56),), "bool")
    T_logical_and = T.sblock_alloc_buffer((T.int64(56),), "bool")
    T_reshape = T.sblock_alloc_buffer((T.int64(1), T.int64(1), T.int64(56)), "bool")
    T_broadcast_to = T.sblock_alloc_buffer((T.int64(0), T.int64(49), T.int64(56)), "bool")
    T_subtract = T.sblock_alloc_buffer((T.int64(56),), "int64")
    T_add = T.sblock_alloc_buffer((T.int64(56),), "int64")
    T_floor_divide = T.sblock_alloc_buffer((T.int64(56),), "int64")
    compute = T.sblock_alloc_buffer((T.int64(56),), "int64")
    T_take = T.sblock_alloc_buffer((T.int64(0), T.int64(49), T.int64(56)))
    for ax0 in range(T.int64(56)):
        with T.sblock("T_full"):
            v_ax0 = T.axis.spatial(T.int64(56), ax0)
            T.reads()
            T.writes(T_full[v_ax0])
            T_full[v_ax0] = T.bool(True)
    for ax0 in range(T.int64(56)):
        with T.sblock("T_arange"):
            v_ax0 = T.axis.spatial(T.int64(56), ax0)
            T.reads()
            T.writes(T_arange[v_ax0])
            T_arange[v_ax0] = T.Cast("int64", v_ax0)
    for ax0 in range(T.int64(56)):
        with T.sblock("T_less"):
            v_ax0 = T.axis.spatial(T.int64(56), ax0)
            T.reads(T_arange[v_ax0])
            T.writes(T_less[v_ax0])
            T_less[v_ax0] = T_arange[v_ax0] < T.int64(49)
    for ax0 in range(T.int64(56)):
        with T.sblock("T_logical_and"):
            v_ax0 = T.axis.spatial(T.int64(56), ax0)
            T.reads(T_full[v_ax0], T_less[v_ax0])
            T.writes(T_logical_and[v_ax0])
            T_logical_and[v_ax0] = T_full[v_ax0] and T_less[v_ax0]
    for ax0, ax1, ax2 in T.grid(T.int64(1), T.int64(1), T.int64(56)):
        with T.sblock("T_reshape"):
            v_ax0, v_ax1, v_ax2 = T.axis.remap("SSS", [ax0, ax1, ax2])
            T.reads(T_logical_and[v_ax2 % T.int64(56)])
            T.writes(T_reshape[v_ax0, v_ax1, v_ax2])
            T_reshape[v_ax0, v_ax1, v_ax2] = T_logical_and[v_ax2 % T.int64(56)]
    for ax0, ax1, ax2 in T.grid(T.int64(0), T.int64(49), T.int64(56)):
        with T.sblock("T_broadcast_to"):
            v_ax0, v_ax1, v_ax2 = T.axis.remap("SSS", [ax0, ax1, ax2])
            T.reads(T_reshape[T.int64(0), T.int64(0), v_ax2])
            T.writes(T_broadcast_to[v_ax0, v_ax1, v_ax2])
            T_broadcast_to[v_ax0, v_ax1, v_ax2] = T_reshape[T.int64(0), T.int64(0), v_ax2]
    for ax0 in range(T.int64(56)):
        with T.sblock("T_subtract"):
            v_ax0 = T.axis.spatial(T.int64(56), ax0)
            T.reads(T_arange[v_ax0])
            T.writes(T_subtract[v_ax0])
            T_subtract[v_ax0] = T_arange[v_ax0]
    for ax0 in range(T.int64(56)):
        with T.sblock("T_add"):
            v_ax0 = T.axis.spatial(T.int64(56), ax0)
            T.reads(T_subtract[v_ax0])
            T.writes(T_add[v_ax0])
            T_add[v_ax0] = T_subtract[v_ax0]
    for ax0 in range(T.int64(56)):
        with T.sblock("T_floor_divide"):
            v_ax0 = T.axis.spatial(T.int64(56), ax0)
            T.reads(T_add[v_ax0])
            T.writes(T_floor_divide[v_ax0])
            T_floor_divide[v_ax0] = T_add[v_ax0]
    for i0 in range(T.int64(56)):
        with T.sblock("compute"):
            v_i0 = T.axis.spatial(T.int64(56), i0)
            T.reads(T_floor_divide[v_i0])
            T.writes(compute[v_i0])
            compute[v_i0] = T.max(T.min(T_floor_divide[v_i0], T.int64(55)), T.int64(0))
    for ax0, ax1, ax2 in T.grid(T.int64(0), T.int64(49), T.int64(56)):
        with T.sblock("T_take"):
            v_ax0, v_ax1, v_ax2 = T.axis.remap("SSS", [ax0, ax1, ax2])
            T.reads(lv111[v_ax0, v_ax1, compute[v_ax2]], compute[v_ax2])
            T.writes(T_take[v_ax0, v_ax1, v_ax2])
            T_take[v_ax0, v_ax1, v_ax2] = lv111[v_ax0, v_ax1, compute[v_ax2]]
    for ax0, ax1, ax2 in T.grid(T.int64(0), T.int64(49), T.int64(56)):
        with T.sblock("T_where"):
            v_ax0, v_ax1, v_ax2 = T.axis.remap("SSS", [ax0, ax1, ax2])
            T.reads(T_broadcast_to[v_ax0, v_ax1, v_ax2], T_take[v_ax0, v_ax1, v_ax2], lv113[v_ax0, v_ax1, v_ax2])
            T.writes(T_where[v_ax0, v_ax1, v_ax2])
            T_where[v_ax0, v_ax1, v_ax2] = T.Select(T.int64(0) < T.Cast("int64", T_broadcast_to[v_ax0, v_ax1, v_ax2]), T_take[v_ax0, v_ax1, v_ax2], lv113[v_ax0, v_ax1, v_ax2])
