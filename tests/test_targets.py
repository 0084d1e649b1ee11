import platform

import pytest

from tvmbench.errors import UserError
from tvmbench.targets import GpuInfo, parse_legacy_string, resolve_target

A100 = GpuInfo(name="NVIDIA A100", compute_capability="8.0", max_threads_per_block=1024,
               max_shared_memory_per_block=49152, warp_size=32)


def no_gpu():
    return None


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("cuda -arch=sm_80", {"kind": "cuda", "arch": "sm_80"}),
        ("llvm -mcpu=skylake-avx512", {"kind": "llvm", "mcpu": "skylake-avx512"}),
        ("llvm -mtriple=aarch64-linux-gnu", {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}),
        ("cuda -max_threads_per_block 1024 -max_shared_memory_per_block 49152",
         {"kind": "cuda", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152}),
        ("llvm -mcpu=a64fx", {"kind": "llvm", "mcpu": "a64fx"}),
        ("llvm -mattr=+avx2,+fma -num-cores 4", {"kind": "llvm", "mattr": ["+avx2", "+fma"], "num-cores": 4}),
        ("llvm --num_cores=3", {"kind": "llvm", "num-cores": 3}),
    ],
)
def test_legacy_strings_convert_to_dicts(spec, expected):
    assert parse_legacy_string(spec) == expected


def test_legacy_cuda_with_limits_but_no_arch_is_refused_without_gpu():
    with pytest.raises(UserError, match="no GPU architecture"):
        resolve_target("cuda -max_threads_per_block 1024 -max_shared_memory_per_block 49152", gpu_query=no_gpu)


def test_legacy_cuda_with_limits_takes_arch_from_the_device():
    t = resolve_target("cuda -max_threads_per_block 512", gpu_query=lambda: A100)
    assert t.config["arch"] == "sm_80"
    assert t.config["max_threads_per_block"] == 512  # the user's value wins over the device's


@pytest.mark.parametrize("spec", ["cuda", '{"kind": "cuda"}', "gpu"])
def test_cuda_without_arch_and_without_gpu_is_an_error_not_sm50(spec):
    with pytest.raises(UserError, match="sm_50"):
        resolve_target(spec, gpu_query=no_gpu)


def test_cuda_arch_and_limits_come_from_device_zero():
    t = resolve_target("cuda", gpu_query=lambda: A100)
    assert t.config["arch"] == "sm_80"
    assert t.config["max_shared_memory_per_block"] == 49152
    assert t.config["thread_warp_size"] == 32
    assert t.tvm().arch == "sm_80"


def test_cuda_arch_given_without_gpu_is_accepted():
    t = resolve_target("cuda -arch=sm_90", gpu_query=no_gpu)
    assert t.tvm().arch == "sm_90"
    assert t.device == "cuda" and not t.is_native


def test_auto_without_gpu_is_the_host_cpu():
    t = resolve_target("auto", gpu_query=no_gpu)
    assert t.kind == "llvm"
    assert t.config["mcpu"] and t.config["mcpu"] != "generic"
    assert t.config["num-cores"] >= 1
    assert t.is_native


def test_auto_with_gpu_is_cuda_with_its_arch():
    t = resolve_target("auto", gpu_query=lambda: A100)
    assert t.kind == "cuda" and t.config["arch"] == "sm_80"


def test_plain_llvm_gets_the_host_cpu_name():
    from tvm.target import codegen

    t = resolve_target("llvm", gpu_query=no_gpu)
    assert t.config["mcpu"] == codegen.llvm_get_system_cpu()


def test_a_host_feature_its_cpu_name_lacks_is_added_and_a_named_cpu_is_taken_as_named(monkeypatch):
    """A hypervisor can report a model number whose LLVM name lacks features the CPU has (the Xeon
    VM with AVX-512 BF16 named ``rocketlake``): a target detected from this machine gets them as
    ``mattr``, so ``--precision bf16`` builds there; a CPU the user names is not second-guessed."""
    from tvm.target import codegen

    from tvmbench import targets
    from tvmbench.targets import has_bf16_dot

    monkeypatch.setattr(targets, "_cpuinfo", lambda: "model name\t: Intel Xeon\nflags\t\t: fpu avx512f avx512_bf16")
    monkeypatch.setattr(targets, "host_cpu", lambda: "rocketlake")
    assert targets.host_features_beyond("rocketlake") == ["avx512bf16"]
    with monkeypatch.context() as m:  # (and its AMX tiles, which rules/amx.py uses)
        m.setattr(targets, "_cpuinfo", lambda: "flags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile")
        assert targets.host_features_beyond("rocketlake") == ["amx-bf16", "amx-tile", "avx512bf16"]
        assert targets.host_features_beyond("sapphirerapids") == []
    assert targets.host_features_beyond("sapphirerapids") == []
    t = resolve_target("llvm", gpu_query=no_gpu)
    assert t.config["mattr"] == ["+avx512bf16"] and any("avx512bf16" in n for n in t.notes)
    assert has_bf16_dot(t.tvm()) and not codegen.target_has_features("avx512bf16", resolve_target(
        {"kind": "llvm", "mcpu": "rocketlake"}, gpu_query=no_gpu).tvm())


def test_what_tvm_answers_is_kept_per_version_and_a_damaged_file_is_asked_again(tmp_path, monkeypatch):
    """Resolving a target asks TVM (kind options, the host CPU, whether TVM accepts the dict): kept
    in the cache folder so a run's main process never imports TVM (and torch) to ask again."""
    import json

    import tvmbench.targets as targets
    from tvmbench.version import tvm_version

    monkeypatch.setenv("TVMBENCH_CACHE", str(tmp_path))
    first = resolve_target("llvm", gpu_query=no_gpu)
    facts = tmp_path / "tvm-facts" / f"{tvm_version()}.json"
    kept = json.loads(facts.read_text())
    assert any(k.startswith("llvm-system-cpu@") for k in kept) and "kind-options/llvm" in kept
    asked = []
    monkeypatch.setattr(targets, "_codegen", lambda: asked.append(1))  # (TVM asked: fails loudly)
    assert resolve_target("llvm", gpu_query=no_gpu).config == first.config and not asked
    facts.write_text('{"kind-options/llvm": {"kind": "str"')  # cut off mid-write by hand
    monkeypatch.undo()
    monkeypatch.setenv("TVMBENCH_CACHE", str(tmp_path))
    assert resolve_target("llvm", gpu_query=no_gpu).config == first.config
    assert json.loads(facts.read_text()).keys() == kept.keys()
    monkeypatch.setenv("TVMBENCH_CACHE", str(facts / "cache"))  # a cache folder that cannot be made: TVM asked
    assert resolve_target("llvm", gpu_query=no_gpu).config == first.config


def test_json_dict_is_kept():
    t = resolve_target('{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}', gpu_query=no_gpu)
    assert t.config == {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}


def test_aarch64_cpu_name_implies_a_cross_target():
    t = resolve_target("llvm -mcpu=a64fx", gpu_query=no_gpu)
    assert t.config["mtriple"] == "aarch64-linux-gnu"
    assert t.arch == "aarch64"
    assert t.is_native == (platform.machine() == "aarch64")


def test_tag_resolves():
    t = resolve_target("nvidia/nvidia-a100", gpu_query=no_gpu)
    assert t.config["arch"] == "sm_80"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("llvm -mcpuu=znver4", "unknown option '-mcpuu'"),
        ("opencl", "unknown target kind"),
        ("llvm -num-cores=many", "takes an integer"),
        ("llvm -mcpu=notacpu", "LLVM does not know the CPU"),
        ('{"kind": "llvm", ', "does not parse"),
        ('{"kind": "llvm", "bogus": 1}', "unknown option"),
        ("", "empty --target"),
    ],
)
def test_bad_targets_get_one_clear_error(spec, message):
    with pytest.raises(UserError, match=message) as info:
        resolve_target(spec, gpu_query=no_gpu)
    assert "\n" not in str(info.value)
