import numpy as np
import pytest
import torch

from tvmbench.errors import UserError
from tvmbench.models import ZOO, ModelOptions, count_flops, load_model, lookup, parse_input_shapes

SMALL = ModelOptions(batch_size=2, seq_length=16, image_size=96)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_zoo_model_builds_and_runs_at_small_size(name):
    model = load_model(name, SMALL)
    assert model.module is not None and not model.module.training
    assert model.param_count and model.param_count > 1_000_000
    for arr in model.inputs.values():
        assert arr.shape[0] == 2  # batch honoured
    entry = ZOO[name]
    if entry.default_seq_length:
        assert model.inputs["input_ids"].shape == (2, 16)
    else:
        assert next(iter(model.inputs.values())).shape == (2, 3, 96, 96)
    with torch.no_grad():
        out = model.module(*model.torch_inputs())
    outs = out if isinstance(out, tuple) else (out,)
    assert all(o.shape[0] == 2 and torch.isfinite(o).all() for o in outs)


def test_published_sizes_are_in_the_registry():
    assert ZOO["bert-large-uncased"].hf_config["hidden_size"] == 1024
    assert ZOO["bert-large-uncased"].hf_config["num_hidden_layers"] == 24
    assert ZOO["gpt2"].hf_config["n_layer"] == 12
    assert ZOO["t5-base"].hf_config["d_model"] == 768
    assert ZOO["google/vit-base-patch16-224"].hf_config["patch_size"] == 16


def test_inputs_are_seeded_and_identical_across_builds():
    a = load_model("bert-base-uncased", ModelOptions(seq_length=8, config_overrides={"num_hidden_layers": 1}))
    b = load_model("bert-base-uncased", ModelOptions(seq_length=8, config_overrides={"num_hidden_layers": 1}))
    np.testing.assert_array_equal(a.inputs["input_ids"], b.inputs["input_ids"])
    with torch.no_grad():
        torch.testing.assert_close(a.module(*a.torch_inputs()), b.module(*b.torch_inputs()))


def test_parameter_count_matches_published_bert_base():
    m = load_model("bert-base-uncased", ModelOptions(seq_length=8))
    assert 109e6 < m.param_count < 110.5e6


def test_torchvision_prefix_reaches_any_classifier():
    m = load_model("torchvision:resnext50_32x4d", ModelOptions(image_size=64))
    assert m.param_count > 20e6


def test_torchvision_prefix_reaches_video_and_segmentation_models():
    """``torchvision:NAME`` builds video classifiers ([N, 3, frames, H, W], frames from
    --seq-length) and segmentation models (the "out" map); their batch norms are calibrated, so
    the output depends on the input (S3D's was its classifier's bias alone). Detectors, MViT at
    another size and --seq-length for an image model are each one line."""
    from tvmbench.models import check_shape_flags

    small = load_model("torchvision:r3d_18", ModelOptions(seq_length=4, image_size=32))
    assert lookup("torchvision:r3d_18").default_image_size == 112 and small.family == "video"
    assert small.inputs["x"].shape == (1, 3, 4, 32, 32)
    video = load_model("torchvision:s3d")
    with torch.no_grad():
        y = video.module(*video.torch_inputs())
        bias = video.module.classifier[1].bias
    assert (y.flatten() - bias).abs().max() > 10 * bias.abs().max()
    seg = load_model("torchvision:lraspp_mobilenet_v3_large", ModelOptions(image_size=64))
    with torch.no_grad():
        assert seg.module(*seg.torch_inputs()).shape == (1, 21, 64, 64)
    check_shape_flags("torchvision:r3d_18", 8, None)
    for name, options, message in [
            ("torchvision:fasterrcnn_resnet50_fpn", ModelOptions(), "two-stage detector .* is not in the zoo"),
            ("torchvision:mvit_v2_s", ModelOptions(image_size=160), "built for 16 frames of 224x224"),
            ("torchvision:s3d", ModelOptions(image_size=64), "cannot run this model on inputs of shape"),
            ("torchvision:raft_small", ModelOptions(image_size=100), "multiple of 8 pixels, at least 128")]:
        with pytest.raises(UserError, match=message) as info:
            load_model(name, options)
        assert "\n" not in str(info.value)
    with pytest.raises(UserError, match="takes images"):
        check_shape_flags("torchvision:lraspp_mobilenet_v3_large", 8, None)


def test_torchvision_prefix_reaches_optical_flow_models():
    """RAFT takes two images and returns the flow after torchvision's 12 refinements (its forward
    returns all 12 fields); a different second image gives a different flow."""
    flow = load_model("torchvision:raft_small", ModelOptions(image_size=128))
    assert flow.family == "optical_flow" and list(flow.inputs) == ["image1", "image2"]
    a, b = flow.torch_inputs()
    with torch.no_grad():
        y = flow.module(a, b)
        assert y.shape == (1, 2, 128, 128)
        assert (flow.module(a, a.flip(-1)) - y).abs().max() > 1e-3


def test_torchvision_prefix_reaches_single_stage_detectors():
    """A single-stage detector is its network (backbone and heads: class logits and boxes for
    every anchor) at the size its own transform resizes to; its heads' convolutions start at the
    default scale, so the outputs depend on the image (torchvision's std-0.01 start left
    RetinaNet's logits at their bias, give or take 0.01)."""
    from tvmbench.models.zoo import two_stage

    assert lookup("torchvision:ssdlite320_mobilenet_v3_large").family == "detection"
    assert two_stage("maskrcnn_resnet50_fpn") and not two_stage("fcos_resnet50_fpn")
    assert load_model("torchvision:ssdlite320_mobilenet_v3_large").inputs["x"].shape == (1, 3, 320, 320)
    net = load_model("torchvision:retinanet_resnet50_fpn", ModelOptions(image_size=64))
    assert net.details["image_size"] == 64 and "non-maximum suppression" in net.details["measured"]
    x, = net.torch_inputs()
    with torch.no_grad():
        boxes, logits = net.module(x)
        other = net.module(torch.randn_like(x))[1]
    assert boxes.shape[-1] == 4 and logits.shape[:2] == boxes.shape[:2] and logits.shape[-1] == 91
    assert (logits - other).abs().mean() > 0.2 * logits.abs().mean()


def test_torchvision_vit_head_is_not_all_zero():
    m = load_model("torchvision:vit_b_32", ModelOptions(image_size=64))
    with torch.no_grad():
        assert m.module(*m.torch_inputs()).abs().max() > 0


def test_flops_include_attention():
    m = load_model("bert-base-uncased", ModelOptions(seq_length=128, config_overrides={"num_hidden_layers": 1}))
    flops = count_flops(m)
    # one layer: 4 projections + FFN = 2*128*(4*768*768 + 2*768*3072) and attention 2*2*128*128*768
    dense = 2 * 128 * (4 * 768 * 768 + 2 * 768 * 3072)
    attention = 2 * 2 * 128 * 128 * 768
    assert flops >= dense + attention
    assert flops < 1.2 * (dense + attention) + 2 * 768 * 768 * 128  # plus the pooler


@pytest.mark.parametrize(
    "name, message",
    [("resnet51", "did you mean resnet50"), ("bert-base", "did you mean"), ("torchvision:resnet9000", "no classification, video, segmentation, optical flow or detection")],
)
def test_unknown_model_suggests_close_names(name, message):
    with pytest.raises(UserError, match=message):
        load_model(name)


def test_sequence_longer_than_the_model_allows_is_an_error():
    with pytest.raises(UserError, match="outside 1..512"):
        load_model("bert-base-uncased", ModelOptions(seq_length=1024))


def test_vit_image_size_must_fit_the_patch():
    with pytest.raises(UserError, match="multiple of the patch"):
        load_model("google/vit-base-patch16-224", ModelOptions(image_size=100))


@pytest.mark.parametrize("spec", [["x:1x3xa"], ["x"], ["x:0x3"], [":1x3"]])
def test_bad_input_shape_flags(spec):
    with pytest.raises(UserError, match="bad --input-shape"):
        parse_input_shapes(spec)


def test_input_shape_flag_parses():
    assert parse_input_shapes(["x:1x3x224x224", "ids:2X8"]) == {"x": (1, 3, 224, 224), "ids": (2, 8)}


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.conv(x).mean(dim=(2, 3)))


def test_onnx_file_with_dynamic_batch(tmp_path):
    pytest.importorskip("onnx")
    path = tmp_path / "tiny.onnx"
    torch.onnx.export(Tiny().eval(), (torch.randn(1, 3, 16, 16),), str(path), input_names=["image"],
                      dynamic_axes={"image": {0: "batch"}}, dynamo=False)
    m = load_model(str(path), ModelOptions(batch_size=3))
    assert m.inputs["image"].shape == (3, 3, 16, 16)
    assert m.family == "onnx" and m.module is None
    m = load_model(str(path), ModelOptions(input_shapes={"image": (2, 3, 20, 20)}))
    assert m.inputs["image"].shape == (2, 3, 20, 20)
    with pytest.raises(UserError, match="--input-shape names"):
        load_model(str(path), ModelOptions(input_shapes={"x": (1, 3, 8, 8)}))


def test_onnx_file_with_an_unknown_inner_dim_asks_for_its_shape(tmp_path):
    pytest.importorskip("onnx")
    path = tmp_path / "tiny.onnx"
    torch.onnx.export(Tiny().eval(), (torch.randn(1, 3, 16, 16),), str(path), input_names=["image"],
                      dynamic_axes={"image": {0: "batch", 2: "height"}}, dynamo=False)
    with pytest.raises(UserError, match="--input-shape image:Nx3xNx16"):
        load_model(str(path))


def test_pt2_file_round_trip(tmp_path):
    module = Tiny().eval()
    x = torch.randn(2, 3, 16, 16)
    path = tmp_path / "tiny.pt2"
    torch.export.save(torch.export.export(module, (x,)), str(path))
    m = load_model(str(path))
    assert m.family == "pt2" and m.exported is not None
    assert next(iter(m.inputs.values())).shape == (2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(m.module(*m.torch_inputs()), module(*m.torch_inputs()))


def test_missing_model_file():
    with pytest.raises(UserError, match="does not exist"):
        load_model("/nonexistent/model.onnx")


def test_every_torchvision_classifier_constructs(monkeypatch):
    """Every classifier torchvision lists builds through ``torchvision:NAME`` at its default size,
    and at 160 px where its constructor takes a size (ViT, MaxViT refuse in one line). Built on
    the meta device (no weights) where the architecture allows, for speed."""
    import torchvision

    # RegNet computes its block widths with tensors (``.tolist()``), which the meta device cannot
    # hold: those few lines run on the CPU, the layers still on meta.
    from torchvision.models.regnet import BlockParams

    from tvmbench.models.builders import construct_torchvision, size_keyword

    widths = BlockParams.from_init_params.__func__

    def on_cpu(cls, *args, **kwargs):
        with torch.device("cpu"):
            return widths(cls, *args, **kwargs)

    monkeypatch.setattr(BlockParams, "from_init_params", classmethod(on_cpu))

    def construct(name: str, size: int) -> None:
        with torch.device("meta"):
            construct_torchvision(name, size)

    names = torchvision.models.list_models(module=torchvision.models)
    assert len(names) > 70
    refused = {}
    for name in names:
        construct(name, lookup("torchvision:" + name).default_image_size)
        if size_keyword(name):
            try:
                construct(name, 160)
            except UserError as e:
                refused[name] = str(e)
    assert set(refused) == {"maxvit_t", "vit_h_14"}, refused
    assert all("\n" not in r and "at image size 160" in r for r in refused.values())
    with pytest.raises(UserError, match="not divisible by partition size"):
        load_model("torchvision:maxvit_t", ModelOptions(image_size=160))


def test_a_factorys_examples_take_the_batch_size_or_say_why_they_cannot():
    """A ``file.py:factory`` returns its example inputs at some batch; ``--batch-size 3`` ran them
    at that batch silently. Examples with a leading dimension of 1 are repeated along it; others
    (a time-major recurrent input) cannot tell their batch axis: a one-line error."""
    from pathlib import Path

    from tvmbench.errors import UserError

    here = str(Path(__file__).with_name("mlp_model.py"))
    model = load_model(here + ":build_unused_input", ModelOptions(batch_size=1))
    assert [a.shape for a in model.inputs.values()] == [(2, 8), (2, 8)]
    with pytest.raises(UserError, match=r"--batch-size 3: the example inputs .*\(input0 \[2, 8\]"):
        load_model(here + ":build_unused_input", ModelOptions(batch_size=3))
    model = load_model(here + ":build_up_convolutions", ModelOptions(batch_size=3))
    (x,) = model.inputs.values()
    assert x.shape == (3, 3, 5, 6) and model.batch_size == 3 and np.array_equal(x[0], x[2])
