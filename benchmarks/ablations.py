"""The SPADE paper's ablations side by side: the same run as configured ("base") and with each chosen ablation
(`ablation=NAME`, config/ablations.py), then the paper's health measures of each (selfplay/health.py).

    python benchmarks/ablations.py --preset demo --steps 4 --out runs/ablations \\
        --ablations no_corpus,no_designer_training [KEY=VALUE ...]

KEY=VALUE overrides apply to every run (the base included), the ablation's own settings after them. A preset with
a warm start runs it once, as the base configures it, in DIR/start, and every run continues from that checkpoint
(the paper's ablations start from the same model; no ablation here changes what the warm start trains on). An
ablation that leaves the base's settings as they are (no_corpus on a preset without a corpus, say) is not run
again: it is reported as the base's run, and said so.

Per run, from its metrics.jsonl: each measure's last value and its mean over the steps that logged it (learnable
share of the scored environments and of the step's plays, the share in the run's configured band, the valid rate,
Vendi of the round's designs and of the archive, the archive's largest class share and longest class run, regret
mean, spread and negative share, the blend's two terms, the agent's unhinted win rate, the designer samples
trained). Writes DIR/ablations.json and DIR/ablations.png (one panel a measure, one curve a run); each run's
directory holds its own report.html.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's spade_jax, wherever it runs from

MEASURES = {  # short name -> metric of metrics.jsonl
    "learnable (scored)": "health/learnable_frac",
    "learnable (step plays)": "health/step_learnable_frac",
    "in configured band": "env/in_band_frac",
    "valid rate": "design/valid_frac",
    "Vendi, round": "health/vendi_round",
    "Vendi, archive": "health/vendi_archive",
    "top class share": "health/archive_top_class_share",
    "longest class run": "health/archive_longest_class_run",
    "regret mean": "health/regret_mean",
    "regret std": "health/regret_std",
    "regret < 0 share": "health/regret_negative_frac",
    "blend: regret part": "health/blend_regret_part",
    "blend: plateau part": "health/blend_plateau_part",
    "agent win (no hint)": "rollout/win_rate_no_hint",
    "designer trained": "train/designer_samples",
}


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per measure: its last logged value, its mean over the logged steps, and how many steps logged it (the
    designer samples trained are summed instead of averaged)."""
    out = {}
    for short, metric in MEASURES.items():
        values = [r[metric] for r in rows if r.get("step", 0) > 0 and r.get(metric) is not None]
        total = metric == "train/designer_samples"
        out[short] = {"last": values[-1] if values else None,
                      "mean": (float(np.sum(values)) if total else float(np.mean(values))) if values else None,
                      "steps": len(values)}  # fmt: skip
    return out


def configs(base: Any, names: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """{run name: config} with the base first, and {ablation: "base"} for those equal to the base in every setting
    but the recorded name (not run again)."""
    from spade_jax.config.overrides import apply_overrides, to_dict

    out, same = {"base": base}, {}
    plain = {k: v for k, v in to_dict(base).items() if k != "ablation"}
    for name in names:
        cfg = apply_overrides(base, [f"ablation={name}"])
        if {k: v for k, v in to_dict(cfg).items() if k != "ablation"} == plain:
            same[name] = "base"
        else:
            out[name] = cfg
    return out, same


def run_all(cfgs: dict[str, Any], out: Path, console: Any) -> tuple[dict[str, Path], dict[str, float]]:
    """Runs every config (after one shared warm start, when the base has one); returns the run dirs and walls."""
    from spade_jax.run.loop import run

    dirs = {name: out / name for name in cfgs}
    for d in (*dirs.values(), out / "start"):
        if d.exists():
            raise SystemExit(f"{d} exists: choose a fresh --out")
    base, walls = cfgs["base"], {}
    start = None
    if base.loop.warmstart:
        start = out / "start"
        t0 = time.perf_counter()
        run(dataclasses.replace(base, loop=dataclasses.replace(base.loop, steps=0)), start, console=console)
        walls["warmstart_s"] = time.perf_counter() - t0
        for d in dirs.values():
            shutil.copytree(start, d)
    for name, cfg in cfgs.items():
        console.rule(f"{name} ({cfg.ablation or 'as configured'})")
        t0 = time.perf_counter()
        run(cfg, dirs[name], resume=start is not None, console=console)
        walls[f"{name}_s"] = time.perf_counter() - t0
        gc.collect()
    return dirs, walls


def fmt(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}"


def print_table(console: Any, figures: dict[str, Any], same: dict[str, str]) -> None:
    from rich.table import Table

    runs = list(figures)
    table = Table(title="The paper's measures per run: last value / mean over the steps (designer trained: sum)")
    table.add_column("measure")
    for name in runs:
        table.add_column(name, justify="right")
    for short in MEASURES:
        table.add_row(short, *(f"{fmt(figures[r][short]['last'])} / {fmt(figures[r][short]['mean'])}" for r in runs))
    console.print(table)
    for name, as_ in same.items():
        console.print(f"{name}: the same settings as the {as_} run (nothing it turns off is on here): not run again")


def plot(path: Path, rows: dict[str, list[dict]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    axes = plt.subplots(3, 5, figsize=(24, 11), dpi=90)[1].ravel()
    last = max((r.get("step", 0) for rs in rows.values() for r in rs), default=1)
    for ax, (short, metric) in zip(axes, MEASURES.items()):
        for i, (name, rs) in enumerate(rows.items()):
            pts = [(r["step"], r[metric]) for r in rs if r.get("step", 0) > 0 and r.get(metric) is not None]
            if pts:  # a marker and width per run, so a run that equals another still shows under it
                ax.plot(*zip(*pts), "-" if name == "base" else "--", color=f"C{i}", marker="os^vD"[i % 5],
                        markersize=7 - 2 * min(i, 2), linewidth=2.4 - 0.7 * min(i, 2), label=name)  # fmt: skip
        ax.set_title(short, fontsize=10)
        ax.set_xlabel("step")
        ax.set_xlim(0.5, last + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="#888")
    plt.tight_layout()
    plt.savefig(path)
    plt.close("all")
    return path


def main(argv: list[str] | None = None) -> int:
    from spade_jax.config.ablations import ABLATIONS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--steps", type=int, default=None, help="loop.steps (default: the preset's)")
    ap.add_argument("--out", required=True, help="output directory (start/, base/, one folder per ablation)")
    ap.add_argument("--ablations", default="no_corpus,no_designer_training",
                    help=f"comma-separated, from: {', '.join(ABLATIONS)}")  # fmt: skip
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides for every run")
    args = ap.parse_args(argv)
    names = [n for n in args.ablations.split(",") if n]
    unknown = [n for n in names if n not in ABLATIONS]
    if unknown or not names:
        ap.error(f"--ablations {args.ablations!r}: expected names from {', '.join(ABLATIONS)}")

    import logging

    from rich.console import Console

    from spade_jax.config.run import load_run_config
    from spade_jax.rundir.metrics import read_metrics

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    console = Console(width=170)
    t_all = time.perf_counter()
    overrides = list(args.overrides) + ([f"loop.steps={args.steps}"] if args.steps is not None else [])
    base = load_run_config(args.preset, overrides)  # a bad key or value: one line, before anything starts
    cfgs, same = configs(base, names)
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    dirs, walls = run_all(cfgs, out, console)
    rows = {name: read_metrics(d / "metrics.jsonl") for name, d in dirs.items()}
    figures = {name: summarise(rs) for name, rs in rows.items()}
    figures.update({name: figures[as_] for name, as_ in same.items()})
    walls["total_s"] = time.perf_counter() - t_all
    result = {"preset": args.preset, "steps": base.loop.steps, "overrides": overrides, "ablations": names,
              "same_as": same, "measures": MEASURES, "figures": figures, "walls": walls,
              "dirs": {k: str(v) for k, v in dirs.items()}}  # fmt: skip
    (out / "ablations.json").write_text(json.dumps(result, indent=1))
    plot(out / "ablations.png", rows)
    print_table(console, figures, same)
    console.print(f"wrote {out / 'ablations.json'}, {out / 'ablations.png'} (total {walls['total_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    from spade_jax.cli.train_cmds import compile_cache

    compile_cache()
    sys.exit(main())
