#!/usr/bin/env bash
# Bennu's scripts/meta_benchmarks.sh: MetaSchedule tuning of the seed's model list, one database
# and output.txt per model under results/ms/meta_${ARCH}_${NAME}_${MODEL}_${trials}.
# Set NAME, ARCH (x86, cuda, arm) and trials below or in the environment; METHOD=dpmeta (with
# TOPK) refines the same folders afterwards. Runs from the repository root.
set -euo pipefail
NAME="${NAME:-test}"
ARCH="${ARCH:-x86}"
trials="${trials:-10000}"
METHOD="${METHOD:-meta}"
TOPK="${TOPK:-10}"
PYTHON="${PYTHON:-.venv/bin/python}"
MODELS="${MODELS:-alexnet vgg11 vgg13 vgg16 vgg19 resnet18 resnet34 resnet50 resnet101 resnet152 shufflenet_v2_x1_0 squeezenet1_1 mobilenet_v2 mnasnet1_0 inception_v3 googlenet densenet121 densenet161 densenet169 densenet201}"
cd "$(dirname "$0")/.."
for model in $MODELS; do
  logdir="results/ms/meta_${ARCH}_${NAME}_${model}_${trials}"
  echo "== ${model} -> ${logdir}"
  "$PYTHON" benchmarks/models_onnx.py -m "$METHOD" -a "$ARCH" -t "$trials" -k "$TOPK" -l "$logdir" -b "$model"
done
