"""End-of-run report: PNG plots of the metrics and a small browsable `report.html`."""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path
from typing import Any

from spade_jax.metrics import read_metrics

# Panel title -> metric-name prefixes drawn in it (metrics are named "<group>/<name>").
PANELS: dict[str, tuple[str, ...]] = {
    "Generated environments (valid fraction, failures by gate)": ("design/valid_frac", "design/failed_"),
    "Agent win rate": ("rollout/win_rate", "eval/win_rate", "warmstart/valid_rate"),
    "Regret and designer reward": ("env/regret_mean", "env/designer_reward_mean"),
    "Samples trained per role": ("train/agent_samples", "train/designer_samples"),
    "Share of samples without signal (dropped)": ("train/agent_dropped_frac", "train/designer_dropped_frac"),
    "Learner loss": ("train/loss", "train/pg_loss", "warmstart/loss"),
    "Clipping and importance weights": ("train/clip_frac", "train/is_"),
    "Throughput (tokens/s)": ("perf/",),
    "Seconds per phase": ("time/",),
}


def _series(rows: list[dict[str, Any]]) -> dict[str, tuple[list[int], list[float]]]:
    out: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for row in rows:
        for key, value in row.items():
            if key != "step" and value is not None:
                out[key][0].append(row["step"])
                out[key][1].append(value)
    return dict(out)


def plot_metrics(rows: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Writes one PNG per panel that has data; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = _series(rows)
    paths = []
    for i, (title, prefixes) in enumerate(PANELS.items()):
        keys = sorted(k for k in series if k.startswith(prefixes) and not k.startswith("eval/win_rate_"))
        if not keys:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.4), dpi=110)
        for key in keys:
            steps, values = series[key]
            ax.plot(steps, values, marker="o", markersize=3, linewidth=1.4, label=key)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        path = out_dir / f"plot_{i}_{title.split()[0].lower()}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def _env_rows(envs: list[dict[str, Any]]) -> str:
    parts = []
    for env in envs:
        stats = ", ".join(
            f"{k}={env[k]:.3g}" if isinstance(env.get(k), float) else f"{k}={env[k]}"
            for k in ("kind", "skill", "win_rate_hint", "win_rate_nohint", "regret", "designer_reward", "plays", "step")
            if env.get(k) is not None
        )
        verdict = env.get("verdict") or ("valid" if env.get("valid") else "")
        parts.append(
            "<details><summary><b>{name}</b> &mdash; {verdict} <span class=s>{stats}</span></summary>"
            "<pre>{code}</pre></details>".format(
                name=html.escape(str(env.get("name") or env.get("env_id") or "environment")),
                verdict=html.escape(str(verdict)),
                stats=html.escape(stats),
                code=html.escape(str(env.get("code", ""))),
            )
        )
    return "\n".join(parts) or "<p>No environments recorded.</p>"


def write_report(
    run_dir: str | Path,
    *,
    envs: list[dict[str, Any]] = (),
    summary: dict[str, Any] | None = None,
    title: str = "spade-jax run",
) -> Path:
    """Renders `run_dir/report.html` from `metrics.jsonl`, the environment list and a summary table."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    plots = plot_metrics(rows, run_dir)
    last: dict[str, Any] = {}
    for row in rows:
        last.update({k: v for k, v in row.items() if v is not None})
    table = dict(summary or {})
    table.update({k: v for k, v in sorted(last.items()) if k not in table})
    cells = "\n".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(f'{v:.4g}' if isinstance(v, float) else str(v))}</td></tr>"
        for k, v in table.items()
    )
    images = "\n".join(f'<img src="{p.name}" alt="{p.stem}">' for p in plots)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}} img{{width:48%;margin:.5%;
border:1px solid #ddd}} table{{border-collapse:collapse}} td{{border-bottom:1px solid #eee;padding:2px 12px}}
pre{{background:#f6f8fa;padding:1em;overflow:auto;font-size:12px}} .s{{color:#666;font-size:90%}}</style></head>
<body><h1>{html.escape(title)}</h1><h2>Summary (last value of each metric)</h2><table>{cells}</table>
<h2>Plots</h2>{images or "<p>No metrics yet.</p>"}<h2>Environments</h2>{_env_rows(list(envs))}</body></html>"""
    path = run_dir / "report.html"
    path.write_text(page)
    return path
