"""tvmbench's own Relax passes (and LazySelect, over the scheduled kernels), one per module;
``compile/pipeline.py`` puts them in order.

Each module's docstring says what its pass rewrites and why (with the measurement that made it
worth having); each exposes one function returning the pass.
"""

from tvmbench.compile.passes.arithmetic import cpu_friendly_arithmetic
from tvmbench.compile.passes.bf16_dense import bf16_dense
from tvmbench.compile.passes.bounded_take import bounded_take
from tvmbench.compile.passes.channels_last import keep_channels_last
from tvmbench.compile.passes.conv1d import conv1d_as_conv2d, on_row_maps
from tvmbench.compile.passes.conv3d import conv3d_as_conv2d
from tvmbench.compile.passes.dilated_bands import dilated_bands
from tvmbench.compile.passes.fast_math import fast_math
from tvmbench.compile.passes.flat_transform import flat_transform_params
from tvmbench.compile.passes.fold_constants import fold_constants_numpy
from tvmbench.compile.passes.fold_scale import fold_scale_into_conv
from tvmbench.compile.passes.fuse_attention import fuse_attention
from tvmbench.compile.passes.fuse_expansion import fuse_expansion_into_window
from tvmbench.compile.passes.group_norm import group_norm_by_channel, instance_norms_as_group_norms
from tvmbench.compile.passes.grouped_conv import grouped_conv_nhwc
from tvmbench.compile.passes.key_limits import key_limits
from tvmbench.compile.passes.layout_guards import convert_layout_guards
from tvmbench.compile.passes.lazy_select import lazy_select
from tvmbench.compile.passes.matmul_broadcast import unbroadcast_matmul
from tvmbench.compile.passes.pack_keys import pack_keys
from tvmbench.compile.passes.pack_weights import pack_weights
from tvmbench.compile.passes.pad_attention import pad_attention
from tvmbench.compile.passes.pad_softmax import pad_softmax_rows
from tvmbench.compile.passes.pad_window_channels import pad_window_channels
from tvmbench.compile.passes.reshape_last import elementwise_before_reshape
from tvmbench.compile.passes.slices import slices_through_layout
from tvmbench.compile.passes.sub_pixel import sub_pixel_conv_transpose
from tvmbench.compile.passes.top_k import top_k_by_selection
from tvmbench.compile.passes.winograd import winograd_conv3x3

__all__ = ["bf16_dense", "bounded_take", "conv1d_as_conv2d", "on_row_maps", "conv3d_as_conv2d", "convert_layout_guards", "cpu_friendly_arithmetic", "dilated_bands",
           "elementwise_before_reshape", "fast_math",
           "flat_transform_params", "fold_constants_numpy", "fold_scale_into_conv", "fuse_attention",
           "fuse_expansion_into_window", "top_k_by_selection", "group_norm_by_channel", "instance_norms_as_group_norms", "grouped_conv_nhwc", "keep_channels_last", "key_limits", "lazy_select", "pack_keys", "pack_weights",
           "pad_attention", "pad_softmax_rows", "pad_window_channels", "slices_through_layout", "sub_pixel_conv_transpose", "unbroadcast_matmul",
           "winograd_conv3x3"]
