"""The designer learns from regret (issue 17, section 4): a CI-sized run of the real cycle.

A tiny random model (`tiny-smollm`: 2 layers, SmolLM2 tokenizer) is warm-started (supervised, `sft_step`) on
the real Designer's prompt to write one of two environment programs, 50/50. They differ in one word of the
first observation:
- EASY ("Easy: ..."): the scripted agent always wins it, hinted or not: win rate 1, regret 0, so the blend
  gives ~0 (plateau(1.0) = 0);
- HARD ("Hard: ..."): unhinted, the scripted agent wins it for half of the reset seeds (by seed parity),
  hinted always: win rate ~0.5 and regret ~0.5, so the blend gives ~0.6 on average (2 plays per condition:
  0.4 when both unhinted plays lose, 1.0 when one wins, 0 when both win).
The agent is scripted so that the outcome does not depend on the tiny model's play. Everything else is the
real cycle: `SelfPlay.step` (Designer prompt, sampler, extraction and every gate in the sandbox pool, env
hints, hinted and unhinted plays, the design round's window, the blend) -> `loop.train_on` (group-centred
designer advantages, packing, `Learner.train_step`, `sampler.update_model`). After a dozen steps the designer
writes HARD clearly more often than at the start, both in the sampled designs (8 a step, at the designer's
default temperature 0.6) and in the exact probability of the HARD completion; the same run with learning
rate 0 does not move.

What the test changes, and why that does not weaken it:
- the contract text in the designer prompt is one line (the designer module's `contract_text` patched): the
  real 2.5K-token contract makes each step of a 64-wide model with a 49K vocabulary ~10x slower; the prompt
  is still rendered by `Designer.fit(parts_for(...))` with the chat template, and the contract's content
  plays no part in what is tested (how the reward moves the designer's choice);
- novelty is off (the memory's index never reports a duplicate): the test needs the same two programs to be
  written again and again, which the novelty gate exists to reject. Every other gate runs;
- only the designer's samples are trained: the scripted agent's replies are not the model's, so their
  gradients would only be noise on the shared weights. The agent role's training is tested elsewhere;
- the two programs differ in one token, late in the program (the LEVEL attribute): what is learnt is the
  choice, not a program; Adam's eps is 1e-4 (see `selfplay_run`) so a fresh optimizer's sign-like first
  steps do not wreck the memorised programs.
"""

from __future__ import annotations

import dataclasses
import re
import time

import jax
import numpy as np
import pytest
from flax import nnx

import spade_jax.selfplay.designer as designer_module
from spade_jax.config.selfplay import (
    AuditConfig,
    DesignerConfig,
    HintConfig,
    MemoryConfig,
    RolloutConfig,
    SelfPlayConfig,
)
from spade_jax.gates.novelty import NoveltyIndex, NoveltyResult
from spade_jax.rl.batch import Sample, pack_sequences
from spade_jax.rl.learner import Learner, LearnerConfig
from spade_jax.run.learn import BatchRule, train_on
from spade_jax.selfplay.cycle import SelfPlay
from spade_jax.selfplay.designer import DesignTarget
from spade_jax.selfplay.policies import ScriptedPolicy
from spade_jax.trajectory import DESIGNER

POOL_WORKERS = 4
POOL_CALL_TIMEOUT_S = 3.0

SKILL = "logical deduction"
SHORT_CONTRACT = "Write one Python class that subclasses spade_jax.envs.base.GameEnv, with setup() and play(command)."
PROGRAM = """from spade_jax.envs.base import GameEnv


class Sum(GameEnv):
    def setup(self):
        self.n = self.rng.randint(10, 99)
        return f"{{self.LEVEL}}: what is {{self.n}} plus 1?"

    def play(self, c):
        return self.win("Yes.") if c == str(self.n + 1) else self.lose("No.")

    def hint(self):
        return "Add one."

    LEVEL = "{word}"
"""
EASY = PROGRAM.format(word="Easy")
HARD = PROGRAM.format(word="Hard")

MODEL = "tiny-smollm"
MAX_TOTAL_LEN = 512
LENGTH_BUCKETS = (320,)
ENVS_PER_STEP = 8
SEED = 0
LR = 3e-3
STEPS = 8
K = 2  # steps averaged at the start and at the end
PLAYS = 2
SFT_LOSS = 0.012


def scripted_agent(req) -> str:
    """Always right on EASY; on HARD right with the hint, and without it only for even reset seeds."""
    first = req.messages[0]["content"]
    m = re.search(r"(Easy|Hard): what is (\d+) plus 1", first)
    if m is None:
        return "\\boxed{0}"
    word, n = m.group(1), int(m.group(2))
    right = word == "Easy" or "HINT:" in first or req.spec.seed % 2 == 0
    return f"\\boxed{{{n + 1 if right else n}}}"


class NoNovelty(NoveltyIndex):
    """A memory index that never reports a duplicate (the test writes the same two programs on purpose)."""

    def check(self, source, exclude=()):
        return NoveltyResult(True, "novelty off in this test")


def _config(seed: int) -> SelfPlayConfig:
    return SelfPlayConfig(
        plays_per_condition=PLAYS, envs_per_step=ENVS_PER_STEP, skills=(SKILL,), skills_per_regen=1, regen_interval=1,
        designer_delay=0, designer_reward_scale=1.0, fill_from_archive=False, seed=seed,
        memory=MemoryConfig(seed_from_library=False, n_positive=0, n_negative=0),
        designer=DesignerConfig(context_len=MAX_TOTAL_LEN, max_new_tokens=160, max_resamples=0,
                                use_corpus=False, use_memory=False),
        hints=HintConfig(source="env"), rollout=RolloutConfig(max_turns=2),
        # HARD and EASY are honest programs and this is about the designer's gradient: the step's audit (which
        # replays every play, half the step's time here) is tested in test_selfplay_audit and test_containment_*
        audit=AuditConfig(enabled=False),
    )  # fmt: skip


def _designer_prompt(sp: SelfPlay) -> list[int]:
    _, ids, _ = sp.designer.fit(sp.designer.parts_for(DesignTarget("game", SKILL)))
    return ids


def _answer(tokenizer, source: str) -> list[int]:
    """The designer's target completion, as the warm start writes it (spade_jax.run.warmstart.designer_examples)."""
    eos = list(tokenizer.eos_ids)[:1]
    return list(tokenizer.encode(f"```python\n{source.strip()}\n```", add_special_tokens=False)) + eos


def logp_programs(learner: Learner, tokenizer, prompt: list[int]) -> tuple[float, float]:
    """log P(HARD), log P(EASY): the whole completion's log-prob under the current params."""
    samples = [Sample(prompt, _answer(tokenizer, src), advantage=1.0, role=DESIGNER) for src in (HARD, EASY)]
    batch = pack_sequences(samples, length_buckets=LENGTH_BUCKETS)
    lp = np.asarray(learner.logprobs(batch)) * np.asarray(batch.loss_mask)
    return float(lp[0].sum()), float(lp[1].sum())


def p_hard(logp: tuple[float, float]) -> float:
    """P(HARD) / (P(HARD) + P(EASY)): the share of HARD among the two programs the designer would sample."""
    hard, easy = logp
    return float(1.0 / (1.0 + np.exp(easy - hard)))


def warm_start(model, tokenizer, prompt: list[int], *, lr: float = 1e-2, max_steps: int = 200) -> int:
    """Supervised steps on prompt -> EASY and prompt -> HARD (one of each per step) until both are nearly
    memorised (the least possible loss is ln 2 over the ~118 completion tokens, 0.006); returns the steps."""
    sft = Learner(model, LearnerConfig(lr=lr, weight_decay=0.0, length_buckets=LENGTH_BUCKETS, compute_entropy=False))
    samples = [Sample(prompt, _answer(tokenizer, src), advantage=1.0, role=DESIGNER) for src in (EASY, HARD)]
    batch = pack_sequences(samples, length_buckets=LENGTH_BUCKETS)
    for step in range(1, max_steps + 1):
        if sft.sft_step(batch)["loss"] < SFT_LOSS:
            return step
    return max_steps


def selfplay_run(model, tokenizer, sampler, pool, *, seed: int, lr: float, steps: int = STEPS) -> dict:
    """`steps` steps of the real cycle from the model's current params: per step, the shares of HARD and EASY
    among the round's designs (first draws), the valid share, the mean designer reward of each program, and
    log P(HARD), log P(EASY) before the step's update."""
    sampler.update_model(model)
    sp = SelfPlay(_config(seed), sampler=sampler, tokenizer=tokenizer, pool=pool,
                  agent_policy=ScriptedPolicy(scripted_agent))  # fmt: skip
    sp.memory.novelty = NoNovelty()
    # Adam's eps at 1e-4: the first updates of a fresh Adam are sign(gradient) on every parameter, and the
    # near-cancelling gradients of the 49K tied output rows then shift all logits at once (the memorised
    # programs fall apart within 3 steps at eps 1e-8, any lr >= 3e-4); eps damps only those tiny gradients.
    learner_cfg = LearnerConfig(lr=lr, eps=1e-4, length_buckets=LENGTH_BUCKETS, compute_entropy=False)
    learner = Learner(model, learner_cfg)
    rule = BatchRule(role_norm="none")
    buckets = learner_cfg.length_buckets_for(MAX_TOTAL_LEN)
    prompt = _designer_prompt(sp)
    out: dict = {"hard": [], "easy": [], "valid": [], "reward_easy": [], "reward_hard": [], "logp": [], "trained": []}
    try:
        for step in range(steps):
            out["logp"].append(logp_programs(learner, tokenizer, prompt))
            batch = sp.step(step)
            designs = [r.code.strip() for r in sp.memory.attempts(step) if r.attempt == 0]
            out["hard"].append(designs.count(HARD.strip()) / len(designs))
            out["easy"].append(designs.count(EASY.strip()) / len(designs))
            out["valid"].append(batch.stats.get("design/valid_frac", 0.0))
            rewards: dict[str, list[float]] = {EASY.strip(): [], HARD.strip(): []}
            for row in batch.envs:
                rewards.get(sp.memory.get(row["env_id"]).code.strip(), []).append(row["designer_reward"])
            out["reward_easy"] += rewards[EASY.strip()]
            out["reward_hard"] += rewards[HARD.strip()]
            batch = dataclasses.replace(batch, agent=())  # the scripted agent's replies are not the model's
            stats = train_on(batch, learner, rule, buckets=buckets, pad_id=tokenizer.pad_id or 0,
                             sync=lambda: sampler.update_model(learner.model))  # fmt: skip
            out["trained"].append(stats.get("train/designer_samples", 0.0))
        out["logp"].append(logp_programs(learner, tokenizer, prompt))
    finally:
        sp.close()
    return out


def _copy(state):
    return jax.tree.map(lambda x: x.copy(), state)


def _mean(xs) -> float:
    return float(np.mean(xs))


def test_the_designer_learns_to_write_the_in_band_program(pool, monkeypatch):
    """The trained run's designer moves to HARD (sampled share and exact probability); with lr 0 it stays."""
    from spade_jax.model.loading import load_model
    from spade_jax.sampling import Sampler

    monkeypatch.setattr(designer_module, "contract_text", lambda name="full": SHORT_CONTRACT)
    _, model, tokenizer = load_model(MODEL, seed=SEED)
    probe = SelfPlay(_config(SEED), sampler=None, tokenizer=tokenizer, pool=pool, corpus=None)
    warm_start(model, tokenizer, _designer_prompt(probe))
    warm = _copy(nnx.state(model, nnx.Param))
    sampler = Sampler(model, tokenizer, max_total_len=MAX_TOTAL_LEN)

    control = selfplay_run(model, tokenizer, sampler, pool, seed=SEED, lr=0.0)
    nnx.update(model, _copy(warm))
    trained = selfplay_run(model, tokenizer, sampler, pool, seed=SEED, lr=LR)
    summary = {k: (control[k], trained[k]) for k in ("hard", "easy", "valid", "trained")}

    # the warm start: both programs, about half each, nearly every design valid
    assert 0.35 <= p_hard(trained["logp"][0]) <= 0.65, summary
    assert _mean(trained["hard"][:K]) >= 0.2 and _mean(trained["easy"][:K]) >= 0.2, summary
    # the signal: EASY earns the designer nothing, HARD clearly more (the blend of regret and plateau)
    rewards = control["reward_easy"] + trained["reward_easy"]
    assert rewards and max(rewards) == 0.0, summary
    assert _mean(control["reward_hard"] + trained["reward_hard"]) >= 0.4, summary
    assert all(n > 0 for n in trained["trained"][:K]), summary  # designer samples reached the learner
    # learning: HARD written clearly more often at the end than at the start, the programs still valid
    start, end = _mean(trained["hard"][:K]), _mean(trained["hard"][-K:])
    assert end >= start + 0.25 and end >= 0.8, summary
    assert p_hard(trained["logp"][-1]) >= 0.85, summary
    assert _mean(trained["valid"][-K:]) >= 0.75, summary
    # the control: the same run with lr 0 does not move (same params, so no more HARD than chance gives)
    assert control["logp"][-1] == pytest.approx(control["logp"][0], abs=1e-5), summary
    assert _mean(control["hard"][-K:]) <= end - 0.25, summary


if __name__ == "__main__":  # the figures over several seeds: python tests/test_designer_learns.py 0,1,2
    import sys

    from spade_jax.model.loading import load_model
    from spade_jax.sampling import Sampler
    from spade_jax.sandbox.host_pool import HostPool
    from spade_jax.sandbox.launchers import SandboxConfig

    designer_module.contract_text = lambda name="full": SHORT_CONTRACT
    pool = HostPool(num_workers=POOL_WORKERS, sandbox=SandboxConfig(level="auto", call_timeout_s=POOL_CALL_TIMEOUT_S))
    try:
        for seed in [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "0").split(",")]:
            t0 = time.time()
            _, model, tokenizer = load_model(MODEL, seed=seed)
            probe = SelfPlay(_config(seed), sampler=None, tokenizer=tokenizer, pool=pool, corpus=None)
            n = warm_start(model, tokenizer, _designer_prompt(probe))
            print(f"seed {seed}: warm start {n} steps, {time.time() - t0:.0f} s", flush=True)
            warm = _copy(nnx.state(model, nnx.Param))
            sampler = Sampler(model, tokenizer, max_total_len=MAX_TOTAL_LEN)
            for lr in (0.0, LR):
                nnx.update(model, _copy(warm))
                t1 = time.time()
                r = selfplay_run(model, tokenizer, sampler, pool, seed=seed, lr=lr)
                print(f"  lr={lr:g} ({time.time() - t1:.0f} s): p_hard "
                      + " ".join(f"{p_hard(lp):.2f}" for lp in r["logp"]))  # fmt: skip
                for key in ("hard", "easy", "valid"):
                    print(f"    {key:5s}", " ".join(f"{x:.2f}" for x in r[key]))
                print(f"    reward easy {_mean(r['reward_easy']):.2f} hard {_mean(r['reward_hard']):.2f}", flush=True)
    finally:
        pool.close()
