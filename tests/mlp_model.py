"""A matmul-heavy model small enough to tune in a test."""

import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 512)
        self.fc2 = torch.nn.Linear(512, 256)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def build():
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(32, 256),)


def build_gemm():
    """The same MLP on 128 rows: every matmul dimension is above DLight's tensor-core threshold (64)."""
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(128, 256),)


def build_conv():
    """A small convolution net (NCHW, as PyTorch gives it)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3))
    return net.eval(), (torch.randn(1, 3, 16, 16),)


def build_stem():
    """A stem as the zoo's CNNs have one: 3 input channels, 7x7 stride 2 with padding, batch 2 at
    an odd size."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 7, stride=2, padding=3), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 16, 1))
    return net.eval(), (torch.randn(2, 3, 23, 23),)


def build_depthwise5():
    """A 5x5 depthwise convolution over a 7x7 map (mnasnet's and EfficientNet's last stages)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 5, padding=2, groups=64), torch.nn.ReLU())
    return net.eval(), (torch.randn(2, 64, 7, 7),)


def build_bn():
    """Convolutions with batch norms whose statistics are not the identity (a fresh torchvision
    model has mean 0, variance 1, scale 1, shift 0, which would hide a wrongly folded batch norm):
    a strided stem, a depthwise 3x3 and a 1x1 whose 40 channels are not a multiple of the tile."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU6(),
        torch.nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU6(),
        torch.nn.Conv2d(32, 40, 1), torch.nn.BatchNorm2d(40))
    return _random_statistics(net).eval(), (torch.randn(1, 3, 32, 32),)


def build_window_project():
    """mobilenet_v2's first block: a stride-2 stem to 32 channels, the depthwise 3x3 (96x96x32,
    1.2 MB: joined into the projection on a 1 MB L2), a 1x1 projection to 16 channels and, as
    in mnasnet1_0's, none to 24 (half vectors of AVX-512); batch norms not the identity."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU6(),
        torch.nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU6(),
        torch.nn.Conv2d(32, 24, 1, bias=False), torch.nn.BatchNorm2d(24))
    return _random_statistics(net).eval(), (torch.randn(1, 3, 192, 192),)


def build_window_project_prime():
    """The same block over a map of 97 pixels (a prime: mnasnet1_0's first block at 193 px)."""
    net, _ = build_window_project()
    return net, (torch.randn(1, 3, 194, 194),)


def _random_statistics(net):
    for m in net:
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return net


def _inverted_residual(size, stride, inner=96, channels=(16, 24), kernel=3):
    """mobilenet_v2's block: a 1x1 expansion 16 -> 96 (more than 1 MB of output at these sizes, so
    the pipeline joins it with the depthwise convolution), the depthwise 3x3, the 1x1 projection;
    batch norms with non-identity statistics."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(channels[0], inner, 1, bias=False), torch.nn.BatchNorm2d(inner), torch.nn.ReLU6(),
        torch.nn.Conv2d(inner, inner, kernel, stride=stride, padding=kernel // 2, groups=inner, bias=False),
        torch.nn.BatchNorm2d(inner), torch.nn.ReLU6(), torch.nn.Conv2d(inner, channels[1], 1, bias=False),
        torch.nn.BatchNorm2d(channels[1]))
    return _random_statistics(net).eval(), (torch.randn(1, channels[0], size, size),)


def build_expand_stride1():
    """60x60: neither the band of rows nor the columns divide by 8."""
    return _inverted_residual(60, 1)


def build_expand_stride2():
    return _inverted_residual(64, 2)


def build_expand_28():
    """mobilenet_v2's 28x28 block, 32 -> 192 -> 32 channels (602 KB expanded)."""
    return _inverted_residual(28, 1, inner=192, channels=(32, 32))


def build_expand_5x5():
    """mnasnet1_0's 5x5 block over 40 channels (40 -> 120 -> 40) at 28x28 (376 KB expanded)."""
    return _inverted_residual(28, 1, inner=120, channels=(40, 40), kernel=5)


def build_expand_72():
    """mnasnet's 72 channels: not whole AVX-512 vectors (64x64, 1.2 MB expanded: joined)."""
    return _inverted_residual(64, 2, inner=72)


def build_expand_116():
    """shufflenet_v2's 116 channels (4 x 29): quarter AVX-512 vectors, not joined."""
    return _inverted_residual(64, 2, inner=116)


def build_expand_batch4():
    """Batch 4 at 30x30 (1.4 MB expanded): joined too, a task per image."""
    net, (x,) = _inverted_residual(30, 1)
    return net, (torch.randn(4, *x.shape[1:]),)


def build_expand_prime():
    """Batch 3 at 31x31 (1.1 MB expanded: joined): no band of 2-8 rows divides a prime height."""
    net, (x,) = _inverted_residual(31, 1)
    return net, (torch.randn(3, *x.shape[1:]),)


class _Excitation(torch.nn.Module):
    """EfficientNet's block middle: a depthwise 3x3 with SiLU, squeezed (mean), excited (two 1x1
    convolutions, SiLU and sigmoid), the map scaled by it and projected."""

    def __init__(self, channels):
        super().__init__()
        self.expand = torch.nn.Sequential(torch.nn.Conv2d(16, channels, 1), torch.nn.SiLU(),
                                          torch.nn.Conv2d(channels, channels, 3, padding=1, groups=channels),
                                          torch.nn.SiLU())
        self.squeeze = torch.nn.Sequential(torch.nn.Conv2d(channels, 8, 1), torch.nn.SiLU(),
                                           torch.nn.Conv2d(8, channels, 1), torch.nn.Sigmoid())
        self.project = torch.nn.Conv2d(channels, 16, 1)

    def forward(self, x):
        x = self.expand(x)
        return self.project(x * self.squeeze(x.mean((2, 3), keepdim=True)))


def build_excitation():
    """A squeeze-excitation block (``_Excitation``) over 32 channels, batch 2 at 14x14."""
    torch.manual_seed(0)
    return _Excitation(32).eval(), (torch.randn(2, 16, 14, 14),)


def build_adaptive_pool():
    """VGG's head at 193 px, small: a 6x6 map pooled to 7x7 (windows of one or two pixels)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 192, 3, stride=2, padding=1), torch.nn.AdaptiveAvgPool2d(7))
    return net.eval(), (torch.randn(1, 3, 12, 12),)


def build_shuffle():
    """ShuffleNetV2's blocks, small: a stride-2 block (two branches, concat, channel shuffle) then a
    stride-1 block (chunk, one branch, concat, channel shuffle), on NCHW input."""
    from torchvision.models.shufflenetv2 import InvertedResidual

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), InvertedResidual(16, 32, 2),
                              InvertedResidual(32, 32, 1))
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            _random_statistics([m])
    return net.eval(), (torch.randn(2, 3, 16, 16),)


class _WinogradBlocks(torch.nn.Module):
    """3x3 stride-1 convolutions for the Winograd rewrite: 4x4 tiles on an 18x18 map (the last
    tile row and column overhang it by 2), 2x2 tiles on a 9x9 map (by 1), a residual add and
    ReLU for the output transform's epilogue, a batch norm with non-identity statistics; and the
    convolutions it must leave direct: two stride-2 ones, one with 16 input channels and 24
    outputs (not whole vectors), and one on a 5x5 map."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Sequential(torch.nn.Conv2d(32, 48, 3, padding=1, bias=False), torch.nn.BatchNorm2d(48))
        self.b = torch.nn.Conv2d(48, 48, 3, padding=1)
        self.down = torch.nn.Conv2d(48, 64, 3, stride=2, padding=1)
        self.c = torch.nn.Conv2d(64, 64, 3, padding=1)
        self.narrow = torch.nn.Conv2d(16, 24, 3, padding=1)
        self.small = torch.nn.Conv2d(64, 64, 3, stride=2, padding=1)
        self.tiny = torch.nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, x, y):
        h = torch.relu(self.a(x))
        h = torch.relu(self.b(h) + h)
        h = torch.relu(self.down(h))
        h = torch.relu(self.c(h) + h)
        return self.tiny(torch.relu(self.small(h))), self.narrow(y)


def build_winograd():
    torch.manual_seed(0)
    net = _WinogradBlocks()
    _random_statistics(net.a)
    return net.eval(), (torch.randn(1, 32, 18, 18), torch.randn(1, 16, 12, 12))


class _DilatedWinograd(torch.nn.Module):
    """Dilated 3x3 stride-1 convolutions for the Winograd rewrite, one undilated convolution per
    residue of the rows and columns: dilation 2 on a 19x19 map (residues of 10 and 9 rows: 2x2
    tiles, the shorter overhung), with a residual add and ReLU; dilation 3 over 33x33 (11 per
    residue); (2, 1) over 19x36 (rows and columns apart); 2 over 36x36 (18 per residue: 4x4
    tiles)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(32, 32, 3, padding=2, dilation=2)
        self.b = torch.nn.Conv2d(32, 32, 3, padding=3, dilation=3)
        self.c = torch.nn.Conv2d(32, 32, 3, padding=(2, 1), dilation=(2, 1))
        self.d = torch.nn.Conv2d(32, 32, 3, padding=2, dilation=2)

    def forward(self, x, y, z, w):
        return torch.relu(self.a(x) + x), self.b(y), self.c(z), self.d(w)


def build_dilated_winograd():
    torch.manual_seed(0)
    return _DilatedWinograd().eval(), tuple(torch.randn(1, 32, h, w) for h, w in
                                            ((19, 19), (33, 33), (19, 36), (36, 36)))


class _GroupedWinograd(torch.nn.Module):
    """Grouped 3x3 convolutions for the Winograd rewrite: 2 groups of 56 channels over 16x16 (4x4
    tiles; each group's 56 output channels padded to whole vectors), with a residual add and ReLU;
    2 groups of 48 over 12x12 (2x2 tiles). Groups of 8 channels and a stride-2 grouped
    convolution stay direct."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(112, 112, 3, padding=1, groups=2)
        self.b = torch.nn.Conv2d(96, 96, 3, padding=1, groups=2)
        self.narrow = torch.nn.Conv2d(96, 96, 3, padding=1, groups=12)
        self.strided = torch.nn.Conv2d(112, 112, 3, padding=1, stride=2, groups=2)

    def forward(self, x, y):
        return torch.relu(self.a(x) + x), self.narrow(self.b(y)), self.strided(x)


def build_grouped_winograd():
    torch.manual_seed(0)
    return _GroupedWinograd().eval(), (torch.randn(1, 112, 16, 16), torch.randn(1, 96, 12, 12))


def build_first_layer():
    """The MLP's first layer alone: a model that shares one workload (matmul + bias + ReLU,
    32x256 by 256x512) with ``build``."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU()).eval(), (torch.randn(32, 256),)


def build_dense_96():
    """A dense layer whose 96 outputs three AVX2 vectors divide (12 of them), over 30 rows (no
    multiple of 4): PackWeights' three-vector blocks on 16 registers."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU()).eval(), (torch.randn(30, 64),)


class _PointwiseBlock(torch.nn.Module):
    """A 1x1 convolution, then an inverted residual (1x1 expansion, depthwise 3x3, 1x1 projection
    added to the first's output), on 7x7 maps."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(32, 48, 1)
        self.expand = torch.nn.Conv2d(48, 96, 1)
        self.window = torch.nn.Conv2d(96, 96, 3, padding=1, groups=96)
        self.project = torch.nn.Conv2d(96, 48, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.first(x))
        return y + self.project(torch.relu(self.window(torch.relu(self.expand(y)))))


def build_pointwise_7x7():
    """1x1 convolutions over 7-pixel rows (no tile of 4 divides them) at batch 2: PackWeights'
    CONV_AS_DENSE on 16 registers (98 rows as a dense layer), the expansion left a convolution."""
    torch.manual_seed(0)
    return _PointwiseBlock().eval(), (torch.randn(2, 32, 7, 7),)


def build_pointwise_10x10():
    """The same block over 10-pixel rows, which the convolution's 2 x 5 tiles divide
    (``pack_weights.CONV_TILE_ROWS``): left convolutions."""
    torch.manual_seed(0)
    return _PointwiseBlock().eval(), (torch.randn(2, 32, 10, 10),)


def build_pointwise_classifier():
    """A 1x1 convolution to 1000 classes over 7-pixel rows (squeezenet's classifier): only half
    blocks divide 1000, so as a dense layer its weight is padded to blocks of three vectors
    (``pack_weights.CONV_AS_DENSE_OVER_HALF_BLOCKS``)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(64, 1000, 1), torch.nn.ReLU()).eval(), (torch.randn(2, 64, 7, 7),)


def build_window_over_39_rows():
    """alexnet's second convolution (5x5, 64 -> 192 channels) over 39-pixel rows (3 x 13: no
    divisor from 4 to 6), as at 320 px: on 16 registers four vectors would hold 3 whole rows,
    which a window's code spills (``rules.contraction.WINDOW_WHOLE_ROWS_UNDER_4``)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(64, 192, 5), torch.nn.ReLU()).eval(), (torch.randn(1, 64, 43, 43),)


def build_odd_stem():
    """A network's first layer over rows no register tile divides: 3x3 stride 2 over 3 channels
    to 64, 11x11 output. On 16 registers its 2 x 4 tile is predicated, and with the window
    unrolled LLVM keeps the accumulators on the stack (``rules.contraction.SPILLS_DECIDE_UNROLL``)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, stride=2), torch.nn.ReLU()).eval(), (torch.randn(1, 3, 23, 23),)


def build_whole_stem():
    """A mobile network's first layer over rows the register tile divides: 3x3 stride 2 over 3
    channels to 32 with padding, 16x16 output, ReLU6. On 16 registers its 2 x 4 tile is whole,
    and with the window unrolled LLVM keeps accumulators on the stack
    (``rules.contraction.SPILLS_DECIDE_CHANNEL_WINDOWS``)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, stride=2, padding=1), torch.nn.ReLU6())
    return net.eval(), (torch.randn(1, 3, 32, 32),)


def build_classifier():
    """A tiny CNN classifier: convolution, ReLU, global average pool, 10 class scores."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(8, 10))
    return net.eval(), (torch.randn(1, 3, 16, 16),)



class _RowSum(torch.nn.Module):
    def forward(self, x):
        return x.sum(dim=1)


def build_row_sum():
    """One small reduction (4 rows of 16): a knob space of a few dozen points, small enough to grid."""
    return _RowSum().eval(), (torch.randn(4, 16),)


class _TokensFirst(torch.nn.Module):
    """A linear layer on a 3-D input that is not contiguous (tokens-first activations turned
    batch-first, as attention's output is): PyTorch's matmul cannot fold it to 2-D without a copy
    and gives it to TVM as a matmul of broadcast operands (passes/matmul_broadcast.py)."""

    def __init__(self):
        super().__init__()
        self.out = torch.nn.Linear(64, 96)

    def forward(self, x):  # x: [tokens, batch, features]
        return self.out(x.transpose(0, 1))


def build_tokens_first():
    torch.manual_seed(0)
    return _TokensFirst().eval(), (torch.randn(10, 3, 64),)


class Attention(torch.nn.Module):
    """One attention over projected inputs: ``softmax(q k^T / sqrt(d) + mask) v`` with ``heads``
    heads of ``dim`` (q, k, v computed from the input, so both matmuls multiply computed tensors);
    ``scores_out`` also returns the probabilities (used outside the attention: no join)."""

    def __init__(self, width=64, heads=2, scores_out=False, sdpa=False):
        super().__init__()
        self.heads, self.scores_out, self.sdpa = heads, scores_out, sdpa
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)

    def forward(self, x, mask):
        b, n, w = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        if self.sdpa:  # (a boolean mask: torch's safe softmax, zeros for a fully masked row)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask > -1)
            return self.out(y.transpose(1, 2).reshape(b, n, w))
        p = torch.softmax(q @ k.transpose(-1, -2) / (w // self.heads) ** 0.5 + mask, dim=-1)
        y = self.out((p @ v).transpose(1, 2).reshape(b, n, w))
        return (y, p) if self.scores_out else y


def _attention_inputs(batch, tokens, width=64):
    mask = torch.zeros(1, 1, tokens, tokens)
    mask[..., tokens // 2:] = -1e4  # (a padding mask: the second half of the keys hidden)
    return torch.randn(batch, tokens, width), mask


def build_attention():
    """Two heads of 32 over 48 tokens (three vectors of keys), batch 2."""
    torch.manual_seed(0)
    return Attention().eval(), _attention_inputs(2, 48)


def build_attention_scores_out():
    torch.manual_seed(0)
    return Attention(scores_out=True).eval(), _attention_inputs(1, 32)


def build_attention_45():
    """45 tokens: keys in no whole vectors, queries in no whole blocks of 4 (padded to 48 both)."""
    torch.manual_seed(0)
    return Attention().eval(), _attention_inputs(2, 45)


def build_attention_45_heads_of_64():
    """45 tokens, two heads of 64: an output tile of 4 vectors per row (ViT's head dimension)."""
    torch.manual_seed(0)
    return Attention(width=128).eval(), _attention_inputs(1, 45, width=128)


def build_attention_45_heads_of_12():
    """45 tokens, two heads of 12 (MobileViT's are 36 and 60): a head dimension in no whole
    vectors, so v gets zero columns to 16 and the output drops them."""
    torch.manual_seed(0)
    return Attention(width=24).eval(), _attention_inputs(1, 45, width=24)


def build_attention_73_heads_of_80():
    """73 tokens (as ViT-H/14's and DINOv2's 257), two heads of 80 (ViT-H's: 5 vectors): 80 keys
    take score tiles of one vector, and the 76 queries whole blocks of 4 would give tasks of 4
    rows with 4 accumulators in both matmuls; padded to 80 they take blocks of 8."""
    torch.manual_seed(0)
    return Attention(width=160).eval(), _attention_inputs(1, 73, width=160)


def build_attention_37_heads_of_64():
    """37 tokens, two heads of 64 (ViT's 197 and head dimension): 40 keys, five 8-lane vectors on
    AVX2, take score tiles of one vector over blocks of 8 query rows, whose output tile over the
    head's 8 vectors must fit 16 registers."""
    torch.manual_seed(0)
    return Attention(width=128).eval(), _attention_inputs(1, 37, width=128)


def build_attention_45_sdpa():
    """The same through SDPA with a boolean mask that hides every key from the last query."""
    torch.manual_seed(0)
    x, mask = _attention_inputs(1, 45)
    mask[..., -1, :] = -1e4
    return Attention(sdpa=True).eval(), (x, mask)


def build_causal_attention():
    """128 tokens under a causal mask (-inf above the diagonal), as a decoder's; the last token
    is NaN, so a query row that computes the last key's score (masked, yet NaN + -inf is NaN)
    comes out NaN."""
    torch.manual_seed(0)
    x = torch.randn(1, 128, 64)
    x[:, -1] = float("nan")
    return Attention().eval(), (x, torch.full((1, 1, 128, 128), float("-inf")).triu(1))


def assert_causal_rows_match(model, outputs) -> None:
    """``build_causal_attention``'s first 64 query rows in ``outputs`` are finite and PyTorch's on
    a finite last token (their keys stop before the NaN one), and the last row is NaN."""
    import numpy as np

    out = np.asarray(outputs[0])
    x, mask = (torch.from_numpy(model.inputs[k]) for k in model.inputs)
    with torch.no_grad():
        expected = model.module(torch.nan_to_num(x), mask).numpy()
    assert np.isfinite(out[:, :64]).all() and np.isnan(out[:, -1]).all()
    np.testing.assert_allclose(out[:, :64], expected[:, :64], rtol=1e-4, atol=1e-5)


class _PatchAttention(torch.nn.Module):
    """torchvision's ViT in small: patches embedded by a strided convolution, then
    ``nn.MultiheadAttention``, which torch.export writes with a ``squeeze(axis=-2)``."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Conv2d(3, 32, 4, stride=4)
        self.attention = torch.nn.MultiheadAttention(32, 2, batch_first=True)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        return self.attention(x, x, x, need_weights=False)[0]


def build_patch_attention():
    torch.manual_seed(0)
    return _PatchAttention().eval(), (torch.randn(1, 3, 16, 16),)


class _PackedProjections(torch.nn.Module):
    """Both ways transformers cut one packed q/k/v projection into three: torchvision's ViT block
    (``nn.MultiheadAttention`` at batch 1: rearranged, then ``proj[0]``, ``proj[1]``, ``proj[2]``)
    and GPT-2's ``c_attn(x).split(width, dim=2)``."""

    def __init__(self):
        super().__init__()
        from torchvision.models.vision_transformer import EncoderBlock

        self.block = EncoderBlock(2, 32, 64, 0.0, 0.0)
        self.qkv = torch.nn.Linear(32, 96)

    def forward(self, x):
        q, k, v = self.qkv(self.block(x)).split(32, dim=2)
        heads = [t.view(1, -1, 2, 16).transpose(1, 2) for t in (q, k, v)]
        return torch.nn.functional.scaled_dot_product_attention(*heads)


def build_packed_projections():
    torch.manual_seed(0)
    return _PackedProjections().eval(), (torch.randn(1, 9, 32),)


class _NegativeIndices(torch.nn.Module):
    """Indices counted from the end: a last step, a fancy index, torch.take, and one computed."""

    def forward(self, x):
        y = x * 2
        computed = (y[0, :3, 0] > 100).long() - 1  # -1 at run time, not a constant
        return y[:, -1], y[..., [-1, 0]], torch.take(y, torch.tensor([-1, 3])), y[:, computed]


def build_negative_indices():
    torch.manual_seed(0)
    return _NegativeIndices().eval(), (torch.randn(2, 5, 4),)


class _ImportedWrongly(torch.nn.Module):
    """Ops TVM 0.27's importer got wrong or refused (``compile/converters.py``)."""

    def forward(self, x):
        f = torch.nn.functional
        index = (x.abs() * 3).long().clamp(max=3)  # an integer clamp with one bound
        return (f.selu(x),  # an ELU with scale 1.0507, which TVM dropped
                f.interpolate(x, size=(7, 9), mode="nearest"),  # not a whole-number enlargement
                f.interpolate(x, scale_factor=(0.7, 1.5), mode="nearest"),
                x.permute(0, -1, 1, -2),  # negative axes: ConvertLayout failed
                torch.logsumexp(x, -1) + x.amin(dim=(1, 2)).sum(),  # amax / amin
                torch.div(x * 10, 3, rounding_mode="floor"),  # a float tensor by an int
                torch.log((index + 1) / 2) + index / (index + 1) + x / (index + 1),  # true division of integers
                torch.gather(x, -1, index),
                f.interpolate(x, scale_factor=1.5, mode="bilinear"),  # mapped by the factor
                f.interpolate(x, size=(3, 4), mode="bilinear", antialias=True),
                f.interpolate(x[:, None], size=(3, 5, 7), mode="nearest"),  # 3-d: indices of rank 3
                f.grid_sample(x, x[:, :2].permute(0, 2, 3, 1).tanh(), align_corners=False),
                x[:, torch.tensor([[0, 2], [1, 1]]), torch.tensor([3, -1])],  # indices after a slice
                x[torch.tensor([0, 1, 1]), :, :, torch.tensor([2, 0, -1])],  # not adjacent
                x[torch.arange(1), x[:1, :, 0, 0].argmax(-1)],  # one joint axis of one (CLIP's pooled token)
                x.index_fill(1, torch.tensor([0, -1]), 7.0),  # index_put with sliced axes
                x.index_copy(2, torch.tensor([3, 0]), x[:, :, :2] * 3))


def build_imported_wrongly():
    torch.manual_seed(0)
    return _ImportedWrongly().eval(), (torch.randn(2, 3, 4, 6),)


class _RefusedBefore(torch.nn.Module):
    """Ops TVM 0.27's importer refused, converted by ``compile/converters.py``."""

    def __init__(self, scatter_reduce="amin"):
        super().__init__()
        self.scatter_reduce = scatter_reduce

    def forward(self, x):
        f = torch.nn.functional
        ints = (x * 10).long()
        index = torch.tensor([[[0] * 6, [2] * 6, [0] * 6, [1] * 6]] * 2)
        return (f.adaptive_max_pool2d(x, (3, 4)),  # windows of 1-2 rows, 2-3 columns
                torch.var_mean(x, dim=-1)[0] + torch.std_mean(x, dim=(1, 2), keepdim=True)[1].sum(),
                torch.zeros(2, 3, 6).scatter_add(1, index, x[:, 0]),
                torch.zeros(2, 3, 6).scatter_reduce(1, index, x[:, 0], self.scatter_reduce, include_self=False),
                torch.exp2(x) + torch.hypot(x, x * 2) + x.prod(-1, keepdim=True),
                ((ints >> 1) + (ints << 2)).float(),
                torch.cdist(x[:, 0], x[:, 1]))


def build_refused_before():
    torch.manual_seed(0)
    return _RefusedBefore().eval(), (torch.randn(2, 3, 4, 6),)


class _RefusedUntil47(torch.nn.Module):
    """The operators ``benchmarks/op_battery.py`` still found refused after session 45, converted
    in session 47: eval-mode rrelu, kthvalue, nn.Bilinear (``_trilinear``), a stable sort (ties
    from rounding), erfinv, copysign, scatter_reduce's mean (with and without the kept value) and
    a constant boolean mask index."""

    def __init__(self):
        super().__init__()
        self.bilinear = torch.nn.Bilinear(6, 4, 3)
        self.register_buffer("mask", torch.tensor([True, False, True, True, False, True]))

    def forward(self, x):
        f = torch.nn.functional
        index = torch.tensor([[[0] * 6, [2] * 6, [0] * 6, [1] * 6]] * 2)
        keep = torch.tensor([False, True, True, False])
        return (f.rrelu(x, training=False) + x.kthvalue(2, -1, keepdim=True).values,
                self.bilinear(x[:, 0, 0], x[:, 1, :, 0]),
                torch.sort((x * 2).round(), dim=-1, stable=True, descending=True).indices.float(),
                torch.erfinv(x.tanh() * 0.95) + torch.copysign(x, x[:, :1] - 0.2),
                torch.ones(2, 3, 6).scatter_reduce(1, index, x[:, 0], "mean"),
                torch.ones(2, 3, 6).scatter_reduce(1, index, x[:, 0], "mean", include_self=False),
                x[:, :, :, self.mask], x[:, :, keep])


def build_refused_until_47():
    torch.manual_seed(0)
    return _RefusedUntil47().eval(), (torch.randn(2, 3, 4, 6),)


def build_scatter_mean_int():
    """scatter_reduce's mean over integers (PyTorch floor-divides): left refused."""
    class ScatterMeanInt(torch.nn.Module):
        def forward(self, x):
            index = torch.tensor([[[0] * 6, [2] * 6, [0] * 6, [1] * 6]] * 2)
            ints = (x[:, 0] * 10).long()
            return torch.zeros(2, 3, 6, dtype=torch.long).scatter_reduce(1, index, ints, "mean").float()

    torch.manual_seed(0)
    return ScatterMeanInt().eval(), (torch.randn(2, 3, 4, 6),)


class _UpConvolutions(torch.nn.Module):
    """Transposed convolutions after an ordinary one (NHWC after ConvertLayout), as in a U-Net's
    decoder: 2x2 stride 2, 3x3 stride 2 with output padding, 4x4 stride 2 padding 1, rectangular."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.ups = torch.nn.Sequential(
            torch.nn.ConvTranspose2d(8, 8, 2, stride=2), torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1),
            torch.nn.ConvTranspose2d(6, 4, 4, stride=2, padding=1, bias=False),
            torch.nn.ConvTranspose2d(4, 2, (3, 2), stride=(1, 2), padding=(1, 0)))

    def forward(self, x):
        return self.ups(self.stem(x))


def build_up_convolutions():
    torch.manual_seed(0)
    return _UpConvolutions().eval(), (torch.randn(1, 3, 5, 6),)


class _UnusedInput(torch.nn.Module):
    """A model with an input it never reads (an optional mask): the ONNX exporters drop it."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x, mask):
        return self.linear(x)


def build_unused_input():
    torch.manual_seed(0)
    return _UnusedInput().eval(), (torch.randn(2, 8), torch.ones(2, 8))


class _TemporalConvolutions(torch.nn.Module):
    """1-d convolutions as a speech front end has them: strided, dilated, grouped, depthwise."""

    def __init__(self):
        super().__init__()
        self.convs = torch.nn.Sequential(
            torch.nn.Conv1d(1, 16, 10, stride=5), torch.nn.GELU(),
            torch.nn.Conv1d(16, 16, 3, padding=2, dilation=2, groups=2), torch.nn.ReLU(),
            torch.nn.Conv1d(16, 16, 5, padding=2, groups=16), torch.nn.Conv1d(16, 8, 1))

    def forward(self, x):
        return self.convs(x)


def build_temporal_convolutions():
    torch.manual_seed(0)
    return _TemporalConvolutions().eval(), (torch.randn(2, 1, 203),)


class _PointFeatures(torch.nn.Module):
    """PointNet's per-point layers: 1-d 1x1 convolutions with batch norm and ReLU, a residual of
    the same view, channels split and joined again (Res2Net's slices in ECAPA-TDNN), a group norm
    and GELU (wav2vec 2.0's), a max pool (a 1-d ResNet's), and a max and a mean over the points."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Sequential(torch.nn.Conv1d(3, 16, 1), torch.nn.BatchNorm1d(16), torch.nn.ReLU())
        self.b = torch.nn.Sequential(torch.nn.Conv1d(8, 8, 1), torch.nn.BatchNorm1d(8))
        self.c = torch.nn.Sequential(torch.nn.Conv1d(16, 32, 1), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                                     torch.nn.GroupNorm(8, 32), torch.nn.GELU())
        for norm in (self.a[1], self.b[1], self.c[1]):
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        p, q = self.a(x).chunk(2, 1)
        y = torch.nn.functional.max_pool1d(self.c(torch.cat([torch.relu(p + self.b(p)), q], 1)), 3, 2, 1)
        return torch.cat([y.amax(2), y.mean(2)], 1)


def build_point_features():
    torch.manual_seed(0)
    return _PointFeatures().eval(), (torch.randn(2, 3, 64),)


def build_code_to_map():
    """A GAN generator's first layer: a code, a 1x1 map, to a 4x4 map (then a 2x upsampling)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.ConvTranspose2d(16, 8, 4, bias=False), torch.nn.ReLU(),
                                torch.nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1))
    return model.eval(), (torch.randn(3, 16, 1, 1),)


class _RecurrentLayers(torch.nn.Module):
    """Recurrent layers in the forms users write them: a bidirectional batch-first GRU from a given
    state, a two-layer time-major LSTM whose final states are used, a ReLU RNN; hidden sizes not
    whole vectors (9, 40)."""

    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(6, 9, batch_first=True, bidirectional=True)
        self.lstm = torch.nn.LSTM(18, 40, num_layers=2)
        self.rnn = torch.nn.RNN(40, 9, nonlinearity="relu")

    def forward(self, x, h0):
        y, h = self.gru(x, h0)
        z, (hn, cn) = self.lstm(y.transpose(0, 1))
        return self.rnn(z)[0], h, hn + cn


def build_recurrent_layers():
    torch.manual_seed(0)
    return _RecurrentLayers().eval(), (torch.randn(3, 7, 6), torch.randn(2, 3, 9))


def build_projected_lstm():
    torch.manual_seed(0)
    return torch.nn.LSTM(6, 9, proj_size=4).eval(), (torch.randn(5, 2, 6),)


class _GroupNorms(torch.nn.Module):
    """Group norms as a diffusion U-Net has them: on the input (channels first, 4 channels a
    group) and after a convolution (channels last once ConvertLayout has run), then SiLU."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.GroupNorm(4, 16)
        self.conv = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.after = torch.nn.GroupNorm(8, 16)
        self.out = torch.nn.Conv2d(16, 8, 3, padding=1)

    def forward(self, x):
        return self.out(torch.nn.functional.silu(self.after(self.conv(self.first(x)))))


def build_group_norms():
    torch.manual_seed(0)
    return _GroupNorms().eval(), (torch.randn(2, 16, 12, 12) * 3 + 1,)


class _Conv3d(torch.nn.Module):
    """3-d convolutions of every form Conv3dAsConv2d rewrites: temporal stride and padding with
    spatial dilation, groups, a 1 x k x k (R(2+1)D's spatial), a padded k x 1 x 1 (temporal) and a
    dilated k x 1 x 1 kernel."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv3d(3, 8, (3, 5, 7), stride=(2, 1, 2), padding=(1, 2, 3), dilation=(1, 2, 1))
        self.b = torch.nn.Conv3d(8, 8, (3, 3, 3), padding=1, groups=2)
        self.c = torch.nn.Conv3d(8, 64, (1, 3, 3), padding=(0, 1, 1))
        self.e = torch.nn.Conv3d(64, 16, (3, 1, 1), padding=(1, 0, 0))  # (a 192-step window)
        self.d = torch.nn.Conv3d(16, 6, (3, 1, 1), padding=(1, 0, 0), stride=(2, 1, 1), dilation=(2, 1, 1))

    def forward(self, x):
        return self.d(torch.relu(self.e(torch.relu(self.c(self.b(self.a(x)))))))


def build_conv3d():
    torch.manual_seed(0)
    return _Conv3d().eval(), (torch.randn(2, 3, 9, 10, 11),)


def build_video_stem():
    """S3D's stem (a 1x7x7 stride-(1, 2, 2) convolution over a clip's 3 channels) with batch norm
    and ReLU, then a temporal 3x1x1 convolution, over two clips of 4 frames."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv3d(3, 64, (1, 7, 7), stride=(1, 2, 2), padding=(0, 3, 3), bias=False),
                                 torch.nn.BatchNorm3d(64), torch.nn.ReLU(),
                                 torch.nn.Conv3d(64, 64, (3, 1, 1), padding=(1, 0, 0))).eval()
    with torch.no_grad():
        module[1].running_mean.uniform_(-1, 1)
        module[1].running_var.uniform_(0.5, 2)
    return module, (torch.randn(2, 3, 4, 32, 32),)


def build_winograd_conv3d():
    """A 3x3x3 convolution wide enough for Winograd (64 channels, 14x14 maps), with batch norm and
    ReLU, over two clips of 5 frames: Conv3dAsConv2d's frames side by side as 192 channels."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv3d(64, 32, 3, padding=1, bias=False), torch.nn.BatchNorm3d(32),
                                 torch.nn.ReLU()).eval()
    norm = module[1]
    with torch.no_grad():
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
    return module, (torch.randn(2, 64, 5, 14, 14),)



class _Dilated(torch.nn.Module):
    """DeepLabV3's atrous pyramid at small scale: 3x3 convolutions dilated 2, 5 and 9 (padded as
    much) and one with stride 2 and unequal dilations, over a 12x10 map."""

    def __init__(self):
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(6, 4, 3, padding=d, dilation=d) for d in (2, 5, 9))
        self.odd = torch.nn.Conv2d(6, 4, (3, 5), stride=2, padding=(4, 3), dilation=(4, 3), bias=False)

    def forward(self, x):
        return torch.cat([c(x) for c in self.convs], 1), self.odd(x)


def build_dilated():
    torch.manual_seed(0)
    return _Dilated().eval(), (torch.randn(2, 6, 12, 10),)


def build_dilated_wide():
    """A 3x3 convolution dilated by 4 over a 14x14 map with 64 output channels: banded by
    DilatedBands, and wide enough for PackWeights' packed form."""
    torch.manual_seed(0)
    return torch.nn.Conv2d(16, 64, 3, padding=4, dilation=4).eval(), (torch.randn(1, 16, 14, 14),)


def build_shifted_windows():
    """torchvision's Swin block with shifted windows (36x36 map, 6x6 windows shifted by 3, 2 heads):
    its attention mask is built per call from ``new_zeros`` and slice assignments (on a map of
    more than 1024 pixels, which TVM's FoldConstant leaves alone)."""
    from torchvision.models.swin_transformer import SwinTransformerBlock

    torch.manual_seed(0)
    block = SwinTransformerBlock(8, 2, window_size=[6, 6], shift_size=[3, 3], stochastic_depth_prob=0.0)
    return block.eval(), (torch.randn(1, 36, 36, 8),)


class _MaskedAttention(torch.nn.Module):
    """``scaled_dot_product_attention`` over 15 tokens with a boolean mask that hides every key
    from query row 3 (PyTorch gives that row zeros) and the last two keys from the others."""

    def forward(self, x):
        mask = torch.ones(15, 15, dtype=torch.bool)
        mask[:, 13:] = False
        mask[3] = False
        q, k, v = x, x * 0.5, x + 1
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def build_masked_attention():
    torch.manual_seed(0)
    return _MaskedAttention().eval(), (torch.randn(1, 2, 15, 16),)


class _BiasFreeResiduals(torch.nn.Module):
    """Dense layers without a bias over a residual stream of tokens (T5's): each one's packed
    matmul is reshaped back to the tokens and the residual add reshapes it again (the two cancel:
    ``pipeline.REDUNDANT_RESHAPES``)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(64, 64, bias=False), torch.nn.Linear(64, 64, bias=False)

    def forward(self, x):
        x = x + self.a(x)
        return x + self.b(torch.relu(x))


def build_bias_free_residuals():
    torch.manual_seed(0)
    return _BiasFreeResiduals().eval(), (torch.randn(1, 16, 64),)


class _Bf16Net(torch.nn.Module):
    """What ``--precision bf16`` changes and what it leaves: a stem over 3 channels to 32 (fp32:
    too few outputs for ``bf16_dense.BF16_STEMS``; with 2, bf16 in pairs of window columns, its
    3-wide window padded to 4), a strided 3x3 onto 13x13 maps (no register tile divides 13:
    whole tiles over 14 columns), with batch norms folded into their weights (bf16), a depthwise
    3x3 (fp32), two 1x1s (no tile divides the 169 pixels either: convolutions, not
    ``pack_weights.BF16_CONV_AS_DENSE``'s dense layers; the first's SiLU epilogue casts to bf16
    for the second: its
    fast exp's ``Let`` once failed to vectorise, ``passes/bf16_casts.py``; the second's 32
    outputs, two vectors: bf16, ``bf16_dense.MIN_CONV_VECTORS``), then dense layers over the
    pixels as tokens, 32 -> 96 (bf16) and 96 -> 40 (fewer outputs than PackWeights packs: fp32)."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 3, stride=2, bias=False), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
            torch.nn.Conv2d(64, 64, 3, padding=1, groups=64), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 1),
            torch.nn.SiLU(), torch.nn.Conv2d(64, 32, 1))
        self.fc1, self.fc2 = torch.nn.Linear(32, 96), torch.nn.Linear(96, 40)

    def forward(self, x):
        tokens = self.features(x).flatten(2).transpose(1, 2)  # [N, 64 pixels, 32 channels]
        return self.fc2(torch.nn.functional.gelu(self.fc1(tokens)))


class _Bf16Residual(torch.nn.Module):
    """Two residual blocks in bf16: each block's input (48x48x128, 1.2 MB in fp32: over a 1 MB
    L2) feeds a bf16 1x1 convolution and the block's residual add (``bf16_dense._residual_casts``:
    stored once, in bf16). The stem reads the 3-channel image in bf16 pairs of window columns
    (``bf16_dense.BF16_STEMS``)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 128, 3, padding=1)
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(128, 128, 1) for _ in range(3))

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = torch.relu(x + self.convs[1](torch.relu(self.convs[0](x))))
        return x + self.convs[2](x)


def build_bf16_residual():
    torch.manual_seed(0)
    return _Bf16Residual().eval(), (torch.randn(1, 3, 48, 48),)


class _Bf16Pools(torch.nn.Module):
    """Max pools in a bf16 build (``bf16_dense._pooled_casts``): a stem's ReLU output (32x32x64)
    max-pooled for a bf16 1x1 convolution, and that pool's output read by another 1x1 and by a
    stride-1 pool before a third (googlenet's branch pools)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 64, 3, padding=1)
        self.a, self.b = torch.nn.Conv2d(64, 64, 1), torch.nn.Conv2d(64, 64, 1)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.stem(x)), 3, 2, 1)
        return self.a(x) + self.b(torch.nn.functional.max_pool2d(x, 3, 1, 1))


def build_bf16_pools():
    torch.manual_seed(0)
    return _Bf16Pools().eval(), (torch.randn(1, 3, 64, 64),)


class _Bf16PoolBranch(torch.nn.Module):
    """An Inception block in a bf16 build (``bf16_dense.BF16_POOL_READERS``): a stem's max pool
    (33x33x64) read by two 1x1 convolutions and by a 3x3 average pool before a third
    (inception_v3's ``branch_pool``)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 64, 3)
        self.a, self.b, self.c = (torch.nn.Conv2d(64, 32, 1) for _ in range(3))

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.stem(x)), 3, 2)
        a, b = self.a(x), self.b(x)
        return torch.cat([a, b, self.c(torch.nn.functional.avg_pool2d(x, 3, 1, 1))], 1)


def build_bf16_pool_branch():
    torch.manual_seed(0)
    return _Bf16PoolBranch().eval(), (torch.randn(1, 3, 69, 69),)


def build_bf16_streamed():
    """A bf16 dense layer whose weights (2048 -> 768: 3 MB in bf16) are larger than L2 (1 or 2 MB)
    and whose input (1024 rows: 4 MB) larger still (``rules/amx.py``'s CHANNEL_OUTER_OVER_L2 and
    ROW_BLOCK_BYTES)."""
    torch.manual_seed(0)
    return torch.nn.Linear(2048, 768).eval(), (torch.randn(1024, 2048),)


def build_bf16_streamed_conv():
    """A bf16 3x3 convolution, 256 -> 256 channels (1.2 MB of weights in bf16: over a 1 MB L2), over
    four 28x28 maps (1.8 MB of padded input): channel-outer in blocks of rows on AMX."""
    torch.manual_seed(0)
    return torch.nn.Conv2d(256, 256, 3, padding=1).eval(), (torch.randn(4, 256, 28, 28),)


def build_bf16_short_tiles():
    """A bf16 dense layer over 200 rows: tiles of 10 rows, two per pair of weight tiles
    (``amx.PAIR_ROWS``: padded to 224, pairs of tiles of 16)."""
    torch.manual_seed(0)
    return torch.nn.Linear(64, 64).eval(), (torch.randn(200, 64),)


class _Bf16Branch(torch.nn.Module):
    """A ResNet block with a downsample branch in bf16 (``bf16_dense.BF16_BRANCHES``): the main
    path and the branch (two bf16 1x1 convolutions to 32x32x128) meet in the residual add."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(64, 64, 1), torch.nn.Conv2d(64, 128, 1)
        self.down = torch.nn.Conv2d(64, 128, 1)

    def forward(self, x):
        main = self.b(torch.relu(self.a(x)))
        return torch.relu(main + self.down(x))


def build_bf16_branch():
    torch.manual_seed(0)
    return _Bf16Branch().eval(), (torch.randn(1, 64, 32, 32),)


class _Bf16Fire(torch.nn.Module):
    """A SqueezeNet fire module in bf16 (``bf16_dense.CAST_BEFORE_CONCATS``): two expand
    convolutions concatenated, the concatenation read only by the next bf16 convolution."""

    def __init__(self):
        super().__init__()
        self.squeeze = torch.nn.Conv2d(64, 32, 1)
        self.one, self.three = torch.nn.Conv2d(32, 64, 1), torch.nn.Conv2d(32, 64, 3, padding=1)
        self.next = torch.nn.Conv2d(128, 32, 1)

    def forward(self, x):
        s = torch.relu(self.squeeze(x))
        return self.next(torch.cat([torch.relu(self.one(s)), torch.relu(self.three(s))], 1))


def build_bf16_fire():
    torch.manual_seed(0)
    return _Bf16Fire().eval(), (torch.randn(1, 64, 28, 28),)


class _Bf16FewChannelWinograd(torch.nn.Module):
    """3x3 convolutions for bf16 Winograd (``winograd.BF16_MIN_CHANNELS``): 32 channels on a 96x96
    map (1.2 MB in fp32: over a 1 MB L2) stays direct; 48 channels there and 32 on a 24x24 map
    (within L2) take Winograd."""

    def __init__(self):
        super().__init__()
        self.few, self.more, self.small = (torch.nn.Conv2d(c, c, 3, padding=1) for c in (32, 48, 32))

    def forward(self, x, y, z):
        return self.few(x), self.more(y), self.small(z)


def build_bf16_few_channel_winograd():
    torch.manual_seed(0)
    return _Bf16FewChannelWinograd().eval(), tuple(torch.randn(1, c, e, e) for c, e in ((32, 96), (48, 96), (32, 24)))


def build_bf16_five_vector_winograd():
    """A 3x3 convolution from 128 to 80 channels on a 28x28 map (raft_small's motion encoder): in
    bf16 a Winograd product over 49 tiles and five 16-lane vectors, whose tile of pairs must take
    rows that divide 49 (``contraction.PAIRS_WHOLE_ROWS``)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(128, 80, 3, padding=1), torch.nn.ReLU()).eval(), \
        (torch.randn(1, 128, 28, 28),)


def build_bf16_short_rows():
    """A 3x3 convolution from 16 to 64 channels on a 55x55 map (squeezenet1_1's fire modules):
    direct in bf16, its register tile's rows are 5, what divides 55 (``contraction.SPAN_PAIRS``)."""
    torch.manual_seed(0)
    return torch.nn.Conv2d(16, 64, 3, padding=1).eval(), (torch.randn(1, 16, 55, 55),)


def build_bf16_patch_stems():
    """Four stems over a 3-channel image to 64 channels: a 7x7 window with stride 2 (a CNN's), an
    11x11 one with stride 4 (AlexNet's), a 4x4 one with stride 4 and no padding (ConvNeXt's) and a
    16x16 patch embedding with stride 16 (a ViT's; ``bf16_dense.BF16_STEM_WINDOW``)."""
    torch.manual_seed(0)

    class _Stems(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn, self.patches = torch.nn.Conv2d(3, 64, 7, 2, 3), torch.nn.Conv2d(3, 64, 16, 16)
            self.patchify, self.alexnet = torch.nn.Conv2d(3, 64, 4, 4), torch.nn.Conv2d(3, 64, 11, 4, 2)

        def forward(self, x, y, z):
            return self.cnn(x), self.patches(y), self.patchify(z), self.alexnet(x)

    return _Stems().eval(), (torch.randn(1, 3, 32, 32), torch.randn(1, 3, 32, 32), torch.randn(1, 3, 32, 32))


class _Bf16Tiles(torch.nn.Module):
    """bf16 products for AMX tiles (``rules/amx.py``): a 1x1 convolution over a 14x14 map (rows
    of 14), a 3x3 one with stride 2 to 7x7 (rows of 7, two input rows apart), one over 8 input
    channels (fewer than 16: the dot product instead), a dense layer over 37 tokens
    (a prime: padded with zero rows to 48, three tiles of 16, ``amx.padded_rows``), a 7x7 stem
    over an image's 3 channels (a window row's 7 columns x 4 channels per product, the image laid
    out with each pixel's channels side by side, ``amx.stem_rows``; the sums held across the window
    rows) and a 3x3 convolution over 48 input channels (read as 64 in its padded copy) to 48
    (padded to 64 with zero channels; with AMX direct, not Winograd). After the strided one, over
    its 7x7 map, a 3x3 convolution to 80 channels (padded to 96) and a 7x1 one from them (reading
    96), both over
    the padded map flattened (``amx.FLAT_MAPS``: rows of 7 are short tiles; a window of one axis
    whose taps are a map row apart)."""

    def __init__(self):
        super().__init__()
        self.pointwise = torch.nn.Conv2d(64, 64, 1)
        self.strided = torch.nn.Conv2d(64, 64, 3, stride=2, padding=1)
        self.flat = torch.nn.Conv2d(64, 80, 3, padding=1)
        self.column = torch.nn.Conv2d(80, 64, (7, 1), padding=(3, 0))
        self.narrow = torch.nn.Conv2d(8, 64, 1)
        self.dense = torch.nn.Linear(64, 96)
        self.stem = torch.nn.Conv2d(3, 64, 7, stride=2, padding=3)
        self.half_steps = torch.nn.Conv2d(48, 48, 3, padding=1)

    def forward(self, x, y, z, image, v):
        seven = self.strided(torch.relu(self.pointwise(x)))
        return (self.column(torch.relu(self.flat(seven))), self.narrow(y), self.dense(z), self.stem(image),
                self.half_steps(v))


def build_bf16_tiles():
    torch.manual_seed(0)
    return _Bf16Tiles().eval(), (torch.randn(1, 64, 14, 14), torch.randn(1, 8, 14, 14), torch.randn(1, 37, 64),
                                 torch.randn(1, 3, 32, 32), torch.randn(1, 48, 14, 14))


class _Bf16Deep(torch.nn.Module):
    """bf16 convolutions over input channels in half steps of AMX tiles (``amx.PAD_DEPTH``): a 3x3
    from 48 channels with padding (14x14), and one from 80 without (19x19 -> 17x17: a prime of
    rows, so over the map flattened, its sums in the output: ``tile_sums.FLAT_SUMS``)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(48, 32, 3, padding=1), torch.nn.Conv2d(80, 64, 3)

    def forward(self, x, y):
        return torch.relu(self.a(x)), torch.relu(self.b(y))


def build_bf16_deep():
    torch.manual_seed(0)
    return _Bf16Deep().eval(), (torch.randn(1, 48, 14, 14), torch.randn(1, 80, 19, 19))


def build_bf16_squeeze():
    """A squeeze to 16 channels (one vector of outputs) and an expansion back to 64, 1x1 each
    (squeezenet's fire module, without the 3x3): ``bf16_dense.MIN_CONV_VECTORS_AMX``."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(64, 16, 1), torch.nn.ReLU(), torch.nn.Conv2d(16, 64, 1),
                              torch.nn.ReLU())
    return net.eval(), (torch.randn(1, 64, 14, 14),)


def build_bf16():
    torch.manual_seed(0)
    net = _Bf16Net()
    _random_statistics(net.features)
    return net.eval(), (torch.randn(1, 3, 54, 54),)


def build_bf16_windows():
    """bf16 convolutions on AMX tiles: 3x3s 128 -> 128 channels over a 28x28 map (weights 295 KB,
    1.3x its input) and 256 -> 256 over 14x14 (1.2 MB, 9x its input), 1x1s 128 -> 256 with
    stride 2 (weights 64 KB, under its input) and 256 -> 512 over 14x14 (256 KB, 2.6x its input)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(128, 128, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(128, 256, 1, stride=2), torch.nn.ReLU(),
                              torch.nn.Conv2d(256, 256, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(256, 512, 1))
    return net.eval(), (torch.randn(1, 128, 28, 28),)


def build_bf16_squeeze_excite():
    """mobilenet_v3_large's third stage, small: a 1x1 expansion 24 -> 72, a depthwise 5x5 with
    stride 2, a squeeze-excite block (72 -> 24 -> 72, biases, hard sigmoid) scaling it, the 1x1
    projection 72 -> 40. The scale's kernel stores the projection's bf16 input padded to 80
    channels."""
    from torchvision.ops import SqueezeExcitation

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(24, 72, 1), torch.nn.ReLU(),
        torch.nn.Conv2d(72, 72, 5, stride=2, padding=2, groups=72), torch.nn.ReLU(),
        SqueezeExcitation(72, 24, scale_activation=torch.nn.Hardsigmoid), torch.nn.Conv2d(72, 40, 1))
    return net.eval(), (torch.randn(1, 24, 56, 56),)


def build_bf16_13_rows():
    """Rows no tile from 4 to 8 divides (``tiles.LONG_PAIR_ACCUMULATORS``): two 3x3 convolutions
    over a 49x49 map (Winograd products over 13 x 13 tiles, to 32 and to 48 channels), one of
    stride 4 to 13x13, then a 3x3 and a 1x1 convolution, 32 -> 32, over the 13x13 map (ResNet's
    layer3 at 193 px, small)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 48, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(48, 32, 3, stride=4, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 32, 1), torch.nn.ReLU())
    return net.eval(), (torch.randn(1, 32, 49, 49),)


def build_bf16_narrow_fire():
    """SqueezeNet's last stage, small: a 3x3 convolution to 16 channels (one dot-product vector)
    and a 1x1 convolution 16 -> 64 over 13-pixel rows (no tile from 4 to 8 divides them), at
    batch 4 (a tile of 4 divides its 676 pixels) (``pack_weights.BF16_ONE_VECTOR_BLOCKS``,
    ``BF16_CONV_AS_DENSE``)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(32, 16, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(16, 64, 1), torch.nn.ReLU())
    return net.eval(), (torch.randn(4, 32, 13, 13),)


class _ScatterAdds(torch.nn.Module):
    """Accumulating scatters with repeated targets (``compile/scatter.py``): a graph's mean over
    neighbours (``index_add`` of gathered rows), an ``index_add`` along columns of computed values,
    ``index_put(..., accumulate=True)`` by two index tensors with negative entries."""

    def forward(self, x, src, dst):
        messages = torch.zeros_like(x).index_add(0, dst, x[src])
        columns = torch.zeros(x.shape[0], 5).index_add(1, torch.tensor([0, 4, 4, 1]), x[:, :4] * 2)
        pairs = x.index_put((dst[:64] - x.shape[0], src[:64] % x.shape[1]), torch.arange(64, dtype=x.dtype), accumulate=True)
        return messages, columns, pairs


def build_scatter_adds():
    torch.manual_seed(0)
    nodes, edges = 64, 400000  # enough adds that TVM's racing threads overlapped in 3 of 3 runs
    return _ScatterAdds().eval(), (torch.randn(nodes, 16), torch.randint(0, nodes, (edges,)),
                                   torch.randint(0, 4, (edges,)))


class _Bags(torch.nn.Module):
    """``EmbeddingBag`` in sum and mean mode, repeated indices, empty bags (two equal offsets, and
    a last offset at the end of the ids), and in max mode (``mode``: refused)."""

    def __init__(self, mode: str = "sum"):
        super().__init__()
        self.sums = torch.nn.EmbeddingBag(300, 24, mode=mode)
        self.means = torch.nn.EmbeddingBag(300, 24, mode="mean")

    def forward(self, ids, offsets):
        return self.sums(ids, offsets) * 2 + self.means(ids, offsets)


def build_embedding_bags(mode: str = "sum"):
    torch.manual_seed(0)
    offsets = torch.tensor([0, 7, 7, 40, 41, 400, 1000, 1500, 2000])
    return _Bags(mode).eval(), (torch.randint(0, 300, (2000,)), offsets)


def build_embedding_bags_max():
    return build_embedding_bags("max")


class _TopK(torch.nn.Module):
    """``topk`` along the last axis and along another, largest and smallest, and ``max`` over an
    axis with its positions unused (a reduction) and used."""

    def forward(self, x):
        values, indices = x.topk(5, dim=-1)
        smallest, where = x.topk(3, dim=1, largest=False)
        best, at = x.max(dim=1)
        return values, indices, smallest, where, x.max(dim=-1)[0], best, at


def build_top_k():
    torch.manual_seed(0)
    return _TopK().eval(), (torch.randn(2, 37, 50),)


class _RoutedExperts(torch.nn.Module):
    """A mixture of experts' routing as GShard writes it: top-2 experts a token, ``one_hot`` (whose
    export adds run-time range checks), the experts' weights contracted by ``einsum``."""

    def __init__(self, d: int = 16, hidden: int = 24, experts: int = 4):
        super().__init__()
        self.experts = experts
        self.router = torch.nn.Linear(d, experts, bias=False)
        self.w1 = torch.nn.Parameter(torch.randn(experts, d, hidden) * d ** -0.5)
        self.w2 = torch.nn.Parameter(torch.randn(experts, hidden, d) * hidden ** -0.5)

    def forward(self, x):
        weight, expert = self.router(x).softmax(-1).topk(2, dim=-1)
        gates = (torch.nn.functional.one_hot(expert, self.experts).float() * weight[..., None]).sum(1)
        h = torch.relu(torch.einsum("td,edh->teh", x, self.w1))
        return torch.einsum("te,teh,ehd->td", gates, h, self.w2)


def build_routed_experts():
    torch.manual_seed(0)
    return _RoutedExperts().eval(), (torch.randn(12, 16),)


class _ConvLeakyMax(torch.nn.Module):
    """DGCNN's EdgeConv tail: a 1x1 convolution, a leaky ReLU, the max over neighbours (the last
    axis) and a mean over points."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(6, 32, 1)

    def forward(self, x):
        y = torch.nn.functional.leaky_relu(self.conv(x), 0.2)
        return y.max(dim=-1)[0], y.mean(2)


def build_conv_leaky_max():
    torch.manual_seed(0)
    return _ConvLeakyMax().eval(), (torch.randn(1, 6, 40, 9),)


class _TransposedConv3d(torch.nn.Module):
    """Transposed 3-d convolutions (refused by TVM 0.27's importer): a 3-d U-Net's 2x2x2
    upsampling, and an overlapping one with padding, output padding and dilation."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose3d(8, 4, 2, stride=2)
        self.overlap = torch.nn.ConvTranspose3d(4, 3, 3, stride=2, padding=1, output_padding=1, dilation=(1, 2, 1))

    def forward(self, x):
        return self.overlap(self.up(x))


def build_transposed_conv3d():
    torch.manual_seed(0)
    return _TransposedConv3d().eval(), (torch.randn(1, 8, 3, 4, 5),)


class _InstanceNorms(torch.nn.Module):
    """Instance norms after 3-d and 2-d convolutions, at batch 2 (torch.export folds the batch into
    the channels), one without affine parameters."""

    def __init__(self):
        super().__init__()
        self.conv3 = torch.nn.Conv3d(3, 8, 3, padding=1)
        self.norm3 = torch.nn.InstanceNorm3d(8, affine=True)
        self.conv2 = torch.nn.Conv2d(8 * 4, 8, 3, padding=1)
        self.norm2 = torch.nn.InstanceNorm2d(8)

    def forward(self, x):
        y = torch.nn.functional.leaky_relu(self.norm3(self.conv3(x)), 0.01)
        return self.norm2(self.conv2(y.flatten(1, 2)))


def build_instance_norms():
    torch.manual_seed(0)
    return _InstanceNorms().eval(), (torch.randn(2, 3, 4, 10, 12),)


class _FeatureTokens(torch.nn.Module):
    """FT-Transformer's numerical feature tokens: each feature times its own vector
    (``einsum("bf,fd->bfd")``, a broadcast product of a reshaped input), a CLS token, a layer."""

    def __init__(self, features: int = 5, d: int = 8):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(features, d))
        self.bias = torch.nn.Parameter(torch.randn(features, d))
        self.cls = torch.nn.Parameter(torch.randn(1, 1, d))
        self.out = torch.nn.Linear(d, 3)

    def forward(self, x):
        tokens = torch.einsum("bf,fd->bfd", x, self.weight) + self.bias
        return self.out(torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], 1))


def build_feature_tokens():
    torch.manual_seed(0)
    return _FeatureTokens().eval(), (torch.randn(4, 5),)


class _ExpertProducts(torch.nn.Module):
    """A mixture of experts' expert layers as GShard writes them: the tokens dispatched to each
    expert, ``[E, C, D]``, times that expert's weights by ``einsum``, a GELU between."""

    def __init__(self, d: int = 32, hidden: int = 64, experts: int = 3):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(experts, d, hidden) * d ** -0.5)
        self.w2 = torch.nn.Parameter(torch.randn(experts, hidden, d) * hidden ** -0.5)

    def forward(self, x):
        h = torch.nn.functional.gelu(torch.einsum("ecd,edh->ech", x, self.w1))
        return torch.einsum("ech,ehd->ecd", h, self.w2)


def build_expert_products():
    torch.manual_seed(0)
    return _ExpertProducts().eval(), (torch.randn(3, 10, 32),)


class _TransposedProduct(torch.nn.Module):
    """A cross-attention's scores without the softmax: queries from one input times the keys of
    another, transposed (``q @ k.T``), scaled."""

    def __init__(self):
        super().__init__()
        self.q, self.k = torch.nn.Linear(24, 32), torch.nn.Linear(16, 32)

    def forward(self, x, z):
        return self.q(x) @ self.k(z).transpose(-1, -2) * 0.125


def build_transposed_product():
    torch.manual_seed(0)
    return _TransposedProduct().eval(), (torch.randn(1, 80, 24), torch.randn(1, 64, 16))
