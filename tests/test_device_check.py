"""benchmarks/device_check.py, the accelerator check, on the CPU (`--cpu-smoke`: the tiny preset everywhere, the
self-play steps on the tiny random model): it runs end to end, every row decodes exactly the steps asked for (no
stop, budget above them) with both decode attentions, and the figures it writes are positive and finite. Its real
use is on a device machine (`benchmarks/device_check.sh`); this keeps it from rotting here."""

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
    assert module.main(["--cpu-smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = [(r["attention"], r["batch"], r["tokens"]) for r in result["decode"]]
    assert rows == [("xla", 2, 16), ("xla", 4, 32), ("pallas", 2, 16), ("pallas", 4, 32)]
    assert [r["step"] for r in result["selfplay"]] == [1, 2]
    assert all(r["time/selfplay"] > 0 and r["time/learner"] > 0 for r in result["selfplay"])
    (learner,) = result["learner"]
    assert (learner["rows"], learner["length"]) == (2, 32)
    figures = [r[k] for r in result["decode"] for k in ("tokens_per_s", "prefill_tokens_per_s", "read_gb_per_s")]
    figures += [learner["tokens_per_s"], learner["mfu"]]
    assert all(math.isfinite(x) and x > 0 for x in figures)
