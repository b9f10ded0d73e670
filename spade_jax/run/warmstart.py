"""Supervised warm start on the seed library, with the learner's masked cross-entropy step.

Two kinds of examples: designer prompts (contract, kind and skill, a grounding document) answered with a
seed environment's source, and agent conversations played by the seeds' reference policies through the
same rollout engine (so the tokens match what the agent later sees). Small instruction models cannot
write a valid environment out of the box; this gives them a starting point before self-play.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Collection
from typing import Any

from spade_jax import streams
from spade_jax.config.warmstart import WarmStartConfig
from spade_jax.envs.contract import contract_text
from spade_jax.rl.batch import Sample, pack_sequences
from spade_jax.rl.learner import Learner
from spade_jax.selfplay.cycle import SelfPlay
from spade_jax.selfplay.designer import DesignTarget
from spade_jax.selfplay.rollouts import NO_HINT, EpisodeSpec, RolloutEngine, TurnReply, TurnRequest


class ReferencePolicy:
    """Plays a seed environment's own `reference_action()`. Seeds are our trusted code, so a local copy of
    the environment is replayed in-process to read the action; generated code never runs this way."""

    def __init__(self, names: dict[str, str]):
        self.names = names  # env_id -> seed name

    def act(self, requests: list[TurnRequest]) -> list[TurnReply]:
        from spade_jax.envs.seeds import load_seed_class

        replies = []
        for r in requests:
            env = load_seed_class(self.names[r.spec.env_id])(max_turns=25)
            env.reset(seed=r.spec.seed)
            for m in r.messages:
                if m["role"] == "assistant":
                    env.step(m["content"])
            replies.append(TurnReply(text=env.reference_action()))
        return replies


def agent_examples(
    pool: Any, tokenizer: Any, seeds: list[Any], rollout_cfg: Any, episodes: int, *, run_seed: int = 0
) -> list[Sample]:
    """Winning reference-policy conversations, tokenised exactly as the rollout engine does."""
    names = {f"seed-{s.name}": s.name for s in seeds}
    specs = [
        EpisodeSpec(f"seed-{s.name}", s.source, streams.derive(run_seed, "warmstart", s.name, k), NO_HINT, kind=s.kind)
        for s in seeds
        for k in range(episodes)
    ]
    engine = RolloutEngine(pool, ReferencePolicy(names), tokenizer, rollout_cfg)
    try:
        result = engine.run(specs)
    finally:
        engine.close()
    return [
        Sample(ep.prompt_ids, ep.completion_ids, ep.completion_mask, advantage=1.0, role=0)
        for ep in result.kept
        if ep.won and ep.completion_ids
    ]


def designer_examples(
    designer: Any,
    tokenizer: Any,
    seeds: list[Any],
    per_seed: int,
    *,
    variants: int = 0,
    variant_seed: int = 0,
    direction: str = "any",
) -> list[Sample]:
    """Designer prompts for each seed's kind and skill, answered with that seed's source in a code block
    (`per_seed` times), and with each of up to `variants` programmatic variants of it (once each). The
    prompts come from `designer.fit`, so they are the prompts the designer is given in self-play."""
    from spade_jax.envs.variants import PARAMS, make_variants

    eos = list(getattr(tokenizer, "eos_ids", ()) or ())[:1]
    out = []
    for s in seeds:
        source = s.source
        answers = [source] * per_seed
        if variants and s.name in PARAMS:  # seeds without a variant table get none
            found = make_variants(s.name, variants, rng_seed=variant_seed, direction=direction, source=source)
            answers += [v.source for v in found]
        for text in answers:
            answer = list(tokenizer.encode(f"```python\n{text.strip()}\n```", add_special_tokens=False)) + eos
            _, prompt_ids, _ = designer.fit(designer.parts_for(DesignTarget(s.kind, s.skill)))
            out.append(Sample(prompt_ids, answer, advantage=1.0, role=1))
    return out


def mutation_examples(
    designer: Any, tokenizer: Any, seeds: list[Any], per_seed: int, *, rng_seed: int = 0
) -> list[Sample]:
    """Mutation prompts (`designer.fit_mutation`'s messages) with a variant of each seed as the parent, answered
    with another variant of it; `per_seed` (parent, child) pairs per seed, drawn deterministically."""
    from spade_jax.envs.variants import PARAMS, make_variants
    from spade_jax.selfplay.designer import mutation_messages
    from spade_jax.selfplay.memory import EnvRecord

    eos = list(getattr(tokenizer, "eos_ids", ()) or ())[:1]
    lo, hi = designer.memory.config.positive_band
    ok = designer.memory.config.max_param_variants > 0
    out = []
    for s in seeds:
        if s.name not in PARAMS or per_seed <= 0:
            continue
        pool = make_variants(s.name, 2 * per_seed + 1, rng_seed=rng_seed, direction="any")
        rng = random.Random(f"{s.name}/mutations/{rng_seed}")
        for i in range(per_seed):
            if len(pool) < 2:
                break
            parent, child = rng.sample(pool, 2)
            # The first pair: the seed itself, unmeasured (as at a run's start); then variant pairs, shown with
            # the win rate that calls for the change made.
            up, down = child.difficulty > parent.difficulty, child.difficulty < parent.difficulty
            shown = None if i == 0 else 1.0 if up else 0.0 if down else (lo + hi) / 2
            code = _archived(designer, s) if i == 0 else parent.source
            record = EnvRecord(id=f"warm-{parent.name}", code=code, kind=s.kind, skill=s.skill,
                               win_rate_no_hint=shown, regret=None if shown is None else 0.0)  # fmt: skip
            target = DesignTarget(s.kind, s.skill, record.id)
            contract = contract_text(designer.config.contract) if designer.config.mutation_contract else None
            msgs = mutation_messages(record, target, (lo, hi), contract, constants_ok=ok)
            prompt_ids = designer.encode(msgs)
            answer = list(tokenizer.encode(f"```python\n{child.source.strip()}\n```", add_special_tokens=False)) + eos
            out.append(Sample(prompt_ids, answer, advantage=1.0, role=1))
    return out


def _archived(designer: Any, seed: Any) -> str:
    """The seed's code as the run's archive holds it (memory.seed_difficulty), else as written."""
    record = designer.memory.get(f"seed-{seed.name}") if getattr(designer, "memory", None) is not None else None
    return record.code if record is not None else seed.source


def valid_rate(selfplay: Any, n: int, step: int) -> float:
    """Fraction of n fresh designer attempts that pass every gate (recorded in memory like any design)."""
    results = selfplay.design(step, n)
    return sum(r.valid for r in results) / max(len(results), 1)


def _named(seeds: list[Any], names: tuple[str, ...], option: str) -> list[Any]:
    by_name = {s.name: s for s in seeds}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(f"warmstart.{option}: {', '.join(missing)} not among the training seeds")
    return [by_name[n] for n in names]


def _designer_seeds(cfg: WarmStartConfig, seeds: list[Any], rng: random.Random) -> list[Any]:
    """The seeds that get designer examples: the named ones, else `designer_seeds` drawn, else all."""
    if cfg.designer_seed_names:
        return _named(seeds, cfg.designer_seed_names, "designer_seed_names")
    return rng.sample(seeds, cfg.designer_seeds) if 0 < cfg.designer_seeds < len(seeds) else seeds


def warm_start(cfg: WarmStartConfig, *, selfplay: SelfPlay, learner: Learner, sync: Callable[[], None],
               held_out: Collection[str], run_seed: int, max_len: int,
               progress: Any = None) -> dict[str, float]:  # fmt: skip
    """Measures the designer's valid rate, trains on the seed data (seeds in `held_out` left out, examples up to
    `max_len` tokens), measures again; `sync` points the sampler at the new parameters. Returns the figures."""
    from spade_jax.envs.seeds import list_seeds

    seeds = [s for s in list_seeds() if s.name not in set(held_out)]
    sp = selfplay
    figures: dict[str, float] = {}
    if cfg.probe_designs:
        figures["warmstart/valid_rate_before"] = valid_rate(sp, cfg.probe_designs, step=-2)
    agent_seeds = _named(seeds, cfg.agent_seed_names, "agent_seed_names") if cfg.agent_seed_names else seeds
    samples = agent_examples(
        sp.pool, sp.tokenizer, agent_seeds, sp.config.rollout, cfg.agent_episodes_per_seed, run_seed=run_seed
    )
    played = len(agent_seeds) * cfg.agent_episodes_per_seed
    if len(samples) < played and progress is not None:  # a reference episode that does not win is no example
        progress.console.log(
            f"  warm start: {len(samples)} of {played} reference episodes won within "
            f"rollout.max_turns={sp.config.rollout.max_turns}: only those are agent examples"
        )
    rng, variant_seed = streams.rng(run_seed, "warmstart"), streams.derive(run_seed, "variants")
    design_seeds = _designer_seeds(cfg, seeds, rng)
    samples += designer_examples(
        sp.designer, sp.tokenizer, design_seeds, cfg.designer_examples_per_seed,
        variants=cfg.designer_variants_per_seed, variant_seed=variant_seed,
        direction=cfg.designer_variant_direction,
    )  # fmt: skip
    samples += mutation_examples(sp.designer, sp.tokenizer, design_seeds, cfg.designer_mutations_per_seed,
                                 rng_seed=variant_seed)  # fmt: skip
    samples = [s for s in samples if len(s) <= max_len]
    # A learner of its own: SFT wants a larger step size than RL, and RL starts from fresh Adam moments
    # (and no KL reference of its own: kl_coef 0 keeps it from copying the params).
    rl = learner
    rl.set_aside()  # its moments and reference are made afresh after: one learner's memory at a time
    sft_cfg = dataclasses.replace(rl.config, lr=cfg.lr, schedule="constant", warmup_steps=0, kl_coef=0.0)
    sft = Learner(rl.model, sft_cfg, mesh=rl.mesh, rules=rl.rules, role_names=rl.role_names)
    buckets = rl.config.length_buckets_for(max_len)
    losses = []
    try:
        for _ in range(cfg.epochs):
            rng.shuffle(samples)
            for i in range(0, len(samples), cfg.batch_size):
                batch = pack_sequences(samples[i : i + cfg.batch_size], length_buckets=buckets)
                metrics = sft.sft_step(batch)
                losses.append(float(metrics.get("loss", metrics.get("sft_loss", 0.0))))
                if progress is not None:
                    progress.console.log(f"  warm start batch {len(losses)}: loss={losses[-1]:.3f}")
    finally:
        sft.set_aside()  # its moments freed now (its compiled steps keep the object itself alive until a gc)
        del sft
        rl.fresh_optimizer()  # fresh moments, and the KL reference (kl_coef > 0) is the policy after the warm start
    sync()
    if cfg.probe_designs:
        figures["warmstart/valid_rate_after"] = valid_rate(sp, cfg.probe_designs, step=-1)
    return {
        **figures,
        "warmstart/examples": float(len(samples)),
        "warmstart/loss_first": losses[0] if losses else 0.0,
        "warmstart/loss_last": losses[-1] if losses else 0.0,
    }
