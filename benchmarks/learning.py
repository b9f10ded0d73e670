"""Does it learn? A paired experiment: the same run twice, as configured ("trained") and at learning rate 0
("control"), then both final policies on held-out environments (issue 17 section 3).

    python benchmarks/learning.py --preset demo --steps 8 --out runs/learning [--eval-variants 2]
                                  [--eval-plays 8] [--eval-family simon_recall --family-variants 4]
                                  [--trained-envs 4] [--eval-designs 8] [KEY=VALUE ...]

Both runs use the same config, seeds and environments; only `learner.lr` differs (0 in the control). A
preset with a warm start runs it once, in DIR/start, and both runs continue from that checkpoint: the control
keeps the warm start, it only takes no RL step. Each run has its own directory (DIR/trained, DIR/control).

Held-out agent win rate, at the end: the held-out seeds (`loop.held_out`: never trained on, out of the
memory) and the K easiest programmatic variants of each (envs/variants.py; the seeds alone may be out of a
small model's reach), and with --eval-family the easiest variants of trained-on families that neither run
played nor warm-started on (programs of the family the agent has not seen), M unhinted plays each, with the
same reset seeds for both runs, through the run's own
rollout engine (its rollout config, sandbox and sampler) with the run's final parameters. With
--trained-envs N, apart from those: up to N environments both runs trained on, on fresh reset seeds (is the
agent better at what it was given, before any transfer?); never part of the target. Per-episode
outcomes are kept, so the trained-minus-control difference gets a paired bootstrap 95% interval (2000
resamples, fixed seed). Per step, from each run's metrics.jsonl: held-out win rate (the loop's own
evaluation, `loop.eval_every`), designer valid rate, designer reward, regret and the share of environments
in the win-rate band (`env/in_band_frac`), for both runs and their difference.

Designer, at the end (--eval-designs N): each run's final policy writes N designs from the same prompts
(the evaluation build's own design targets: same parents, same sampling seeds; the self-play state is rolled
back after each run, so neither run's designs are the other's novelty archive), every gate applied. Its valid
rate gets a 95% interval and the paired difference one too: a run's own design rounds are few (two designs a
round in the demo), too few for the second-half rate alone to tell the runs apart.

Targets: final held-out win rate >= 10 points above the control with the interval above 0; designer valid
rate over the second half of the run >= 2x the control's. PASS / NOT REACHED is printed as measured.
Writes DIR/learning.json (every figure), DIR/learning.png, and DIR/trained/report.html with the control.
Run as a script, it keeps XLA's compiled programs on disk as `spade-jax selfplay` does (SPADE_JAX_COMPILE_CACHE).
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
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's spade_jax, wherever it runs from
sys.path.insert(0, str(Path(__file__).resolve().parent))  # learning_output, beside this file

from learning_output import STEP_METRICS, designer_line, fmt, plot, print_tables  # noqa: E402

TARGET_WIN_DIFF = 0.10
TARGET_VALID_RATIO = 2.0
HELD_OUT = ("seed", "variant", "family")  # the groups of "all" (the target); "trained" is reported apart
EVAL_STEP = 20_000  # the final evaluation's step in the held-out stream (streams.py): same seeds for both runs


# ------------------------------------------------------------------------------------------------- statistics
def bootstrap_mean(x, n: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(mean, lo, hi): the mean of `x` with a percentile bootstrap 95% interval."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return (math.nan, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n, x.size))].mean(axis=1)
    return (float(x.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5)))


def bootstrap_diff(a, b, n: int = 2000, seed: int = 0, *, paired: bool = True) -> tuple[float, float, float]:
    """(mean(a) - mean(b), lo, hi) with a percentile bootstrap 95% interval. `paired`: a[i] and b[i] are the
    same episode (environment and reset seed) in the two runs, resampled together; else independently."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size == 0 or b.size == 0:
        return (math.nan, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    if paired:
        if a.shape != b.shape:
            raise ValueError(f"paired bootstrap needs equal lengths, got {a.size} and {b.size}")
        d = a - b
        diffs = d[rng.integers(0, d.size, size=(n, d.size))].mean(axis=1)
    else:
        diffs = (a[rng.integers(0, a.size, size=(n, a.size))].mean(axis=1)
                 - b[rng.integers(0, b.size, size=(n, b.size))].mean(axis=1))  # fmt: skip
    mean = float(a.mean() - b.mean())
    return (mean, float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5)))


def _interval(t: tuple[float, float, float], **extra: Any) -> dict[str, Any]:
    return {"mean": t[0], "lo": t[1], "hi": t[2], **extra}


# --------------------------------------------------------------------------------------- held-out evaluation
def easiest_variants(seed: str, k: int) -> list[Any]:
    """The k easiest programmatic variants of `seed` (easiest first; none when it has no variant table)."""
    from spade_jax.envs.variants import PARAMS, make_variants

    if k <= 0 or seed not in PARAMS:
        return []
    every = make_variants(seed, 1_000_000, direction="easier")
    return sorted(every, key=lambda v: (v.difficulty, v.name))[:k]


def eval_envs(held_out: tuple[str, ...], k: int, family: tuple[str, ...] = (),
              played: dict[str, set[tuple]] | None = None, family_k: int = 4) -> list[dict[str, str]]:  # fmt: skip
    """The final evaluation's environments: each held-out seed, then its k easiest variants; then, for each
    trained-on `family` seed, its `family_k` easiest variants that neither run ever played (`played`: knob
    values per seed), so a family the agent trains on is measured on programs it has not seen."""
    from spade_jax.envs.seeds import list_seeds, load_seed_source
    from spade_jax.envs.variants import PARAMS, make_variants, seed_params

    kinds = {s.name: s.kind for s in list_seeds()}
    out = []
    for name in held_out:  # () with --no-heldout-seeds
        out.append({"env": name, "seed": name, "group": "seed", "kind": kinds[name], "source": load_seed_source(name)})
        for v in easiest_variants(name, k):
            out.append({"env": v.name, "seed": name, "group": "variant", "kind": kinds[name], "source": v.source})
    for name in family:
        if name not in PARAMS:
            raise SystemExit(f"--eval-family {name}: no variant table (envs/variants.py)")
        seen = (played or {}).get(name, set()) | {_knobs(seed_params(load_seed_source(name), name))}  # warm start
        fresh = [v for v in make_variants(name, 1_000_000, direction="any") if _knobs(v.params) not in seen]
        for v in sorted(fresh, key=lambda v: (v.difficulty, v.name))[:family_k]:
            out.append({"env": v.name, "seed": name, "group": "family", "kind": kinds[name], "source": v.source})
    return out


def _knobs(params: dict[str, int]) -> tuple:
    return tuple(sorted(params.items()))


def played_knobs(memories: list[Path], family: tuple[str, ...]) -> dict[str, set[tuple]]:
    """Knob values of every program of the `family` seeds that a run's memory holds (played or designed)."""
    from spade_jax.envs.variants import seed_params
    from spade_jax.selfplay.memory import Memory

    out: dict[str, set[tuple]] = {name: set() for name in family}
    for path in memories:
        mem = Memory(path)
        try:
            for record in mem.attempts():
                for name in family:
                    try:
                        out[name].add(_knobs(seed_params(record.code or "", name)))
                    except (ValueError, SyntaxError):
                        continue
        finally:
            mem.close()
    return out


def trained_on(memories: list[Path], k: int) -> list[dict[str, str]]:
    """Up to k environments that every run played (same program text), in the first run's order: the agent's
    own training environments, evaluated on fresh reset seeds to tell learning what it is given from transfer."""
    from spade_jax.selfplay.memory import Memory

    played: list[dict[str, dict[str, str]]] = []
    for path in memories:
        mem = Memory(path)
        try:
            played.append({r.code: {"env": f"trained-{r.id}", "seed": r.name or r.id, "group": "trained",
                                    "kind": r.kind, "source": r.code}
                           for r in mem.attempts() if r.plays > 0 and r.verdict_valid})  # fmt: skip
        finally:
            mem.close()
    if not played or k <= 0:
        return []
    return [e for code, e in played[0].items() if all(code in p for p in played[1:])][:k]


def play_eval(parts: Any, envs: list[dict[str, str]], plays: int) -> list[dict[str, Any]]:
    """Unhinted plays of every environment with the policy now in `parts`; one row per episode, in a fixed
    order (environment, play), so two runs' rows pair up (both play the run's held-out stream at EVAL_STEP)."""
    from spade_jax.envs.source import EnvSource

    sources = [EnvSource(name=e["env"], source=e["source"], kind=e["kind"], skill="") for e in envs]
    won = parts.selfplay.evaluate(sources, EVAL_STEP, plays)
    return [
        {"env": e["env"], "seed": e["seed"], "group": e["group"], "play": k, "won": float(won[e["env"]][k])}
        for e in envs
        for k in range(plays)
    ]


def design_eval(parts: Any, n: int) -> list[dict[str, Any]]:
    """n designs by the policy now in `parts`, one row each (valid, the gate that refused it, the prompt's
    hash), from the build's own design targets; the self-play state (memory, novelty archive, designer seeds)
    is rolled back afterwards, so every run designs from the same prompts with the same seeds."""
    import hashlib

    sp = parts.selfplay
    state = sp.get_state()
    try:
        results = sp.design(EVAL_STEP, n)
    finally:
        sp.set_state(state)
    rows = []
    for i, r in enumerate(results):
        first = r.attempts[0]  # max_resamples / max_repairs apply as configured; the prompt is the first's
        last = r.attempts[-1]
        rows.append({"design": i, "valid": float(r.valid), "gate": "" if r.valid else last.verdict.gate,
                     "prompt": hashlib.sha256(str(first.prompt_ids).encode()).hexdigest()[:16]})  # fmt: skip
    return rows


def _params(learner: Any) -> list[np.ndarray]:
    import jax

    return [np.array(x) for x in jax.tree.leaves(learner.get_state()["params"])]


def _load(parts: Any, ckpt_dir: Path) -> int:
    """Puts the latest checkpoint's parameters in `parts` (learner and sampler); returns its step."""
    from spade_jax.model.layer_stack import LayerRelayout
    from spade_jax.rundir.checkpoints import Checkpointer

    ckpt = Checkpointer(ckpt_dir, async_save=False, relayout=LayerRelayout())  # runs saved before layers stacked
    try:
        state = parts.learner.get_state()
        trees, meta = ckpt.restore(None, {k: v for k, v in state.items() if k != "step"})
    finally:
        ckpt.close()
    parts.learner.set_state({**trees, "step": meta["learner_step"]})
    parts.sampler.update_model(parts.learner.model)
    return int(meta["step"])


def final_eval(cfg: Any, run_dirs: dict[str, Path], start: Path | None, eval_dir: Path, envs: list[dict[str, str]],
               plays: int, designs: int = 0) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Each run's final policy on `envs` and, with `designs`, as designer (`design_eval`); one build of the
    run's parts, parameters swapped per run; and how far its parameters moved from where both runs started
    (the warm-start checkpoint, else the initial model)."""
    from spade_jax.run.parts import build

    parts = build(cfg, eval_dir)
    try:
        if start is not None:
            _load(parts, start / "checkpoints")
        origin = _params(parts.learner)
        out = {}
        for name, run_dir in run_dirs.items():
            t0 = time.perf_counter()
            step = _load(parts, run_dir / "checkpoints")
            moved = max(float(np.max(np.abs(a - b))) for a, b in zip(_params(parts.learner), origin))
            episodes = play_eval(parts, envs, plays)
            designed = design_eval(parts, designs) if designs > 0 else []
            out[name] = {"checkpoint_step": step, "param_max_abs_change": moved, "episodes": episodes,
                         "designs": designed, "eval_s": time.perf_counter() - t0}  # fmt: skip
        return out
    finally:
        parts.selfplay.close()
        parts.pool.close()


def heldout_figures(trained: list[dict], control: list[dict], n: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Win rates with 95% intervals per run and of the paired difference: all held-out environments, the seeds
    only, the variants only, the trained-on families' unplayed variants; apart from those, the environments
    both runs trained on (fresh reset seeds: not held out, never part of "all" or the target); and per
    environment (means)."""
    out: dict[str, Any] = {}
    for group in ("all", "seed", "variant", "family", "trained"):
        a = [e["won"] for e in trained if e["group"] == group or (group == "all" and e["group"] in HELD_OUT)]
        b = [e["won"] for e in control if e["group"] == group or (group == "all" and e["group"] in HELD_OUT)]
        if not a:
            continue
        out[group] = {
            "episodes": len(a),
            "trained": _interval(bootstrap_mean(a, n, seed)),
            "control": _interval(bootstrap_mean(b, n, seed)),
            "difference": _interval(bootstrap_diff(a, b, n, seed, paired=True)),
        }
    envs = list(dict.fromkeys(e["env"] for e in trained))
    out["per_env"] = {env: {run: float(np.mean([e["won"] for e in eps if e["env"] == env]))
                            for run, eps in (("trained", trained), ("control", control))} for env in envs}  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------------- per step
def step_rows(trained: list[dict], control: list[dict]) -> list[dict[str, Any]]:
    """Per logged step: each quantity of STEP_METRICS for both runs and trained - control (None: not logged)."""
    by_step = [{r["step"]: r for r in rows} for rows in (trained, control)]
    out = []
    for step in sorted(set(by_step[0]) | set(by_step[1])):
        row: dict[str, Any] = {"step": step}
        for short, metric in STEP_METRICS.items():
            a, b = (s.get(step, {}).get(metric) for s in by_step)
            row[f"{short}/trained"], row[f"{short}/control"] = a, b
            row[f"{short}/difference"] = a - b if a is not None and b is not None else None
        if any(row[f"{s}/trained"] is not None or row[f"{s}/control"] is not None for s in STEP_METRICS):
            out.append(row)
    return out


def second_half_mean(rows: list[dict], metric: str, steps: int) -> float | None:
    """Mean of `metric` over the steps after the first half of the run (None when never logged there)."""
    values = [r[metric] for r in rows if r.get("step", 0) > steps / 2 and r.get(metric) is not None]
    return float(np.mean(values)) if values else None


def second_half_designs(rows: list[dict], steps: int) -> tuple[int, int]:
    """(valid designs, designs) over the design rounds after the first half of the run: the sample size behind
    the valid rate (a demo-sized run has one round of two designs there)."""
    late = [r for r in rows if r.get("step", 0) > steps / 2 and r.get("design/targets")]
    return (round(sum(r["design/valid_frac"] * r["design/targets"] for r in late)),
            round(sum(r["design/targets"] for r in late)))  # fmt: skip


def valid_rate_figures(trained: list[dict], control: list[dict], steps: int) -> dict[str, Any]:
    a = second_half_mean(trained, "design/valid_frac", steps)
    b = second_half_mean(control, "design/valid_frac", steps)
    ratio = None
    if a is not None and b is not None:
        ratio = a / b if b > 0 else (None if a == 0 else math.inf)
    designs = {"trained": second_half_designs(trained, steps), "control": second_half_designs(control, steps)}
    return {"trained": a, "control": b, "ratio": None if ratio is math.inf else ratio,
            "ratio_infinite": ratio is math.inf, "designs": designs}  # fmt: skip


def designer_figures(trained: list[dict], control: list[dict], n: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The final designers' valid rates with 95% intervals, the paired difference (design i of both runs had
    the same prompt and seed) and the ratio; {} without designs."""
    if not trained:
        return {}
    if [d["prompt"] for d in trained] != [d["prompt"] for d in control]:
        raise ValueError("the two runs' evaluation designs do not pair up (different prompts)")
    a, b = [d["valid"] for d in trained], [d["valid"] for d in control]
    ratio = (sum(a) / sum(b)) if sum(b) > 0 else None
    return {"designs": len(a), "valid": {"trained": int(sum(a)), "control": int(sum(b))},
            "trained": _interval(bootstrap_mean(a, n, seed)), "control": _interval(bootstrap_mean(b, n, seed)),
            "difference": _interval(bootstrap_diff(a, b, n, seed, paired=True)), "ratio": ratio,
            "refused_by": {run: dict(Counter(d["gate"] for d in rows if not d["valid"]))
                           for run, rows in (("trained", trained), ("control", control))}}  # fmt: skip


def targets(heldout: dict[str, Any], valid: dict[str, Any]) -> dict[str, dict[str, Any]]:
    d = heldout.get("all", {}).get("difference", {})
    win_ok = bool(d) and d["mean"] >= TARGET_WIN_DIFF and d["lo"] > 0
    valid_ok = valid["ratio_infinite"] or (valid["ratio"] is not None and valid["ratio"] >= TARGET_VALID_RATIO)
    ratio = "inf" if valid["ratio_infinite"] else valid["ratio"]
    return {
        "heldout_win_diff": {"target": f">= {TARGET_WIN_DIFF:.2f} with the 95% interval above 0",
                             "measured": d.get("mean"), "lo": d.get("lo"), "passed": win_ok},
        "valid_rate_ratio": {"target": f">= {TARGET_VALID_RATIO:g}x the control's over the second half",
                             "measured": ratio, "passed": bool(valid_ok), "limit": ratio_limit(valid["control"])},
    }  # fmt: skip


def ratio_limit(control_rate: float | None) -> str:
    """What bounds the valid-rate ratio: a control already valid at rate c leaves at most 1/c (every trained
    design valid), so at c > 1/TARGET_VALID_RATIO the target is out of reach whatever the designer learns."""
    if not control_rate or control_rate * TARGET_VALID_RATIO <= 1:
        return ""
    return (f"out of reach: the control's valid rate is {control_rate:.0%}, so the ratio is at most "
            f"{1 / control_rate:.2f} (every trained design valid)")  # fmt: skip


# --------------------------------------------------------------------------------------------------- main
def _runs(
    cfg: Any, control_cfg: Any, out: Path, console: Any, resume: bool = False
) -> tuple[dict[str, Path], Path | None, dict]:
    """Runs trained and control (after one shared warm start, when the config has one). With resume, an interrupted
    experiment in `out` goes on: a finished warm start is kept, each run continues from its last checkpoint, and the
    final evaluation starts afresh."""
    from spade_jax.run.loop import run

    dirs = {"trained": out / "trained", "control": out / "control"}
    if resume:
        if not (out / "start" / "checkpoints").is_dir() and cfg.loop.warmstart:
            raise SystemExit(f"{out}/start holds no finished warm start: nothing to resume, choose a fresh --out")
        shutil.rmtree(out / "eval", ignore_errors=True)
    else:
        for d in (*dirs.values(), out / "start", out / "eval"):
            if d.exists():
                raise SystemExit(f"{d} exists: choose a fresh --out, or --resume")
    walls: dict[str, float] = {}
    start = None
    if cfg.loop.warmstart:
        start = out / "start"
        t0 = time.perf_counter()
        if not resume:
            run(dataclasses.replace(cfg, loop=dataclasses.replace(cfg.loop, steps=0)), start, console=console)
        walls["warmstart_s"] = time.perf_counter() - t0
        for d in dirs.values():
            if not d.exists():
                shutil.copytree(start, d)
    for name, c in (("trained", cfg), ("control", control_cfg)):
        console.rule(f"{name} run (learner.lr={c.learner.lr:g})")
        t0 = time.perf_counter()
        run(c, dirs[name], resume=start is not None or dirs[name].joinpath("checkpoints").is_dir(), console=console)
        walls[f"{name}_s"] = time.perf_counter() - t0
        gc.collect()
    return dirs, start, walls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--steps", type=int, default=None, help="loop.steps (default: the preset's)")
    ap.add_argument("--out", required=True, help="output directory (trained/, control/, learning.json, ...)")
    ap.add_argument("--eval-variants", type=int, default=2, help="easiest variants per held-out seed (K)")
    ap.add_argument("--eval-plays", type=int, default=8, help="unhinted plays per evaluation environment (M)")
    ap.add_argument(
        "--eval-family",
        default="",
        help="comma-separated trained-on seeds: also evaluate on K of their easiest variants that neither run played",
    )
    ap.add_argument("--family-variants", type=int, default=4, help="unplayed variants per --eval-family seed")
    ap.add_argument("--no-heldout-seeds", action="store_true",
                    help="leave out the run's held-out seeds and their variants (other skills; out of a small model's "
                         "reach): the target is then the --eval-family variants alone")  # fmt: skip
    ap.add_argument("--trained-envs", type=int, default=0,
                    help="also up to N environments both runs trained on (fresh seeds; not held out)")  # fmt: skip
    ap.add_argument("--eval-designs", type=int, default=8,
                    help="designs each final designer writes from the same prompts and seeds (0: none)")  # fmt: skip
    ap.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples")
    ap.add_argument("--resume", action="store_true", help="go on with an interrupted experiment in --out")
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. learner.lr=1e-5")
    args = ap.parse_args(argv)
    if args.no_heldout_seeds and not args.eval_family:
        ap.error("--no-heldout-seeds leaves nothing held out: give --eval-family too")

    import logging

    from rich.console import Console

    from spade_jax.config.overrides import apply_overrides
    from spade_jax.config.run import load_run_config
    from spade_jax.report import write_report
    from spade_jax.report.envs import report_envs
    from spade_jax.rundir.metrics import read_metrics
    from spade_jax.selfplay.memory import Memory

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    console = Console(width=160)
    t_all = time.perf_counter()
    overrides = list(args.overrides) + ([f"loop.steps={args.steps}"] if args.steps is not None else [])
    cfg = load_run_config(args.preset, overrides)
    control_cfg = apply_overrides(cfg, ["learner.lr=0"])
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)

    dirs, start, walls = _runs(cfg, control_cfg, out, console, resume=args.resume)
    console.rule("final held-out evaluation")
    family = tuple(n for n in args.eval_family.split(",") if n)
    played = played_knobs([d / "memory.sqlite" for d in dirs.values()], family)
    seeds = () if args.no_heldout_seeds else tuple(cfg.loop.held_out)
    envs = eval_envs(seeds, args.eval_variants, family, played, args.family_variants)
    envs += trained_on([d / "memory.sqlite" for d in dirs.values()], args.trained_envs)
    t0 = time.perf_counter()
    evals = final_eval(cfg, dirs, start, out / "eval", envs, args.eval_plays, args.eval_designs)
    walls["final_eval_s"] = time.perf_counter() - t0

    metrics = {name: read_metrics(d / "metrics.jsonl") for name, d in dirs.items()}
    rows = step_rows(metrics["trained"], metrics["control"])
    heldout = heldout_figures(evals["trained"]["episodes"], evals["control"]["episodes"], args.bootstrap)
    valid = valid_rate_figures(metrics["trained"], metrics["control"], cfg.loop.steps)
    designer = designer_figures(evals["trained"]["designs"], evals["control"]["designs"], args.bootstrap)
    walls["total_s"] = time.perf_counter() - t_all
    fig = {
        "preset": args.preset, "steps": cfg.loop.steps, "overrides": overrides,
        "eval": {"environments": [{k: e[k] for k in ("env", "seed", "group")} for e in envs],
                 "plays_per_env": args.eval_plays, "variants_per_seed": args.eval_variants,
                 "bootstrap_resamples": args.bootstrap, "bootstrap_seed": 0},
        "runs": {name: {"dir": str(dirs[name]), "lr": c.learner.lr, **evals[name]}
                 for name, c in (("trained", cfg), ("control", control_cfg))},
        "warm_start_dir": str(start) if start else None,
        "heldout": heldout, "per_step": rows, "valid_rate_second_half": valid, "designer_eval": designer,
        "targets": targets(heldout, valid), "wall": walls,
    }  # fmt: skip
    (out / "learning.json").write_text(json.dumps(fig, indent=1))
    plot(out / "learning.png", rows, fig)
    print_tables(console, rows, fig)

    mem = Memory(dirs["trained"] / "memory.sqlite")
    env_rows = report_envs([dataclasses.asdict(r) for r in mem.attempts()])
    mem.close()
    everything = heldout.get("all", {})
    d = everything.get("difference", {})
    summary = {"learning: held-out win, trained": everything.get("trained", {}).get("mean"),
               "learning: held-out win, control": everything.get("control", {}).get("mean"),
               "learning: difference [95% CI]": f"{fmt(d.get('mean'))} [{fmt(d.get('lo'))}, {fmt(d.get('hi'))}]",
               "learning: valid-rate ratio (2nd half)": fig["targets"]["valid_rate_ratio"]["measured"]}  # fmt: skip
    if designer:
        summary["learning: final designers"] = designer_line(designer)
    title = f"spade-jax learning benchmark: {args.preset}, {cfg.loop.steps} steps (vs lr 0)"
    report = write_report(dirs["trained"], envs=env_rows, summary=summary, control=dirs["control"], title=title)
    console.print(f"wrote {out / 'learning.json'}, {out / 'learning.png'}, {report} "
                  f"(total {walls['total_s']:.0f} s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    from spade_jax.cli.train_cmds import compile_cache

    compile_cache()  # as `spade-jax selfplay` does: after `make demo`, the same programs load from disk
    sys.exit(main())
