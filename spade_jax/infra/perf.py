"""A step's performance figures: memory of the host and the devices, and model FLOPs utilisation (MFU).

- `memory_figures()`: `mem/host_rss_gb` (resident now), `mem/host_peak_gb` (the process's peak so far), and where
  the backend reports them (GPU, TPU; not XLA:CPU) `mem/device_gb` and `mem/device_peak_gb` summed over this
  process's devices.
- `mfu(flops_per_s)`: achieved FLOPs over the devices' peak. Model FLOPs count the matrix products of the
  weights only (2 x parameters per token forward, 6 x for a training step's forward and backward; attention
  and the padding of rows are not counted), as MFU is usually defined. The peak of one device comes from
  `PEAK_TFLOPS` (bfloat16, dense, by device kind), or from SPADE_JAX_PEAK_TFLOPS for a kind not listed; on a
  CPU there is none and no MFU is reported.
Nothing here fails a run: a figure that cannot be read is left out.
"""

from __future__ import annotations

import os
import resource
import sys
from typing import Any

__all__ = ["PEAK_TFLOPS", "memory_figures", "mfu", "peak_flops", "step_perf"]

# Dense bfloat16 peak of one device, TFLOP/s, by (a prefix of) jax's `device_kind`, from the vendors' data sheets.
PEAK_TFLOPS: dict[str, float] = {
    "TPU v4": 275.0,
    "TPU v5 lite": 197.0,  # v5e
    "TPU v5e": 197.0,
    "TPU v5p": 459.0,
    "TPU v5": 459.0,
    "TPU v6 lite": 918.0,  # v6e (Trillium)
    "TPU v6e": 918.0,
    "NVIDIA H200": 989.0,
    "NVIDIA H100": 989.0,  # SXM; the PCIe card is 756
    "NVIDIA A100": 312.0,
    "NVIDIA L4": 121.0,
    "NVIDIA A10G": 125.0,
}
GB = 1e9


def _devices() -> list[Any]:
    import jax

    return list(jax.local_devices())


def peak_flops(devices: list[Any] | None = None) -> float | None:
    """The summed peak FLOP/s of this process's devices, or None when unknown (a CPU, a kind not listed)."""
    devices = _devices() if devices is None else devices
    if not devices:
        return None
    env = os.environ.get("SPADE_JAX_PEAK_TFLOPS")
    if env:
        return float(env) * 1e12 * len(devices)
    kind = str(getattr(devices[0], "device_kind", ""))
    for prefix in sorted(PEAK_TFLOPS, key=len, reverse=True):  # "TPU v5 lite" before "TPU v5"
        if kind.startswith(prefix):
            return PEAK_TFLOPS[prefix] * 1e12 * len(devices)
    return None


def mfu(flops_per_s: float, devices: list[Any] | None = None) -> float | None:
    """Achieved model FLOP/s over the devices' peak (None when the peak is unknown)."""
    peak = peak_flops(devices)
    return flops_per_s / peak if peak else None


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def memory_figures(devices: list[Any] | None = None) -> dict[str, float]:
    """Host memory (resident now, peak) and device memory (in use, peak) where the backend reports it."""
    out: dict[str, float] = {}
    rss = _rss_bytes()
    if rss is not None:
        out["mem/host_rss_gb"] = rss / GB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    out["mem/host_peak_gb"] = peak * (1 if sys.platform == "darwin" else 1024) / GB
    try:
        stats = [d.memory_stats() for d in (_devices() if devices is None else devices)]
    except Exception:  # a backend without the call
        stats = []
    stats = [s for s in stats if s]
    if stats:
        out["mem/device_gb"] = sum(s.get("bytes_in_use", 0) for s in stats) / GB
        out["mem/device_peak_gb"] = sum(s.get("peak_bytes_in_use", 0) for s in stats) / GB
    return out


def step_perf(row: dict[str, float], n_params: int, *, selfplay_tokens: int, eval_tokens: int = 0) -> dict[str, float]:
    """A step's throughput per phase and its MFU, from the step's row (its `time/*` seconds and the learner's
    `perf/learner_tokens_per_s`) and the tokens the sampler generated in the self-play and evaluation phases;
    then the memory figures. Sampling counts 2 x parameters per generated token, training 6 x per token trained."""
    out: dict[str, float] = {}
    rates = {
        "selfplay": (selfplay_tokens / row["time/selfplay"], 2) if row.get("time/selfplay") else None,
        "eval": (eval_tokens / row["time/eval"], 2) if row.get("time/eval") else None,
        "learner": (row["perf/learner_tokens_per_s"], 6) if row.get("perf/learner_tokens_per_s") else None,
    }
    for phase, rate in rates.items():
        if rate is None:
            continue
        tokens_per_s, flops_per_token = rate
        out[f"perf/{phase}_tokens_per_s"] = float(tokens_per_s)
        used = mfu(tokens_per_s * flops_per_token * n_params)
        if used is not None:
            out[f"perf/{phase}_mfu"] = used
    out.update(memory_figures())
    return out
