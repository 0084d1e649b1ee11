"""The Python API as the README shows it: the first example runs as a plain script (no
``__main__`` guard) on a tiny model, and every call of the second binds to the API's signatures."""

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tvmbench
from tvmbench import api
from tvmbench.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
MLP = str(Path(__file__).with_name("mlp_model.py")) + ":build"


def _readme_examples():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Python API"):text.index("## Layout")]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.mark.slow
def test_the_readme_example_runs_as_a_plain_script(tmp_path):
    script = _readme_examples()[0].replace('"resnet18"', repr(MLP)).replace("runs=50", "runs=3, warmup=1")
    script += ("\nassert doc['tvm_relax']['status'] == 'ok' and doc['pytorch']['status'] == 'ok'"
               "\nassert tvm.accuracy['passed'] and result.speedup.speedup > 0"
               "\nprint('API OK', sorted(result.results))\n")
    (tmp_path / "example.py").write_text(script)
    out = subprocess.run([sys.executable, str(tmp_path / "example.py")], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "API OK ['pytorch', 'tvm']" in out.stdout


def test_every_call_in_the_readme_binds_to_the_api():
    calls = 0
    for block in _readme_examples():
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "tvmbench":
                fn = getattr(tvmbench, node.func.attr)
                inspect.signature(fn).bind(*[None] * len(node.args), **{k.arg: None for k in node.keywords})
                calls += 1
    assert calls >= 5


HOST_BF16 = "avx512_bf16" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else False


@pytest.mark.skipif(not HOST_BF16, reason="TVM's bf16 build needs a CPU with AVX-512 BF16")
def test_a_bf16_miss_is_judged_again_by_pytorch_under_autocast():
    """TVM's bf16 outputs checked at a bound of half their error miss, so PyTorch runs once more
    under bf16 autocast and the verdict comes from TVM's error against twice PyTorch's own."""
    result = tvmbench.run(MLP, ["tvm", "pytorch"], "llvm", runs=3, warmup=1, history=False, isolate=False,
                          precision="bf16")
    err = result.results["tvm"].accuracy["max_rel_err"]
    judged = tvmbench.run(MLP, ["tvm", "pytorch"], "llvm", runs=3, warmup=1, history=False, isolate=False,
                          precision="bf16", rtol=err / 2, atol=1e-12).results["tvm"].accuracy
    own = judged["bfloat16"]
    assert judged["judged_by"] == "pytorch bfloat16" and own["pytorch_max_rel_err"] > 1e-4  # bf16, not fp32 again
    assert judged["passed"] is (judged["max_rel_err"] <= max(err / 2, 2 * own["pytorch_max_rel_err"]))


def test_user_mistakes_raise_one_line_errors_before_any_work():
    with pytest.raises(UserError, match="unknown model"):
        tvmbench.run("resnet-18-typo", target_spec="llvm")
    with pytest.raises(UserError, match="AVX-512 BF16"):
        tvmbench.run(MLP, target_spec={"kind": "llvm", "mcpu": "skylake-avx512"}, precision="bf16")
    with pytest.raises(UserError, match="onnxruntime runs fp32 only"):
        api.explain(MLP, vs="onnxruntime", target_spec="llvm", precision="bf16")
    with pytest.raises(UserError, match="openvino-hint"):
        tvmbench.run(MLP, frameworks="tvm,openvino", target_spec="llvm", openvino_hint="fastest")
    for bad, message in ((dict(batch_size=0), "batch_size="), (dict(runs=2.5), "runs="), (dict(warmup=-1), "warmup="),
                         (dict(min_time=0), "above 0"), (dict(threads=0), "threads="), (dict(rtol=0), "rtol=")):
        with pytest.raises(UserError, match=message):
            tvmbench.run(MLP, frameworks="pytorch", target_spec="llvm", **bad)
    with pytest.raises(UserError, match="trials=-5"):
        tvmbench.api.tune(MLP, target_spec="llvm", trials=-5)


def test_a_narrow_miss_is_judged_again_against_pytorch_in_float64():
    """TVM's outputs checked at a bound of half their error against PyTorch miss narrowly, so
    PyTorch runs once more in float64 and the verdict comes from both frameworks' errors against
    those exact outputs. Within the bound, no float64 run."""
    def tvm_accuracy(**bounds):
        result = tvmbench.run(MLP, ["tvm", "pytorch"], "llvm", runs=3, warmup=1, history=False, isolate=False,
                              **bounds)
        return result.results["tvm"].accuracy

    plain = tvm_accuracy()
    assert plain["passed"] and "float64" not in plain
    err = plain["max_rel_err"]
    judged = tvm_accuracy(rtol=err / 2, atol=1e-12)
    exact = judged["float64"]
    assert judged["judged_by"] == "float64" and exact["reference_fp32_max_rel_err"] > 0  # not float32 again
    bound = max(err / 2, 2 * exact["reference_fp32_max_rel_err"])
    assert judged["passed"] is (exact["max_rel_err"] <= bound)
