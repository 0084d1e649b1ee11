"""Architectures of the transformers library the zoo does not name, as users bring them
(``file.py:factory``): which does TVM import wrongly or refuse?

    .venv/bin/python benchmarks/hf_battery.py [--match SUBSTRING] [--onnx [--dynamo]]
    HF_BATTERY_TOKENS=128 .venv/bin/python benchmarks/hf_battery.py     # inputs of 128 tokens, not 16

Each case is one architecture built from its config at a small size (2 layers, width 64, random
seeded weights, eval mode) on a short input, compiled by tvmbench's TVM pipeline and compared with
PyTorch eager, the check every ``tvmbench run`` makes: decoder-only language models (Llama,
Mistral, Qwen2, Gemma, Phi-3, OPT, BLOOM, GPT-NeoX, Falcon, GPT-J), encoder-decoders (BART,
Marian, Whisper), encoders (ALBERT, ELECTRA, DeBERTa-v2, XLM-R, MPNet), speech (wav2vec2, HuBERT)
and vision (DeiT, BEiT, Swin, ConvNeXt, MobileViT, SegFormer, DINOv2, CLIP's two towers). The
same harness as ``op_battery.py`` (``--onnx``: through ONNX files, ONNX Runtime the reference).
docs/performance.md ("Architectures of the transformers library") records the runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from op_battery import arguments, run_battery  # noqa: E402

SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
# (``HF_BATTERY_TOKENS=128``: long enough for the attention's key tiles, passes/key_limits.py)
TOKENS = int(os.environ.get("HF_BATTERY_TOKENS", "16"))
VOCAB = 1000


class Output(nn.Module):
    """A transformers model called with keyword tensors, returning one output field as a tensor."""

    def __init__(self, model: nn.Module, names: tuple[str, ...], field: str, **extra):
        super().__init__()
        self.model, self.names, self.field, self.extra = model, names, field, extra

    def forward(self, *xs):
        out = self.model(**dict(zip(self.names, xs, strict=True)), **self.extra)
        return out[self.field]


def hf(model_type: str, cls: str, inputs: dict, field: str, extra: dict | None = None, **config):
    """A case: ``transformers.<cls>`` of ``AutoConfig.for_model(model_type, **config)`` on ``inputs``
    (name -> (shape, "tokens" | "float"))."""

    def build():
        import transformers

        torch.manual_seed(0)
        cfg = transformers.AutoConfig.for_model(model_type, **config)
        model = getattr(transformers, cls)(cfg).eval()
        tensors = tuple(torch.randint(0, VOCAB, shape) if kind == "tokens" else torch.randn(*shape)
                        for shape, kind in inputs.values())
        return Output(model, tuple(inputs), field, **(extra or {})).eval(), tensors

    return build


def decoder(model_type: str, cls: str, **config):
    return hf(model_type, cls, {"input_ids": ((1, TOKENS), "tokens")}, "logits", {"use_cache": False},
              vocab_size=VOCAB, **config)


def encoder(model_type: str, cls: str, **config):
    return hf(model_type, cls, {"input_ids": ((1, TOKENS), "tokens")}, "last_hidden_state", vocab_size=VOCAB, **config)


def seq2seq(model_type: str, cls: str, **config):
    return hf(model_type, cls, {"input_ids": ((1, TOKENS), "tokens"), "decoder_input_ids": ((1, 8), "tokens")},
              "logits", {"use_cache": False}, vocab_size=VOCAB, **config)


def vision(model_type: str, cls: str, field: str = "logits", size: int = 64, **config):
    return hf(model_type, cls, {"pixel_values": ((1, 3, size, size), "float")}, field, **config)


LM = {**SMALL, "max_position_embeddings": 128}
BART = {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "max_position_embeddings": 64}

cases = {
    "llama": decoder("llama", "LlamaForCausalLM", **LM),
    "llama_gqa": decoder("llama", "LlamaForCausalLM", **LM, num_key_value_heads=2),
    "mistral_window": decoder("mistral", "MistralForCausalLM", **LM, num_key_value_heads=2, sliding_window=8),
    "qwen2": decoder("qwen2", "Qwen2ForCausalLM", **LM, num_key_value_heads=2),
    "gemma": decoder("gemma", "GemmaForCausalLM", **LM, num_key_value_heads=1, head_dim=16),
    "phi3": decoder("phi3", "Phi3ForCausalLM", **LM, pad_token_id=0),
    "opt": decoder("opt", "OPTForCausalLM", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   ffn_dim=128, word_embed_proj_dim=64, max_position_embeddings=128),
    "bloom_alibi": decoder("bloom", "BloomForCausalLM", hidden_size=64, n_layer=2, n_head=4),
    "gpt_neox": decoder("gpt_neox", "GPTNeoXForCausalLM", **LM, rotary_pct=0.25),
    "falcon": decoder("falcon", "FalconForCausalLM", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      new_decoder_architecture=True, num_kv_heads=2),
    "gptj": decoder("gptj", "GPTJForCausalLM", n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=128),
    "bart": seq2seq("bart", "BartForConditionalGeneration", **BART),
    "marian": seq2seq("marian", "MarianMTModel", **BART, pad_token_id=0, decoder_start_token_id=0),
    "albert": encoder("albert", "AlbertModel", **SMALL, embedding_size=32),
    "electra": encoder("electra", "ElectraModel", **SMALL, embedding_size=32),
    "deberta_v2": encoder("deberta-v2", "DebertaV2Model", **SMALL, max_position_embeddings=128,
                          relative_attention=True, position_buckets=32, pos_att_type=["p2c", "c2p"]),
    "xlm_roberta": encoder("xlm-roberta", "XLMRobertaModel", **SMALL, max_position_embeddings=130),
    "mpnet": encoder("mpnet", "MPNetModel", **SMALL),
    "whisper": hf("whisper", "WhisperForConditionalGeneration",
                  {"input_features": ((1, 80, 64), "float"), "decoder_input_ids": ((1, 8), "tokens")}, "logits",
                  {"use_cache": False}, vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                  max_source_positions=32, max_target_positions=64, pad_token_id=0, bos_token_id=1,
                  eos_token_id=2, decoder_start_token_id=1),
    "wav2vec2": hf("wav2vec2", "Wav2Vec2Model", {"input_values": ((1, 4000), "float")}, "last_hidden_state",
                   **SMALL, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                   num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4),
    "hubert": hf("hubert", "HubertModel", {"input_values": ((1, 4000), "float")}, "last_hidden_state",
                 **SMALL, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                 num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4),
    "deit": vision("deit", "DeiTForImageClassification", **SMALL, image_size=64, patch_size=16),
    "beit": vision("beit", "BeitForImageClassification", **SMALL, image_size=64, patch_size=16,
                   use_relative_position_bias=True),
    "swin_hf": vision("swin", "SwinForImageClassification", image_size=64, patch_size=4, embed_dim=16,
                      depths=[2, 2], num_heads=[2, 4], window_size=4),
    "convnext_hf": vision("convnext", "ConvNextForImageClassification", hidden_sizes=[16, 32, 64, 128],
                          depths=[1, 1, 2, 1]),
    "mobilevit": vision("mobilevit", "MobileViTForImageClassification", image_size=64,
                        hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 16, 24, 32, 40, 48, 64]),
    "segformer": vision("segformer", "SegformerForSemanticSegmentation", hidden_sizes=[16, 32, 48, 64],
                        decoder_hidden_size=64),
    "dinov2": vision("dinov2", "Dinov2Model", "last_hidden_state", **SMALL, image_size=64, patch_size=16),
    "clip_vision": vision("clip_vision_model", "CLIPVisionModel", "pooler_output", **SMALL, image_size=64,
                          patch_size=16),
    "clip_text": hf("clip_text_model", "CLIPTextModel", {"input_ids": ((1, TOKENS), "tokens")}, "pooler_output",
                    vocab_size=VOCAB, **SMALL, max_position_embeddings=32),
}

globals().update(cases)  # each case is a factory ``load_model("hf_battery.py:NAME")`` finds


if __name__ == "__main__":
    run_battery(cases, __file__, arguments(__doc__.split("\n")[0]), "hf_battery_onnx")
