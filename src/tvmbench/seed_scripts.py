"""The seed project's four benchmark scripts, kept working as thin wrappers over tvmbench.

Users have notes and scripts full of invocations such as
``python resnet_benchmark.py --model resnet50 --batch-size 8 --compare-frameworks``; the scripts in
``benchmarks/`` accept exactly those flags and translate them into ``tvmbench run`` (one model,
TVM against PyTorch, tuned with ``--tune``) or ``tvmbench compare`` (``--compare-frameworks``,
``--all-frameworks``, ``--models``, ``--config``), so every number comes from the same code paths.
"""

from __future__ import annotations

import argparse

# script kind -> (default model, text model?)
KINDS = {"resnet": ("resnet50", False), "bert": ("bert-base-uncased", True),
         "transformer": ("gpt2", True), "multi": (None, False)}


def build_parser(kind: str) -> argparse.ArgumentParser:
    default_model, text = KINDS[kind]
    p = argparse.ArgumentParser(prog=f"{kind}_benchmark.py" if kind != "multi" else "multi_framework_comparison.py",
                                description=__doc__.splitlines()[0])
    if kind == "multi":
        p.add_argument("--models", default=None, help="comma-separated models")
        p.add_argument("--config", default=None, help="benchmark_config.json")
        p.add_argument("--all-frameworks", action="store_true")
        p.add_argument("--frameworks", default=None)
    else:
        p.add_argument("--model", default=default_model)
        p.add_argument("--compare-frameworks", action="store_true",
                       help="compare with every framework installed here (tvmbench compare --all-frameworks)")
    p.add_argument("--batch-size", default=None, help="a number, or a list such as 1,8,32 (a sweep)")
    if text or kind == "multi":
        p.add_argument("--seq-length", default=None)
    p.add_argument("--tune", action="store_true", help="tune with MetaSchedule first")
    p.add_argument("--trials", default=None, help="tuning trials (default 1000)")
    p.add_argument("--target", default=None, help="llvm, cuda, or a string like 'llvm -mcpu=skylake-avx512'")
    p.add_argument("--threads", default=None)
    p.add_argument("--output", default=None, help="result JSON")
    return p


def translate(kind: str, argv: list[str]) -> list[str]:
    """The ``tvmbench`` command line equivalent to a seed script's ``argv``."""
    a = build_parser(kind).parse_args(argv)
    batch = a.batch_size
    compare = kind == "multi" or a.compare_frameworks or (batch is not None and "," in batch) or \
        ("," in (getattr(a, "seq_length", None) or ""))
    if compare:
        out = ["compare"]
        if kind == "multi":
            out += ["--models", a.models] if a.models else []
            out += ["--config", a.config] if a.config else []
            out += ["--frameworks", a.frameworks] if a.frameworks else []
            out += ["--all-frameworks"] if a.all_frameworks else []
        else:
            out += ["--models", a.model] + (["--all-frameworks"] if a.compare_frameworks else [])
    else:
        out = ["run", "--model", a.model]
    for flag, value in (("--batch-size", batch), ("--seq-length", getattr(a, "seq_length", None)),
                        ("--target", a.target), ("--threads", a.threads), ("--output", a.output),
                        ("--trials", a.trials)):
        if value is not None:
            out += [flag, value]
    if a.tune:
        out.append("--tune")
    return out


def main(kind: str, argv: list[str] | None = None) -> int:
    import sys

    from tvmbench.cli import main as tvmbench_main

    return tvmbench_main(translate(kind, sys.argv[1:] if argv is None else argv))
