"""Models of kinds the zoo does not have, as a user brings them (``file.py:factory``).

    .venv/bin/tvmbench run --model benchmarks/user_models.py:unet --frameworks tvm,onnxruntime,openvino

Random seeded weights, eval mode, one input each. A U-Net and a DCGAN generator (transposed
convolutions: ``passes/sub_pixel.py``), torchvision's segmentation models (dilated convolutions,
bilinear resizing), PyTorch's own transformer layers, and a speech front end (1-d convolutions,
group norm, a bidirectional GRU), an LSTM language model and a CRNN text recogniser (recurrent
layers: ``compile/recurrent.py``), a diffusion U-Net's residual blocks (group norms:
``passes/group_norm.py``), and transformers architectures at published sizes (a Llama-type
language model at SmolLM-135M's, Whisper-tiny's encoder, wav2vec 2.0 base, SegFormer-B0,
MobileViT-S, DINOv2 ViT-S/14), and from session 124 EDSR super-resolution (a pixel shuffle),
PointNet (1-d 1x1 convolutions, a max over points), DLRM (embeddings, pairwise dots), YOLOv8n
(SiLU, SPPF's max pools, nearest upsampling), MLP-Mixer (token mixing across the transposed
patches), Conformer blocks, ECAPA-TDNN and QuartzNet (1-d convolutions with batch norms, squeeze-excitation
over time, attentive pooling, depthwise 1-d convolutions of 33-87 taps), and from session 125
ConvMixer and RepLKNet (depthwise windows of 9x9 and 31x31), PoolFormer (pooling as the token
mixer, one-group group norms), NeRF's MLP (sine encodings, 3 outputs), GraphSAGE (message sums by
``index_add``: ``compile/scatter.py``), StyleGAN2's synthesis (convolution weights computed from
the latent), CLIP's text tower, DeBERTa-v3 base and DLRM over multi-hot ``EmbeddingBag`` tables, and from session 126 a
3-d U-Net (transposed 3-d convolutions, instance norms), DGCNN (``topk`` over pairwise distances, a
max over neighbours), a GShard-style mixture of experts (``one_hot`` routing, expert weights by
``einsum``), a TCN (causal dilated 1-d convolutions with weight norm), EfficientDet's BiFPN
(weighted fusion across five levels), FT-Transformer (tabular feature tokens) and a Perceiver
encoder (latents cross-attending to 4096 inputs), and from session 127 Johnson's style transfer
network (reflection padding, 2-d instance norms), Real-ESRGAN's RRDBNet (dense blocks of
concatenations, leaky ReLUs, nearest upsampling), TSM (a temporal shift of channels between
frames) and SNGAN's discriminator (spectral norm computed in the graph). docs/performance.md ("Models the zoo does not
have") records their times against the peers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

sys.path.insert(0, str(Path(__file__).parent))
from hf_battery import Output  # noqa: E402  (a transformers model called with keyword tensors)


def _block(i: int, o: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                         nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())


class UNet(nn.Module):
    """Four levels (32-256 channels), max pooling down, 2x2 stride-2 transposed convolutions up."""

    def __init__(self, channels: tuple[int, ...] = (32, 64, 128, 256)):
        super().__init__()
        c = channels
        self.downs = nn.ModuleList([_block(3, c[0])] + [_block(c[i], c[i + 1]) for i in range(len(c) - 1)])
        self.ups = nn.ModuleList([nn.ConvTranspose2d(c[i + 1], c[i], 2, stride=2) for i in reversed(range(len(c) - 1))])
        self.decs = nn.ModuleList([_block(2 * c[i], c[i]) for i in reversed(range(len(c) - 1))])
        self.head = nn.Conv2d(c[0], 2, 1)

    def forward(self, x):
        skips = []
        for i, down in enumerate(self.downs):
            x = down(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        for up, dec, skip in zip(self.ups, self.decs, reversed(skips[:-1]), strict=True):
            x = dec(torch.cat([skip, up(x)], 1))
        return self.head(x)


def unet():
    torch.manual_seed(0)
    return UNet().eval(), (torch.randn(1, 3, 128, 128),)


def dcgan():
    """DCGAN's generator: 4x4 transposed convolutions, stride 2, from a 100-d code to 32x32."""
    torch.manual_seed(0)
    g = nn.Sequential(nn.ConvTranspose2d(100, 256, 4, 1, 0, bias=False), nn.BatchNorm2d(256), nn.ReLU(),
                      nn.ConvTranspose2d(256, 128, 4, 2, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU(),
                      nn.ConvTranspose2d(128, 64, 4, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                      nn.ConvTranspose2d(64, 3, 4, 2, 1, bias=False), nn.Tanh())
    return g.eval(), (torch.randn(4, 100, 1, 1),)


class _Out(nn.Module):
    """torchvision's segmentation models return a dict; the benchmark times its ``out``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def lraspp():
    import torchvision

    torch.manual_seed(0)
    m = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None)
    return _Out(m).eval(), (torch.randn(1, 3, 160, 200),)


def fcn():
    import torchvision

    torch.manual_seed(0)
    m = torchvision.models.segmentation.fcn_resnet50(weights=None, weights_backbone=None, aux_loss=False)
    return _Out(m).eval(), (torch.randn(1, 3, 160, 200),)


def transformer_encoder():
    """``nn.TransformerEncoder``: 2 layers, width 256, 8 heads, 64 tokens."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval(), (torch.randn(1, 64, 256),)


class SpeechFrontEnd(nn.Module):
    """wav2vec-style strided 1-d convolutions with group norm and GELU, then a bidirectional GRU."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(1, 64, 10, 5), nn.GroupNorm(64, 64), nn.GELU(),
                                  nn.Conv1d(64, 64, 3, 2), nn.GELU(), nn.Conv1d(64, 64, 3, 2), nn.GELU())
        self.gru = nn.GRU(64, 48, batch_first=True, bidirectional=True)

    def forward(self, x):
        return self.gru(self.conv(x).transpose(1, 2))[0]


def speech():
    torch.manual_seed(0)
    return SpeechFrontEnd().eval(), (torch.randn(1, 1, 4000),)


class LanguageModel(nn.Module):
    """A word-level LSTM language model: embedding, two LSTM layers of 512, the vocabulary's logits."""

    def __init__(self, vocab: int = 2000):
        super().__init__()
        self.embed = nn.Embedding(vocab, 256)
        self.lstm = nn.LSTM(256, 512, num_layers=2, batch_first=True)
        self.head = nn.Linear(512, vocab)

    def forward(self, tokens):
        return self.head(self.lstm(self.embed(tokens))[0])


def lstm_lm():
    torch.manual_seed(0)
    return LanguageModel().eval(), (torch.randint(0, 2000, (1, 64)),)


class CRNN(nn.Module):
    """Text recognition (CRNN): a small CNN over a 32-pixel-high line, the columns as a sequence into
    a two-layer bidirectional LSTM, per-column character logits."""

    def __init__(self, classes: int = 37):
        super().__init__()
        def conv(i, o, pool):
            return [nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(pool)]
        self.cnn = nn.Sequential(*conv(1, 64, 2), *conv(64, 128, 2), *conv(128, 256, (2, 1)),
                                 *conv(256, 256, (4, 1)))
        self.rnn = nn.LSTM(256, 256, num_layers=2, bidirectional=True)
        self.head = nn.Linear(512, classes)

    def forward(self, x):
        f = self.cnn(x).squeeze(2).permute(2, 0, 1)  # (width, batch, channels)
        return self.head(self.rnn(f)[0])


def crnn():
    torch.manual_seed(0)
    return CRNN().eval(), (torch.randn(1, 1, 32, 128),)


class ResBlock(nn.Module):
    """A diffusion U-Net's residual block: group norm, SiLU, 3x3 convolution, twice, and the skip."""

    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(nn.GroupNorm(32, channels), nn.SiLU(), nn.Conv2d(channels, channels, 3, padding=1),
                                  nn.GroupNorm(32, channels), nn.SiLU(), nn.Conv2d(channels, channels, 3, padding=1))

    def forward(self, x):
        return x + self.body(x)


def diffusion_blocks():
    """Two residual blocks of a Stable-Diffusion-style U-Net (128 channels, 32 groups, 32x32)."""
    torch.manual_seed(0)
    return nn.Sequential(ResBlock(128), ResBlock(128)).eval(), (torch.randn(1, 128, 32, 32),)


class AttnBlock(nn.Module):
    """A VAE's spatial self-attention: group norm, 1x1 convolutions to q, k, v, one head over the
    pixels, a 1x1 projection, and the skip."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(32, channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.proj = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        n, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(n, 3, c, h * w).unbind(1)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return x + self.proj(a.transpose(1, 2).reshape(n, c, h, w))


def vae_mid_block():
    """A Stable-Diffusion VAE decoder's middle block (residual, attention, residual; 256 channels
    at 32x32: attention over 1024 pixels)."""
    torch.manual_seed(0)
    return nn.Sequential(ResBlock(256), AttnBlock(256), ResBlock(256)).eval(), (torch.randn(1, 256, 32, 32),)


def _hf(model_type: str, cls: str, inputs: dict, field: str, extra: dict | None = None, **config):
    import transformers

    torch.manual_seed(0)
    model = getattr(transformers, cls)(transformers.AutoConfig.for_model(model_type, **config)).eval()
    return Output(model, tuple(inputs), field, **(extra or {})).eval(), tuple(inputs.values())


def smollm():
    """A Llama-architecture language model at SmolLM-135M's published sizes (30 layers of 576, 9
    heads sharing 3 key/value heads, SwiGLU 1536, RoPE, RMSNorm): the logits of a 128-token prompt."""
    return _hf("llama", "LlamaForCausalLM", {"input_ids": torch.randint(0, 49152, (1, 128))}, "logits",
               {"use_cache": False}, vocab_size=49152, hidden_size=576, intermediate_size=1536,
               num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
               rope_theta=10000.0, tie_word_embeddings=True)


def whisper_tiny_encoder():
    """Whisper-tiny's encoder (4 layers of 384, 6 heads) over 30 s of 80 mel bins: 1500 tokens."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
                                     decoder_layers=4, decoder_attention_heads=6, decoder_ffn_dim=1536)
    encoder = transformers.WhisperModel(cfg).get_encoder().eval()
    return Output(encoder, ("input_features",), "last_hidden_state").eval(), (torch.randn(1, 80, 3000),)


def wav2vec2_base():
    """wav2vec 2.0 base (7 convolutions, 12 layers of 768): one second of 16 kHz audio."""
    return _hf("wav2vec2", "Wav2Vec2Model", {"input_values": torch.randn(1, 16000)}, "last_hidden_state")


def segformer_b0():
    """SegFormer-B0 (MiT-B0 encoder, all-MLP decoder) at 512 x 512, 150 classes (ADE20K)."""
    return _hf("segformer", "SegformerForSemanticSegmentation", {"pixel_values": torch.randn(1, 3, 512, 512)},
               "logits", num_labels=150)


def mobilevit_small():
    """MobileViT-S (the transformers default config, 1000 classes) at 256 x 256, its batch norms
    calibrated on two random images (with the initial statistics its logits were 1e-41: the
    accuracy check compared denormals)."""
    model, inputs = _hf("mobilevit", "MobileViTForImageClassification",
                        {"pixel_values": torch.randn(1, 3, 256, 256)}, "logits", num_labels=1000)
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
        norm.train()
    with torch.no_grad():
        model(torch.randn(2, 3, 256, 256))
    for norm in norms:
        norm.eval()
    return model, inputs


def dinov2_small():
    """DINOv2 ViT-S/14 (12 layers of 384, 6 heads) at 224 x 224: 257 tokens."""
    return _hf("dinov2", "Dinov2Model", {"pixel_values": torch.randn(1, 3, 224, 224)}, "last_hidden_state",
               hidden_size=384, num_attention_heads=6, image_size=518, patch_size=14)


class EDSR(nn.Module):
    """EDSR-baseline super-resolution: 16 residual blocks of 64 channels (3x3, no norm, the
    residual scaled), then a 3x3 convolution to 4 x 64 channels and a pixel shuffle (x2)."""

    def __init__(self, channels: int = 64, blocks: int = 16, scale: int = 2):
        super().__init__()
        self.head = nn.Conv2d(3, channels, 3, padding=1)
        self.body = nn.ModuleList([nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(),
                                                 nn.Conv2d(channels, channels, 3, padding=1))
                                   for _ in range(blocks)])
        self.up = nn.Sequential(nn.Conv2d(channels, channels * scale * scale, 3, padding=1), nn.PixelShuffle(scale),
                                nn.Conv2d(channels, 3, 3, padding=1))

    def forward(self, x):
        x = self.head(x)
        y = x
        for block in self.body:
            y = y + 0.1 * block(y)
        return self.up(x + y)


def edsr():
    """EDSR-baseline (x2) on a 96 x 96 image: 1.6 GFLOP, a pixel shuffle to 192 x 192."""
    torch.manual_seed(0)
    return EDSR().eval(), (torch.randn(1, 3, 96, 96),)


class PointNet(nn.Module):
    """PointNet's classifier: a learned 3x3 input transform (its own small PointNet), shared
    per-point MLPs as 1-d 1x1 convolutions with batch norm, a max over the points, three dense layers."""

    def __init__(self, classes: int = 40):
        super().__init__()
        def mlp(*widths):
            layers = []
            for i, o in zip(widths, widths[1:], strict=False):
                layers += [nn.Conv1d(i, o, 1), nn.BatchNorm1d(o), nn.ReLU()]
            return nn.Sequential(*layers)
        self.tnet = mlp(3, 64, 128, 1024)
        self.tnet_fc = nn.Sequential(nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 9))
        self.features = mlp(3, 64, 128, 1024)
        self.head = nn.Sequential(nn.Linear(1024, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Linear(512, 256),
                                  nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, classes))

    def forward(self, points):  # (batch, 3, points)
        t = self.tnet_fc(self.tnet(points).amax(2)).reshape(-1, 3, 3) + torch.eye(3)
        x = torch.bmm(t, points)
        return self.head(self.features(x).amax(2))


def pointnet():
    """PointNet on 8 clouds of 1024 points."""
    torch.manual_seed(0)
    return PointNet().eval(), (torch.randn(8, 3, 1024),)


class DLRM(nn.Module):
    """DLRM: a bottom MLP over 13 dense features, 26 embedding tables (one lookup each), the
    pairwise dot products of the 27 vectors (upper triangle), a top MLP to one logit."""

    def __init__(self, tables: int = 26, rows: int = 10000, dim: int = 64):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(13, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                    nn.Linear(256, dim), nn.ReLU())
        self.tables = nn.ModuleList([nn.Embedding(rows, dim) for _ in range(tables)])
        pairs = tables + 1
        i, j = torch.triu_indices(pairs, pairs, 1)
        self.register_buffer("upper", i * pairs + j)
        self.top = nn.Sequential(nn.Linear(dim + len(i), 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                 nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, dense, sparse):  # (batch, 13) float, (batch, tables) int
        x = self.bottom(dense)
        v = torch.stack([x] + [t(sparse[:, k]) for k, t in enumerate(self.tables)], 1)
        dots = torch.bmm(v, v.transpose(1, 2)).flatten(1)[:, self.upper]
        return torch.sigmoid(self.top(torch.cat([x, dots], 1)))


def dlrm():
    """DLRM at batch 128 (MLPerf's layer sizes, 10 000 rows per table)."""
    torch.manual_seed(0)
    return DLRM().eval(), (torch.randn(128, 13), torch.randint(0, 10000, (128, 26)))


class DLRMBags(DLRM):
    """DLRM with multi-hot features: each table an ``EmbeddingBag`` summing a bag of ids per
    sample (``compile/scatter.py``), the bags given as flat ids and offsets, as TorchRec's
    ``EmbeddingBagCollection`` takes them."""

    def __init__(self, tables: int = 26, rows: int = 10000, dim: int = 64):
        super().__init__(tables, rows, dim)
        self.tables = nn.ModuleList([nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables)])

    def forward(self, dense, ids, offsets):  # (batch, 13) float, (tables, ids) int, (tables, batch) int
        x = self.bottom(dense)
        v = torch.stack([x] + [t(ids[k], offsets[k]) for k, t in enumerate(self.tables)], 1)
        dots = torch.bmm(v, v.transpose(1, 2)).flatten(1)[:, self.upper]
        return torch.sigmoid(self.top(torch.cat([x, dots], 1)))


def dlrm_bags():
    """DLRM at batch 128 with bags of 20 ids per sample and table (2560 lookups per table)."""
    torch.manual_seed(0)
    batch, hot = 128, 20
    offsets = torch.arange(0, batch * hot, hot).repeat(26, 1)
    return DLRMBags().eval(), (torch.randn(batch, 13), torch.randint(0, 10000, (26, batch * hot)), offsets)


def _cbs(i: int, o: int, k: int = 1, s: int = 1) -> nn.Module:
    return nn.Sequential(nn.Conv2d(i, o, k, s, k // 2, bias=False), nn.BatchNorm2d(o), nn.SiLU())


class C2f(nn.Module):
    """YOLOv8's C2f: a 1x1 convolution split in two, n bottlenecks on the second half, every
    intermediate concatenated, a 1x1 convolution."""

    def __init__(self, i: int, o: int, n: int, shortcut: bool):
        super().__init__()
        self.half = o // 2
        self.cv1, self.cv2 = _cbs(i, o), _cbs((2 + n) * self.half, o)
        self.blocks = nn.ModuleList([nn.Sequential(_cbs(self.half, self.half, 3), _cbs(self.half, self.half, 3))
                                     for _ in range(n)])
        self.shortcut = shortcut

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for block in self.blocks:
            y.append(y[-1] + block(y[-1]) if self.shortcut else block(y[-1]))
        return self.cv2(torch.cat(y, 1))


class YOLOv8n(nn.Module):
    """YOLOv8n's backbone (C2f stages, SPPF's three 5x5 max pools) and its PAN neck (nearest
    upsampling, concatenations), with the three scales' box and class convolutions."""

    def __init__(self, classes: int = 80):
        super().__init__()
        w = (16, 32, 64, 128, 256)
        self.stem = nn.Sequential(_cbs(3, w[0], 3, 2), _cbs(w[0], w[1], 3, 2), C2f(w[1], w[1], 1, True))
        self.p3 = nn.Sequential(_cbs(w[1], w[2], 3, 2), C2f(w[2], w[2], 2, True))
        self.p4 = nn.Sequential(_cbs(w[2], w[3], 3, 2), C2f(w[3], w[3], 2, True))
        self.p5 = nn.Sequential(_cbs(w[3], w[4], 3, 2), C2f(w[4], w[4], 1, True))
        self.sppf_in, self.sppf_out = _cbs(w[4], w[4] // 2), _cbs(w[4] * 2, w[4])
        self.up4, self.up3 = C2f(w[4] + w[3], w[3], 1, False), C2f(w[3] + w[2], w[2], 1, False)
        self.down3, self.down4 = _cbs(w[2], w[2], 3, 2), _cbs(w[3], w[3], 3, 2)
        self.n4, self.n5 = C2f(w[2] + w[3], w[3], 1, False), C2f(w[3] + w[4], w[4], 1, False)
        self.heads = nn.ModuleList([nn.Sequential(_cbs(c, 64, 3), _cbs(64, 64, 3), nn.Conv2d(64, 64 + classes, 1))
                                    for c in (w[2], w[3], w[4])])

    def forward(self, x):
        p3 = self.p3(self.stem(x))
        p4 = self.p4(p3)
        y = self.sppf_in(self.p5(p4))
        a = F.max_pool2d(y, 5, 1, 2)
        b = F.max_pool2d(a, 5, 1, 2)
        p5 = self.sppf_out(torch.cat([y, a, b, F.max_pool2d(b, 5, 1, 2)], 1))
        t4 = self.up4(torch.cat([F.interpolate(p5, scale_factor=2.0, mode="nearest"), p4], 1))
        t3 = self.up3(torch.cat([F.interpolate(t4, scale_factor=2.0, mode="nearest"), p3], 1))
        n4 = self.n4(torch.cat([self.down3(t3), t4], 1))
        n5 = self.n5(torch.cat([self.down4(n4), p5], 1))
        return torch.cat([h(f).flatten(2) for h, f in zip(self.heads, (t3, n4, n5), strict=True)], 2)


def yolov8n():
    """YOLOv8n at 640 x 640 (8400 anchors' box and class outputs, 8.7 GFLOP)."""
    torch.manual_seed(0)
    return YOLOv8n().eval(), (torch.randn(1, 3, 640, 640),)


class MixerLayer(nn.Module):
    """An MLP-Mixer layer: a token-mixing MLP over the patches (across the transposed tokens),
    then a channel-mixing MLP, each after a layer norm with the skip."""

    def __init__(self, tokens: int, width: int, token_mlp: int, channel_mlp: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.tokens = nn.Sequential(nn.Linear(tokens, token_mlp), nn.GELU(), nn.Linear(token_mlp, tokens))
        self.channels = nn.Sequential(nn.Linear(width, channel_mlp), nn.GELU(), nn.Linear(channel_mlp, width))

    def forward(self, x):
        x = x + self.tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channels(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self, layers: int = 8, width: int = 512, patch: int = 16, size: int = 224, classes: int = 1000):
        super().__init__()
        tokens = (size // patch) ** 2
        self.patches = nn.Conv2d(3, width, patch, patch)
        self.layers = nn.Sequential(*[MixerLayer(tokens, width, 256, 2048) for _ in range(layers)])
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, classes)

    def forward(self, x):
        x = self.layers(self.patches(x).flatten(2).transpose(1, 2))
        return self.head(self.norm(x).mean(1))


def mlp_mixer():
    """MLP-Mixer S/16 at 224 x 224 (8 layers of 512, 196 tokens mixed by a 256-wide MLP)."""
    torch.manual_seed(0)
    return Mixer().eval(), (torch.randn(1, 3, 224, 224),)


class ConformerBlock(nn.Module):
    """A Conformer block: half-step feed-forward, self-attention, the convolution module (pointwise
    1-d convolution, GLU, depthwise 1-d convolution of 31 taps, batch norm, SiLU, pointwise), half-step
    feed-forward, layer norm."""

    def __init__(self, width: int = 256, heads: int = 4, kernel: int = 31):
        super().__init__()
        def ff():
            return nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.SiLU(), nn.Linear(4 * width, width))
        self.ff1, self.ff2 = ff(), ff()
        self.attn_norm, self.attn = nn.LayerNorm(width), nn.MultiheadAttention(width, heads, batch_first=True)
        self.conv_norm = nn.LayerNorm(width)
        self.conv = nn.Sequential(nn.Conv1d(width, 2 * width, 1), nn.GLU(1),
                                  nn.Conv1d(width, width, kernel, padding=kernel // 2, groups=width),
                                  nn.BatchNorm1d(width), nn.SiLU(), nn.Conv1d(width, width, 1))
        self.out_norm = nn.LayerNorm(width)

    def forward(self, x):  # (batch, frames, width)
        x = x + 0.5 * self.ff1(x)
        a = self.attn_norm(x)
        x = x + self.attn(a, a, a, need_weights=False)[0]
        x = x + self.conv(self.conv_norm(x).transpose(1, 2)).transpose(1, 2)
        return self.out_norm(x + 0.5 * self.ff2(x))


def conformer():
    """Four Conformer blocks of 256 (Conformer-S's width) over 250 frames (10 s after 4x subsampling)."""
    torch.manual_seed(0)
    return nn.Sequential(*[ConformerBlock() for _ in range(4)]).eval(), (torch.randn(1, 250, 256),)


def _tdnn(i: int, o: int, k: int = 1, d: int = 1) -> nn.Module:
    return nn.Sequential(nn.Conv1d(i, o, k, dilation=d, padding=d * (k - 1) // 2), nn.ReLU(), nn.BatchNorm1d(o))


class SERes2Block(nn.Module):
    """ECAPA-TDNN's block: a 1x1 layer, Res2Net's 8 chained dilated 3-tap layers over channel
    slices, a 1x1 layer, squeeze-excitation over time, the skip."""

    def __init__(self, channels: int, dilation: int, scale: int = 8):
        super().__init__()
        self.scale = scale
        self.inp, self.out = _tdnn(channels, channels), _tdnn(channels, channels)
        self.res2 = nn.ModuleList([_tdnn(channels // scale, channels // scale, 3, dilation) for _ in range(scale - 1)])
        self.se = nn.Sequential(nn.Linear(channels, 128), nn.ReLU(), nn.Linear(128, channels), nn.Sigmoid())

    def forward(self, x):
        parts = self.inp(x).chunk(self.scale, 1)
        y = [parts[0]]
        for i, layer in enumerate(self.res2):
            y.append(layer(parts[i + 1] if i == 0 else parts[i + 1] + y[-1]))
        y = self.out(torch.cat(y, 1))
        return x + y * self.se(y.mean(2)).unsqueeze(2)


class ECAPA(nn.Module):
    """ECAPA-TDNN (512 channels) over 80 filterbank channels: three SE-Res2 blocks, their outputs
    joined by a 1x1 layer, attentive statistics pooling over time, a 192-d embedding."""

    def __init__(self, channels: int = 512):
        super().__init__()
        self.stem = _tdnn(80, channels, 5)
        self.blocks = nn.ModuleList([SERes2Block(channels, d) for d in (2, 3, 4)])
        self.join = nn.Sequential(nn.Conv1d(3 * channels, 1536, 1), nn.ReLU())
        self.attention = nn.Sequential(nn.Conv1d(1536, 128, 1), nn.Tanh(), nn.Conv1d(128, 1536, 1))
        self.norm, self.embed = nn.BatchNorm1d(3072), nn.Linear(3072, 192)

    def forward(self, x):
        x = self.stem(x)
        outs = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        h = self.join(torch.cat(outs, 1))
        w = torch.softmax(self.attention(h), dim=2)
        mean = (h * w).sum(2)
        std = ((h * h * w).sum(2) - mean * mean).clamp(min=1e-5).sqrt()
        return self.embed(self.norm(torch.cat([mean, std], 1)))


def ecapa_tdnn():
    """ECAPA-TDNN-512 on 3 s of speech (300 frames of 80 filterbank channels)."""
    torch.manual_seed(0)
    return ECAPA().eval(), (torch.randn(1, 80, 300),)


def _separable(i: int, o: int, k: int, stride: int = 1, dilation: int = 1) -> list[nn.Module]:
    pad = dilation * (k - 1) // 2
    return [nn.Conv1d(i, i, k, stride, pad, dilation, groups=i, bias=False), nn.Conv1d(i, o, 1, bias=False),
            nn.BatchNorm1d(o)]


class QuartzBlock(nn.Module):
    """QuartzNet's block: R time-channel separable layers (a depthwise 1-d convolution of k taps, a
    pointwise one, batch norm, ReLU), a pointwise residual with batch norm added before the last ReLU."""

    def __init__(self, i: int, o: int, k: int, repeats: int = 5):
        super().__init__()
        layers = []
        for r in range(repeats):
            layers += _separable(i if r == 0 else o, o, k) + ([nn.ReLU()] if r < repeats - 1 else [])
        self.body = nn.Sequential(*layers)
        self.skip = nn.Sequential(nn.Conv1d(i, o, 1, bias=False), nn.BatchNorm1d(o))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def quartznet():
    """QuartzNet 5x5 (6.7 M parameters) on 10 s of 64 mel bins (1000 frames, 500 after its strided
    first layer), the 29 characters' logits per frame."""
    torch.manual_seed(0)
    blocks = [QuartzBlock(256, 256, 33), QuartzBlock(256, 256, 39), QuartzBlock(256, 512, 51),
              QuartzBlock(512, 512, 63), QuartzBlock(512, 512, 75)]
    model = nn.Sequential(*_separable(64, 256, 33, stride=2), nn.ReLU(), *blocks,
                          *_separable(512, 512, 87, dilation=2), nn.ReLU(),
                          nn.Conv1d(512, 1024, 1), nn.BatchNorm1d(1024), nn.ReLU(), nn.Conv1d(1024, 29, 1))
    return model.eval(), (torch.randn(1, 64, 1000),)


class BasicBlock1d(nn.Module):
    def __init__(self, i: int, o: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv1d(i, o, 7, stride, 3, bias=False), nn.BatchNorm1d(o), nn.ReLU(),
                                  nn.Conv1d(o, o, 7, 1, 3, bias=False), nn.BatchNorm1d(o))
        self.skip = nn.Sequential(nn.Conv1d(i, o, 1, stride, bias=False), nn.BatchNorm1d(o)) \
            if stride != 1 or i != o else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet1d():
    """A ResNet-18-shaped 1-d CNN for 12-lead ECGs (10 s at 500 Hz): 7-tap layers with batch norm,
    a max pool and an adaptive average pool over time, 5 classes."""
    torch.manual_seed(0)
    widths = (64, 128, 256, 512)
    layers = [nn.Conv1d(12, 64, 15, 2, 7, bias=False), nn.BatchNorm1d(64), nn.ReLU(), nn.MaxPool1d(3, 2, 1)]
    for k, w in enumerate(widths):
        i = widths[max(k - 1, 0)]
        layers += [BasicBlock1d(i, w, 1 if k == 0 else 2), BasicBlock1d(w, w, 1)]
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(512, 5))
    return model.eval(), (torch.randn(1, 12, 5000),)


class ConvMixerLayer(nn.Module):
    """ConvMixer's layer: a depthwise k x k convolution with GELU and batch norm around a skip, then
    a pointwise convolution with GELU and batch norm."""

    def __init__(self, width: int, kernel: int):
        super().__init__()
        self.depthwise = nn.Sequential(nn.Conv2d(width, width, kernel, groups=width, padding=kernel // 2), nn.GELU(),
                                       nn.BatchNorm2d(width))
        self.pointwise = nn.Sequential(nn.Conv2d(width, width, 1), nn.GELU(), nn.BatchNorm2d(width))

    def forward(self, x):
        return self.pointwise(x + self.depthwise(x))


def convmixer():
    """ConvMixer-768/32 cut to 12 layers of 512 (patch 7, 9 x 9 depthwise windows) at 224 x 224:
    32 x 32 maps throughout."""
    torch.manual_seed(0)
    width = 512
    model = nn.Sequential(nn.Conv2d(3, width, 7, 7), nn.GELU(), nn.BatchNorm2d(width),
                          *[ConvMixerLayer(width, 9) for _ in range(12)],
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 1000))
    return model.eval(), (torch.randn(1, 3, 224, 224),)


class LargeKernelBlock(nn.Module):
    """RepLKNet's block after re-parameterisation: batch norm, a 1x1 convolution with ReLU, one
    large depthwise window (the small parallel window merged into it), a 1x1 convolution, the skip;
    then its ConvFFN (batch norm, 1x1 to 4x with GELU, 1x1 back, the skip)."""

    def __init__(self, width: int, kernel: int):
        super().__init__()
        self.lk = nn.Sequential(nn.BatchNorm2d(width), nn.Conv2d(width, width, 1), nn.BatchNorm2d(width), nn.ReLU(),
                                nn.Conv2d(width, width, kernel, padding=kernel // 2, groups=width),
                                nn.BatchNorm2d(width), nn.Conv2d(width, width, 1))
        self.ffn = nn.Sequential(nn.BatchNorm2d(width), nn.Conv2d(width, 4 * width, 1), nn.GELU(),
                                 nn.Conv2d(4 * width, width, 1))

    def forward(self, x):
        x = x + self.lk(x)
        return x + self.ffn(x)


def replknet():
    """RepLKNet-31B's first two stages (2 blocks of 128 channels with 31 x 31 windows at 56 x 56, a
    strided transition, 2 blocks of 256 with 29 x 29 at 28 x 28), from a 224 x 224 image."""
    torch.manual_seed(0)
    stem = nn.Sequential(nn.Conv2d(3, 128, 3, 2, 1), nn.BatchNorm2d(128), nn.ReLU(),
                         nn.Conv2d(128, 128, 3, 2, 1, groups=128), nn.BatchNorm2d(128), nn.ReLU())
    transition = nn.Sequential(nn.Conv2d(128, 256, 1), nn.BatchNorm2d(256), nn.ReLU(),
                               nn.Conv2d(256, 256, 3, 2, 1, groups=256), nn.BatchNorm2d(256), nn.ReLU())
    model = nn.Sequential(stem, LargeKernelBlock(128, 31), LargeKernelBlock(128, 31), transition,
                          LargeKernelBlock(256, 29), LargeKernelBlock(256, 29))
    return model.eval(), (torch.randn(1, 3, 224, 224),)


class PoolFormerBlock(nn.Module):
    """PoolFormer's block: a group norm of one group (over channels and pixels), pooling minus
    identity as the token mixer (3 x 3 average, padding not counted), an MLP of 1x1 convolutions
    with GELU, both branches layer-scaled."""

    def __init__(self, width: int):
        super().__init__()
        self.norm1, self.norm2 = nn.GroupNorm(1, width), nn.GroupNorm(1, width)
        self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.mlp = nn.Sequential(nn.Conv2d(width, 4 * width, 1), nn.GELU(), nn.Conv2d(4 * width, width, 1))
        self.scale1 = nn.Parameter(torch.full((width, 1, 1), 0.1))
        self.scale2 = nn.Parameter(torch.full((width, 1, 1), 0.1))

    def forward(self, x):
        y = self.norm1(x)
        x = x + self.scale1 * (self.pool(y) - y)
        return x + self.scale2 * self.mlp(self.norm2(x))


def poolformer():
    """PoolFormer-S12 (stages of 2, 2, 6, 2 blocks at 64-512 channels) at 224 x 224."""
    torch.manual_seed(0)
    widths, depths = (64, 128, 320, 512), (2, 2, 6, 2)
    layers = [nn.Conv2d(3, widths[0], 7, 4, 2)]
    for k, (w, d) in enumerate(zip(widths, depths, strict=True)):
        if k:
            layers.append(nn.Conv2d(widths[k - 1], w, 3, 2, 1))
        layers += [PoolFormerBlock(w) for _ in range(d)]
    model = nn.Sequential(*layers, nn.GroupNorm(1, widths[-1]), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(widths[-1], 1000))
    return model.eval(), (torch.randn(1, 3, 224, 224),)


class NeRF(nn.Module):
    """NeRF's MLP: sine and cosine encodings of the position (10 octaves) and the view direction
    (4), eight dense layers of 256 with the encoded position joined again after the fifth, density,
    and a 128-wide colour branch."""

    def __init__(self, width: int = 256):
        super().__init__()
        self.register_buffer("pos_freqs", 2.0 ** torch.arange(10))
        self.register_buffer("dir_freqs", 2.0 ** torch.arange(4))
        pos, view = 3 + 3 * 2 * 10, 3 + 3 * 2 * 4
        self.front = nn.Sequential(nn.Linear(pos, width), nn.ReLU(),
                                   *[m for _ in range(4) for m in (nn.Linear(width, width), nn.ReLU())])
        self.back = nn.Sequential(nn.Linear(width + pos, width), nn.ReLU(),
                                  *[m for _ in range(2) for m in (nn.Linear(width, width), nn.ReLU())])
        self.density, self.feature = nn.Linear(width, 1), nn.Linear(width, width)
        self.colour = nn.Sequential(nn.Linear(width + view, width // 2), nn.ReLU(), nn.Linear(width // 2, 3),
                                    nn.Sigmoid())

    @staticmethod
    def encode(x, freqs):
        angles = (x[..., None] * freqs).flatten(-2)
        return torch.cat([x, torch.sin(angles), torch.cos(angles)], -1)

    def forward(self, points, directions):  # (n, 3) each
        p = self.encode(points, self.pos_freqs)
        h = self.back(torch.cat([self.front(p), p], -1))
        rgb = self.colour(torch.cat([self.feature(h), self.encode(directions, self.dir_freqs)], -1))
        return torch.cat([rgb, torch.relu(self.density(h))], -1)


def nerf():
    """NeRF's MLP over 8192 sample points (64 samples on each of 128 rays)."""
    torch.manual_seed(0)
    return NeRF().eval(), (torch.rand(8192, 3) * 2 - 1, F.normalize(torch.randn(8192, 3), dim=-1))


class GraphSAGE(nn.Module):
    """Two GraphSAGE layers with mean aggregation: every edge's source features gathered, summed
    into its destination with ``index_add``, divided by the in-degree; the node's own features and
    the mean through two dense layers."""

    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.self1, self.neigh1 = nn.Linear(features, hidden), nn.Linear(features, hidden, bias=False)
        self.self2, self.neigh2 = nn.Linear(hidden, classes), nn.Linear(hidden, classes, bias=False)

    @staticmethod
    def mean(x, src, dst, degree):
        return torch.zeros_like(x).index_add(0, dst, x[src]) / degree

    def forward(self, x, src, dst, degree):
        h = torch.relu(self.self1(x) + self.neigh1(self.mean(x, src, dst, degree)))
        return self.self2(h) + self.neigh2(self.mean(h, src, dst, degree))


def graphsage():
    """GraphSAGE on a random graph of Cora's size: 2708 nodes of 1433 features, 10556 edges, 7 classes."""
    torch.manual_seed(0)
    nodes, edges = 2708, 10556
    src, dst = torch.randint(0, nodes, (edges,)), torch.randint(0, nodes, (edges,))
    degree = torch.bincount(dst, minlength=nodes).clamp(min=1).float()[:, None]
    x = (torch.rand(nodes, 1433) < 0.013).float()
    return GraphSAGE(1433, 256, 7).eval(), (x, src, dst, degree)


class ModulatedConv(nn.Module):
    """StyleGAN2's modulated 3x3 convolution: the weights scaled per input channel by a style
    computed from the latent, demodulated per output channel (the weights are activations), then
    noise, bias and a leaky ReLU."""

    def __init__(self, i: int, o: int, latent: int = 512):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(o, i, 3, 3))
        self.style = nn.Linear(latent, i)
        self.bias = nn.Parameter(torch.zeros(o, 1, 1))
        self.noise_strength = nn.Parameter(torch.tensor(0.1))

    def forward(self, x, w, noise):
        weight = self.weight * (self.style(w) + 1.0)[:, None, :, None, None]
        weight = weight * torch.rsqrt(weight.pow(2).sum((2, 3, 4), keepdim=True) + 1e-8)
        y = F.conv2d(x, weight[0], padding=1)  # batch 1
        return F.leaky_relu(y + self.noise_strength * noise + self.bias, 0.2) * 2 ** 0.5


class StyleSynthesis(nn.Module):
    """StyleGAN2's synthesis from 8 x 8 to 64 x 64: two modulated convolutions per resolution
    (512, 512, 256, 128 channels), bilinear upsampling between, a 1x1 modulated RGB output."""

    def __init__(self, widths: tuple[int, ...] = (512, 512, 256, 128)):
        super().__init__()
        self.const = nn.Parameter(torch.randn(1, widths[0], 8, 8))
        self.convs = nn.ModuleList()
        for k, w in enumerate(widths):
            i = widths[max(k - 1, 0)]
            self.convs.extend([ModulatedConv(i, w), ModulatedConv(w, w)])
        self.rgb_style, self.rgb = nn.Linear(512, widths[-1]), nn.Parameter(torch.randn(3, widths[-1], 1, 1))

    def forward(self, w):  # (1, 512) latent
        x = self.const
        for k, conv in enumerate(self.convs):
            if k and k % 2 == 0:
                x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
            noise = torch.sin(torch.arange(x.shape[-1], dtype=x.dtype) * (k + 1.0))[None, None, None, :]
            x = conv(x, w, noise)
        return F.conv2d(x, self.rgb * (self.rgb_style(w) + 1.0)[0, None, :, None, None])


def stylegan2_synthesis():
    """StyleGAN2's synthesis network cut to 64 x 64 (eight modulated convolutions) for one latent."""
    torch.manual_seed(0)
    return StyleSynthesis().eval(), (torch.randn(1, 512),)


def clip_text():
    """CLIP ViT-B/32's text tower (12 layers of 512, 8 heads, a causal mask, quick GELU) over 77 tokens."""
    return _hf("clip_text_model", "CLIPTextModel", {"input_ids": torch.randint(0, 49408, (1, 77))},
               "last_hidden_state")


def deberta_v3_base():
    """DeBERTa-v3 base (12 layers of 768, disentangled attention over 256 relative-position buckets)
    on 128 tokens."""
    return _hf("deberta-v2", "DebertaV2Model", {"input_ids": torch.randint(0, 128100, (1, 128))},
               "last_hidden_state", vocab_size=128100, hidden_size=768, num_hidden_layers=12,
               num_attention_heads=12, intermediate_size=3072, relative_attention=True, position_buckets=256,
               norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"], max_relative_positions=-1,
               position_biased_input=False)


class Block3d(nn.Sequential):
    """Two 3x3x3 convolutions, each with an instance norm and a leaky ReLU (nnU-Net's stage)."""

    def __init__(self, i: int, o: int):
        super().__init__(nn.Conv3d(i, o, 3, padding=1), nn.InstanceNorm3d(o, affine=True), nn.LeakyReLU(0.01),
                         nn.Conv3d(o, o, 3, padding=1), nn.InstanceNorm3d(o, affine=True), nn.LeakyReLU(0.01))


class UNet3d(nn.Module):
    """A 3-d U-Net as nnU-Net builds one: max pooling down, transposed 2x2x2 convolutions up, skip
    concatenations, instance norms."""

    def __init__(self, widths: tuple[int, ...] = (16, 32, 64, 128), classes: int = 3):
        super().__init__()
        self.down = nn.ModuleList()
        c = 1
        for w in widths:
            self.down.append(Block3d(c, w))
            c = w
        self.ups = nn.ModuleList(nn.ConvTranspose3d(widths[k + 1], widths[k], 2, stride=2) for k in range(len(widths) - 1))
        self.up_blocks = nn.ModuleList(Block3d(2 * widths[k], widths[k]) for k in range(len(widths) - 1))
        self.head = nn.Conv3d(widths[0], classes, 1)

    def forward(self, x):
        skips = []
        for k, block in enumerate(self.down):
            x = block(x)
            if k < len(self.down) - 1:
                skips.append(x)
                x = F.max_pool3d(x, 2)
        for k in reversed(range(len(self.ups))):
            x = self.up_blocks[k](torch.cat([self.ups[k](x), skips[k]], 1))
        return self.head(x)


def unet3d():
    """A 3-d U-Net over a 64^3 volume of one channel (16-128 channels, 3 classes)."""
    torch.manual_seed(0)
    return UNet3d().eval(), (torch.randn(1, 1, 64, 64, 64),)


def knn(x: torch.Tensor, k: int) -> torch.Tensor:
    """The k nearest points of each point in feature space (DGCNN's form: topk of minus the squared distances)."""
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    xx = torch.sum(x ** 2, dim=1, keepdim=True)
    dist = -xx - inner - xx.transpose(2, 1)
    return dist.topk(k=k, dim=-1)[1]


def edge_features(x: torch.Tensor, k: int) -> torch.Tensor:
    """Each point's neighbours' features minus its own, beside its own: [B, 2C, N, k]."""
    b, c, n = x.shape
    idx = knn(x, k) + torch.arange(b)[:, None, None] * n
    x = x.transpose(2, 1).contiguous()
    neighbours = x.reshape(b * n, c)[idx.reshape(-1)].reshape(b, n, k, c)
    x = x.reshape(b, n, 1, c).expand(-1, -1, k, -1)
    return torch.cat([neighbours - x, x], 3).permute(0, 3, 1, 2)


class DGCNN(nn.Module):
    """DGCNN's classifier: four EdgeConvs over k nearest neighbours in feature space (topk over
    pairwise distances, gathered rows, a max over neighbours), a 1-d 1x1 convolution, pooling."""

    def __init__(self, k: int = 20, classes: int = 40):
        super().__init__()
        self.k = k
        def conv(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 1, bias=False), nn.BatchNorm2d(o), nn.LeakyReLU(0.2))
        self.convs = nn.ModuleList([conv(6, 64), conv(128, 64), conv(128, 128), conv(256, 256)])
        self.conv5 = nn.Sequential(nn.Conv1d(512, 1024, 1, bias=False), nn.BatchNorm1d(1024), nn.LeakyReLU(0.2))
        self.head = nn.Sequential(nn.Linear(2048, 512, bias=False), nn.BatchNorm1d(512), nn.LeakyReLU(0.2),
                                  nn.Linear(512, 256), nn.BatchNorm1d(256), nn.LeakyReLU(0.2), nn.Linear(256, classes))

    def forward(self, x):
        outs = []
        for conv in self.convs:
            x = conv(edge_features(x, self.k)).max(dim=-1)[0]
            outs.append(x)
        x = self.conv5(torch.cat(outs, 1))
        return self.head(torch.cat([x.amax(-1), x.mean(-1)], 1))


def dgcnn():
    """DGCNN classifying a cloud of 1024 points (k = 20 neighbours, 40 classes)."""
    torch.manual_seed(0)
    return DGCNN().eval(), (torch.randn(1, 3, 1024),)


class MoE(nn.Module):
    """A GShard / Switch-style mixture-of-experts layer with top-2 routing and a fixed capacity:
    dispatch and combine as one-hot tensors (cumsum for each token's slot), experts by einsum."""

    def __init__(self, d: int = 512, hidden: int = 1024, experts: int = 8, capacity: int = 64):
        super().__init__()
        self.experts, self.capacity = experts, capacity
        self.router = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) * d ** -0.5)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) * hidden ** -0.5)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        b, s, d = x.shape
        t = self.norm(x).reshape(b * s, d)
        gates = self.router(t).softmax(-1)
        weight, expert = gates.topk(2, dim=-1)
        mask = F.one_hot(expert, self.experts).float()  # tokens, 2, experts
        slot = (torch.cumsum(mask.reshape(-1, self.experts), 0).reshape(b * s, 2, self.experts) - 1) * mask
        keep = mask * (slot < self.capacity).float()
        slots = F.one_hot(slot.long().clamp(0, self.capacity - 1), self.capacity).float() * keep[..., None]
        combine = (weight[..., None, None] * slots).sum(1)  # tokens, experts, capacity
        dispatch = (combine > 0).float()
        inputs = torch.einsum("tec,td->ecd", dispatch, t)
        h = F.gelu(torch.einsum("ecd,edh->ech", inputs, self.w1))
        out = torch.einsum("ech,ehd->ecd", h, self.w2)
        return x + torch.einsum("tec,ecd->td", combine, out).reshape(b, s, d)


class MoEModel(nn.Module):
    """Mixture-of-experts layers one after another (residual: each adds to its input)."""

    def __init__(self, layers: int = 4, d: int = 512):
        super().__init__()
        self.layers = nn.ModuleList(MoE(d) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def moe():
    """Four mixture-of-experts layers (8 experts of 512 -> 1024 -> 512, top 2, capacity 64) over 256 tokens."""
    torch.manual_seed(0)
    return MoEModel().eval(), (torch.randn(1, 256, 512),)


class TemporalBlock(nn.Module):
    """Two causal dilated 1-d convolutions (left padding) with weight norm, ReLUs, a residual."""

    def __init__(self, i: int, o: int, k: int, d: int):
        super().__init__()
        self.pad = (k - 1) * d
        self.conv1 = weight_norm(nn.Conv1d(i, o, k, dilation=d))
        self.conv2 = weight_norm(nn.Conv1d(o, o, k, dilation=d))
        self.down = nn.Conv1d(i, o, 1) if i != o else None

    def forward(self, x):
        y = F.relu(self.conv1(F.pad(x, (self.pad, 0))))
        y = F.relu(self.conv2(F.pad(y, (self.pad, 0))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class TCN(nn.Module):
    """A temporal convolutional network (Bai et al.): causal dilated 1-d convolutions with weight
    norm (the weights computed from g and v in the graph), dilations 1 to 128, the last step's
    features classified."""

    def __init__(self, i: int = 64, widths: tuple[int, ...] = (128,) * 8, k: int = 3):
        super().__init__()
        layers, c = [], i
        for n, w in enumerate(widths):
            layers.append(TemporalBlock(c, w, k, 2 ** n))
            c = w
        self.net = nn.Sequential(*layers)
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        return self.head(self.net(x)[:, :, -1])


def tcn():
    """A TCN over 1024 steps of 64 features."""
    torch.manual_seed(0)
    return TCN().eval(), (torch.randn(1, 64, 1024),)


class SeparableConv(nn.Sequential):
    """A depthwise 3x3, a pointwise convolution and a batch norm."""

    def __init__(self, c: int):
        super().__init__(nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), nn.Conv2d(c, c, 1), nn.BatchNorm2d(c))


class BiFPNLayer(nn.Module):
    """EfficientDet's BiFPN layer over five levels: fast normalised weighted fusion, top-down then
    bottom-up, each fusion a SiLU and a depthwise separable convolution."""

    def __init__(self, c: int = 64, levels: int = 5):
        super().__init__()
        self.levels = levels
        self.td_w = nn.Parameter(torch.ones(levels - 1, 2))
        self.bu_w = nn.Parameter(torch.ones(levels - 1, 3))
        self.td = nn.ModuleList(SeparableConv(c) for _ in range(levels - 1))
        self.bu = nn.ModuleList(SeparableConv(c) for _ in range(levels - 1))

    @staticmethod
    def fuse(weights, inputs):
        w = F.relu(weights)
        w = w / (w.sum() + 1e-4)
        return sum(w[i] * x for i, x in enumerate(inputs))

    def forward(self, feats):
        td = [feats[-1]]
        for i in range(self.levels - 2, -1, -1):
            up = F.interpolate(td[-1], scale_factor=2.0, mode="nearest")
            td.append(self.td[i](F.silu(self.fuse(self.td_w[i], [feats[i], up]))))
        td = td[::-1]
        out = [td[0]]
        for i in range(1, self.levels):
            down = F.max_pool2d(out[-1], 3, 2, 1)
            out.append(self.bu[i - 1](F.silu(self.fuse(self.bu_w[i - 1], [feats[i], td[i], down]))))
        return out


class BiFPN(nn.Module):
    """EfficientDet-D0's feature network: three BiFPN layers of 64 channels."""

    def __init__(self, c: int = 64, repeats: int = 3):
        super().__init__()
        self.layers = nn.ModuleList(BiFPNLayer(c) for _ in range(repeats))

    def forward(self, p3, p4, p5, p6, p7):
        feats = [p3, p4, p5, p6, p7]
        for layer in self.layers:
            feats = layer(feats)
        return tuple(feats)


def bifpn():
    """The BiFPN over a 512-pixel image's five levels (64 x 64 down to 4 x 4)."""
    torch.manual_seed(0)
    sizes = [64, 32, 16, 8, 4]
    return BiFPN().eval(), tuple(torch.randn(1, 64, s, s) for s in sizes)


class FTTransformer(nn.Module):
    """FT-Transformer for tabular data: numerical features embedded per feature (einsum),
    categorical ones by embeddings, a CLS token, a pre-norm transformer."""

    def __init__(self, numeric: int = 50, cats: tuple[int, ...] = (10, 20, 30, 40, 50, 60, 70, 80), d: int = 192,
                 layers: int = 3):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(numeric, d) * 0.1)
        self.bias = nn.Parameter(torch.randn(numeric, d) * 0.1)
        self.offsets = nn.Parameter(torch.tensor([0] + list(torch.tensor(cats).cumsum(0)[:-1])), requires_grad=False)
        self.embed = nn.Embedding(sum(cats), d)
        self.cls = nn.Parameter(torch.randn(1, 1, d))
        layer = nn.TransformerEncoderLayer(d, 8, 4 * d // 3 * 2, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(d), nn.ReLU(), nn.Linear(d, 1))

    def forward(self, numeric, categorical):
        tokens = torch.einsum("bf,fd->bfd", numeric, self.weight) + self.bias
        tokens = torch.cat([self.cls.expand(numeric.shape[0], -1, -1), tokens, self.embed(categorical + self.offsets)], 1)
        return self.head(self.encoder(tokens)[:, 0])


def ft_transformer():
    """FT-Transformer over a batch of 256 rows of 50 numerical and 8 categorical features."""
    torch.manual_seed(0)
    return FTTransformer().eval(), (torch.randn(256, 50), torch.randint(0, 10, (256, 8)))


class Perceiver(nn.Module):
    """A Perceiver encoder: 256 latents cross-attend to 4096 inputs, then self-attend."""

    def __init__(self, d_in: int = 64, d: int = 512, latents: int = 256, layers: int = 4):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(latents, d))
        self.cross = nn.MultiheadAttention(d, 1, kdim=d_in, vdim=d_in, batch_first=True)
        self.norm_q, self.norm_kv = nn.LayerNorm(d), nn.LayerNorm(d_in)
        layer = nn.TransformerEncoderLayer(d, 8, 4 * d, dropout=0.0, batch_first=True, norm_first=True, activation="gelu")
        self.self_attn = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x):
        q = self.norm_q(self.latents.expand(x.shape[0], -1, -1))
        kv = self.norm_kv(x)
        z = q + self.cross(q, kv, kv, need_weights=False)[0]
        return self.self_attn(z).mean(1)


def perceiver():
    """A Perceiver over 4096 inputs of 64 features."""
    torch.manual_seed(0)
    return Perceiver().eval(), (torch.randn(1, 4096, 64),)


class ResidualIN(nn.Module):
    """Two reflection-padded 3x3 convolutions with instance norms, added to the input."""

    def __init__(self, c: int):
        super().__init__()
        self.body = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(c, c, 3), nn.InstanceNorm2d(c, affine=True),
                                  nn.ReLU(), nn.ReflectionPad2d(1), nn.Conv2d(c, c, 3), nn.InstanceNorm2d(c, affine=True))

    def forward(self, x):
        return x + self.body(x)


def _conv_in(i: int, o: int, k: int, stride: int = 1) -> list[nn.Module]:
    return [nn.ReflectionPad2d(k // 2), nn.Conv2d(i, o, k, stride), nn.InstanceNorm2d(o, affine=True), nn.ReLU()]


class StyleTransfer(nn.Module):
    """Johnson et al.'s fast style transfer network: reflection padding, instance norms, five
    residual blocks of 128 channels, nearest upsampling then convolution on the way up."""

    def __init__(self):
        super().__init__()
        self.down = nn.Sequential(*_conv_in(3, 32, 9), *_conv_in(32, 64, 3, 2), *_conv_in(64, 128, 3, 2))
        self.res = nn.Sequential(*(ResidualIN(128) for _ in range(5)))
        self.up = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), *_conv_in(128, 64, 3),
                                nn.Upsample(scale_factor=2, mode="nearest"), *_conv_in(64, 32, 3),
                                nn.ReflectionPad2d(4), nn.Conv2d(32, 3, 9))

    def forward(self, x):
        return self.up(self.res(self.down(x)))


def style_transfer():
    """The style transfer network over a 256 x 256 image."""
    torch.manual_seed(0)
    return StyleTransfer().eval(), (torch.randn(1, 3, 256, 256),)


class DenseBlock5(nn.Module):
    """ESRGAN's residual dense block: five 3x3 convolutions, each over the concatenation of all
    before it, leaky ReLUs, the result scaled by 0.2 and added."""

    def __init__(self, c: int = 64, g: int = 32):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(c + i * g, g if i < 4 else c, 3, padding=1) for i in range(5))

    def forward(self, x):
        feats = [x]
        for i, conv in enumerate(self.convs):
            y = conv(torch.cat(feats, 1))
            if i < 4:
                feats.append(F.leaky_relu(y, 0.2))
        return x + 0.2 * y


class RRDB(nn.Module):
    def __init__(self, c: int = 64):
        super().__init__()
        self.blocks = nn.Sequential(DenseBlock5(c), DenseBlock5(c), DenseBlock5(c))

    def forward(self, x):
        return x + 0.2 * self.blocks(x)


class RRDBNet(nn.Module):
    """Real-ESRGAN's generator at its anime size (6 RRDBs), 4x: two nearest upsamplings, each
    followed by a convolution and a leaky ReLU."""

    def __init__(self, c: int = 64, blocks: int = 6):
        super().__init__()
        self.first = nn.Conv2d(3, c, 3, padding=1)
        self.body = nn.Sequential(*(RRDB(c) for _ in range(blocks)))
        self.trunk = nn.Conv2d(c, c, 3, padding=1)
        self.up1, self.up2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)
        self.hr, self.last = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, 3, 3, padding=1)

    def forward(self, x):
        f = self.first(x)
        f = f + self.trunk(self.body(f))
        f = F.leaky_relu(self.up1(F.interpolate(f, scale_factor=2.0, mode="nearest")), 0.2)
        f = F.leaky_relu(self.up2(F.interpolate(f, scale_factor=2.0, mode="nearest")), 0.2)
        return self.last(F.leaky_relu(self.hr(f), 0.2))


def rrdbnet():
    """Real-ESRGAN x4 (6 blocks) over a 64 x 64 image."""
    torch.manual_seed(0)
    return RRDBNet().eval(), (torch.randn(1, 3, 64, 64),)


class TemporalShift(nn.Module):
    """TSM's shift: an eighth of the channels from the previous frame, an eighth from the next,
    the rest in place, then the block's first convolution."""

    def __init__(self, block: nn.Module, frames: int):
        super().__init__()
        self.block, self.frames = block, frames

    def forward(self, x):
        nt, c, h, w = x.shape
        x5 = x.view(nt // self.frames, self.frames, c, h, w)
        f = c // 8
        shifted = torch.cat([torch.cat([x5[:, 1:, :f], torch.zeros_like(x5[:, :1, :f])], 1),
                             torch.cat([torch.zeros_like(x5[:, :1, f:2 * f]), x5[:, :-1, f:2 * f]], 1),
                             x5[:, :, 2 * f:]], 2)
        return self.block(shifted.view(nt, c, h, w))


class TSM(nn.Module):
    """A temporal shift module network: resnet18 over 8 frames, each residual block's first
    convolution fed shifted channels, the frames' logits averaged."""

    def __init__(self, frames: int = 8):
        super().__init__()
        import torchvision

        self.frames = frames
        self.net = torchvision.models.resnet18(num_classes=174)
        for layer in (self.net.layer1, self.net.layer2, self.net.layer3, self.net.layer4):
            for block in layer:
                block.conv1 = TemporalShift(block.conv1, frames)

    def forward(self, x):
        b, t = x.shape[:2]
        return self.net(x.flatten(0, 1)).view(b, t, -1).mean(1)


def tsm():
    """TSM-resnet18 over one clip of 8 frames of 224 x 224."""
    torch.manual_seed(0)
    return TSM().eval(), (torch.randn(1, 8, 3, 224, 224),)


class SNDiscriminator(nn.Module):
    """SNGAN's CIFAR discriminator: convolutions under spectral norm (each weight divided by its
    largest singular value, estimated in the graph from the stored vectors), leaky ReLUs, a sum
    over positions and a linear output."""

    def __init__(self, c: int = 128):
        super().__init__()
        sn = nn.utils.parametrizations.spectral_norm
        widths = [(3, c // 2, 3, 1), (c // 2, c, 4, 2), (c, c, 3, 1), (c, 2 * c, 4, 2), (2 * c, 2 * c, 3, 1),
                  (2 * c, 4 * c, 4, 2), (4 * c, 4 * c, 3, 1)]
        self.convs = nn.ModuleList(sn(nn.Conv2d(i, o, k, s, 1)) for i, o, k, s in widths)
        self.linear = sn(nn.Linear(4 * c * 4 * 4, 1))

    def forward(self, x):
        for conv in self.convs:
            x = F.leaky_relu(conv(x), 0.1)
        return self.linear(x.flatten(1))


def sn_discriminator():
    """SNGAN's discriminator over a batch of 16 CIFAR images."""
    torch.manual_seed(0)
    model = SNDiscriminator()
    with torch.no_grad():  # a few power iterations in training mode, as a trained model's u and v would be
        model.train()
        for _ in range(3):
            model(torch.randn(2, 3, 32, 32))
    return model.eval(), (torch.randn(16, 3, 32, 32),)
