"""The SPADE cycle: design -> gate -> hint -> play (K hinted, K not) -> regret -> learn -> checkpoint.

`run(cfg, run_dir)` is the whole job. Each step: the self-play half (`SelfPlay.step`, or a fixed environment
pool for baselines) returns both roles' samples; group-centred advantages turn rewards into a `TrainBatch`;
one learner step updates the shared policy in place and the sampler reads the same arrays next step. The run
checkpoints everything (params, optimizer, RNGs, corpus position, memory snapshot) so `resume=True`
continues exactly where the last finished checkpoint left off. A damaged run directory resumes or stops with
one line: the newest checkpoint that restores is used, a damaged memory file is rebuilt from the copy in the
checkpoint, a torn metrics row is put back (`_restore`, `_repair_memory`, `metrics.repair_metrics`).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spade_jax.checkpoint import Checkpointer, RunDirError, one_line, set_aside
from spade_jax.metrics import MetricsLogger
from spade_jax.report import write_report
from spade_jax.rl.advantages import group_advantages, group_stats
from spade_jax.rl.batch import AGENT, DESIGNER, ROLE_NAMES, Sample, pack_sequences, split_trainable
from spade_jax.run_config import LoopConfig, RunConfig
from spade_jax.selfplay.batch import SelfPlayBatch
from spade_jax.selfplay.cycle import PlayableEnv, SelfPlay, episode_seed
from spade_jax.selfplay.memory import EnvRecord, Memory, damage, rebuild
from spade_jax.selfplay.rollouts import NO_HINT, EpisodeSpec
from spade_jax.warmstart import warm_start

log = logging.getLogger("spade_jax")


@dataclass
class Parts:
    """The live objects of a run."""

    cfg: RunConfig
    run_dir: Path
    model: Any
    tokenizer: Any
    sampler: Any
    pool: Any
    learner: Any
    selfplay: SelfPlay
    fixed_pool: list[Any] = field(default_factory=list)
    held_out: list[Any] = field(default_factory=list)


def build(cfg: RunConfig, run_dir: Path, *, progress: Any = None) -> Parts:
    """Loads the model, starts the sandbox pool, and wires sampler, self-play and learner together."""
    from spade_jax.envs.host_pool import HostPool
    from spade_jax.envs.sandbox import SandboxConfig
    from spade_jax.model.loading import load_model
    from spade_jax.model.sharding import make_mesh
    from spade_jax.sampling import Sampler

    mesh = make_mesh(_mesh_shape(cfg.mesh)) if cfg.mesh else None
    _, model, tokenizer = load_model(cfg.model, mesh=mesh, param_dtype=cfg.param_dtype, dtype=cfg.dtype)
    sampler = Sampler(model, tokenizer, mesh=mesh, max_total_len=cfg.max_total_len)
    pool = HostPool(cfg.num_workers, SandboxConfig(level=cfg.sandbox, call_timeout_s=cfg.call_timeout_s))
    log.info("sandbox level in force: %s (%d workers)", pool.level, cfg.num_workers)
    try:
        return _wire(cfg, run_dir, model, tokenizer, sampler, pool, mesh)
    except BaseException:  # a bad config, Ctrl-C, SIGTERM: the sandboxes and their temp dirs go either way
        pool.close()
        raise


def _wire(cfg: RunConfig, run_dir: Path, model: Any, tokenizer: Any, sampler: Any, pool: Any, mesh: Any) -> Parts:
    """The learner, memory and self-play around a started pool (`build`, which closes the pool on failure)."""
    from spade_jax.envs.seeds import list_seeds
    from spade_jax.rl.learner import Learner

    learner = Learner(model, cfg.learner, mesh=mesh)

    seeds = {s.name: s for s in list_seeds()}
    unknown = [n for n in cfg.loop.held_out if n not in seeds]
    if unknown:
        raise ValueError(f"loop.held_out names unknown seed environments: {', '.join(unknown)}")
    held_out = [seeds[n] for n in cfg.loop.held_out]
    sp_cfg = dataclasses.replace(cfg.selfplay, seed=cfg.loop.seed)
    sp_cfg = dataclasses.replace(sp_cfg, memory=dataclasses.replace(sp_cfg.memory, seed_from_library=False))
    memory = Memory(run_dir / "memory.sqlite", sp_cfg.memory)
    fixed_pool = []
    if cfg.loop.pool == "selfplay":
        if cfg.selfplay.memory.seed_from_library:
            memory.seed_from_library([s for n, s in seeds.items() if n not in cfg.loop.held_out])
    else:
        from spade_jax.eval.pools import load_pool

        fixed_pool = [e for e in load_pool(cfg.loop.pool) if e.name not in cfg.loop.held_out]
        if not fixed_pool:
            raise ValueError(f"environment pool {cfg.loop.pool!r} is empty")
    selfplay = SelfPlay(sp_cfg, sampler=sampler, tokenizer=tokenizer, pool=pool, run_dir=run_dir, memory=memory)
    return Parts(cfg, run_dir, model, tokenizer, sampler, pool, learner, selfplay, fixed_pool, held_out)


def _mesh_shape(spec: str) -> dict[str, int]:
    try:
        return {k.strip(): int(v) for k, v in (item.split("=") for item in spec.split(",") if item)}
    except ValueError:
        raise ValueError(f"mesh={spec!r}: expected axis=size pairs, e.g. data=2,fsdp=4,tensor=1") from None


def play_step(parts: Parts, step: int) -> SelfPlayBatch:
    """The self-play half of a step: the full designer cycle, or a draw from a fixed pool (baselines)."""
    if not parts.fixed_pool:
        return parts.selfplay.step(step, final=step + 1 == parts.cfg.loop.steps)
    rng = random.Random(f"{parts.cfg.loop.seed}:{step}")
    chosen = rng.sample(parts.fixed_pool, min(parts.cfg.loop.pool_envs_per_step, len(parts.fixed_pool)))
    envs = []
    for spec in chosen:
        env_id = f"pool-{spec.name}"
        if parts.selfplay.memory.get(env_id) is None:
            parts.selfplay.memory.add(EnvRecord(id=env_id, code=spec.source, kind=spec.kind, skill=spec.skill,
                                                name=spec.name, origin="pool", verdict_valid=True,
                                                verdict_gate="pool", step=step))  # fmt: skip
        envs.append(PlayableEnv(env_id, spec.source, spec.kind, spec.skill))
    return parts.selfplay.play_fixed(envs, step)


def to_train_samples(batch: SelfPlayBatch, loop: LoopConfig = LoopConfig()) -> tuple[list[Sample], dict[str, float]]:
    """Rewards -> group advantages (the agent's z-scored per group, the designer's centred per skill and round
    and scaled) -> learner samples; samples whose advantage is 0 carry no signal and are dropped (counted)."""
    samples = batch.samples
    if not samples:
        return [], {}
    rewards = [s.reward for s in samples]
    groups = [s.group_id for s in samples]
    roles = [s.role_id for s in samples]
    adv = group_advantages(rewards, groups, roles=roles, role_norm=loop.role_norm,
                           std_roles=(AGENT,) if loop.agent_group_std else (),
                           role_scale={DESIGNER: batch.designer_scale})  # fmt: skip
    out = [
        # The importance weight corrects sampler-vs-learner numerics (and, for the designer's delayed samples,
        # the policy versions since sampling), so it uses the raw-model log-probs.
        Sample(s.prompt_ids, s.completion_ids, s.completion_mask, s.raw_logprobs or s.logprobs, float(a), s.role_id)
        for s, a in zip(samples, adv)
        if a != 0.0
    ]
    stats = {f"train/{k}": v for k, v in group_stats(rewards, groups).items()}
    stats["train/samples"] = float(len(out))
    for role, name in ROLE_NAMES.items():
        made = sum(r == role for r in roles)
        kept = sum(s.role == role for s in out)
        stats[f"train/{name}_samples"] = float(kept)
        stats[f"train/{name}_dropped_frac"] = (made - kept) / made if made else 0.0
    return out, stats


def band_stats(envs: list[dict[str, Any]], band: tuple[float, float]) -> dict[str, float]:
    """`env/in_band_frac`: the share of the environments scored this step (measured ones) whose unhinted win
    rate lies in the band (memory.positive_band); nothing when none was scored."""
    lo, hi = band
    rates = [e["win_rate_no_hint"] for e in envs if e.get("measured") and e.get("win_rate_no_hint") is not None]
    return {"env/in_band_frac": sum(lo <= r <= hi for r in rates) / len(rates)} if rates else {}


def evaluate(parts: Parts, step: int) -> dict[str, float]:
    """Held-out seed environments, played without hints: win rate per environment and overall."""
    specs = [
        EpisodeSpec(
            f"heldout-{s.name}", Path(s.path).read_text(), episode_seed(s.name, 10_000 + step, k), NO_HINT, kind=s.kind
        )  # fmt: skip
        for s in parts.held_out
        for k in range(parts.cfg.loop.eval_plays)
    ]
    if not specs:
        return {}
    result = parts.selfplay.engine.run(specs)
    wins: dict[str, list[float]] = {}
    for ep in result.episodes:
        wins.setdefault(ep.env_id.removeprefix("heldout-"), []).append(float(bool(ep.won)))
    out = {f"eval/win_rate_{name}": float(np.mean(v)) for name, v in wins.items()}
    out["eval/win_rate"] = float(np.mean([w for v in wins.values() for w in v]))
    return out


def _checkpoint(parts: Parts, ckpt: Checkpointer, step: int, metrics: MetricsLogger) -> None:
    """Saves the run at `step`. Besides the state, the record keeps a copy of the memory's rows (to rebuild a
    damaged memory.sqlite) and the metrics rows made since the previous checkpoint (to put back a torn one)."""
    state = parts.learner.get_state()
    trees = {k: v for k, v in state.items() if k != "step"}  # params, opt_state (+ ref_params with KL)
    meta = {
        "step": step,
        "learner_step": int(state["step"]),
        "selfplay": parts.selfplay.get_state(),
        "config": parts.cfg.to_json(),
        "memory_copy": parts.selfplay.memory.dump(),
        "metrics": metrics.take_unsaved(),
    }
    ckpt.save(step, trees, meta)


def _check_record(meta: dict[str, Any], step: int) -> None:
    """ValueError unless a checkpoint's JSON record has what a resume reads (a hand-edited or foreign one)."""
    if meta.get("step") != step or not isinstance(meta.get("learner_step"), int):
        raise ValueError(f"its record names step {meta.get('step')!r}, learner step {meta.get('learner_step')!r}")
    if not isinstance(meta.get("selfplay"), dict):
        raise ValueError("its record has no self-play state")


def _restore(parts: Parts, ckpt: Checkpointer) -> tuple[int, dict[str, Any]]:
    """Restores the newest checkpoint that restores whole (arrays and record), trying older kept ones when a
    newer one is damaged; damaged newer ones go to run_dir/damaged/ so their steps are redone and saved anew.
    Logs which step and why in one line; returns (step, record). RunDirError (one line) when none restores,
    and then nothing was changed."""
    state = parts.learner.get_state()
    templates = {k: v for k, v in state.items() if k != "step"}
    failed: list[tuple[int, str]] = []
    for step in sorted(ckpt.all_steps(), reverse=True):
        try:
            trees, meta = ckpt.restore(step, templates)
            _check_record(meta, step)
        except Exception as e:  # any damage: a truncated array file, a missing item, a record without a key
            failed.append((step, one_line(e)))
            continue
        parts.learner.set_state({**trees, "step": meta["learner_step"]})
        parts.sampler.update_model(parts.learner.model)
        parts.selfplay.set_state(meta["selfplay"])
        moved = [str(ckpt.set_aside(bad, parts.run_dir)) for bad, _ in failed]
        if failed:
            why = "; ".join(f"checkpoint {bad} does not restore ({reason})" for bad, reason in failed)
            log.warning("resuming from checkpoint %d: %s; moved to %s; the steps after %d are redone",
                        step, why, ", ".join(moved), step)  # fmt: skip
        else:
            log.info("resuming from checkpoint %d (the newest)", step)
        return step, meta
    reasons = "; ".join(f"checkpoint {bad}: {reason}" for bad, reason in failed)
    raise RunDirError(f"cannot resume {parts.run_dir}: no checkpoint restores ({reasons})")


def _repair_memory(run_dir: Path, ckpt: Checkpointer, resume: bool) -> None:
    """Before the memory is opened: a damaged memory.sqlite (not a database, failing its integrity check,
    missing while checkpoints exist) is moved to run_dir/damaged/ and, on resume, rebuilt from the copy in the
    newest checkpoint whose record reads (the resume then rolls it back to the step it restores, as it would
    the live file). One line says so. RunDirError (one line, nothing changed) when no record holds a copy."""
    path = run_dir / "memory.sqlite"
    steps = sorted(ckpt.all_steps(), reverse=True) if resume else []
    if not path.exists() and not steps:
        return
    why = damage(path)
    if why is None:
        return
    copy, source, failed = None, None, []
    for step in steps:
        try:
            meta = ckpt.restore_meta(step)
        except Exception as e:  # a damaged record: try the one before
            failed.append(f"checkpoint {step}: {one_line(e)}")
            continue
        copy, source = meta.get("memory_copy"), step
        break
    if steps and copy is None:
        held = f"checkpoint {source} holds no copy of it (written by an older version)" if source is not None else (
            f"no checkpoint record reads ({'; '.join(failed)})")  # fmt: skip
        raise RunDirError(f"cannot resume {run_dir}: {path.name} is damaged ({why}) and {held}; nothing was changed")
    moved = _set_memory_aside(path, run_dir)
    if copy is None:
        log.warning("%s is damaged (%s): moved to %s; this run starts with an empty memory", path, why, moved)
        return
    rebuild(path, copy)
    log.warning("%s is damaged (%s)%s: rebuilt from the copy in checkpoint %d (%d rows)", path, why,
                f", moved to {moved}" if moved else "", source, len(copy))  # fmt: skip


def _set_memory_aside(path: Path, run_dir: Path) -> str:
    """Moves a damaged memory file and its journal files to run_dir/damaged/ (a stale journal must not be
    replayed into the rebuilt file); returns where the file went ('' when there was none)."""
    moved = ""
    for suffix in ("", "-journal", "-wal", "-shm"):
        p = path.with_name(path.name + suffix)
        if p.exists():
            moved = moved or str(set_aside(p, run_dir, p.name))
    return moved


def train_on(parts: Parts, batch: SelfPlayBatch) -> dict[str, float]:
    """One learner step on a self-play batch (skipped when no group carries signal)."""
    samples, stats = to_train_samples(batch, parts.cfg.loop)
    buckets = parts.cfg.learner.length_buckets_for(parts.cfg.max_total_len)
    samples, dropped = split_trainable(samples, max(buckets))  # longer than any bucket: counted, not trained
    stats["train/dropped_too_long"] = float(dropped)
    if dropped:  # the counts say what the learner really trains on
        stats["train/samples"] = float(len(samples))
        for role, name in ROLE_NAMES.items():
            stats[f"train/{name}_samples"] = float(sum(s.role == role for s in samples))
    if not samples:
        return {**stats, "train/skipped": 1.0}
    t0 = time.perf_counter()
    tb = pack_sequences(samples, length_buckets=buckets, pad_id=getattr(parts.tokenizer, "pad_id", None) or 0)
    metrics = parts.learner.train_step(tb)
    parts.sampler.update_model(parts.learner.model)
    dt = time.perf_counter() - t0
    stats.update({f"train/{k}": float(v) for k, v in metrics.items()})
    stats["perf/learner_tokens_per_s"] = float(sum(len(s) for s in samples)) / max(dt, 1e-9)
    stats["train/skipped"] = 0.0
    return stats


def run(cfg: RunConfig, run_dir: str | Path, *, resume: bool = False, console: Any = None) -> dict[str, Any]:
    """Runs (or resumes) the job; returns a summary with the paths of the report, logs and checkpoints.

    On every way out (an error, Ctrl-C, SIGTERM turned into an exception by the command line) the checkpoint
    being written is finished and the sandboxes are closed, their temp dirs removed."""
    from spade_jax.progress import StepProgress

    run_dir = Path(run_dir).absolute()
    run_dir.mkdir(parents=True, exist_ok=True)
    saved = run_dir / "config.json"
    if resume and saved.exists() and saved.read_text() != cfg.to_json():
        log.warning("resuming with a config that differs from %s; the new one is used and saved", saved)
    saved.write_text(cfg.to_json())
    ckpt = Checkpointer(run_dir / "checkpoints", max_to_keep=cfg.loop.keep_checkpoints,
                        async_save=cfg.loop.async_checkpoints)  # fmt: skip
    progress = StepProgress(cfg.loop.steps, console=console)
    try:
        if not resume and ckpt.latest_step() is not None:
            raise ValueError(f"{run_dir} already holds checkpoints; pass --resume or choose another --run-dir")
        _repair_memory(run_dir, ckpt, resume)
        with progress.phase("loading model and starting sandbox workers"):
            parts = build(cfg, run_dir)
        try:
            summary = _train(parts, ckpt, progress, resume)
            envs = [dataclasses.asdict(r) for r in parts.selfplay.memory.attempts()]
        finally:
            progress.stop()
            _close(parts)
    finally:
        progress.stop()
        ckpt.close()
    summary.update(
        report=str(write_report(run_dir, envs=_report_envs(envs), summary=summary, title=f"spade-jax: {run_dir.name}")),
        tensorboard=str(run_dir / "tb"),
        checkpoints=str(run_dir / "checkpoints"),
        metrics=str(run_dir / "metrics.jsonl"),
    )
    return summary


def _close(parts: Parts) -> None:
    """Closes the pool first (its sandboxes killed, temp dirs removed: an episode interrupted mid-call then
    fails at once instead of holding up the engine), then the rollout engine's threads."""
    try:
        parts.pool.close()
    finally:
        parts.selfplay.close()


def _train(parts: Parts, ckpt: Checkpointer, progress: Any, resume: bool) -> dict[str, Any]:
    """The steps of `run` from the restored checkpoint (or the start) to cfg.loop.steps; returns the summary."""
    cfg = parts.cfg
    start, record = 0, {}
    if resume and ckpt.all_steps():
        with progress.phase("restoring checkpoint"):
            start, record = _restore(parts, ckpt)
    metrics = MetricsLogger(parts.run_dir, resume_step=start, known_rows=record.get("metrics", ()))
    summary: dict[str, Any] = {"sandbox": parts.pool.level, "resumed_from": start if resume else None}
    try:
        if cfg.loop.warmstart and ckpt.latest_step() is None:
            with progress.phase("warm start on the seed library"):
                figures = warm_start(parts, cfg.warmstart, progress=progress)
            metrics.log(0, figures)
            summary.update(figures)
            _checkpoint(parts, ckpt, 0, metrics)
        progress.start(start)
        for step in range(start, cfg.loop.steps):
            row = _step(parts, step, progress)
            metrics.log(step + 1, row)
            if (step + 1) % max(1, cfg.loop.checkpoint_every) == 0 or step + 1 == cfg.loop.steps:
                _checkpoint(parts, ckpt, step + 1, metrics)
            progress.advance(row)
        ckpt.wait()
    finally:
        metrics.close()
    return summary


def _step(parts: Parts, step: int, progress: Any) -> dict[str, float]:
    """One step of the cycle (play, learn, maybe evaluate); returns its metrics row."""
    cfg = parts.cfg
    row: dict[str, float] = {}
    t0 = time.perf_counter()
    with progress.phase(f"step {step + 1}: design, hints and play"):
        batch = play_step(parts, step)
    row.update(batch.stats)
    row.update(band_stats(batch.envs, cfg.selfplay.memory.positive_band))
    row["time/selfplay"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    with progress.phase(f"step {step + 1}: learner"):
        row.update(train_on(parts, batch))
    row["time/learner"] = time.perf_counter() - t1
    if cfg.loop.eval_every and (step + 1) % cfg.loop.eval_every == 0:
        t2 = time.perf_counter()
        with progress.phase(f"step {step + 1}: held-out evaluation"):
            row.update(evaluate(parts, step))
        row["time/eval"] = time.perf_counter() - t2
    row["time/step"] = time.perf_counter() - t0
    return row


def _report_envs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Memory rows in the report's vocabulary (newest designer output first, seeds last)."""
    out = []
    for r in sorted(rows, key=lambda r: (r.get("origin") == "seed", -(r.get("step") or 0))):
        gate, reason = r.get("verdict_gate"), r.get("verdict_reason")
        verdict = "valid" if r.get("verdict_valid") else f"rejected at {gate}: {reason}"
        out.append({**r, "name": r.get("name") or r["id"], "verdict": verdict,
                    "win_rate_nohint": r.get("win_rate_no_hint")})  # fmt: skip
    return out
