"""The SPADE cycle: design -> gate -> hint -> play (K hinted, K not) -> regret -> learn -> checkpoint.

`run(cfg, run_dir)` is the whole job. Each step: the self-play half (`SelfPlay.step`, or a fixed environment
pool for baselines) returns both roles' samples in one `SelfPlayBatch`; the learner half (run/learn.py) turns
them into advantages and the update's batch (`loop.batch_policy`, `learner.loss_agg`); one learner step
updates the shared policy in place and the sampler reads the same arrays next step. The run
checkpoints everything (params, optimizer, RNGs, corpus position, memory snapshot) so `resume=True`
continues exactly where the last finished checkpoint left off. A damaged run directory resumes or stops with
one line: the newest checkpoint that restores is used, a damaged memory file is rebuilt from the copy in the
checkpoint, a torn metrics row is put back (run/resume.py, `metrics.repair_metrics`). The parts are built in
run/parts.py, the learner half of a step is run/learn.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from spade_jax.config.overrides import changed_keys, to_dict
from spade_jax.config.run import RunConfig
from spade_jax.infra import malloc
from spade_jax.infra.compile_time import compile_seconds
from spade_jax.infra.hosts import Hosts
from spade_jax.infra.perf import step_perf
from spade_jax.model.layer_stack import LayerRelayout
from spade_jax.report import write_report
from spade_jax.report.envs import report_envs
from spade_jax.run.learn import BatchRule, band_stats, train_on
from spade_jax.run.parts import Parts, build
from spade_jax.run.resume import repair_memory, restore, save_checkpoint
from spade_jax.run.warmstart import warm_start
from spade_jax.rundir import transcripts
from spade_jax.rundir.checkpoints import Checkpointer
from spade_jax.rundir.metrics import MetricsLogger
from spade_jax.rundir.paths import RunDir, RunDirError, check_run_dir, open_run_dir
from spade_jax.selfplay.batch import SelfPlayBatch
from spade_jax.selfplay.health import step_health

__all__ = ["Parts", "build", "evaluate", "play_step", "run"]

log = logging.getLogger("spade_jax")


def play_step(parts: Parts, step: int) -> SelfPlayBatch:
    """The self-play half of a step: the full designer cycle, or a draw from a fixed pool (baselines)."""
    return parts.selfplay.step(step, final=step + 1 == parts.cfg.loop.steps, pool=parts.fixed_pool)


def evaluate(parts: Parts, step: int) -> dict[str, float]:
    """Held-out seed environments, played without hints: win rate per environment and overall."""
    wins = parts.selfplay.evaluate(parts.held_out, step, parts.cfg.loop.eval_plays)
    if not any(wins.values()):
        return {}
    out = {f"eval/win_rate_{name}": float(np.mean(v)) for name, v in wins.items() if v}
    out["eval/win_rate"] = float(np.mean([w for v in wins.values() for w in v]))
    return out


def run(cfg: RunConfig, run_dir: str | Path | RunDir, *, resume: bool = False, console: Any = None) -> dict[str, Any]:
    """Runs (or resumes) the job; returns a summary with the paths of the report, logs and checkpoints.
    `run_dir`: a local folder or a gs:// URL (rundir/paths.py: checkpoints written there directly, the other files
    through a local staging copy pushed before each checkpoint and at the end).

    On every way out (an error, Ctrl-C, SIGTERM turned into an exception by the command line) the checkpoint
    being written is finished, the staging copy pushed and the sandboxes closed, their temp dirs removed.

    On several processes (infra/hosts.py) every process runs this together, each doing its share of the self-play
    work; process 0 alone writes the run directory's files, and every process takes part in the checkpoints."""
    from spade_jax.run.progress import StepProgress

    hosts = Hosts.current()
    if not isinstance(run_dir, RunDir):  # every refusal before anything is written (a file, --resume of nothing)
        check_run_dir(run_dir, resume=resume)
    rd = open_run_dir(run_dir, host=hosts.index)
    ckpt = Checkpointer(rd.checkpoints, max_to_keep=cfg.loop.keep_checkpoints,
                        async_save=cfg.loop.async_checkpoints, relayout=LayerRelayout())  # fmt: skip
    if not resume and ckpt.latest_step() is not None:  # Orbax's own listing, before config.json is touched
        ckpt.close()
        raise RunDirError(f"{rd} already holds checkpoints; pass --resume or choose another --run-dir")
    saved = rd.path / "config.json"
    if hosts.is_leader:
        if resume and saved.exists() and saved.read_text() != cfg.to_json():
            log.warning("resuming with a config that differs from %s in %s; the new one is used and saved",
                        saved, _changed(saved.read_text(), cfg))  # fmt: skip
        saved.write_text(cfg.to_json())
    progress = StepProgress(cfg.loop.steps, console=console if hosts.is_leader else _quiet())
    try:
        if hosts.is_leader:
            repair_memory(rd.path, ckpt, resume)
        with progress.phase("loading model and starting sandbox workers"):
            parts = build(cfg, rd.path)
        try:
            summary = _train(parts, ckpt, progress, resume, push=rd.push)
            envs = [dataclasses.asdict(r) for r in parts.selfplay.memory.attempts()]
        finally:
            progress.stop()
            _close(parts)
        if hosts.is_leader:
            write_report(rd.path, envs=report_envs(envs), summary=summary, title=f"spade-jax: {rd.name}")
    finally:
        progress.stop()
        ckpt.close()
        rd.push()
    summary.update(report=rd.where("report.html"), tensorboard=rd.where("tb"), checkpoints=str(rd.checkpoints),
                   metrics=rd.where("metrics.jsonl"))  # fmt: skip
    return summary


def _decode_counts(sampler: Any) -> tuple[int, ...]:
    """(slot-steps computed, tokens generated, live KV slots read, all KV slots read) so far by the sampler
    (zeros for one that does not count)."""
    live, total = getattr(sampler, "kv_slot_reads", (0, 0))
    return getattr(sampler, "slot_steps", 0), getattr(sampler, "tokens_generated", 0), live, total


def _changed(saved_json: str, cfg: RunConfig) -> str:
    """The config keys a resume changes, for its warning (a few named, then a count)."""
    try:
        keys = changed_keys(json.loads(saved_json), to_dict(cfg))
    except ValueError:
        return "a file that is not JSON"
    return ", ".join(keys[:6]) + (f" and {len(keys) - 6} more keys" if len(keys) > 6 else "")


def _quiet() -> Any:
    """A console that shows nothing: the progress of the hosts other than the leader."""
    import os

    from rich.console import Console

    return Console(file=open(os.devnull, "w"))  # noqa: SIM115 (lives as long as the run)


def _close(parts: Parts) -> None:
    """Closes the pool first (its sandboxes killed, temp dirs removed: an episode interrupted mid-call then
    fails at once instead of holding up the engine), then the rollout engine's threads."""
    try:
        parts.pool.close()
    finally:
        parts.selfplay.close()


def _train(parts: Parts, ckpt: Checkpointer, progress: Any, resume: bool, push: Any = None) -> dict[str, Any]:
    """The steps of `run` from the restored checkpoint (or the start) to cfg.loop.steps; returns the summary.
    `push` (the run directory's upload) is called before each checkpoint starts."""
    push = push or (lambda: None)
    cfg = parts.cfg
    start, record = 0, {}
    if resume and ckpt.all_steps():
        with progress.phase("restoring checkpoint"):
            start, record = restore(ckpt, learner=parts.learner, selfplay=parts.selfplay, sync=parts.sync_sampler,
                                    run_dir=parts.run_dir, leader=parts.hosts.is_leader)  # fmt: skip
    if parts.hosts.is_leader:
        transcripts.trim(parts.run_dir, start)  # the steps after the restored one are redone
    wandb = to_dict(cfg.wandb) if "wandb" in cfg.loggers else None
    metrics = MetricsLogger(parts.run_dir, resume_step=start, known_rows=record.get("metrics", ()),
                            write=parts.hosts.is_leader, tensorboard="tensorboard" in cfg.loggers, wandb=wandb,
                            config=to_dict(cfg))  # fmt: skip
    summary: dict[str, Any] = {"sandbox": parts.pool.level, "resumed_from": start if resume else None}
    try:
        if cfg.loop.warmstart and ckpt.latest_step() is None:
            with progress.phase("warm start on the seed library"):
                figures = warm_start(cfg.warmstart, selfplay=parts.selfplay, learner=parts.learner,
                                     sync=parts.sync_sampler, held_out=cfg.loop.held_out, run_seed=cfg.loop.seed,
                                     max_len=cfg.max_total_len, progress=progress)  # fmt: skip
            _between_phases(parts)  # the warm start's own optimizer and its sampling are done with
            metrics.log(0, figures)
            summary.update(figures)
            push()
            _save(parts, ckpt, 0, metrics)
        progress.start(start)
        for step in range(start, cfg.loop.steps):
            row = _step(parts, step, progress)
            metrics.log(step + 1, row)
            if (step + 1) % max(1, cfg.loop.checkpoint_every) == 0 or step + 1 == cfg.loop.steps:
                push()
                _save(parts, ckpt, step + 1, metrics)
            progress.advance(row)
        ckpt.wait()
    finally:
        metrics.close()
    return summary


def _learn(parts: Parts, batch: SelfPlayBatch) -> dict[str, float]:
    """The learner half of a step (run/learn.py) with the run's batch rule, row lengths and pad token."""
    cfg = parts.cfg
    buckets = cfg.learner.length_buckets_for(cfg.max_total_len)
    pad_id = getattr(parts.tokenizer, "pad_id", None) or 0
    return train_on(batch, parts.learner, BatchRule.of(cfg), buckets=buckets, pad_id=pad_id, sync=parts.sync_sampler)


def _save(parts: Parts, ckpt: Checkpointer, step: int, metrics: MetricsLogger) -> None:
    cfg = parts.cfg.to_json()
    save_checkpoint(ckpt, step, metrics, learner=parts.learner, selfplay=parts.selfplay, config_json=cfg)


def _step(parts: Parts, step: int, progress: Any) -> dict[str, float]:
    """One step of the cycle (play, learn, maybe evaluate); returns its metrics row."""
    cfg = parts.cfg
    row: dict[str, float] = {}
    t0, c0 = time.perf_counter(), compile_seconds()
    counts = _decode_counts(parts.sampler)
    with progress.phase(f"step {step + 1}: design, hints and play"):
        batch = play_step(parts, step)
    if parts.hosts.is_leader:  # one hinted and one unhinted play of each environment, for the report
        transcripts.record(parts.run_dir, parts.tokenizer, step + 1, batch.examples)
    slots, tokens, kv_live, kv_all = (now - then for now, then in zip(_decode_counts(parts.sampler), counts))
    if slots:  # the share of the decode work computed that became tokens (this host's sampler)
        row["perf/slot_utilisation"] = tokens / slots
    if kv_all:  # the share of the KV slots decode attended that running rows hold (all that a kernel must read)
        row["perf/kv_live_share"] = kv_live / kv_all
    row.update(batch.stats)
    row.update(band_stats(batch.envs, cfg.selfplay.memory.positive_band))
    row.update(step_health(batch, parts.selfplay.memory, step, cfg.selfplay.reward))  # the paper's measures
    row["time/selfplay"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    _between_phases(parts)  # the sampler's KV cache is of no use to the learner: its memory goes back first
    with progress.phase(f"step {step + 1}: learner"):
        row.update(_learn(parts, batch))
    _between_phases(parts)
    row["time/learner"] = time.perf_counter() - t1
    eval_tokens = 0
    if _evaluates(cfg, step):
        t2, before = time.perf_counter(), _decode_counts(parts.sampler)[1]
        with progress.phase(f"step {step + 1}: held-out evaluation"):
            row.update(evaluate(parts, step))
        row["time/eval"] = time.perf_counter() - t2
        eval_tokens = _decode_counts(parts.sampler)[1] - before
    row["time/step"] = time.perf_counter() - t0
    row["time/compile"] = compile_seconds() - c0  # inside the phases above: tracing, lowering and XLA
    row.update(step_perf(row, parts.model.cfg.num_params, selfplay_tokens=tokens, eval_tokens=eval_tokens))
    return row


def _between_phases(parts: Parts) -> None:
    """Frees what one phase leaves that the next does not use (the sampler's KV cache and parked rows) and hands
    the heap's free pages back (infra/malloc.py), so the run's peak is its largest phase, not their sum."""
    release = getattr(parts.sampler, "release", None)
    if release is not None:
        release()
    malloc.trim()


def _evaluates(cfg: RunConfig, step: int) -> bool:
    """Whether step `step` ends with the held-out evaluation: every `eval_every` steps, and always the run's last
    step, so every run ends with its held-out win rate (`eval_plays=0` or no held-out seeds: never)."""
    if not cfg.loop.eval_plays or not cfg.loop.held_out:
        return False
    every = cfg.loop.eval_every
    return step + 1 == cfg.loop.steps or bool(every and (step + 1) % every == 0)
