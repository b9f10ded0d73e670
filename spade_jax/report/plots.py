"""The report's PNG panels: the learning curves (with a control run's, dashed, when there is one) and the
run's diagnostics (failures by gate, samples per role, loss, clipping, throughput, time per phase)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The quantities that say whether the run learns, one panel each: title -> metric names. A control run
# (the same run at learning rate 0) draws its curve of each name dashed, in the same colour.
KEY_PANELS: dict[str, tuple[str, ...]] = {
    "Held-out win rate (unhinted)": ("eval/win_rate",),
    "Rollout win rate": ("rollout/win_rate_no_hint", "rollout/win_rate_hint"),
    "Designer valid rate": ("design/valid_frac",),
    "Designer reward (mean)": ("design/reward_mean",),
    "Regret (mean)": ("env/regret_mean",),
    "Share of environments in the win-rate band": ("env/in_band_frac",),
}
# The paper's health measures (selfplay/health.py), drawn as key panels too: learnable share, diversity, collapse,
# regret and the blend's two terms (issue 48).
HEALTH_PANELS: dict[str, tuple[str, ...]] = {
    "Learnable share (unhinted win rate in [0.2, 0.8])": ("health/learnable_frac", "health/step_learnable_frac"),
    "Diversity (Vendi score of the programs)": ("health/vendi_round", "health/vendi_archive"),
    "Collapse: largest share of one class in the archive": ("health/archive_top_class_share",),
    "Collapse: longest run of one class in the archive": ("health/archive_longest_class_run",),
    "Regret: mean, spread, share negative": ("health/regret_mean", "health/regret_std", "health/regret_negative_frac"),
    "Designer blend, its two terms (means)": ("health/blend_regret_part", "health/blend_plateau_part"),
}
KEY_PANELS.update(HEALTH_PANELS)
# Diagnostics: title -> metric-name prefixes drawn in it (metrics are named "<group>/<name>").
PANELS: dict[str, tuple[str, ...]] = {
    "Designer failures by gate": ("design/failed_",),
    "Reward rule over every environment played (seeds too)": ("env/designer_reward_mean",),
    "Samples trained per role": ("train/agent_samples", "train/designer_samples"),
    "Share of samples without signal (dropped)": ("train/agent_dropped_frac", "train/designer_dropped_frac"),
    "Learner loss": ("train/loss", "train/pg_loss"),
    "Clipping and importance weights": ("train/clip_frac", "train/is_"),
    "Throughput (tokens/s)": ("perf/",),
    "Seconds per phase": ("time/",),
}
# Key panels of shares and rates: drawn on a fixed 0..1 axis so that runs and steps compare at a glance.
UNIT_PANELS = ("Held-out win rate (unhinted)", "Rollout win rate", "Designer valid rate",
               "Share of environments in the win-rate band", "Learnable share (unhinted win rate in [0.2, 0.8])",
               "Collapse: largest share of one class in the archive")  # fmt: skip
CONTROL_SUFFIX = " (control)"


@dataclass
class Line:
    """One drawn curve: its legend label, points, colour and whether it is the control's."""

    label: str
    steps: list[int]
    values: list[float]
    color: str
    control: bool = False


@dataclass
class Panel:
    """One PNG: its title, file and the curves drawn in it."""

    title: str
    path: Path
    lines: list[Line] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        return [line.label for line in self.lines]


def series(rows: list[dict[str, Any]]) -> dict[str, tuple[list[int], list[float]]]:
    """metric name -> (steps, values), skipping missing (None) values."""
    out: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for row in rows:
        for key, value in row.items():
            if key != "step" and value is not None:
                out[key][0].append(row["step"])
                out[key][1].append(value)
    return dict(out)


def _color(i: int) -> str:
    return f"C{i % 10}"


def key_lines(rows: list[dict[str, Any]], control_rows: list[dict[str, Any]] | None = None) -> dict[str, list[Line]]:
    """KEY_PANELS title -> the lines to draw (the run's, then the control's of the same metric), titles with
    no data in either run left out."""
    run, ctl = series(rows), series(control_rows or [])
    out = {}
    for title, names in KEY_PANELS.items():
        lines = []
        for i, name in enumerate(names):
            if name in run:
                lines.append(Line(name, *run[name], _color(i)))
            if control_rows is not None and name in ctl:
                lines.append(Line(name + CONTROL_SUFFIX, *ctl[name], _color(i), control=True))
        if lines:
            out[title] = lines
    return out


def diagnostic_lines(rows: list[dict[str, Any]]) -> dict[str, list[Line]]:
    """PANELS title -> the run's lines of every metric matching the panel's prefixes."""
    run = series(rows)
    out = {}
    for title, prefixes in PANELS.items():
        keys = sorted(k for k in run if k.startswith(prefixes))
        if keys:
            out[title] = [Line(k, *run[k], _color(i)) for i, k in enumerate(keys)]
    return out


def _draw(title: str, lines: list[Line], path: Path) -> Panel:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4), dpi=110)
    for line in lines:
        ax.plot(line.steps, line.values, color=line.color, marker="o", markersize=3,
                linewidth=1.2 if line.control else 1.6, linestyle="--" if line.control else "-",
                alpha=0.75 if line.control else 1.0, label=line.label)  # fmt: skip
    ax.set_title(title, fontsize=11)
    ax.set_xlabel("step")
    steps = sorted({s for line in lines for s in line.steps})
    if len(steps) <= 12:  # whole steps only: a short run's axis otherwise reads 0.5, 1.5, ...
        ax.set_xticks(steps)
    if title in UNIT_PANELS:
        ax.set_ylim(-0.04, 1.04)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Panel(title, path, lines)


def _slug(title: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in title.lower()).strip("_")[:40]


def plot_metrics(
    rows: list[dict[str, Any]], out_dir: Path, control_rows: list[dict[str, Any]] | None = None
) -> tuple[list[Panel], list[Panel]]:
    """Writes the key panels (with the control's curves when `control_rows` is given) and the diagnostic
    panels that have data as PNGs in `out_dir` (named so that sorting them puts the key panels first);
    returns (key panels, diagnostic panels)."""
    out_dir = Path(out_dir)
    key = [_draw(t, ls, out_dir / f"plot_1key_{i:02d}_{_slug(t)}.png") for i, (t, ls) in
           enumerate(key_lines(rows, control_rows).items())]  # fmt: skip
    diag = [_draw(t, ls, out_dir / f"plot_2diag_{i:02d}_{_slug(t)}.png") for i, (t, ls) in
            enumerate(diagnostic_lines(rows).items())]  # fmt: skip
    return key, diag
