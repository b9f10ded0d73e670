#!/usr/bin/env bash
# One prepared accelerator check (issues 19, 46), under 8 minutes on one H100: decode tokens/s and HBM share at batch
# 64 and 256 (random-init Qwen3-1.7B / 4B / 8B, real configs, bfloat16; Qwen3-1.7B with both decode attentions),
# learner-step MFU and first-step compile seconds, and two self-play steps of SmolLM2-135M at the paper's batch
# shape, by benchmarks/device_check.py.
#
# Runs on the machine's own jax/flax. If our model does not build under its flax, the flax we test with
# (a wheel in .whl/, carried there) is installed into /tmp/site and used instead. Figures go to stdout and, when
# $OUT is set, to $OUT/device_check.json and $OUT/device_check.log. Extra arguments go to device_check.py.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-.}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.92
py="${PYTHON:-python3}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

smoke='from flax import nnx; from spade_jax.model.presets import load_preset; from spade_jax.model.transformer import Transformer
m = Transformer(load_preset("tiny").model, rngs=nnx.Rngs(0)); import flax, jax; print("flax", flax.__version__, "jax", jax.__version__, "ok")'
if ! "$py" -c "$smoke"; then
  echo "our model does not build under this flax; installing the carried wheel"
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/flax-*.whl \
    && export PYTHONPATH="/tmp/site:$PYTHONPATH" && "$py" -c "$smoke" || { echo "no usable flax"; exit 1; }
fi
# ---- issue 48: the designer curriculum on the accelerator (benchmarks/device_curriculum.py) ------------------------
# Its own part with its own time limit (< 8 min): DEVICE_CURRICULUM=1 runs it after the throughput check, =only runs it
# alone (one call's 10 minutes hold one of the two, not both). Its figures come back flat in $OUT (curriculum_*).
device_curriculum() {
  local work=/tmp/device_curriculum
  rm -rf "$work"
  timeout "${DEVICE_CURRICULUM_TIMEOUT:-470}" "$py" benchmarks/device_curriculum.py --out "$work" 2>&1 \
    | tee "$out/device_curriculum.log"
  for f in designer_learning.json designer_learning.png; do
    [ -f "$work/$f" ] && cp "$work/$f" "$out/curriculum_$f"
  done
  for run in trained control; do  # per-round rows survive a timeout: each step's row is written as it ends
    [ -f "$work/$run/metrics.jsonl" ] && cp "$work/$run/metrics.jsonl" "$out/curriculum_${run}_metrics.jsonl"
  done
  return 0
}
if [ "${DEVICE_CURRICULUM:-0}" = only ]; then device_curriculum; exit 0; fi
trap '[ "${DEVICE_CURRICULUM:-0}" = 1 ] && device_curriculum' EXIT
# ---- end of issue 48's part ---------------------------------------------------------------------------------------
timeout "${DEVICE_CHECK_TIMEOUT:-450}" "$py" benchmarks/device_check.py --out "$out/device_check.json" "$@" 2>&1 \
  | tee "$out/device_check.log"
