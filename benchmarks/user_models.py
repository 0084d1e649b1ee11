"""Models of kinds the zoo does not have, as a user brings them (``file.py:factory``).

    .venv/bin/tvmbench run --model benchmarks/user_models.py:unet --frameworks tvm,onnxruntime,openvino

Random seeded weights, eval mode, one input each. A U-Net and a DCGAN generator (transposed
convolutions: ``passes/sub_pixel.py``), torchvision's segmentation models (dilated convolutions,
bilinear resizing), PyTorch's own transformer layers, and a speech front end (1-d convolutions,
group norm, a bidirectional GRU), an LSTM language model and a CRNN text recogniser (recurrent
layers: ``compile/recurrent.py``), a diffusion U-Net's residual blocks (group norms:
``passes/group_norm.py``), and transformers architectures at published sizes (a Llama-type
language model at SmolLM-135M's, Whisper-tiny's encoder, wav2vec 2.0 base, SegFormer-B0,
MobileViT-S, DINOv2 ViT-S/14). docs/performance.md ("Models the zoo does not have") records
their times against the peers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

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
