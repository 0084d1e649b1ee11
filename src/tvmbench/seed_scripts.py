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


# ----- Bennu's models_onnx.py (lac-dcc/bennu): -m meta|dpmeta|droplet|run -a ARCH -t TRIALS -k TOPK -l LOGDIR -b MODEL

BENNU_TARGETS = {"x86": "llvm", "cuda": "cuda", "arm": '{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}'}
BENNU_LABELS = {"meta": "Meta", "dpmeta": "DPMeta", "droplet": "Droplet"}


def bennu_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="models_onnx.py", description="Bennu's model benchmark, as a thin wrapper "
                                "over tvmbench: tune (meta, dpmeta, droplet) into LOGDIR, or run with it")
    p.add_argument("-m", "--method", required=True, choices=["meta", "dpmeta", "droplet", "run"])
    p.add_argument("-a", "--arch", default="x86", choices=list(BENNU_TARGETS),
                   help="x86 (this CPU), cuda, arm (aarch64: measured over --rpc, else built only)")
    p.add_argument("-t", "--trials", type=int, default=1000,
                   help="meta: trials for the model; dpmeta/droplet: trials on top of LOGDIR's records")
    p.add_argument("-k", "--top-k", type=int, default=3, help="dpmeta: records per task Droplet starts from")
    p.add_argument("-l", "--logdir", required=True, help="the MetaSchedule database folder (and output.txt)")
    p.add_argument("-b", "--benchmark", required=True, help="an .onnx file or a zoo name")
    p.add_argument("--rpc", default=None, metavar="HOST:PORT", help="a TVM RPC tracker whose devices measure")
    p.add_argument("--rpc-key", default=None)
    return p


def bennu_steps(argv: list[str], records_in_logdir: int = 0) -> list[tuple[str, list[str]]]:
    """The steps of one Bennu invocation, as (what, ``tvmbench`` argv) pairs; a ("copy", ["copy",
    SRC, DEST]) step copies a database's files. ``meta`` tunes LOGDIR with MetaSchedule's evolutionary search;
    ``dpmeta``/``droplet`` refine a copy of LOGDIR in LOGDIR/<method>[-kK] with ``-t`` more trials
    and print the per-layer table against LOGDIR; every tuning method then runs the model with its
    database; ``run`` runs it with LOGDIR (built only for ``-a arm`` without ``--rpc``)."""
    from pathlib import Path

    a = bennu_parser().parse_args(argv)
    target = ["--target", BENNU_TARGETS[a.arch]]
    remote = (["--rpc", a.rpc] + (["--rpc-key", a.rpc_key] if a.rpc_key else [])) if a.rpc else []
    model = ["--model", a.benchmark]
    logdir = Path(a.logdir)
    steps: list[tuple[str, list[str]]] = []
    db = logdir
    if a.method == "meta":
        steps.append(("tune", ["tune", *model, *target, *remote, "--strategy", "evolutionary",
                               "--trials", str(a.trials), "--db", str(logdir)]))
    elif a.method in ("dpmeta", "droplet"):
        db = logdir / (f"dpmeta-k{a.top_k}" if a.method == "dpmeta" else "droplet")
        if records_in_logdir:
            steps.append(("copy", ["copy", str(logdir), str(db)]))
        steps.append(("tune", ["tune", *model, *target, *remote, "--strategy", a.method, "--top-k", str(a.top_k),
                               "--trials", str(records_in_logdir + a.trials), "--db", str(db)]))
        if records_in_logdir:
            steps.append(("layers", ["tune", "report", str(logdir), str(db), "--labels",
                                     f"Meta,{BENNU_LABELS[a.method]}", "--csv", str(logdir / f"layers-{db.name}.csv")]))
    run = ["run", *model, *target, *remote, "--frameworks", "tvm", "--db", str(db)]
    if a.arch == "arm" and not a.rpc:
        run = ["run", *model, *target, "--db", str(db), "--compile-only", "--artifact-dir", str(logdir / "build")]
    steps.append(("run", run))
    return steps


def bennu_main(argv: list[str] | None = None) -> int:
    """Run the steps, every tvmbench command's stdout shown and kept in LOGDIR/output.txt."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from tvmbench.tuning.database import META, RECORDS, WORKLOADS

    argv = sys.argv[1:] if argv is None else argv
    a = bennu_parser().parse_args(argv)
    logdir = Path(a.logdir)
    records = logdir / RECORDS
    count = len(records.read_text().splitlines()) if records.is_file() else 0
    logdir.mkdir(parents=True, exist_ok=True)
    with (logdir / "output.txt").open("a") as out:
        out.write(f"# models_onnx.py {' '.join(argv)}\n")
        for what, cmd in bennu_steps(argv, count):
            if what == "copy":  # the database's own files, not the folders beside them
                shutil.rmtree(cmd[2], ignore_errors=True)
                Path(cmd[2]).mkdir(parents=True)
                for name in (WORKLOADS, RECORDS, META):
                    if (Path(cmd[1]) / name).is_file():
                        shutil.copy2(Path(cmd[1]) / name, Path(cmd[2]) / name)
                continue
            out.write(f"$ tvmbench {' '.join(cmd)}\n")
            out.flush()
            proc = subprocess.Popen([sys.executable, "-m", "tvmbench.cli", *cmd], stdout=subprocess.PIPE, text=True,
                                    env={**os.environ, "COLUMNS": "200"})
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                out.write(line)
            if proc.wait() != 0:
                out.write(f"(exit status {proc.returncode})\n")
                return proc.returncode
    print(f"written to {logdir / 'output.txt'}")
    return 0
