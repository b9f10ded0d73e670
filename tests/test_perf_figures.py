"""A step's performance figures (infra/perf.py): tokens/s per phase, MFU from the device's peak, host memory."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from spade_jax.infra.perf import memory_figures, mfu, peak_flops, step_perf


@dataclass
class FakeDevice:  # only its kind is read: the peak of a TPU or GPU cannot be measured on this CPU machine
    device_kind: str

    def memory_stats(self):
        return {"bytes_in_use": 2e9, "peak_bytes_in_use": 3e9}


@pytest.mark.parametrize(
    "kind, tflops",
    [("TPU v5 lite", 197.0), ("TPU v5p", 459.0), ("TPU v6 lite", 918.0), ("TPU v4", 275.0),
     ("NVIDIA H100 80GB HBM3", 989.0), ("cpu", None)],
)  # fmt: skip
def test_peak_by_device_kind(kind: str, tflops: float | None, monkeypatch) -> None:
    monkeypatch.delenv("SPADE_JAX_PEAK_TFLOPS", raising=False)
    devices = [FakeDevice(kind)] * 4
    assert peak_flops(devices) == (None if tflops is None else pytest.approx(4 * tflops * 1e12))
    monkeypatch.setenv("SPADE_JAX_PEAK_TFLOPS", "10")
    assert peak_flops(devices) == pytest.approx(40e12)
    assert mfu(20e12, devices) == pytest.approx(0.5)


def test_step_perf_per_phase(monkeypatch) -> None:
    monkeypatch.setenv("SPADE_JAX_PEAK_TFLOPS", "1")  # one (CPU) device at 1 TFLOP/s: MFU is then defined here too
    row = {"time/selfplay": 4.0, "time/eval": 2.0, "perf/learner_tokens_per_s": 1000.0}
    out = step_perf(row, 1_000_000, selfplay_tokens=800, eval_tokens=100)
    assert out["perf/selfplay_tokens_per_s"] == 200.0 and out["perf/eval_tokens_per_s"] == 50.0
    assert out["perf/learner_tokens_per_s"] == 1000.0
    n_dev = len(__import__("jax").local_devices())
    assert out["perf/selfplay_mfu"] == pytest.approx(200 * 2e6 / (1e12 * n_dev))
    assert out["perf/learner_mfu"] == pytest.approx(1000 * 6e6 / (1e12 * n_dev))
    assert "perf/eval_tokens_per_s" not in step_perf({"time/selfplay": 1.0}, 10, selfplay_tokens=1)


def test_memory_figures() -> None:
    host = memory_figures(devices=[])
    assert 0 < host["mem/host_rss_gb"] <= host["mem/host_peak_gb"] + 0.05
    assert "mem/device_gb" not in host
    dev = memory_figures(devices=[FakeDevice("TPU v4")] * 2)
    assert dev["mem/device_gb"] == pytest.approx(4.0) and dev["mem/device_peak_gb"] == pytest.approx(6.0)
