"""`tvmbench compare`: config files, sweeps, summaries, unavailable frameworks, the seed scripts."""

import json
import shlex

import pytest

from tvmbench import comparison as compare
from tvmbench.cli import main
from tvmbench.errors import UserError
from tvmbench.seed_scripts import translate

TINY_BERT = {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128}


def write(tmp_path, data, name="cfg.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_the_issue_example_config_is_valid(tmp_path):
    cfg = compare.load_config(write(tmp_path, {
        "models": [{"name": "resnet50", "type": "resnet", "batch_size": 8, "enable_tuning": True,
                    "tuning_trials": 2000},
                   {"name": "bert-large-uncased", "type": "bert", "batch_size": 4, "seq_length": 512,
                    "enable_tuning": True}],
        "global_settings": {"target": "cuda", "num_runs": 200, "warmup_runs": 20}}))
    points = compare.plan(cfg)
    assert [(p.model, p.batch_size, p.seq_length, p.tune, p.trials) for p in points] == [
        ("resnet50", 8, None, True, 2000), ("bert-large-uncased", 4, 512, True, None)]
    assert cfg.global_settings.num_runs == 200 and cfg.global_settings.target == "cuda"


@pytest.mark.parametrize("content, message", [
    ("{not json", "is not valid JSON"),
    ({"models": []}, "models: List should have at least 1 item"),
    ({"models": [{"name": "resnet18", "batchsize": 8}]}, "models[0].batchsize: Extra inputs are not permitted"),
    ({"models": [{"name": "resnet18", "batch_size": 0}]}, "models[0].batch_size"),
    ({"models": [{"name": "resnet18"}], "global_settings": {"num_runs": "many"}}, "global_settings.num_runs"),
    ({"models": [{"batch_size": 2}]}, "models[0].name: Field required"),
    ({"models": [{"name": "resnet18", "seq_length": []}]}, "models[0].seq_length"),
])
def test_a_bad_config_file_is_one_line_naming_the_field(tmp_path, capsys, content, message):
    path = write(tmp_path, content)
    assert main(["compare", "--config", str(path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and message in err[0] and str(path) in err[0], err


def test_a_missing_config_file_and_a_bad_sweep_flag_are_usage_errors(tmp_path, capsys):
    assert main(["compare", "--config", str(tmp_path / "nope.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["compare", "--models", "resnet18", "--batch-size", "1,x"]) == 2
    assert "bad --batch-size '1,x'" in capsys.readouterr().err
    assert main(["compare", "--models", "resnet18,resnet5"]) == 2
    assert "unknown model 'resnet5'" in capsys.readouterr().err


def test_sweeps_multiply_batch_sizes_and_sequence_lengths_and_flags_override_the_file(tmp_path):
    cfg = compare.load_config(write(tmp_path, {"models": [
        {"name": "bert-base-uncased", "batch_size": [1, 2], "seq_length": [128, 512]},
        {"name": "resnet18", "batch_size": 4}]}))
    points = compare.plan(cfg)
    assert [(p.model, p.batch_size, p.seq_length) for p in points] == [
        ("bert-base-uncased", 1, 128), ("bert-base-uncased", 1, 512), ("bert-base-uncased", 2, 128),
        ("bert-base-uncased", 2, 512), ("resnet18", 4, None)]
    flagged = compare.plan(cfg, batch_sizes=[8, 16], seq_lengths=[64])
    assert [(p.model, p.batch_size, p.seq_length) for p in flagged] == [
        ("bert-base-uncased", 8, 64), ("bert-base-uncased", 16, 64), ("resnet18", 8, None), ("resnet18", 16, None)]
    assert [p.type for p in points] == ["bert"] * 4 + ["resnet"]
    # a video classifier's sequence length is its frames: a sweep over it applies, a row per length
    video = compare.load_config(write(tmp_path, {"models": [{"name": "torchvision:r3d_18"}]}))
    assert [p.seq_length for p in compare.plan(video, seq_lengths=[8, 16])] == [8, 16]
    from tvmbench.results.summary import _label
    assert _label({"model": "torchvision:r3d_18", "batch_size": 1, "model_info": {"frames": 8}}).endswith("b1 f8")


@pytest.mark.parametrize("name, kind", [("resnet101", "resnet"), ("roberta-base", "bert"),
                                        ("distilbert-base-uncased", "bert"), ("gpt2", "gpt"), ("t5-base", "t5"),
                                        ("google/vit-base-patch16-224", "vit"), ("mobilenet_v2", "cnn"),
                                        ("torchvision:resnext50_32x4d", "resnet"), ("my.onnx", "user"),
                                        ("torchvision:swin3d_t", "video"), ("torchvision:lraspp_mobilenet_v3_large",
                                                                            "segmentation")])
def test_model_types_for_the_summary(name, kind):
    assert compare.model_type(name) == kind


def test_compare_sweeps_frameworks_reports_unavailable_ones_and_summarizes(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    cfg = write(tmp_path, {"models": [{"name": "bert-base-uncased", "batch_size": [1, 2], "seq_length": 16,
                                       "hf_config": TINY_BERT}],
                           "global_settings": {"target": "llvm", "num_runs": 10, "warmup_runs": 2,
                                               "frameworks": ["tvm", "pytorch", "onnxruntime", "tensorrt"]}})
    out = tmp_path / "cmp.json"
    plots = tmp_path / "plots"
    code = main(["compare", "--config", str(cfg), "--output", str(out), "--plots", str(plots), "-q"])
    text = capsys.readouterr()
    assert code == 0, text.err
    doc = json.loads(out.read_text())
    assert doc["complete"] and [p["batch_size"] for p in doc["points"]] == [1, 2]
    for p in doc["points"]:
        assert p["tvm_relax"]["accuracy"]["passed"] and p["onnxruntime"]["accuracy"]["passed"]
        assert p["tvm_relax"]["total_runs"] == 10
        trt = p["tensorrt"]
        assert trt["status"] == "unavailable" and "needs an NVIDIA GPU" in trt["error"]
        s = p["tvm_speedups"]
        assert s["pytorch"]["speedup"] > 0 and s["onnxruntime"]["ci95"][0] <= s["onnxruntime"]["speedup"]
        assert s["tensorrt"]["speedup"] is None
    summary = doc["summary"]
    sweep = summary["sweeps"][0]
    assert sweep["model"] == "bert-base-uncased" and set(sweep["throughput"]) == {"tvm", "pytorch", "onnxruntime"}
    assert all([b for b, _ in v] == [1, 2] for v in sweep["throughput"].values())
    assert all(sweep["best_batch_size"][fw] in (1, 2) for fw in sweep["throughput"])
    speedups = [p["tvm_speedups"]["onnxruntime"]["speedup"] for p in doc["points"]]
    g = summary["tvm_speedup_geomean"]["onnxruntime"]
    assert g["points"] == 2 and g["geomean"] == pytest.approx((speedups[0] * speedups[1]) ** 0.5)
    assert g["geomean_clipped_at_1"] >= max(1.0, g["geomean"]) - 1e-9
    bert = summary["tvm_speedup_by_type"]["bert"]["pytorch"]
    assert bert["min"] <= bert["max"] and bert["points"] == 2
    assert "Model type" in text.out and "vs ONNX RT" in text.out and "best batch" in text.out
    assert "unavailable" in text.out  # the latency table says so even in quiet mode
    if (plots / "bert-base-uncased-seq16-throughput.png").exists() is False:
        pytest.importorskip("matplotlib")
        raise AssertionError("matplotlib is installed but no throughput plot was written")


def test_cuda_without_a_gpu_is_one_clear_line(capsys):
    from tvmbench.targets import query_gpu

    if query_gpu() is not None:
        pytest.skip("this machine has a GPU")
    assert main(["compare", "--models", "resnet18", "--target", "cuda -arch=sm_80"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0]


SEED = [
    ("resnet", "--model resnet50 --tune --target cuda", "run --model resnet50 --target cuda --tune"),
    ("resnet", "--model resnet50 --batch-size 8 --compare-frameworks",
     "compare --models resnet50 --all-frameworks --batch-size 8"),
    ("resnet", "--model resnet101 --batch-size 32 --tune", "run --model resnet101 --batch-size 32 --tune"),
    ("bert", "--model bert-base-uncased --seq-length 128 --tune",
     "run --model bert-base-uncased --seq-length 128 --tune"),
    ("bert", "--model bert-large-uncased --batch-size 4 --seq-length 512",
     "run --model bert-large-uncased --batch-size 4 --seq-length 512"),
    ("bert", "--model roberta-base --compare-frameworks", "compare --models roberta-base --all-frameworks"),
    ("transformer", "--model gpt2 --seq-length 1024 --tune", "run --model gpt2 --seq-length 1024 --tune"),
    ("transformer", "--model google/vit-base-patch16-224 --batch-size 16",
     "run --model google/vit-base-patch16-224 --batch-size 16"),
    ("transformer", "--model t5-base --seq-length 512 --compare-frameworks",
     "compare --models t5-base --all-frameworks --seq-length 512"),
    ("multi", "--models resnet50,bert-base-uncased,gpt2 --all-frameworks",
     "compare --models resnet50,bert-base-uncased,gpt2 --all-frameworks"),
    ("multi", "--config benchmark_config.json", "compare --config benchmark_config.json"),
    ("resnet", "--model resnet50 --output r.json --target 'llvm -mcpu=skylake-avx512'",
     "run --model resnet50 --target 'llvm -mcpu=skylake-avx512' --output r.json"),
    ("bert", "--model bert-base-uncased --batch-size 1,8 --output b.json",
     "compare --models bert-base-uncased --batch-size 1,8 --output b.json"),
]


@pytest.mark.parametrize("kind, seed, expected", SEED)
def test_seed_script_invocations_map_onto_tvmbench(kind, seed, expected):
    argv = translate(kind, shlex.split(seed))
    assert argv == shlex.split(expected)
    from tvmbench.cli import build_parser

    build_parser().parse_args(argv)  # and tvmbench accepts what they map to


BENNU = [
    ("-m meta -a x86 -t 1000 -l L -b resnet18", 0,
     [("tune", "tune --model resnet18 --target llvm --strategy evolutionary --trials 1000 --db L"),
      ("run", "run --model resnet18 --target llvm --frameworks tvm --db L")]),
    ("-m dpmeta -a x86 -t 100 -k 10 -l L -b m.onnx", 500,
     [("copy", "copy L L/dpmeta-k10"),
      ("tune", "tune --model m.onnx --target llvm --strategy dpmeta --top-k 10 --trials 600 --db L/dpmeta-k10"),
      ("layers", "tune report L L/dpmeta-k10 --labels Meta,DPMeta --csv L/layers-dpmeta-k10.csv"),
      ("run", "run --model m.onnx --target llvm --frameworks tvm --db L/dpmeta-k10")]),
    ("-m droplet -a cuda -t 50 -l L -b resnet18", 0,
     [("tune", "tune --model resnet18 --target cuda --strategy droplet --top-k 3 --trials 50 --db L/droplet"),
      ("run", "run --model resnet18 --target cuda --frameworks tvm --db L/droplet")]),
    ("-m run -a arm -l L -b resnet18", 0,
     [("run", "run --model resnet18 --target '{\"kind\": \"llvm\", \"mtriple\": \"aarch64-linux-gnu\"}' "
              "--db L --compile-only --artifact-dir L/build")]),
    ("-m meta -a arm -t 64 -l L -b resnet18 --rpc 127.0.0.1:9190 --rpc-key pi", 0,
     [("tune", "tune --model resnet18 --target '{\"kind\": \"llvm\", \"mtriple\": \"aarch64-linux-gnu\"}' "
               "--rpc 127.0.0.1:9190 --rpc-key pi --strategy evolutionary --trials 64 --db L"),
      ("run", "run --model resnet18 --target '{\"kind\": \"llvm\", \"mtriple\": \"aarch64-linux-gnu\"}' "
              "--rpc 127.0.0.1:9190 --rpc-key pi --frameworks tvm --db L")]),
]


@pytest.mark.parametrize("bennu, records, expected", BENNU)
def test_bennu_invocations_map_onto_tvmbench_steps(bennu, records, expected):
    """Bennu's models_onnx.py flags become tvmbench commands that tvmbench's parser accepts;
    dpmeta/droplet refine a copy of LOGDIR's database when it has records, and compare per layer."""
    from tvmbench.cli import build_parser
    from tvmbench.seed_scripts import bennu_steps

    steps = bennu_steps(shlex.split(bennu), records)
    assert [(what, argv) for what, argv in steps] == [(w, shlex.split(e)) for w, e in expected]
    for what, argv in steps:
        if what != "copy":
            build_parser().parse_args(["db", "compare", *argv[2:]] if argv[:2] == ["tune", "report"] else argv)


def test_seed_scripts_run_end_to_end(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "r.json"
    script = Path(__file__).parents[1] / "benchmarks" / "bert_benchmark.py"
    proc = subprocess.run([sys.executable, str(script), "--model", "bert-base-uncased", "--seq-length", "8",
                           "--output", str(out), "--target", "cuda -arch=sm_80"], capture_output=True, text=True)
    assert proc.returncode == 2 and "no CUDA device" in proc.stderr and "Traceback" not in proc.stderr
    with pytest.raises(SystemExit):
        translate("bert", ["--bogus"])
    with pytest.raises(UserError):
        compare.parse_int_list("0", "--batch-size")


@pytest.mark.parametrize("name", ["cpu_quick.json", "cpu_full_zoo.json", "cuda.json"])
def test_shipped_configs_are_valid_and_name_zoo_models(name):
    from pathlib import Path

    from tvmbench.models import check_model_name

    cfg = compare.load_config(Path(__file__).parents[1] / "configs" / name)
    for point in compare.plan(cfg):
        check_model_name(point.model)


def test_an_interrupted_comparison_resumes_where_it_stopped_and_untuned_overrides_the_config(tmp_path):
    """Ctrl-C after the first point, then ``resume``: only the second point is measured, the first
    is kept as it was; ``untuned`` overrides the file's enable_tuning (the tuner is never called);
    a file made with other options is refused."""
    from pathlib import Path

    from tvmbench import api

    mlp = str(Path(__file__).with_name("mlp_model.py")) + ":build"
    cfg = write(tmp_path, {"models": [{"name": mlp, "batch_size": [1, 2], "enable_tuning": True}]})
    out = tmp_path / "sweep.json"

    def never_tune(*args):
        raise AssertionError("--untuned must not tune")

    def stop_after_first(doc):
        raise KeyboardInterrupt

    common = dict(config=str(cfg), output=out, tuner=never_tune, untuned=True, runs=5, warmup=1)
    with pytest.raises(KeyboardInterrupt):
        api.compare(None, "pytorch", "llvm", on_result=stop_after_first, **common)
    first = json.loads(out.read_text())
    assert len(first["points"]) == 1 and not first["complete"]
    started = []
    doc = api.compare(None, "pytorch", "llvm", resume=True, on_point=lambda i, n, p: started.append(p.batch_size),
                      **common)
    assert started == [2] and doc["resumed_points"] == 1 and doc["complete"]
    # (the MLP's factory fixes its own batch, so the points differ by their key, not their batch size)
    assert len({p["point_key"] for p in doc["points"]}) == 2 and doc["points"][0] == first["points"][0]
    with pytest.raises(UserError, match="other options"):
        api.compare(None, "pytorch", "llvm", resume=True, **{**common, "runs": 7})
