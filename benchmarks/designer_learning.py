"""Does the designer learn to write environments at the agent's frontier? A paired experiment (issue 48 section 2):
the same run twice, as configured ("trained") and at learning rate 0 ("control"), with the agent frozen, then both
final designers writing the same designs, each placed by the same agent.

    python benchmarks/designer_learning.py --preset demo --rounds 3 --designs 8 --out runs/designer_learning
                                           [--eval-designs 24] [--eval-plays 8] [--band 0.2,0.8] learner.lr=1e-4
                                           warmstart.agent_episodes_per_seed=16 warmstart.epochs=3
                                           [--curriculum] [KEY=VALUE ...]

What the two runs are: the preset (its warm start runs once, in DIR/start, and both runs continue from it) with a
design round every step (`selfplay.regen_interval=1`, scored on the round's own plays: `designer_delay=0`), N
designs a round (`selfplay.envs_per_step`, one skill, so the round's designs are centred against each other), no
archive fill-ins, a family large enough for every parameter variant (`memory.max_param_variants`), and the agent
frozen: `selfplay.train_agent=false` (its plays are played and scored, never trained). Both roles share the weights,
so the designer's updates move the agent's play a little too; that is why the final designs are all placed by
one agent, the common start's. Only `learner.lr` differs between the runs (0 in the control); seeds are the same.

Per round, from each run's memory and metrics: the round's designs, the share valid, the share whose unhinted win
rate (the round's own plays) lies in the band (of all designs, an invalid one counting as outside), the designer's
reward, the Vendi score of its valid designs, the agent's win rate, and the goal length the designer chose (the
`GOAL` constant of a simon variant).

The parents stand still as the agent does: the archive starts with the seed's table variants spread over its
difficulty (`memory.seed_difficulty=spread`, the easiest first), each placed by the start agent before the first
prompt (`designer.place_parents`), and they are the only mutation parents (`designer.mutation_parents=seeds`), so
every round's prompts, and the final evaluation's, show the same measured parents. (Measured at 3 rounds without
this: mutations of mutations raised the goal length round by round in both runs, until the agent won none of the
designs and every design of a round earned the same reward: GRPO advantages zero, nothing to learn from.)
The start agent's frontier has to lie among the parents: after the demo's warm start (4 reference games, 2 passes)
it won simon's easiest game (goal 5) 6% of 32 plays, below the band, so hardly a design could land in it;
`make designer-learning` gives the warm start 16 games and 3 passes (62% at goal 5, 42% at goal 6, 24 plays each).
Note that an episode's turn cap bounds the games: simon needs GOAL - START + 1 turns, so the demo's 5 turns
cannot win a goal-9 game that starts at 4, whoever plays it.

At the end (--eval-designs N): an evaluation build holds the same parents, placed by the start agent
(--eval-plays unhinted plays). Each final designer (trained; control = the start)
writes N mutation designs from the same targets with the same sampling seeds (the self-play state rolled back after
each), every gate applied; each design is judged on its own against that archive (the gates' within-batch copy check
is off, so that design i's verdict does not depend on designs 0..i-1 and the two runs' designs pair up; their
diversity is reported apart). Every valid design is then played --eval-plays times, unhinted, by the start agent,
design i of both runs on the same reset seeds. Figures: the in-band share and the valid rate of each designer with
95% bootstrap intervals, and their paired differences (design i of both runs: same prompt, same seed).
Targets: in-band share >= 15 points above the control with the interval above 0; valid rate not lower (the
difference's interval reaches 0 or above).

--curriculum: the agent trains too (`selfplay.train_agent=true`); the figure to read is the goal length the designer
chooses per round against the agent's rising win rate (the final designers are measured as above, by the start
agent). benchmarks/device_curriculum.py runs it on an accelerator.

Writes DIR/designer_learning.json (every figure), DIR/designer_learning.png and DIR/trained/report.html (the
control's curves dashed). Run as a script, it keeps XLA's compiled programs on disk as `spade-jax selfplay` does.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's spade_jax, wherever it runs from
sys.path.insert(0, str(Path(__file__).resolve().parent))  # learning.py, beside this file

from learning import _interval, _load, _params, _runs, bootstrap_diff, bootstrap_mean  # noqa: E402

TARGET_IN_BAND_DIFF = 0.15
EVAL_STEP = 30_000  # the final evaluation's step in the streams (designer seeds, reset seeds): same for both runs
FAMILY = "simon_recall"  # the family whose goal length the curriculum figure reads
PARENTS = 4  # the start seed's table variants (the easiest first) that are every round's mutation parents
PARENT_PLAYS = 8  # unhinted plays that place each parent before the first round's prompts


def experiment_overrides(designs: int, rounds: int, curriculum: bool) -> list[str]:
    """The settings that turn a preset into the experiment (applied before the user's own KEY=VALUE)."""
    return [
        f"loop.steps={rounds}",
        "loop.eval_every=0",
        "selfplay.regen_interval=1",
        "selfplay.designer_delay=0",
        f"selfplay.envs_per_step={designs}",
        "selfplay.skills_per_regen=1",
        "selfplay.fill_from_archive=false",
        "selfplay.memory.max_param_variants=1000",
        # The parents stand still as the agent does: the start seed's table variants across its difficulty, each
        # placed by the start agent before the first prompt, the only parents of every round and of the final
        # evaluation (mutations of mutations drifted to games no one wins, which pay every design the same).
        "selfplay.memory.seed_difficulty=spread",
        f"selfplay.memory.seed_spread={PARENTS}",
        "selfplay.designer.mutation_share=1.0",
        "selfplay.designer.mutation_parents=seeds",
        f"selfplay.designer.place_parents={PARENT_PLAYS}",
        f"selfplay.train_agent={str(curriculum).lower()}",
    ]


# ------------------------------------------------------------------------------------------------- per round
def knob(code: str, name: str) -> float | None:
    """An UPPER_CASE numeric constant of a program (module or class level; the last one wins), None without one."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    value = None
    for body in [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]:
        for stmt in body:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id == name and isinstance(stmt.value, ast.Constant)
                    and type(stmt.value.value) in (int, float)):  # fmt: skip
                value = float(stmt.value.value)
    return value


def in_band(rate: float | None, band: tuple[float, float]) -> bool:
    return rate is not None and band[0] <= rate <= band[1]


def round_rows(records: list[Any], metrics: list[dict], band: tuple[float, float]) -> list[dict[str, Any]]:
    """Per design round (step): designs, valid, in band (of all designs), the designer's reward, diversity, the
    agent's unhinted win rate and the goal length chosen. `records`: the run's memory rows; `metrics`: its rows."""
    from spade_jax.selfplay.health import vendi_score

    by_step = {r["step"]: r for r in metrics}
    out = []
    for step in sorted({r.step for r in records if r.step >= 0 and r.origin in ("designer", "mutation")}):
        designs = [r for r in records if r.step == step and r.origin in ("designer", "mutation")]
        finals = _finals(designs)
        valid = [r for r in finals if r.verdict_valid]
        placed = [r for r in valid if r.win_rate_no_hint is not None]
        goals = [g for g in (knob(r.code, "GOAL") for r in valid) if g is not None]
        m = by_step.get(step + 1, {})  # metrics rows are numbered from 1 (step 0's row is the warm start)
        n = int(m.get("design/targets") or len(finals))  # targets: with resampling, several attempts make one design
        hits = sum(in_band(r.win_rate_no_hint, band) for r in placed)
        out.append({
            "round": step + 1, "designs": n, "valid": len(valid), "placed": len(placed), "in_band": hits,
            "valid_rate": len(valid) / n if n else None, "in_band_share": hits / n if n else None,
            "in_band_share_valid": hits / len(placed) if placed else None,
            "reward": m.get("design/reward_mean"), "agent_win": m.get("rollout/win_rate_no_hint"),
            "vendi": vendi_score([r.code for r in valid]), "goal": float(np.mean(goals)) if goals else None,
            "trained_designer": m.get("train/designer_samples"), "trained_agent": m.get("train/agent_samples"),
        })  # fmt: skip
    return out


def _finals(attempts: list[Any]) -> list[Any]:
    """One row per design target: the last attempt of each chain (a repair's parent_id is the attempt it repairs)."""
    repaired = {r.parent_id for r in attempts if r.parent_id}
    return [r for r in attempts if r.id not in repaired]


# -------------------------------------------------------------------------------------------- final evaluation
def place(parts: Any, sources: list[tuple[str, str, str]], plays: int) -> dict[str, float]:
    """Unhinted win rate of each (name, source, kind) over `plays` plays by the policy now in `parts`; reset seeds
    from the name, so the same name gets the same seeds in every call."""
    from spade_jax.envs.source import EnvSource

    if not sources:
        return {}
    envs = [EnvSource(name=n, source=s, kind=k, skill="") for n, s, k in sources]
    won = parts.selfplay.evaluate(envs, EVAL_STEP, plays)
    return {n: float(np.mean(won[n])) if won[n] else 0.0 for n, _, _ in sources}


def prepare_eval_archive(parts: Any, plays: int) -> list[dict[str, Any]]:
    """Places the evaluation build's parents (its archived seeds: the runs' parents) with the policy now in
    `parts` (the start); returns them with their win rates."""
    mem = parts.selfplay.memory
    parents = mem.archive()
    rates = place(parts, [(f"parent-{r.id}", r.code, r.kind) for r in parents], plays)
    out = []
    for r in parents:
        rate = rates[f"parent-{r.id}"]
        mem.update_stats(r.id, win_rate_no_hint=rate, regret=0.0, plays=plays)
        out.append({"id": r.id, "name": r.name, "win_rate": rate, "goal": knob(r.code, "GOAL")})
    return out


def write_designs(parts: Any, n: int) -> list[dict[str, Any]]:
    """n designs by the policy now in `parts`, from the build's own targets; each judged on its own against the
    archive (no within-batch copy check); the self-play state rolled back afterwards."""
    import hashlib

    sp = parts.selfplay
    state = sp.get_state()
    own = sp.designer._recheck_novelty
    sp.designer._recheck_novelty = lambda verdict: verdict  # design i's verdict must not depend on designs < i
    try:
        results = sp.design(EVAL_STEP, n)
    finally:
        sp.designer._recheck_novelty = own
        sp.set_state(state)
    rows = []
    for i, r in enumerate(results):
        first, last = r.attempts[0], r.attempts[-1]
        rows.append({"design": i, "valid": float(r.valid), "gate": "" if r.valid else last.verdict.gate,
                     "prompt": hashlib.sha256(str(first.prompt_ids).encode()).hexdigest()[:16],
                     "parent": r.mutation_of, "source": r.source or "", "kind": r.target.kind,
                     "goal": knob(r.source, "GOAL") if r.valid else None})  # fmt: skip
    return rows


def final_eval(cfg: Any, run_dirs: dict[str, Path], start: Path | None, eval_dir: Path, designs: int, plays: int,
               band: tuple[float, float]) -> dict[str, Any]:  # fmt: skip
    """Both final designers' designs (same prompts and seeds), all placed by the start agent."""
    from spade_jax.run.parts import build

    parts = build(cfg, eval_dir)
    try:
        if start is not None:
            _load(parts, start / "checkpoints")
        origin = _params(parts.learner)
        parents = prepare_eval_archive(parts, plays)
        out: dict[str, Any] = {"parents": parents, "runs": {}}
        for name, run_dir in run_dirs.items():
            t0 = time.perf_counter()
            step = _load(parts, run_dir / "checkpoints")
            moved = max(float(np.max(np.abs(a - b))) for a, b in zip(_params(parts.learner), origin))
            rows = write_designs(parts, designs)
            out["runs"][name] = {"checkpoint_step": step, "param_max_abs_change": moved, "designs": rows,
                                 "design_s": time.perf_counter() - t0}  # fmt: skip
        if start is not None:  # the start agent places every design (the control's params are the start's)
            _load(parts, start / "checkpoints")
        t0 = time.perf_counter()
        for r in out["runs"].values():
            valid = [d for d in r["designs"] if d["valid"]]
            rates = place(parts, [(f"design-{d['design']}", d["source"], d["kind"]) for d in valid], plays)
            for d in r["designs"]:
                d["win_rate"] = rates.get(f"design-{d['design']}")
                d["in_band"] = float(bool(d["valid"]) and in_band(d["win_rate"], band))
        out["place_s"] = time.perf_counter() - t0
        return out
    finally:
        parts.selfplay.close()
        parts.pool.close()


def design_figures(trained: list[dict], control: list[dict], n: int = 2000, seed: int = 0) -> dict[str, Any]:
    """In-band share and valid rate of each designer with 95% intervals, and the paired differences (design i of
    both runs had the same prompt and sampling seed); the diversity of each designer's valid designs."""
    from spade_jax.selfplay.health import vendi_score

    if not trained:
        return {}
    if [d["prompt"] for d in trained] != [d["prompt"] for d in control]:
        raise ValueError("the two runs' evaluation designs do not pair up (different prompts)")
    out: dict[str, Any] = {"designs": len(trained)}
    for key in ("in_band", "valid"):
        a, b = [d[key] for d in trained], [d[key] for d in control]
        out[key] = {"trained": _interval(bootstrap_mean(a, n, seed), count=int(sum(a))),
                    "control": _interval(bootstrap_mean(b, n, seed), count=int(sum(b))),
                    "difference": _interval(bootstrap_diff(a, b, n, seed, paired=True))}  # fmt: skip
    for run, rows in (("trained", trained), ("control", control)):
        valid = [d for d in rows if d["valid"]]
        placed = [d for d in valid if d.get("win_rate") is not None]
        out[f"{run}_in_band_of_valid"] = (sum(d["in_band"] for d in placed) / len(placed)) if placed else None
        out[f"{run}_vendi"] = vendi_score([d["source"] for d in valid])
        out[f"{run}_distinct"] = len({d["source"] for d in valid})
        goals = [d["goal"] for d in valid if d.get("goal") is not None]
        out[f"{run}_goal_mean"] = float(np.mean(goals)) if goals else None
        out[f"{run}_win_rate_mean"] = float(np.mean([d["win_rate"] for d in placed])) if placed else None
        out[f"{run}_refused_by"] = {
            g: sum(d["gate"] == g for d in rows) for g in {d["gate"] for d in rows if d["gate"]}
        }
    return out


def targets(fig: dict[str, Any]) -> dict[str, dict[str, Any]]:
    if not fig:
        return {}
    d, v = fig["in_band"]["difference"], fig["valid"]["difference"]
    reached = d["mean"] >= TARGET_IN_BAND_DIFF and d["lo"] > 0
    return {
        "in_band_diff": {"target": f">= {TARGET_IN_BAND_DIFF:.2f} with the 95% interval above 0",
                         "measured": d["mean"], "lo": d["lo"], "passed": reached},
        "valid_not_lower": {"target": "the difference's 95% interval reaches 0 or above", "measured": v["mean"],
                            "hi": v["hi"], "passed": v["hi"] >= 0},
    }  # fmt: skip


def curriculum_figures(rounds: list[dict]) -> dict[str, Any]:
    """How the goal length chosen moves with the agent's win rate: their correlation over the rounds and the
    first and last thirds' means of each."""
    pairs = [(r["agent_win"], r["goal"]) for r in rounds if r["agent_win"] is not None and r["goal"] is not None]
    if len(pairs) < 3:
        return {"rounds": len(pairs)}
    win, goal = (np.array(x, dtype=float) for x in zip(*pairs))
    third = max(1, len(pairs) // 3)
    corr = float(np.corrcoef(win, goal)[0, 1]) if win.std() > 0 and goal.std() > 0 else None
    return {"rounds": len(pairs), "corr_win_goal": corr,
            "win_first": float(win[:third].mean()), "win_last": float(win[-third:].mean()),
            "goal_first": float(goal[:third].mean()), "goal_last": float(goal[-third:].mean())}  # fmt: skip


# ---------------------------------------------------------------------------------------------------- output
ROUND_COLUMNS = ("valid_rate", "in_band_share", "reward", "vendi", "agent_win", "goal")


def fmt(v: Any, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{100 * v:.1f}" if pct else f"{v:.3g}"


def print_tables(console: Any, fig: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="Per round: trained / control (in-band: share of all the round's designs)")
    table.add_column("round", justify="right")
    for col in ("designs", *ROUND_COLUMNS):
        table.add_column(col, justify="right")
    rows = {run: {r["round"]: r for r in fig["rounds"][run]} for run in ("trained", "control")}
    for n in sorted(set(rows["trained"]) | set(rows["control"])):
        a, b = rows["trained"].get(n, {}), rows["control"].get(n, {})
        designs = f"{a.get('valid', '-')}/{a.get('designs', '-')} / {b.get('valid', '-')}/{b.get('designs', '-')}"
        table.add_row(str(n), designs, *(f"{fmt(a.get(c))} / {fmt(b.get(c))}" for c in ROUND_COLUMNS))
    console.print(table)
    d = fig.get("designer_eval")
    if d:
        final = Table(title=f"Final designers, {d['designs']} designs each (same prompts and seeds), placed by the "
                            f"start agent: %, 95% bootstrap intervals")  # fmt: skip
        for col in ("measure", "trained", "control", "difference (paired)"):
            final.add_column(col, justify="right" if col != "measure" else "left")
        cell = lambda x: f"{fmt(x['mean'], True)} [{fmt(x['lo'], True)}, {fmt(x['hi'], True)}]"  # noqa: E731
        for key, label in (("in_band", f"in band {fig['band']}"), ("valid", "valid")):
            g = d[key]
            final.add_row(f"{label} (count)", f"{cell(g['trained'])} ({g['trained']['count']})",
                          f"{cell(g['control'])} ({g['control']['count']})", cell(g["difference"]))  # fmt: skip
        console.print(final)
        console.print(f"in band among valid: trained {fmt(d['trained_in_band_of_valid'], True)}%, control "
                      f"{fmt(d['control_in_band_of_valid'], True)}%; distinct valid designs {d['trained_distinct']} vs "
                      f"{d['control_distinct']} (Vendi {fmt(d['trained_vendi'])} vs {fmt(d['control_vendi'])}); mean "
                      f"goal {fmt(d['trained_goal_mean'])} vs {fmt(d['control_goal_mean'])}; refused by "
                      f"{d['trained_refused_by']} vs {d['control_refused_by']}")  # fmt: skip
    moved = {k: r["param_max_abs_change"] for k, r in fig.get("runs", {}).items()}
    console.print(f"parameters moved (max |change| from the common start): {moved}")
    if fig.get("curriculum"):
        console.print(f"curriculum (goal length vs agent win rate per round): {fig['curriculum']}")
    for name, t in fig.get("targets", {}).items():
        verdict = "[green]PASS[/green]" if t["passed"] else "[red]NOT REACHED[/red]"
        console.print(f"{verdict}  {name}: target {t['target']}; measured {fmt(t['measured'])}")


def plot(path: Path, fig: dict[str, Any]) -> Path:
    """Six per-round panels (trained solid, control dashed), the final designers with their intervals, verdicts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    titles = {"in_band_share": f"Share of the round's designs in the band {fig['band']}", "valid_rate": "Valid rate",
              "reward": "Designer reward (mean)", "vendi": "Diversity of valid designs (Vendi)",
              "agent_win": "Agent win rate on the round's designs (unhinted)",
              "goal": "Goal length chosen (GOAL, mean of valid)"}  # fmt: skip
    axes = plt.subplots(2, 4, figsize=(21, 8), dpi=100)[1].ravel()
    rounds = max([r["round"] for rows in fig["rounds"].values() for r in rows] or [1])
    final = fig.get("designer_eval") or {}
    for i, (ax, (key, title)) in enumerate(zip(axes, titles.items())):
        for run, style in (("trained", "-"), ("control", "--")):
            pts = [(r["round"], r[key]) for r in fig["rounds"][run] if r.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), style, color=f"C{i}", marker="o", markersize=3, label=run)
        if key in ("in_band_share", "valid_rate") and final:
            g = final["in_band" if key == "in_band_share" else "valid"]
            for run, x, face in (("trained", rounds + 0.6, "C3"), ("control", rounds + 1.1, "white")):
                m = g[run]
                ax.errorbar([x], [m["mean"]], yerr=[[m["mean"] - m["lo"]], [m["hi"] - m["mean"]]], fmt="s", color="C3",
                            mfc=face, capsize=4, label=f"final designer, {run} (95% CI)")  # fmt: skip
        if key in ("in_band_share", "valid_rate", "agent_win"):
            ax.set_ylim(-0.04, 1.04)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("design round")
        ax.set_xlim(0.5, rounds + 1.4)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes, color="#888")
    ax = axes[6]
    if final:
        labels, keys = ["in band", "valid"], ["in_band", "valid"]
        for j, key in enumerate(keys):
            m = final[key]["difference"]
            ax.errorbar([j], [m["mean"]], yerr=[[m["mean"] - m["lo"]], [m["hi"] - m["mean"]]], fmt="o", color="C3",
                        capsize=6)  # fmt: skip
        ax.axhline(0, color="#777", linewidth=1)
        ax.axhline(TARGET_IN_BAND_DIFF, color="C2", linestyle=":", linewidth=1, label="in-band target (+0.15)")
        ax.set_xticks(range(len(labels)), labels)
        ax.set_xlim(-0.6, len(labels) - 0.4)
        ax.set_ylim(-1.04, 1.04)
        ax.legend(fontsize=7)
    ax.set_title("Final designers: trained - control (paired, 95% CI)", fontsize=10)
    ax.grid(alpha=0.3)
    text = [f"{fig['preset']}: {fig['rounds_n']} rounds x {fig['designs_per_round']} designs",
            f"agent {'trains (curriculum)' if fig['curriculum_mode'] else 'frozen'}", ""]  # fmt: skip
    if final:
        for key, label in (("in_band", "In band"), ("valid", "Valid")):
            text.append(f"{label} (%, {final['designs']} designs)")
            for run in ("trained", "control", "difference"):
                m = {k: format(100 * final[key][run][k], "+.1f" if run == "difference" else ".1f")
                     for k in ("mean", "lo", "hi")}  # fmt: skip
                text.append(f"  {run:<10} {m['mean']:>6} [{m['lo']}, {m['hi']}]")
        text.append("")
    text += [f"{k}: {'PASS' if t['passed'] else 'NOT REACHED'}" for k, t in fig.get("targets", {}).items()]
    axes[7].axis("off")
    axes[7].text(0.02, 0.98, "\n".join(text), va="top", fontsize=10, family="monospace")
    plt.tight_layout()
    plt.savefig(path)
    plt.close("all")
    return path


# ------------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--rounds", type=int, default=4, help="design rounds (one a step; 4 fit 2 hours on 2 cores)")
    ap.add_argument("--designs", type=int, default=8, help="designs a round")
    ap.add_argument("--out", required=True, help="output directory (start/, trained/, control/, eval/, ...)")
    ap.add_argument("--eval-designs", type=int, default=24, help="designs each final designer writes (0: none)")
    ap.add_argument("--eval-plays", type=int, default=8, help="unhinted plays that place each evaluation design")
    ap.add_argument("--band", default="0.2,0.8", help="the win-rate band (lo,hi); default the paper's learnable band")
    ap.add_argument("--curriculum", action="store_true", help="the agent trains too (the curriculum experiment)")
    ap.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples")
    ap.add_argument("--resume", action="store_true", help="go on with an interrupted experiment in --out")
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. learner.lr=2e-5")
    args = ap.parse_args(argv)
    try:
        lo, hi = (float(x) for x in args.band.split(","))
    except ValueError:
        ap.error(f"--band {args.band!r}: expected two numbers lo,hi")
    if not 0 <= lo <= hi <= 1:
        ap.error(f"--band {args.band!r}: expected 0 <= lo <= hi <= 1")
    if args.rounds < 1 or args.designs < 2:
        ap.error("--rounds must be >= 1 and --designs >= 2 (a round's designs are centred against each other)")

    import logging

    from rich.console import Console

    from spade_jax.config.overrides import apply_overrides
    from spade_jax.config.run import load_run_config
    from spade_jax.report import write_report
    from spade_jax.report.envs import report_envs
    from spade_jax.rundir.metrics import read_metrics
    from spade_jax.selfplay.memory import Memory

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    console = Console(width=170)
    t_all = time.perf_counter()
    overrides = experiment_overrides(args.designs, args.rounds, args.curriculum) + list(args.overrides)
    cfg = load_run_config(args.preset, overrides)  # a bad key or value: one line, before anything starts
    control_cfg = apply_overrides(cfg, ["learner.lr=0"])
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    band = (lo, hi)

    dirs, start, walls = _runs(cfg, control_cfg, out, console, resume=args.resume)
    rounds = {}
    for name, d in dirs.items():
        mem = Memory(d / "memory.sqlite")
        try:
            rounds[name] = round_rows(mem.attempts(), read_metrics(d / "metrics.jsonl"), band)
        finally:
            mem.close()
    evals: dict[str, Any] = {"runs": {}}
    if args.eval_designs > 0:
        console.rule("final designers")
        t0 = time.perf_counter()
        evals = final_eval(cfg, dirs, start, out / "eval", args.eval_designs, args.eval_plays, band)
        walls["final_eval_s"] = time.perf_counter() - t0
    designer = (design_figures(evals["runs"]["trained"]["designs"], evals["runs"]["control"]["designs"],
                               args.bootstrap) if evals["runs"] else {})  # fmt: skip
    walls["total_s"] = time.perf_counter() - t_all
    fig = {
        "preset": args.preset, "rounds_n": args.rounds, "designs_per_round": args.designs, "band": list(band),
        "curriculum_mode": args.curriculum, "overrides": overrides, "lr": {"trained": cfg.learner.lr, "control": 0.0},
        "eval": {"designs": args.eval_designs, "plays": args.eval_plays, "bootstrap_resamples": args.bootstrap,
                 "parents": evals.get("parents", [])},
        "rounds": rounds, "runs": evals["runs"], "designer_eval": designer, "targets": targets(designer),
        "curriculum": {run: curriculum_figures(rows) for run, rows in rounds.items()} if args.curriculum else None,
        "warm_start_dir": str(start) if start else None, "wall": walls,
    }  # fmt: skip
    (out / "designer_learning.json").write_text(json.dumps(fig, indent=1))
    plot(out / "designer_learning.png", fig)
    print_tables(console, fig)

    mem = Memory(dirs["trained"] / "memory.sqlite")
    env_rows = report_envs([dataclasses.asdict(r) for r in mem.attempts()])
    mem.close()
    summary = {"designer learning: rounds x designs": f"{args.rounds} x {args.designs}"}
    if designer:
        for key in ("in_band", "valid"):
            g = designer[key]
            summary[f"designer learning: final {key}, trained / control / difference"] = (
                f"{fmt(g['trained']['mean'])} / {fmt(g['control']['mean'])} / {fmt(g['difference']['mean'])} "
                f"[{fmt(g['difference']['lo'])}, {fmt(g['difference']['hi'])}]"
            )
    title = f"spade-jax designer learning: {args.preset}, {args.rounds} rounds x {args.designs} designs (vs lr 0)"
    report = write_report(dirs["trained"], envs=env_rows, summary=summary, control=dirs["control"], title=title)
    console.print(f"wrote {out / 'designer_learning.json'}, {out / 'designer_learning.png'}, {report} "
                  f"(total {walls['total_s']:.0f} s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    from spade_jax.cli.train_cmds import compile_cache

    compile_cache()  # as `spade-jax selfplay` does: after `make demo`, the same programs load from disk
    sys.exit(main())
