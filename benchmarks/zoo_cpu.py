"""Issue 20's benchmark: the whole zoo against the best peer, at odd shapes and batch 8.

    .venv/bin/python benchmarks/zoo_cpu.py [--models a,b] [--quick] [--out-dir results/zoo_cpu]
                                          [--summary] [--min-time 1] [--max-time 4] [--rounds 1]
                                          [--lockstep] [--precision bf16]

Every zoo model through ``tvmbench compare`` with TVM (default schedules and the shipped
databases), ONNX Runtime, OpenVINO (f32) and PyTorch eager (the reference: every point's outputs
are checked against it). Points:

- the 20 CNNs at batch 1 and 8, at their default size (224, inception_v3 299) and at 160 and
  320 px (feature maps that are not multiples of the register tile);
- the 7 transformers at batch 1 and 8 (text models at seq 128, ViT at 224), and bert-base and
  gpt2 at seq 512, batch 1.

``--torchvision``: also every torchvision classifier outside the zoo (``torchvision:NAME``, the
models no rule was measured on), at batch 1 and 8 at their default size (``--quick``: batch 1);
``--torchvision video,segmentation,optical_flow,detection`` (or ``all``) takes those families'
models (the single-stage detectors: their networks);
``--models`` takes ``torchvision:NAME`` too. A framework that failed at a point is listed with its
error line.

``--odd``: one point per model at shapes no rule was measured on and no tile divides: batch 3,
CNNs (and torchvision's classifiers but ViT and MaxViT) at 193 px (feature maps of 97, 49, 25, 13
and 7), text models at seq 77, ViTs at their own size.

``--seq N``: only the six text models, at seq N and batch 1 (``--batch``: that batch); the full
sweep has only bert-base and gpt2 at seq 512.

``--precision bf16``: TVM and OpenVINO in bf16 (on a CPU with AVX-512 BF16), ONNX Runtime fp32
(it has no bf16 there: the best peer is then OpenVINO's bf16), outputs checked at bf16's tolerance.

``--quick``: batch 1 at the default size only (``--batch N``: batch N there). ``--rounds N``: each point measured in N rounds of
fresh workers, the frameworks' order alternating (one round's ratio moved by up to 7 % between
runs an hour apart on the shared Xeon host). ``--lockstep``: the frameworks of a point take turns
of a quarter second even in a single round (``measure/lockstep.py``), so a burst of interference
hits all of them instead of whichever was being timed (a single round without it put points of
the Zen 4 host off by up to 1.6x). Each model is one comparison document in
``--out-dir`` (``MODEL.json``), resumed when rerun, so the sweep can run in parts (``--models``)
and be summarised together (``--summary`` only summarises what is there). The summary prints per
point the best of ONNX Runtime and OpenVINO and TVM's ratio to it (> 1: TVM faster; as the result
states it: in lockstep the median ratio of adjacent turns, ``stats.turn_paired_ratio``, else the
ratio of medians), per model family the range, the issue's goals, and the points that miss them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

import tvmbench
from tvmbench.comparison import CompareConfig, GlobalSettings, ModelEntry
from tvmbench.models import ZOO
from tvmbench.models.zoo import TORCHVISION_PREFIX, TORCHVISION_TASKS, listed, two_stage

FRAMEWORKS = ["tvm", "onnxruntime", "openvino", "pytorch"]
PEERS = ("onnxruntime", "openvino")
SEQ_512 = ("bert-base-uncased", "gpt2")
ODD_BATCH, ODD_IMAGE, ODD_SEQ = 3, 193, 77


def torchvision_models(families: list[str]) -> list[str]:
    """Every torchvision model of ``families`` ("cnn" for the classifiers; "video",
    "segmentation", "optical_flow", "detection": the single-stage detectors) the zoo does not
    hold, as ``torchvision:NAME``."""
    return [f"{TORCHVISION_PREFIX}{n}" for family in families for n in listed(TORCHVISION_TASKS[family])
            if n not in ZOO and not (family == "detection" and two_stage(n))]


def odd_entry(name: str) -> ModelEntry:
    """The ``--odd`` point of one model: batch 3 at a size no register tile or band divides (a
    ViT's or MaxViT's own size: they take only sizes their patches divide)."""
    fixed = name.removeprefix(TORCHVISION_PREFIX).startswith(("vit_", "maxvit_"))
    if fixed or (name in ZOO and ZOO[name].family == "vision-transformer"):
        return ModelEntry(name=name, batch_size=[ODD_BATCH])
    if name.startswith(TORCHVISION_PREFIX) or ZOO[name].family == "cnn":
        return ModelEntry(name=name, batch_size=[ODD_BATCH], image_size=ODD_IMAGE)
    return ModelEntry(name=name, batch_size=[ODD_BATCH], seq_length=ODD_SEQ)


def entries(name: str, quick: bool, odd: bool = False, batch: int | None = None,
            seq: int | None = None) -> list[ModelEntry]:
    """The points of one model, as compare config entries (``batch``: that batch alone, at the
    default size, as ``quick`` is batch 1; ``seq``: a text model at that sequence length, at
    ``batch`` or 1; none for an image model)."""
    if odd:
        return [odd_entry(name)]
    if seq is not None:
        text = name in ZOO and ZOO[name].family not in ("cnn", "vision-transformer")
        return [ModelEntry(name=name, batch_size=[batch or 1], seq_length=seq)] if text else []
    quick = quick or batch is not None
    batches = [batch or 1] if quick else [1, 8]
    if name.startswith(TORCHVISION_PREFIX):  # its own default size (ViTs take no other)
        return [ModelEntry(name=name, batch_size=batches)]
    zoo = ZOO[name]
    if zoo.family == "cnn":
        sizes = [zoo.default_image_size] if quick else [zoo.default_image_size, 160, 320]
        return [ModelEntry(name=name, batch_size=batches, image_size=s) for s in sizes]
    if zoo.family == "vision-transformer":
        return [ModelEntry(name=name, batch_size=batches)]
    out = [ModelEntry(name=name, batch_size=batches, seq_length=128)]
    if not quick and name in SEQ_512:
        out.append(ModelEntry(name=name, batch_size=1, seq_length=512))
    return out


def measure(name: str, args: argparse.Namespace) -> None:
    out = Path(args.out_dir) / f"{name.replace('/', '_').replace(':', '_')}.json"
    config = CompareConfig(models=entries(name, args.quick, args.odd, args.batch, args.seq),
                           global_settings=GlobalSettings(target="llvm", rounds=args.rounds))
    t0 = time.monotonic()
    print(f"== {name}: {len(config.models)} entries -> {out}", flush=True)
    tvmbench.compare(config=config, frameworks=FRAMEWORKS, output=out, resume=True, min_time=args.min_time,
                     max_time=args.max_time, history=False, lockstep=True if args.lockstep else None,
                     precision=args.precision,
                     on_point=lambda i, n, p: print(f"   point {i}/{n}: b{p.batch_size} "
                                                    f"{p.image_size or p.seq_length or ''}", flush=True))
    print(f"   {name} took {time.monotonic() - t0:.0f} s", flush=True)


def _median(point: dict, fw: str) -> float | None:
    e = point.get("tvm_relax" if fw == "tvm" else fw) or {}
    return e.get("median_ms") if e.get("status") == "ok" else None


def _ratio(point: dict, peer: str) -> float | None:
    """TVM's speedup over ``peer`` as the result states it: from adjacent lockstep turns when the
    point was measured in lockstep (``results/build.py``), else the ratio of medians."""
    s = (point.get("tvm_speedups") or {}).get(peer) or {}
    if s.get("speedup"):
        return s["speedup"]
    tvm, other = _median(point, "tvm"), _median(point, peer)
    return other / tvm if tvm and other else None


def _compile_s(entry: dict) -> float | None:
    """TVM's compile time for a point, when it compiled (a library from the compile cache was not)."""
    compiled = entry.get("status") == "ok" and (entry.get("info") or {}).get("cache_hit") is False
    return (entry.get("phases_s") or {}).get("compile_s") if compiled else None


def _spread(row: dict) -> str:
    """How sure a point's ratio is: its 95 % interval within the point's process, and the two
    frameworks' coefficients of variation (a point behind at CV 0.3 is a point to measure again);
    for a ratio from lockstep turns, also the ratio of the two whole medians."""
    ci, cv = row["ci95"], {k: v for k, v in row["cv"].items() if v is not None}
    out = f" ({ci[0]:.2f}-{ci[1]:.2f} in its run" if ci else " ("
    out += (", " if ci else "") + "CV " + ", ".join(f"{fw} {v:.0%}" for fw, v in cv.items())
    if row["paired"] and row["medians_ratio"]:
        out += f"; ratio of the whole medians {row['medians_ratio']:.2f}"
    return out + ")"


def summarize(out_dir: Path) -> int:
    rows = []
    for path in sorted(out_dir.glob("*.json")):
        for p in json.loads(path.read_text()).get("points", []):
            tvm = _median(p, "tvm")
            # (in bf16 the peer in the same precision: ONNX Runtime ran fp32)
            bf16 = ((p.get("tvm_relax") or {}).get("info") or {}).get("precision") == "bf16"
            peers = {fw: _median(p, fw) for fw in (("openvino",) if bf16 else PEERS) if _median(p, fw)}
            ratios = {fw: _ratio(p, fw) for fw in peers}
            ratios = {fw: r for fw, r in ratios.items() if r}
            best = min(ratios, key=ratios.get) if ratios else None
            size = p.get("seq_length") and f"s{p['seq_length']}" or f"{p.get('image_size')}px"
            entry = p.get("tvm_relax") or {}
            acc = entry.get("accuracy") or {}
            rows.append({"model": p["model"], "type": p.get("model_type"), "point": f"b{p['batch_size']} {size}",
                         "tvm": tvm, "best": best, "peer_ms": peers.get(best), "pytorch": _median(p, "pytorch"),
                         "ratio": ratios.get(best), "matched": acc.get("passed"), "judged_by": acc.get("judged_by"),
                         "medians_ratio": peers[best] / tvm if tvm and best else None,
                         "ci95": ((p.get("tvm_speedups") or {}).get(best) or {}).get("ci95"),
                         "paired": (((p.get("tvm_speedups") or {}).get(best) or {}).get("basis") or "").startswith(
                             "lockstep turns"),
                         "cv": {fw: (p.get("tvm_relax" if fw == "tvm" else fw) or {}).get("cv") for fw in ("tvm", best)},
                         "compile_s": _compile_s(entry) if p["batch_size"] == 1 else None,
                         "warnings": (entry.get("info") or {}).get("warnings") or [],
                         "failed": "; ".join(f"{fw}: {(p.get(k) or {}).get('error', '')[:160]}"
                                             for fw, k in (("tvm", "tvm_relax"), *((f, f) for f in PEERS))
                                             if (p.get(k) or {}).get("status") not in (None, "ok"))})
    print(f"{'model':28} {'point':10} {'TVM ms':>9} {'best peer':>12} {'peer ms':>9} {'PyTorch':>9} {'ratio':>6} ok")
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
        print(f"{r['model']:28} {r['point']:10} {r['tvm'] or 0:9.2f} {r['best'] or '-':>12} {r['peer_ms'] or 0:9.2f} "
              f"{r['pytorch'] or 0:9.2f} {ratio:>6} {('yes*' if r['judged_by'] else 'yes') if r['matched'] else 'NO'}")
    families: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["ratio"]:
            families[r["type"]].append(r["ratio"])
    print("\nper family: TVM / best peer (min-max, geomean, points)")
    for fam, v in sorted(families.items()):
        print(f"  {fam:8} {min(v):.2f}-{max(v):.2f}  {math.exp(sum(map(math.log, v)) / len(v)):.2f}  {len(v)}")
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    if not ratios:
        return 1
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    ahead = sum(x >= 1.0 for x in ratios) / len(ratios)
    unmatched = [r for r in rows if not r["matched"]]
    paired = sum(1 for r in rows if r["ratio"] and r["paired"])
    print(f"\n{len(rows)} points, {len(ratios)} with TVM and a peer ({paired} of them from adjacent lockstep turns, "
          f"the rest from the ratio of medians)")
    print(f"goal: at or ahead of the best peer on >= 90 % of points: {ahead:.0%}")
    print(f"goal: no point below 0.8x: worst {min(ratios):.2f}")
    print(f"goal: geometric mean >= 1.1x: {geo:.2f}")
    print(f"goal: every point's outputs matched: {len(rows) - len(unmatched)} of {len(rows)}")
    compiled = [r for r in rows if r["compile_s"] is not None]
    if compiled:
        slowest = max(compiled, key=lambda r: r["compile_s"])
        print(f"goal: compile under 60 s at batch 1 (untuned, {len(compiled)} builds not from the cache): "
              f"slowest {slowest['compile_s']:.1f} s ({slowest['model']} {slowest['point']})")
    for r in sorted((r for r in rows if r["ratio"] and r["ratio"] < 1.0), key=lambda r: r["ratio"]):
        print(f"  behind: {r['model']} {r['point']} {r['ratio']:.2f}x of {r['best']}{_spread(r)}")
    for r in unmatched:
        print(f"  not matched: {r['model']} {r['point']}")
    for r in (r for r in rows if r["matched"] and r["judged_by"]):
        print(f"  yes*: {r['model']} {r['point']} matched as judged by {r['judged_by']} (its error, not the fixed bound)")
    for r in (r for r in rows if r["failed"]):
        print(f"  failed: {r['model']} {r['point']} {r['failed']}")
    for r in rows:  # (a kernel left to the fallback schedule, a bf16 one without its dot product)
        for w in r["warnings"]:
            print(f"  TVM build warning: {r['model']} {r['point']}: {w}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo names or torchvision:NAME (default: the whole zoo; "
                                         "with --torchvision, none)")
    parser.add_argument("--torchvision", nargs="?", const="cnn", metavar="FAMILIES",
                        help="also every torchvision classifier outside the zoo, at its default size; "
                             "with a comma-separated list of families (cnn, video, segmentation, "
                             "optical_flow, detection, or all), those families' models")
    parser.add_argument("--quick", action="store_true", help="batch 1 at the default size only")
    parser.add_argument("--batch", type=int, help="only this batch size, at the default size (as --quick at batch 1)")
    parser.add_argument("--seq", type=int, help="only the text models, at this sequence length (batch 1, or --batch)")
    parser.add_argument("--odd", action="store_true",
                        help="one point per model at odd shapes: batch 3, 193 px or seq 77")
    parser.add_argument("--out-dir", default="results/zoo_cpu")
    parser.add_argument("--summary", action="store_true", help="only summarise what --out-dir holds")
    parser.add_argument("--min-time", type=float, default=1.0)
    parser.add_argument("--max-time", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds per point in fresh worker processes, frameworks in alternating order "
                             "(as `tvmbench compare --rounds`): a burst of interference on a shared host "
                             "then hits every framework alike; N times the time")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                        help="bf16: TVM and OpenVINO in bf16, ONNX Runtime stays fp32")
    parser.add_argument("--lockstep", action="store_true",
                        help="a point's frameworks measure in alternating quarter-second turns even in one "
                             "round (default: only with --rounds > 1), so a burst hits them all alike")
    args = parser.parse_args()
    names = args.models.split(",") if args.models else ([] if args.torchvision else list(ZOO))
    if args.torchvision:
        families = list(TORCHVISION_TASKS) if args.torchvision == "all" else args.torchvision.split(",")
        if set(families) - set(TORCHVISION_TASKS):
            parser.error(f"--torchvision takes {', '.join(TORCHVISION_TASKS)} or all, not {args.torchvision}")
        names += torchvision_models(families)
    unknown = [n for n in names if n not in ZOO and not n.startswith(TORCHVISION_PREFIX)]
    if unknown:
        parser.error(f"not zoo models: {', '.join(unknown)}")
    if args.seq is not None:
        names = [n for n in names if entries(n, False, seq=args.seq)]
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    if not args.summary:
        t0 = time.monotonic()
        for name in names:
            measure(name, args)
        print(f"sweep took {time.monotonic() - t0:.0f} s", flush=True)
    return summarize(Path(args.out_dir))


if __name__ == "__main__":
    sys.exit(main())
