"""benchmarks/device_check.py, the accelerator check, on the CPU with the tiny preset: it runs end to end, every
row decodes exactly the steps asked for (no stop, budget above them), and the figures it writes are positive and
finite. Its real use is on a device machine (`benchmarks/device_check.sh`); this keeps it from rotting here."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_device_check_runs_on_the_tiny_preset(tmp_path):
    spec = importlib.util.spec_from_file_location("device_check", ROOT / "benchmarks" / "device_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "check.json"
    argv = ["--models", "tiny", "--batches", "2,4", "--prompt", "16", "--decode-steps", "8", "--train-rows", "2",
            "--train-len", "32", "--train-micro", "1", "--train-steps", "1", "--out", str(out)]  # fmt: skip
    assert module.main(argv) == 0
    result = json.loads(out.read_text())
    assert [(r["batch"], r["tokens"]) for r in result["decode"]] == [(2, 16), (4, 32)]
    (learner,) = result["learner"]
    assert (learner["rows"], learner["length"]) == (2, 32)
    figures = [r[k] for r in result["decode"] for k in ("tokens_per_s", "prefill_tokens_per_s", "read_gb_per_s")]
    figures += [learner["tokens_per_s"], learner["mfu"]]
    assert all(math.isfinite(x) and x > 0 for x in figures)
