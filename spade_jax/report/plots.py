"""The report's plots: the learning curves (with a control run's, dashed, when there is one) and the run's
diagnostics (failures by gate, samples per role, loss, clipping, throughput, utilisation, memory, time per phase).

Made to read the same at 4 steps and at 400: every panel spans the whole run's steps (a quantity measured once
shows where in the run it was), points carry markers while there are few of them, the last value of each curve is
written beside it, and a quantity with a natural range is drawn on it (win rates and shares on [0, 1], regret on
[-1, 1], the designer's reward on [-0.5, 1]) instead of an axis zoomed onto its noise. One unit per panel:
tokens/s, shares (utilisation, MFU), gigabytes and seconds each get their own. Failures by gate are a bar chart of
the run's totals. Each panel is a PNG (written to the run directory, and embedded in report.html as a data URI).
"""

from __future__ import annotations

import base64
import io
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
# Diagnostics: title -> metric-name prefixes drawn in it (metrics are named "<group>/<name>"); a name matching two
# panels goes to the first. Bar panels draw each metric's total over the run.
PANELS: dict[str, tuple[str, ...]] = {
    "Designer failures by gate (run total)": ("design/failed_",),
    "Reward rule over every environment played (seeds too)": ("env/designer_reward_mean",),
    "Samples trained per role": ("train/agent_samples", "train/designer_samples"),
    "Share of samples without signal (dropped)": ("train/agent_dropped_frac", "train/designer_dropped_frac"),
    "Learner loss": ("train/loss", "train/pg_loss", "train/kl", "train/entropy"),
    "Share of tokens clipped": ("train/clip_frac",),
    "Importance weights (sampler to learner)": ("train/is_",),
    "Throughput (tokens/s)": ("perf/selfplay_tokens_per_s", "perf/learner_tokens_per_s", "perf/eval_tokens_per_s"),
    "Utilisation (share)": ("perf/slot_utilisation", "perf/selfplay_mfu", "perf/learner_mfu", "perf/eval_mfu"),
    "Memory (GB)": ("mem/",),
    "Seconds per phase": ("time/",),
}
BAR_PANELS = ("Designer failures by gate (run total)",)
# Fixed y ranges: the quantity's whole natural range.
Y_RANGES: dict[str, tuple[float, float]] = {
    "Held-out win rate (unhinted)": (0.0, 1.0),
    "Rollout win rate": (0.0, 1.0),
    "Designer valid rate": (0.0, 1.0),
    "Designer reward (mean)": (-0.5, 1.0),
    "Regret (mean)": (-1.0, 1.0),
    "Share of environments in the win-rate band": (0.0, 1.0),
    "Share of samples without signal (dropped)": (0.0, 1.0),
    "Share of tokens clipped": (0.0, 1.0),
    "Utilisation (share)": (0.0, 1.0),
    "Learnable share (unhinted win rate in [0.2, 0.8])": (0.0, 1.0),
    "Collapse: largest share of one class in the archive": (0.0, 1.0),
}
UNIT_PANELS = tuple(t for t, r in Y_RANGES.items() if r == (0.0, 1.0))  # shares and rates
MARKERS_UP_TO = 60  # points per curve drawn with markers; more read better as a line
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
    """One PNG: its title, file, the curves drawn in it, and the PNG's bytes (for the page's data URI)."""

    title: str
    path: Path
    lines: list[Line] = field(default_factory=list)
    png: bytes = b""

    @property
    def labels(self) -> list[str]:
        return [line.label for line in self.lines]

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


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


def _merge_equal(lines: list[Line]) -> list[Line]:
    """Curves equal at every step drawn once, labelled with every name (train/loss = train/pg_loss when the loss
    has no KL or entropy term): two curves on top of each other read as one and hide a name."""
    out: list[Line] = []

    def equal(a: Line, b: Line) -> bool:
        return a.steps == b.steps and all(abs(x - y) <= 1e-12 * max(1.0, abs(x)) for x, y in zip(a.values, b.values))

    for line in lines:
        same = next((o for o in out if equal(o, line)), None)
        if same is None:
            out.append(Line(line.label, line.steps, line.values, line.color, line.control))
        else:
            same.label += f" = {line.label}"
    return out


def diagnostic_lines(rows: list[dict[str, Any]]) -> dict[str, list[Line]]:
    """PANELS title -> the run's lines of every metric matching the panel's prefixes (each metric in the first
    panel it matches; equal curves merged)."""
    run = series(rows)
    out, taken = {}, set()
    for title, prefixes in PANELS.items():
        keys = sorted(k for k in run if k.startswith(prefixes) and k not in taken)
        taken.update(keys)
        if keys:
            out[title] = _merge_equal([Line(k, *run[k], _color(i)) for i, k in enumerate(keys)])
    return out


def _span(rows: list[dict[str, Any]]) -> tuple[int, int]:
    steps = [r["step"] for r in rows if isinstance(r.get("step"), int)]
    return (min(steps), max(steps)) if steps else (0, 1)


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def _draw(title: str, lines: list[Line], path: Path, span: tuple[int, int]) -> Panel:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4), dpi=110)
    if title in BAR_PANELS:
        totals = sorted(((sum(line.values), line.label.rsplit("failed_", 1)[-1]) for line in lines), reverse=True)
        bars = ax.barh([name for _, name in totals][::-1], [t for t, _ in totals][::-1], color="C3")
        ax.bar_label(bars, fmt="%g", fontsize=8, padding=2)
        ax.set_xlabel(f"designs failed at the gate, steps {span[0]}-{span[1]}")
        ax.margins(x=0.15)
    else:
        for line in lines:
            marker = "o" if len(line.steps) <= MARKERS_UP_TO else None
            ax.plot(line.steps, line.values, color=line.color, marker=marker, markersize=4 if marker else 0,
                    linewidth=1.2 if line.control else 1.6, linestyle="--" if line.control else "-",
                    alpha=0.75 if line.control else 1.0, label=line.label)  # fmt: skip
            if line.steps and not line.control:  # the last value, written beside its point
                ax.annotate(_fmt(line.values[-1]), (line.steps[-1], line.values[-1]), textcoords="offset points",
                            xytext=(5, 3), fontsize=7, color=line.color)  # fmt: skip
        lo, hi = span
        ax.set_xlim(lo - 0.5 if hi - lo < 12 else lo, hi + 0.5 if hi - lo < 12 else hi + max(1, (hi - lo) // 25))
        ax.set_xlabel("step")
        if hi - lo < 12:  # whole steps only: a short run's axis otherwise reads 0.5, 1.5, ...
            ax.set_xticks(range(lo, hi + 1))
        if title in Y_RANGES:
            a, b = Y_RANGES[title]
            pad = 0.04 * (b - a)
            ax.set_ylim(a - pad, b + pad)
        elif all(v >= 0 for line in lines for v in line.values):  # counts, seconds, tokens/s, GB, Vendi: from zero
            top = max((v for line in lines for v in line.values), default=0.0)
            ax.set_ylim(0, top * 1.12 if top > 0 else 1.0)  # room above the highest point and its label
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    ax.set_title(title, fontsize=11)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    png = buf.getvalue()
    path.write_bytes(png)
    return Panel(title, path, lines, png)


def _slug(title: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in title.lower()).strip("_")[:40]


def plot_metrics(
    rows: list[dict[str, Any]], out_dir: Path, control_rows: list[dict[str, Any]] | None = None
) -> tuple[list[Panel], list[Panel]]:
    """Writes the key panels (with the control's curves when `control_rows` is given) and the diagnostic
    panels that have data as PNGs in `out_dir` (named so that sorting them puts the key panels first);
    returns (key panels, diagnostic panels)."""
    out_dir = Path(out_dir)
    for old in out_dir.glob("plot_*.png"):  # a panel that has no data this time must not linger from a past one
        old.unlink()
    span = _span(rows + (control_rows or []))
    key = [_draw(t, ls, out_dir / f"plot_1key_{i:02d}_{_slug(t)}.png", span) for i, (t, ls) in
           enumerate(key_lines(rows, control_rows).items())]  # fmt: skip
    diag = [_draw(t, ls, out_dir / f"plot_2diag_{i:02d}_{_slug(t)}.png", span) for i, (t, ls) in
            enumerate(diagnostic_lines(rows).items())]  # fmt: skip
    return key, diag
