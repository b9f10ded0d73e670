"""The self-play loop on one process vs the same job on N processes (`launch.local`), same config, same machine.

Both jobs run the designer cycle of `--preset tiny` with more environments and plays than the preset (so a step
has work to divide) and the same total number of CPU devices. Per step it prints each job's self-play, learner
and step time and the busiest process's share of the episodes; at the end the means over the steps after the
first (which compiles) and their ratios (N processes / 1 process). On a machine with fewer cores than
processes the processes compete for the cores, so the time ratio there says little about a pod; the episode
shares say how the work divides.

    python benchmarks/multihost.py [--processes 2] [--steps 4] [--envs 4] [--plays 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _job(run_dir: Path, processes: int, devices: int, overrides: list[str]) -> float:
    """Runs one job to the end; returns its wall time (seconds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPADE_")}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
               SPADE_JAX_COMPILE_CACHE="off")  # fmt: skip
    job = ["--preset", "tiny", "--run-dir", str(run_dir), *overrides]
    if processes == 1:
        cmd = [sys.executable, "-m", "spade_jax.cli", "selfplay", *job]
    else:
        cmd = [sys.executable, "-m", "launch.local", "--processes", str(processes), "--cpu", "--port",
               str(_free_port()), *job]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"the {processes}-process job failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _share(row: dict) -> float:
    """The busiest process's share of the step's episodes (1.0 on one process)."""
    total = row.get("rollout/episodes", 0.0)
    return row.get("rollout/host_episodes_max", total) / total if total else 1.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--envs", type=int, default=4, help="environments per step (designs, else archive fills)")
    ap.add_argument("--plays", type=int, default=4, help="plays per condition")
    ap.add_argument("--out", default=None, help="keep the run directories here (default: a temp dir)")
    args = ap.parse_args(argv)
    n = args.processes
    overrides = [f"loop.steps={args.steps}", "loop.eval_plays=0", f"selfplay.envs_per_step={args.envs}",
                 f"selfplay.plays_per_condition={args.plays}", "selfplay.regen_interval=1"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        walls = {1: _job(out / "one", 1, n, overrides), n: _job(out / f"p{n}", n, 1, overrides)}
        rows = {1: _rows(out / "one"), n: _rows(out / f"p{n}")}

    print(f"{'step':>4} | {'1 process: play / learn / step s':>33} | {n} processes: play / learn / step s"
          f" | episodes of the busiest process | its / the idlest one's rollout s")  # fmt: skip
    for a, b in zip(rows[1], rows[n]):
        fa = [a.get(k, 0.0) for k in ("time/selfplay", "time/learner", "time/step")]
        fb = [b.get(k, 0.0) for k in ("time/selfplay", "time/learner", "time/step")]
        eps = f"{b.get('rollout/host_episodes_max', 0):.0f} of {b.get('rollout/episodes', 0):.0f}"
        walls = f"{b.get('rollout/host_wall_s_max', 0):.2f} / {b.get('rollout/host_wall_s_min', 0):.2f}"
        print(f"{a['step']:>4} | {fa[0]:9.2f} / {fa[1]:5.2f} / {fa[2]:6.2f}           |"
              f" {fb[0]:9.2f} / {fb[1]:5.2f} / {fb[2]:6.2f}               | {eps:>31} | {walls}")  # fmt: skip
    print(f"\nmeans over steps 2..{args.steps} (step 1 compiles):")
    for key in ("time/selfplay", "time/learner", "time/step"):
        m1 = statistics.mean(r.get(key, 0.0) for r in rows[1][1:])
        mn = statistics.mean(r.get(key, 0.0) for r in rows[n][1:])
        print(f"  {key:<14} 1 process {m1:7.2f} s   {n} processes {mn:7.2f} s   ratio {mn / max(m1, 1e-9):.2f}")
    share = statistics.mean(_share(r) for r in rows[n])
    print(f"  busiest process's share of the episodes: {share:.2f} (even division: {1 / n:.2f})")
    print(f"  job wall time: 1 process {walls[1]:.0f} s, {n} processes {walls[n]:.0f} s"
          f" (ratio {walls[n] / walls[1]:.2f}; {os.cpu_count()} cores on this machine)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
