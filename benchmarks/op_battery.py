"""Every operator in a small model, through TVM and PyTorch: which does TVM import wrongly or refuse?

    .venv/bin/python benchmarks/op_battery.py [--match SUBSTRING] [--onnx [--dynamo]]

Each case is a one-operator model (or a few, for layers) on small random inputs, compiled by
tvmbench's TVM pipeline and compared with PyTorch eager (``measure.accuracy``, the check every
``tvmbench run`` makes). A line per case: ``ok``, ``FAIL`` (wrong outputs: the worst kind, as the
model compiles) or ``ERROR`` (refused, with the first line of the reason), then the counts.
Session 45 ran it over 200 cases and found the wrong results and refusals that
``compile/converters.py`` now converts (SELU, nearest and bilinear resizing by a factor,
antialiased resizing, grid_sample, advanced and negative indexing, index_put with sliced axes,
amax, scatter_reduce, ...), and the eight it still refused then that session 47 converted
(erfinv, kthvalue, copysign, a stable sort, rrelu, nn.Bilinear, scatter_reduce's mean, a constant
boolean mask index); the regression tests are in ``tests/test_compile.py``. Whatever it prints as
``ERROR`` is the honest list of operators tvmbench's TVM does not take (none, as of session 47).

``--onnx`` takes the other road in: each case exported to an ONNX file (``torch.onnx.export``
with ``dynamo=False``, the exporter most files in the wild come from; ``--dynamo`` for the
torch.export-based one, torch's default since 2.9), imported by TVM's ONNX
importer as ``tvmbench run --model FILE.onnx`` does, and compared with ONNX Runtime on the same
file. A case the exporter itself refuses is ``SKIP``; one ONNX Runtime cannot run is ``SKIP`` too
(a file no framework runs says nothing about TVM).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn


def mk(fn, *shapes):
    """A model computing ``fn`` of random inputs of ``shapes``."""

    class M(nn.Module):
        def forward(self, *xs):
            return fn(*xs)

    def build():
        torch.manual_seed(0)
        return M().eval(), tuple(torch.randn(*s) for s in shapes)

    return build


def mod(make, *shapes):
    """The module ``make()`` on random inputs of ``shapes``."""

    def build():
        torch.manual_seed(0)
        return make().eval(), tuple(torch.randn(*s) for s in shapes)

    return build


class EmbM(nn.Module):
    def __init__(self):
        super().__init__()
        self.e = nn.Embedding(10, 4, padding_idx=0)

    def forward(self, x):
        return self.e((x.abs() * 4).long().clamp(0, 9))


class Recurrent(nn.Module):
    """A recurrent layer with every output it returns (its final states too), from ``h0`` when
    given a second input."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, *h0):
        lstm = isinstance(self.rnn, nn.LSTM)
        out, h = self.rnn(x, ((h0[0], h0[0] * 0.5) if lstm else h0[0]) if h0 else None)
        return (out, *h) if lstm else (out, h)


class Cells(nn.Module):
    """A cell stepped in Python over the sequence (torch.export unrolls the loop)."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x):
        h, outs = None, []
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
            outs.append(h[0] if isinstance(h, tuple) else h)
        return torch.stack(outs, 1)


def _index_puts(x):
    z = x.clone()
    z[:, torch.tensor([1, -1])] = 0.5
    w = x.clone()
    w.index_add_(2, torch.tensor([0, 2]), x[..., :2])
    v = x.clone()
    v[torch.tensor([0, 1]), torch.tensor([2, -1])] = x[0, :2] * 5
    u = x.clone()
    u[:, torch.tensor([[0], [3]]), torch.tensor([1, 2])] = 9.0
    return z, w, v, u


S = (2, 6, 8, 8)
cases = {
    "cumsum_neg": mk(lambda x: torch.cumsum(x, -1), (2, 5, 7)),
    "flip": mk(lambda x: torch.flip(x, [-1, 1]), (2, 5, 7)),
    "gather_neg": mk(lambda x: torch.gather(x, -1, (x.abs() * 3).long().clamp(max=6)), (2, 5, 7)),
    "index_select": mk(lambda x: torch.index_select(x, 1, torch.tensor([4, 0, 2])), (2, 5, 7)),
    "masked_fill": mk(lambda x: x.masked_fill(x > 0.5, -3.0), (2, 5, 7)),
    "topk": mk(lambda x: torch.topk(x, 3, dim=-1).values, (2, 5, 7)),
    "sort": mk(lambda x: torch.sort(x, dim=1, descending=True).values, (2, 5, 7)),
    "argmax": mk(lambda x: torch.argmax(x, dim=-1).float(), (2, 5, 7)),
    "max_dim": mk(lambda x: torch.max(x, dim=1)[0] + torch.max(x, dim=1)[1].float(), (2, 5, 7)),
    "interp_bilinear": mk(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False), S),
    "interp_bilinear_ac": mk(lambda x: F.interpolate(x, size=(11, 13), mode="bilinear", align_corners=True), S),
    "interp_nearest": mk(lambda x: F.interpolate(x, size=(11, 13), mode="nearest"), S),
    "interp_bicubic": mk(lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False), S),
    "pixel_shuffle": mk(lambda x: F.pixel_shuffle(torch.cat([x, x], 1), 2), (2, 6, 8, 8)),
    "unfold": mk(lambda x: F.unfold(x, 3, padding=1), S),
    "einsum": mk(lambda a, b: torch.einsum("bij,bjk->bik", a, b), (2, 5, 7), (2, 7, 3)),
    "ln_2d": mod(lambda: nn.LayerNorm([8, 8]), S),
    "group_norm": mod(lambda: nn.GroupNorm(3, 6), S),
    "instance_norm": mod(lambda: nn.InstanceNorm2d(6, affine=True), S),
    "pad_reflect": mk(lambda x: F.pad(x, (1, 2, 3, 1), mode="reflect"), S),
    "pad_replicate": mk(lambda x: F.pad(x, (1, 2, 3, 1), mode="replicate"), S),
    "conv_t": mod(lambda: nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1), S),
    "conv_t_groups": mod(lambda: nn.ConvTranspose2d(6, 6, 4, stride=2, padding=1, groups=3), S),
    "adaptive_pool_odd": mk(lambda x: F.adaptive_avg_pool2d(x, (3, 5)), (2, 6, 7, 9)),
    "adaptive_max_odd": mk(lambda x: F.adaptive_max_pool2d(x, (3, 5)), (2, 6, 7, 9)),
    "maxpool_ceil": mk(lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True), (2, 6, 8, 8)),
    "avgpool_nopad": mk(lambda x: F.avg_pool2d(x, 3, 2, padding=1, count_include_pad=False), S),
    "avgpool_ceil": mk(lambda x: F.avg_pool2d(x, 3, 2, ceil_mode=True), S),
    "gru": mod(lambda: nn.GRU(7, 9, batch_first=True), (2, 5, 7)),
    "lstm_bi2": mod(lambda: nn.LSTM(7, 9, num_layers=2, bidirectional=True, batch_first=True), (2, 5, 7)),
    "lstm_states": mod(lambda: Recurrent(nn.LSTM(7, 9, batch_first=True)), (2, 5, 7)),
    "lstm_h0": mod(lambda: Recurrent(nn.LSTM(7, 9, num_layers=2)), (5, 2, 7), (2, 2, 9)),
    "lstm_nobias": mod(lambda: Recurrent(nn.LSTM(7, 9, bias=False, batch_first=True)), (2, 5, 7)),
    "lstm_proj": mod(lambda: Recurrent(nn.LSTM(7, 9, proj_size=4, batch_first=True)), (2, 5, 7)),
    "lstm_wide": mod(lambda: Recurrent(nn.LSTM(20, 70, num_layers=2, bidirectional=True)), (6, 3, 20)),
    "gru_bi2_h0": mod(lambda: Recurrent(nn.GRU(7, 9, num_layers=2, bidirectional=True)), (5, 2, 7), (4, 2, 9)),
    "gru_wide": mod(lambda: Recurrent(nn.GRU(20, 300, batch_first=True)), (2, 6, 20)),
    "rnn_tanh": mod(lambda: Recurrent(nn.RNN(7, 9, batch_first=True)), (2, 5, 7)),
    "rnn_relu2": mod(lambda: Recurrent(nn.RNN(7, 9, num_layers=2, nonlinearity="relu")), (5, 2, 7)),
    "lstm_cell": mod(lambda: Cells(nn.LSTMCell(7, 9)), (2, 5, 7)),
    "gru_cell": mod(lambda: Cells(nn.GRUCell(7, 9)), (2, 5, 7)),
    "std_var": mk(lambda x: x.std(dim=-1) + x.var(dim=1, unbiased=False).mean(), (2, 5, 7)),
    "cos_sim": mk(lambda a, b: F.cosine_similarity(a, b, dim=-1), (2, 5, 7), (2, 5, 7)),
    "logsumexp": mk(lambda x: torch.logsumexp(x, -1), (2, 5, 7)),
    "softplus": mk(lambda x: F.softplus(x, beta=2) + F.mish(x) + F.hardswish(x) + F.selu(x), (2, 5, 7)),
    "tril": mk(lambda x: torch.tril(x, -1) + torch.triu(x, 2), (2, 5, 7)),
    "roll": mk(lambda x: torch.roll(x, (2, -1), (1, 2)), (2, 5, 7)),
    "cumprod": mk(lambda x: torch.cumprod(x, 1), (2, 5, 7)),
    "baddbmm": mk(lambda a, b, c: torch.baddbmm(c, a, b, beta=0.5, alpha=2), (2, 5, 7), (2, 7, 3), (2, 5, 3)),
    "repeat_interleave": mk(lambda x: x.repeat_interleave(2, dim=1), (2, 5, 7)),
    "expand_where": mk(lambda x, y: torch.where(x > 0, x, y[:, :1]), (2, 5, 7), (2, 5, 7)),
    "clamp_t": mk(lambda x, y: torch.clamp(x, min=y.mean(), max=1.0), (2, 5, 7), (3,)),
    "chunk_neg": mk(lambda x: torch.chunk(x, 3, -1)[-1] * 2, (2, 5, 9)),
    "split_sizes": mk(lambda x: torch.split(x, [2, 5], dim=-1)[1], (2, 5, 7)),
    "norm_p": mk(lambda x: torch.linalg.vector_norm(x, ord=3, dim=-1) + x.norm(dim=1).sum(), (2, 5, 7)),
    "normalize": mk(lambda x: F.normalize(x, dim=1), S),
    "prelu": mod(lambda: nn.PReLU(6), S),
    "glu": mk(lambda x: F.glu(x, dim=-1), (2, 5, 8)),
    "silu_gelu_tanh": mk(lambda x: F.gelu(x, approximate="tanh") + F.silu(x), (2, 5, 7)),
    "conv1d_dil": mod(lambda: nn.Conv1d(5, 4, 3, dilation=2, padding=2), (2, 5, 17)),
    "conv3d": mod(lambda: nn.Conv2d(6, 6, 3, padding=2, dilation=2, groups=2), S),
    "flatten_neg": mk(lambda x: x.flatten(-2) @ torch.ones(64, 3), S),
    "mean_keep": mk(lambda x: x.mean(dim=(-1, -2), keepdim=True) * x, S),
    "sdpa_causal": mk(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), (1, 2, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8)),
    "bmm_t": mk(lambda a, b: a @ b.transpose(-1, -2), (2, 5, 7), (2, 3, 7)),
    "int_div": mk(lambda x: torch.div(x * 10, 3, rounding_mode="floor") + torch.remainder(x * 10, 3) + torch.fmod(x * 10, 3), (2, 5, 7)),
    "pow_sqrt": mk(lambda x: x.abs().sqrt() + x ** 3 + torch.rsqrt(x.abs() + 1), (2, 5, 7)),
    "sign_round": mk(lambda x: torch.sign(x) + torch.round(x * 3) + torch.trunc(x * 3) + torch.ceil(x), (2, 5, 7)),
    "erf_exp": mk(lambda x: torch.erf(x) + torch.expm1(x) + torch.log1p(x.abs()), (2, 5, 7)),
    "atan2": mk(lambda a, b: torch.atan2(a, b), (2, 5, 7), (2, 5, 7)),
    "cat_neg": mk(lambda a, b: torch.cat([a, b], dim=-2), (2, 5, 7), (2, 3, 7)),
    "stack_neg": mk(lambda a, b: torch.stack([a, b], dim=-1), (2, 5, 7), (2, 5, 7)),
    "unsqueeze_neg": mk(lambda x: x.unsqueeze(-2).expand(2, 5, 3, 7).reshape(2, 15, 7), (2, 5, 7)),
    "permute_neg": mk(lambda x: x.permute(0, -1, 1, -2).contiguous(), S),
    "narrow_t": mk(lambda x: x.narrow(-1, 1, 3), (2, 5, 7)),
    "slice_step": mk(lambda x: x[:, ::2, 1::3], (2, 5, 7)),
    "index_put": mk(lambda x: x.index_fill(1, torch.tensor([0, 3]), 7.0), (2, 5, 7)),
    "index_put_forms": mk(_index_puts, (2, 5, 7)),
    "index_put_full": mk(lambda x: x.clone().index_put_((torch.tensor([0, -1]), torch.tensor([2, -3])), x[0, :2] * 4),
                         (3, 5)),
    "scatter": mk(lambda x: torch.zeros(2, 5, 7).scatter(2, torch.tensor([[[1, 0, 6]] * 5] * 2), x[..., :3]), (2, 5, 7)),
    "bool_ops": mk(lambda x: ((x > 0) & (x < 1) | (x < -1)).float() + (~(x > 0)).float(), (2, 5, 7)),
    "min_max_bin": mk(lambda a, b: torch.maximum(a, b) - torch.minimum(a, b), (2, 5, 7), (5, 7)),
    "softplus_b2": mk(lambda x: F.softplus(x, beta=2), (2, 5, 7)),
    "softplus_1": mk(lambda x: F.softplus(x), (2, 5, 7)),
    "mish": mk(lambda x: F.mish(x), (2, 5, 7)),
    "hardswish": mk(lambda x: F.hardswish(x), (2, 5, 7)),
    "selu": mk(lambda x: F.selu(x), (2, 5, 7)),
    "interp_nearest2": mk(lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), S),
    "interp_nearest_d": mk(lambda x: F.interpolate(x, size=(4, 5), mode="nearest"), S),
    "interp_nearest_exact": mk(lambda x: F.interpolate(x, size=(11, 13), mode="nearest-exact"), S),
    "permute_neg_only": mk(lambda x: x.permute(0, -1, 1, -2) * 2, (2, 3, 4, 5)),
    "gather_pos": mk(lambda x: torch.gather(x, 2, torch.tensor([[[1, 0, 6]] * 5] * 2)), (2, 5, 7)),
    "amax_only": mk(lambda x: x.amax(dim=-1), (2, 5, 7)),
    "floordiv_f": mk(lambda x: torch.div(x * 10, 3, rounding_mode="floor"), (2, 5, 7)),
    "remainder_f": mk(lambda x: torch.remainder(x * 10, 3), (2, 5, 7)),
    "fmod_f": mk(lambda x: torch.fmod(x * 10, 3), (2, 5, 7)),
    "int_floordiv": mk(lambda x: torch.div((x * 10).long(), 3, rounding_mode="floor").float() + torch.div((x * 10).long(), 4, rounding_mode="trunc").float(), (2, 5, 7)),
    "trunc_f": mk(lambda x: torch.div(x * 10, 3, rounding_mode="trunc"), (2, 5, 7)),
    "tensor_floordiv": mk(lambda a, b: torch.div(a, b, rounding_mode="floor"), (2, 5, 7), (2, 5, 7)),
    "interp_scale15": mk(lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest"), (2, 3, 7, 9)),
    "interp_scale07": mk(lambda x: F.interpolate(x, scale_factor=(0.7, 2.5), mode="nearest"), (2, 3, 7, 9)),
    "elu_celu": mk(lambda x: F.elu(x, 0.3) + F.celu(x, 0.7), (2, 5, 7)),
    "clamp_int_both": mk(lambda x: (x * 5).long().clamp(-2, 3).float(), (2, 5, 7)),
    "clamp_float_min": mk(lambda x: x.clamp(min=0.1), (2, 5, 7)),
    "amin_keep": mk(lambda x: x.amin(dim=(1, 2), keepdim=True) * x + x.amax(), (2, 5, 7)),
    "bilinear_s15": mk(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=False), (2, 3, 7, 9)),
    "bilinear_s07": mk(lambda x: F.interpolate(x, scale_factor=0.7, mode="bilinear", align_corners=False), (2, 3, 7, 9)),
    "bicubic_s15": mk(lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=False), (2, 3, 7, 9)),
    "bilinear_down_sz": mk(lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", align_corners=False), (2, 3, 7, 9)),
    "bilinear_aa": mk(lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True), (2, 3, 7, 9)),
    "nearest1d": mk(lambda x: F.interpolate(x, size=11, mode="nearest"), (2, 3, 7)),
    "linear1d": mk(lambda x: F.interpolate(x, size=11, mode="linear"), (2, 3, 7)),
    "nearest3d": mk(lambda x: F.interpolate(x, size=(3, 5, 7), mode="nearest"), (1, 2, 4, 4, 4)),
    "grid_sample": mk(lambda x, g: F.grid_sample(x, g.tanh(), align_corners=False), (1, 3, 6, 7), (1, 4, 5, 2)),
    "affine_grid": mk(lambda t: F.affine_grid(t, (1, 3, 4, 5), align_corners=False), (1, 2, 3)),
    "pad_crop": mk(lambda x: F.pad(x, (-1, 2, 0, -2)), (2, 3, 7, 9)),
    "conv_same": mod(lambda: nn.Conv2d(3, 4, (3, 4), padding="same"), (2, 3, 7, 9)),
    "conv_reflect": mod(lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), (2, 3, 7, 9)),
    "conv_circular": mod(lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="circular"), (2, 3, 7, 9)),
    "channel_shuffle": mk(lambda x: F.channel_shuffle(x, 2), (2, 6, 4, 4)),
    "pixel_unshuffle": mk(lambda x: F.pixel_unshuffle(x, 2), (2, 3, 8, 6)),
    "embedding_pad": mod(EmbM, (2, 5)),
    "conv1d_stride": mod(lambda: nn.Conv1d(4, 6, 5, stride=3, padding=2), (2, 4, 23)),
    "maxpool1d": mk(lambda x: F.max_pool1d(x, 3, 2, padding=1), (2, 4, 23)),
    "avgpool1d": mk(lambda x: F.avg_pool1d(x, 4, 3), (2, 4, 23)),
    "adaptive_avg1d": mk(lambda x: F.adaptive_avg_pool1d(x, 5), (2, 4, 23)),
    "lppool": mk(lambda x: F.lp_pool2d(x, 2, 2), (2, 3, 8, 8)),
    "batchnorm1d": mod(lambda: nn.BatchNorm1d(4), (2, 4, 23)),
    "layernorm_nob": mod(lambda: nn.LayerNorm(23, elementwise_affine=False), (2, 4, 23)),
    "rmsnorm": mod(lambda: nn.RMSNorm(23), (2, 4, 23)),
    "hardtanh": mk(lambda x: F.hardtanh(x, -0.5, 0.7) + F.relu6(x * 4) + F.leaky_relu(x, 0.2) + F.hardsigmoid(x), (2, 5, 7)),
    "softmin_logsm": mk(lambda x: F.softmin(x, -1) + F.log_softmax(x, 1), (2, 5, 7)),
    "tanhshrink": mk(lambda x: F.tanhshrink(x) + F.softsign(x) + F.logsigmoid(x) + F.softshrink(x, 0.3) + F.hardshrink(x, 0.3), (2, 5, 7)),
    "threshold": mk(lambda x: F.threshold(x, 0.2, -1.0) + F.rrelu(x, training=False), (2, 5, 7)),
    "cumsum_rev": mk(lambda x: x.flip(-1).cumsum(-1).flip(-1), (2, 5, 7)),
    "sum_int": mk(lambda x: (x > 0).sum(-1).float() + (x > 0).long().cumsum(1).float().sum(-1), (2, 5, 7)),
    "mean_int": mk(lambda x: (x > 0).float().mean(-1), (2, 5, 7)),
    "prod": mk(lambda x: x.prod(-1), (2, 5, 7)),
    "any_all": mk(lambda x: (x > 0).any(-1).float() + (x > -2).all(1).float().sum(), (2, 5, 7)),
    "median": mk(lambda x: x.median(-1).values, (2, 5, 7)),
    "kthvalue": mk(lambda x: x.kthvalue(2, -1).values, (2, 5, 7)),
    "argsort": mk(lambda x: x.argsort(-1).float(), (2, 5, 7)),
    "argmin_keep": mk(lambda x: x.argmin(1, keepdim=True).float(), (2, 5, 7)),
    "diag": mk(lambda x: torch.diagonal(x, 1, -2, -1), (2, 5, 7)),
    "eye_add": mk(lambda x: x + torch.eye(7)[:5], (2, 5, 7)),
    "linspace": mk(lambda x: x * torch.linspace(0, 1, 7), (2, 5, 7)),
    "arange_f": mk(lambda x: x + torch.arange(7, dtype=torch.float32) / 3, (2, 5, 7)),
    "full_like": mk(lambda x: torch.full_like(x, 3.0) + torch.ones_like(x) + torch.zeros_like(x), (2, 5, 7)),
    "new_zeros": mk(lambda x: x.new_zeros(2, 5, 7) + x, (2, 5, 7)),
    "bmm_bcast": mk(lambda a, b: torch.matmul(a, b), (3, 1, 5, 7), (4, 7, 2)),
    "mv": mk(lambda a, b: torch.mv(a, b), (5, 7), (7,)),
    "addmm": mk(lambda a, b, c: torch.addmm(c, a, b, beta=0.3), (5, 7), (7, 3), (3,)),
    "linear_nobias": mk(lambda a, w: F.linear(a, w), (2, 5, 7), (3, 7)),
    "bilinear_layer": mod(lambda: nn.Bilinear(4, 5, 3), (2, 4), (2, 5)),
    "tensordot": mk(lambda a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1])), (2, 5, 7), (5, 7, 3)),
    "outer": mk(lambda a, b: torch.outer(a, b), (5,), (7,)),
    "cross": mk(lambda a, b: torch.linalg.cross(a, b, dim=-1), (4, 3), (4, 3)),
    "cdist": mk(lambda a, b: torch.cdist(a, b), (2, 5, 7), (2, 4, 7)),
    "where_scalar": mk(lambda x: torch.where(x > 0, 1.0, -1.0) * x, (2, 5, 7)),
    "nan_to_num": mk(lambda x: torch.nan_to_num(torch.log(x)), (2, 5, 7)),
    "isnan": mk(lambda x: torch.isnan(torch.log(x)).float() + torch.isinf(1 / (x.round())).float(), (2, 5, 7)),
    "masked_select_sum": mk(lambda x: torch.where(x > 0, x, torch.zeros_like(x)).sum(), (2, 5, 7)),
    "expand_as": mk(lambda a, b: a.expand_as(b) * b, (1, 5, 1), (2, 5, 7)),
    "repeat": mk(lambda x: x.repeat(2, 1, 3), (2, 5, 7)),
    "tile": mk(lambda x: torch.tile(x, (2,)), (2, 5, 7)),
    "view_as_neg": mk(lambda x: x.view(-1, 7).t().reshape(7, 2, -1), (2, 5, 7)),
    "movedim": mk(lambda x: torch.movedim(x, -1, 0) * 2, (2, 5, 7)),
    "swapaxes": mk(lambda x: x.swapaxes(-1, -3) * 2, (2, 5, 7)),
    "squeeze_multi": mk(lambda x: x.unsqueeze(1).unsqueeze(-1).squeeze((1, -1)) * 2, (2, 5, 7)),
    "unflatten": mk(lambda x: x.unflatten(-1, (7, 1)).sum(-1), (2, 5, 7)),
    "index_last2": mk(lambda x: x[..., -2:, -1], (2, 5, 7)),
    "bool_index_const": mk(lambda x: x[:, torch.tensor([True, False, True, False, True])], (2, 5, 7)),
    "index_2d": mk(lambda x: x[torch.tensor([1, -1]), torch.tensor([0, -2])], (2, 5, 7)),
    "select_scatter": mk(lambda x: torch.select_scatter(x, x[:, 0] * 2, 1, -1), (2, 5, 7)),
    "slice_scatter": mk(lambda x: torch.slice_scatter(x, x[:, :2] * 2, 1, 3), (2, 5, 7)),
    "index_copy": mk(lambda x: x.index_copy(1, torch.tensor([4, 0]), x[:, :2] * 3), (2, 5, 7)),
    "scatter_add": mk(lambda x: torch.zeros(2, 3, 7).scatter_add(1, torch.tensor([[[0] * 7, [2] * 7, [0] * 7, [1] * 7, [2] * 7]] * 2), x), (2, 5, 7)),
    "scatter_reduce": mk(lambda x: torch.zeros(2, 3, 7).scatter_reduce(1, torch.tensor([[[0] * 7, [2] * 7, [0] * 7, [1] * 7, [2] * 7]] * 2), x, "amax", include_self=False), (2, 5, 7)),
    "topk_smallest": mk(lambda x: torch.topk(x, 2, dim=1, largest=False).values + torch.topk(x, 2, dim=1).indices.float(), (2, 5, 7)),
    "sort_stable_idx": mk(lambda x: torch.sort((x * 2).round(), dim=-1, stable=True).indices.float(), (2, 5, 7)),
    "var_mean": mk(lambda x: torch.var_mean(x, dim=-1, correction=0)[0] + torch.std_mean(x, 1)[1].sum(), (2, 5, 7)),
    "erfinv": mk(lambda x: torch.erfinv(x.tanh() * 0.9), (2, 5, 7)),
    "trig": mk(lambda x: torch.sin(x) + torch.cos(x) + torch.tan(x * 0.3) + torch.asin(x.tanh()) + torch.acos(x.tanh()) + torch.atan(x) + torch.sinh(x) + torch.cosh(x) + torch.asinh(x) + torch.acosh(x.abs() + 1) + torch.atanh(x.tanh() * 0.9), (2, 5, 7)),
    "exp2_log2": mk(lambda x: torch.exp2(x) + torch.log2(x.abs() + 1) + torch.log10(x.abs() + 1) + torch.reciprocal(x.abs() + 1) + torch.square(x), (2, 5, 7)),
    "pow_tensor": mk(lambda a, b: torch.pow(a.abs() + 0.5, b) + torch.pow(2.0, b), (2, 5, 7), (2, 5, 7)),
    "bitwise": mk(lambda x: (((x * 10).long() & 5) | ((x * 10).long() ^ 3)).float() + ((x * 10).long() >> 1).float() + ((x*10).long() << 2).float(), (2, 5, 7)),
    "frac_lerp": mk(lambda a, b: torch.frac(a * 3) + torch.lerp(a, b, 0.3) + torch.addcmul(a, a, b, value=0.5) + torch.addcdiv(a, a, b.abs() + 1, value=2), (2, 5, 7), (2, 5, 7)),
    "copysign": mk(lambda a, b: torch.copysign(a, b) + torch.hypot(a, b) + torch.logaddexp(a, b), (2, 5, 7), (2, 5, 7)),
    "einsum_attn": mk(lambda q, k: torch.einsum("bhid,bhjd->bhij", q, k).softmax(-1), (1, 2, 5, 8), (1, 2, 6, 8)),
    "einsum_trace": mk(lambda x: torch.einsum("bii->b", x) + torch.einsum("bij->bji", x).sum((1, 2)), (2, 5, 5)),
    "idx_adj_mid": mk(lambda x: x[:, torch.tensor([[0, 2], [1, 1]]), torch.tensor([3, -1])], (2, 5, 7, 3)),
    "idx_nonadj": mk(lambda x: x[torch.tensor([0, 1, 1]), :, torch.tensor([2, 0, -1])], (2, 5, 7)),
    "idx_orth": mk(lambda x: x[:, :, torch.tensor([0, 2, 4])[:, None], torch.tensor([1, 0])], (2, 3, 5, 7)),
    "adv": mk(lambda x: x[:, [-1, 0, -2]], (2, 5, 7)),
    "idx_lead": mk(lambda x: x[torch.tensor([1, 0]), torch.tensor([4, 2])], (2, 5, 7)),
    "idx_joint_one": mk(lambda x: x[torch.arange(1), x[:, :, 0].argmax(-1)], (1, 5, 7)),
    "aa_down_s05": mk(lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True), (2, 3, 8, 10)),
    "aa_down_odd": mk(lambda x: F.interpolate(x, size=(5, 3), mode="bilinear", antialias=True), (2, 3, 17, 9)),
    "aa_up": mk(lambda x: F.interpolate(x, size=(11, 13), mode="bilinear", antialias=True), (2, 3, 7, 9)),
    "aa_ac": mk(lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True, align_corners=True), (2, 3, 7, 9)),
    "bilinear_s2": mk(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), (2, 3, 7, 9)),
    "bilinear_s05": mk(lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear"), (2, 3, 8, 10)),
    "bilinear_s13_ac": mk(lambda x: F.interpolate(x, scale_factor=1.3, mode="bilinear", align_corners=True), (2, 3, 7, 9)),
    "adaptive_max_div": mk(lambda x: F.adaptive_max_pool2d(x, (2, 3)), (2, 6, 8, 9)),
    "adaptive_max_1d": mk(lambda x: F.adaptive_max_pool1d(x, 4), (2, 6, 9)),
    "std_mean": mk(lambda x: torch.std_mean(x, dim=(1, 2), keepdim=True)[0] * x + torch.var_mean(x, -1)[1].sum(), (2, 5, 7)),
    "scatter_red_sum": mk(lambda x: torch.ones(2, 3, 7).scatter_reduce(1, torch.tensor([[[0] * 7, [2] * 7, [0] * 7, [1] * 7, [2] * 7]] * 2), x, "sum"), (2, 5, 7)),
    "scatter_red_min": mk(lambda x: torch.zeros(2, 3, 7).scatter_reduce(1, torch.tensor([[[0] * 7, [2] * 7, [0] * 7, [1] * 7, [2] * 7]] * 2), x, "amin", include_self=False), (2, 5, 7)),
    "scatter_red_mean": mk(lambda x: torch.ones(2, 3, 7).scatter_reduce(1, torch.tensor([[[0] * 7, [2] * 7, [0] * 7, [1] * 7, [2] * 7]] * 2), x, "mean"), (2, 5, 7)),
    "exp2": mk(lambda x: torch.exp2(x), (2, 5, 7)),
    "shifts": mk(lambda x: (((x * 10).long() >> 1) + ((x*10).long() << 2)).float(), (2, 5, 7)),
    "hypot": mk(lambda a, b: torch.hypot(a, b), (2, 5, 7), (2, 5, 7)),
    "cdist30": mk(lambda a, b: torch.cdist(a, b), (2, 30, 7), (2, 4, 7)),
    "ct_k2s2": mod(lambda: nn.ConvTranspose2d(8, 4, 2, stride=2), (1, 8, 5, 6)),
    "ct_k3s2p1op1": mod(lambda: nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1), (2, 8, 5, 6)),
    "ct_k4s2p1": mod(lambda: nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1, bias=False), (1, 8, 5, 6)),
    "ct_k3s1p1": mod(lambda: nn.ConvTranspose2d(8, 4, 3, stride=1, padding=1), (1, 8, 5, 6)),
    "ct_k5s3p2op2": mod(lambda: nn.ConvTranspose2d(8, 4, 5, stride=3, padding=2, output_padding=2), (1, 8, 5, 6)),
    "ct_rect": mod(lambda: nn.ConvTranspose2d(8, 4, (3, 2), stride=(2, 1), padding=(1, 0)), (1, 8, 5, 6)),
    "ct_k1s2": mod(lambda: nn.ConvTranspose2d(8, 4, 1, stride=2), (1, 8, 5, 6)),
    "ct_1px": mod(lambda: nn.ConvTranspose2d(8, 4, 4, stride=1, padding=0, bias=False), (3, 8, 1, 1)),
    "ct_1px_p1s2": mod(lambda: nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1), (3, 8, 1, 1)),
    "ct_1px_op": mod(lambda: nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1), (3, 8, 1, 1)),
    "ct_k3s2p0": mod(lambda: nn.ConvTranspose2d(8, 4, 3, stride=2), (1, 8, 5, 6)),
}

globals().update(cases)  # each case is a factory ``load_model("op_battery.py:NAME")`` finds


def exported(cases: dict, name: str, dynamo: bool, folder: str = "op_battery_onnx") -> Path:
    """Case ``name`` as an ONNX file in the cache (exported once per torch version and exporter)."""
    import contextlib
    import io

    from tvmbench.paths import cache_dir

    path = cache_dir(folder, torch.__version__, "dynamo" if dynamo else "legacy") / f"{name}.onnx"
    if not path.exists():
        model, inputs = cases[name]()
        tmp = path.with_name(f"{name}.{os.getpid()}.tmp.onnx")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            torch.onnx.export(model, inputs, str(tmp), dynamo=dynamo, external_data=False)
        tmp.replace(path)
    return path


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--match", default="", help="only the cases whose name contains this")
    parser.add_argument("--onnx", action="store_true", help="through ONNX files, ONNX Runtime the reference")
    parser.add_argument("--dynamo", action="store_true", help="with --onnx: export with torch.onnx's dynamo exporter")
    return parser.parse_args()


def run_battery(cases: dict, factory_file: str, args: argparse.Namespace, onnx_folder: str = "op_battery_onnx") -> None:
    """Every case of ``cases`` (factories that ``factory_file:NAME`` names) through TVM against
    PyTorch (or, with ``--onnx``, ONNX Runtime on the exported file); a line per case, then the
    counts."""
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    from tvmbench.backends import BackendConfig
    from tvmbench.backends.onnxruntime import OnnxRuntimeBackend
    from tvmbench.backends.pytorch import PyTorchBackend
    from tvmbench.backends.tvm import TVMBackend
    from tvmbench.errors import headline
    from tvmbench.measure import accuracy
    from tvmbench.models import load_model
    from tvmbench.targets import resolve_target

    cfg = BackendConfig(target=resolve_target("llvm", gpu_query=lambda: None), threads=2)
    counts: dict[str, int] = {}
    for name in [n for n in cases if args.match in n]:
        try:
            if args.onnx:
                try:
                    model = load_model(str(exported(cases, name, args.dynamo, onnx_folder)))
                    ref = OnnxRuntimeBackend(cfg)
                    ref.prepare(model)
                except Exception as e:  # noqa: BLE001 - the exporter's or ONNX Runtime's failure
                    counts["SKIP"] = counts.get("SKIP", 0) + 1
                    print(f"{name:22s} SKIP  {headline(e, 160)}", flush=True)
                    continue
            else:
                model, ref = load_model(f"{os.path.abspath(factory_file)}:{name}"), PyTorchBackend(cfg)
                ref.prepare(model)
            tvm_b = TVMBackend(cfg)
            tvm_b.prepare(model)
            tvm_b.run()
            ref.run()
            result = accuracy.compare(tvm_b.outputs(), ref.outputs(), accuracy.tolerance_for("float32"))
            verdict = "ok" if result["passed"] else "FAIL"
            detail = f"max abs error {result.get('max_abs_err', result.get('reason'))}"
        except Exception as e:  # noqa: BLE001 - a refused operator is a result here
            verdict, detail = "ERROR", headline(e, 160)
        counts[verdict] = counts.get(verdict, 0) + 1
        print(f"{name:22s} {verdict:5s} {detail}", flush=True)
    print(", ".join(f"{v} {n}" for v, n in sorted(counts.items())), file=sys.stderr)


if __name__ == "__main__":
    run_battery(cases, __file__, arguments(__doc__.split("\n")[0]))
