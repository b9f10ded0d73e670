"""The learning benchmark's output (benchmarks/learning.py): the per-step table and the final figures in the
terminal, and the PNG (six per-step panels, the final evaluations with their intervals, the verdicts)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

STEP_METRICS = {  # short name -> metric of each run's metrics.jsonl
    "heldout_win": "eval/win_rate",
    "play_win": "rollout/win_rate_no_hint",  # the step's own plays (same environments and reset seeds at first)
    "valid_rate": "design/valid_frac",
    "designer_reward": "design/reward_mean",
    "regret": "env/regret_mean",
    "in_band": "env/in_band_frac",
}


def fmt(v: Any, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{100 * v:.1f}" if pct else f"{v:.3g}"


def designs_text(v: dict[str, Any], run: str) -> str:
    """A run's second-half valid rate with the counts behind it, e.g. "0.5 (1 of 2 designs)"."""
    valid, n = v.get("designs", {}).get(run, (0, 0))
    return f"{fmt(v[run])} ({valid} of {n} designs)"


def designer_line(d: dict[str, Any]) -> str:
    """The final designers in one line: valid counts, rates (%) with 95% intervals, the paired difference."""
    pct = lambda x, sign="": f"{100 * x['mean']:{sign}.1f} [{100 * x['lo']:.1f}, {100 * x['hi']:.1f}]"  # noqa: E731
    n, v = d["designs"], d["valid"]
    return (f"valid {v['trained']} of {n} vs {v['control']} of {n} (control): {pct(d['trained'])}% vs "
            f"{pct(d['control'])}%; difference {pct(d['difference'], '+')} points")  # fmt: skip


def print_tables(console: Any, rows: list[dict], fig: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="Per step: trained / control / difference")
    table.add_column("step", justify="right")
    for short in STEP_METRICS:
        table.add_column(short, justify="right")
    for r in rows:
        table.add_row(str(r["step"]), *(f"{fmt(r[f'{s}/trained'])} / {fmt(r[f'{s}/control'])} / "
                                        f"{fmt(r[f'{s}/difference'])}" for s in STEP_METRICS))  # fmt: skip
    console.print(table)

    summary = Table(title="Agent win rate (%), unhinted, final policies, 95% bootstrap intervals")
    for col in ("environments", "episodes/run", "trained", "control", "difference"):
        summary.add_column(col, justify="right" if col != "environments" else "left")
    for group, g in fig["heldout"].items():
        if group == "per_env":
            continue
        cell = lambda x: f"{fmt(x['mean'], True)} [{fmt(x['lo'], True)}, {fmt(x['hi'], True)}]"  # noqa: E731
        label = "trained-on (fresh seeds; not held out)" if group == "trained" else f"held-out: {group}"
        summary.add_row(label, str(g["episodes"]), cell(g["trained"]), cell(g["control"]), cell(g["difference"]))
    console.print(summary)
    v = fig["valid_rate_second_half"]
    ratio = "inf" if v["ratio_infinite"] else fmt(v["ratio"])
    console.print(f"designer valid rate, second half: trained {designs_text(v, 'trained')}, "
                  f"control {designs_text(v, 'control')}, ratio {ratio}")  # fmt: skip
    if fig.get("designer_eval"):
        console.print(f"final designers: {designer_line(fig['designer_eval'])}")
    moved = {k: r["param_max_abs_change"] for k, r in fig["runs"].items()}
    console.print(f"parameters moved (max |change| from the common start): {moved}")
    for name, t in fig["targets"].items():
        verdict = "[green]PASS[/green]" if t["passed"] else "[red]NOT REACHED[/red]"
        limit = f" ({t['limit']})" if t.get("limit") else ""
        console.print(f"{verdict}  {name}: target {t['target']}; measured {t['measured']}{limit}")


def plot(path: Path, rows: list[dict], fig: dict[str, Any]) -> Path:
    """Six panels (trained solid, control dashed in the same colour, their difference dotted grey; the final
    evaluation with its 95% intervals right of the last step) and the verdicts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    titles = {"heldout_win": "Held-out win rate (unhinted)", "play_win": "Win rate of the step's plays (unhinted)",
              "valid_rate": "Designer valid rate",
              "designer_reward": "Designer reward (mean)", "regret": "Regret (mean)",
              "in_band": "Share of environments in the win-rate band"}  # fmt: skip
    rates = ("heldout_win", "play_win", "valid_rate", "in_band")
    steps = fig["steps"]
    axes = plt.subplots(2, 4, figsize=(20, 7.5), dpi=100)[1].ravel()
    for i, (ax, (short, title)) in enumerate(zip(axes, titles.items())):
        for run, style in (("trained", "-"), ("control", "--"), ("difference", ":")):
            pts = [(r["step"], r[f"{short}/{run}"]) for r in rows if r[f"{short}/{run}"] is not None]
            if pts:
                ax.plot(*zip(*pts), style, color="#777" if run == "difference" else f"C{i}", marker="o",
                        markersize=3, linewidth=1.0 if run == "difference" else 1.6,
                        label="trained - control" if run == "difference" else run)  # fmt: skip
        final = {"heldout_win": fig["heldout"].get("all"), "valid_rate": fig.get("designer_eval")}.get(short)
        if final:  # the final policies' evaluation (held-out plays; designs from the same prompts)
            for run, x, face in (("trained", steps + 0.3, "C3"), ("control", steps + 0.55, "white")):
                m = final[run]
                ax.errorbar([x], [m["mean"]], yerr=[[m["mean"] - m["lo"]], [m["hi"] - m["mean"]]], fmt="s",
                            color="C3", mfc=face, capsize=4, label=f"final eval, {run} (95% CI)")  # fmt: skip
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("step")
        ax.set_xlim(0.5, steps + 0.8)
        if steps <= 16:
            ax.set_xticks(range(1, steps + 1))
        if short in rates:
            low = min([0.0] + [r[f"{short}/difference"] for r in rows if r[f"{short}/difference"] is not None])
            ax.set_ylim(min(-0.04, low - 0.04), 1.04)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="#888")
    text = []
    for group, title in (("all", "Final held-out win rate (%, 95% CI)"),
                         ("trained", "Trained-on envs, fresh seeds (%, 95% CI)")):  # fmt: skip
        g = fig["heldout"].get(group)
        if not g:
            continue
        text += [title] if not text else ["", title]
        for run in ("trained", "control", "difference"):
            sign = "+" if run == "difference" else ""
            m = {k: format(100 * g[run][k], f"{sign}.1f") for k in ("mean", "lo", "hi")}
            text.append(f"  {run:<10} {m['mean']:>6} [{m['lo']}, {m['hi']}]")
    v = fig["valid_rate_second_half"]
    ratio = "inf" if v["ratio_infinite"] else fmt(v["ratio"])
    text += ["", "Designer valid rate, 2nd half", f"  trained {designs_text(v, 'trained')}",
             f"  control {designs_text(v, 'control')}", f"  ratio {ratio}", ""]  # fmt: skip
    d = fig.get("designer_eval")
    if d:
        n = d["designs"]
        text += ["Final designers (same prompts, seeds)", f"  trained {d['valid']['trained']} of {n} valid",
                 f"  control {d['valid']['control']} of {n} valid", ""]  # fmt: skip
    text += [f"{k}: {'PASS' if t['passed'] else 'NOT REACHED'}" for k, t in fig["targets"].items()]
    for ax in axes[len(titles) :]:
        ax.axis("off")
    axes[-1].text(0.02, 0.98, "\n".join(text), va="top", fontsize=10, family="monospace")
    plt.tight_layout()
    plt.savefig(path)
    plt.close("all")
    return path
