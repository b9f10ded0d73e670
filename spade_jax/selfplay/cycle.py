"""One self-play step, everything but the gradient: design (every `regen_interval` steps), hints, K hinted +
K unhinted plays per environment, regret, designer rewards, memory update, and the `SelfPlayBatch`.

Hinted and unhinted plays of an environment use the same reset seeds (play k of both conditions sees the same
episode), which removes the seed variance from the regret. When too few designs are valid (a small model
early on), the step is filled with environments from the archive so the agent always has something to play.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from spade_jax.envs.contract import SKILLS, TOOL_DOMAINS
from spade_jax.envs.gates import GateConfig
from spade_jax.selfplay.batch import SelfPlayBatch, SelfPlaySample
from spade_jax.selfplay.config import SelfPlayConfig
from spade_jax.selfplay.corpus import Corpus
from spade_jax.selfplay.designer import Designer, DesignResult, DesignTarget
from spade_jax.selfplay.hints import HintWriter, defines_hint
from spade_jax.selfplay.memory import Memory
from spade_jax.selfplay.regret import LearningProgress, RegretStats, designer_reward, measure_regret
from spade_jax.selfplay.rollouts import HINT, NO_HINT, EpisodeSpec, ModelPolicy, Policy, RolloutEngine, RolloutResult

__all__ = ["PlayableEnv", "SelfPlay", "episode_seed"]


@dataclass
class PlayableEnv:
    """An environment the agent plays this step, with its hint (model-written) or `env_hint` (its own)."""

    env_id: str
    source: str
    kind: str
    skill: str
    hint: str | None = None
    env_hint: bool = False


def episode_seed(env_id: str, step: int, k: int) -> int:
    """Reset seed of play k of an environment at a step (shared by the hinted and unhinted play k)."""
    digest = hashlib.sha256(f"{env_id}|{step}|{k}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


class SelfPlay:
    """Owns the memory, corpus, designer, hint writer and rollout engine of a run."""

    def __init__(
        self,
        config: SelfPlayConfig,
        *,
        sampler: Any,
        tokenizer: Any,
        pool: Any,
        run_dir: str | Path | None = None,
        memory: Memory | None = None,
        corpus: Corpus | None = None,
        agent_policy: Policy | None = None,
        gate_config: GateConfig | None = None,
    ):
        self.config, self.sampler, self.tokenizer, self.pool = config, sampler, tokenizer, pool
        path = Path(run_dir) / "memory.sqlite" if run_dir is not None else ":memory:"
        self.memory = memory or Memory(path, config.memory)
        if config.memory.seed_from_library:
            self.memory.seed_from_library()
        if corpus is None and config.designer.use_corpus:
            corpus = Corpus(config.corpus, tokenizer)
        self.corpus = corpus
        context = getattr(sampler, "max_total_len", None)
        self.gate_config = gate_config or GateConfig(max_turns=config.rollout.max_turns)
        self.designer = Designer(
            sampler, tokenizer, pool, self.memory, config.designer, corpus=corpus, gate_config=self.gate_config,
            exemplars=(config.memory.n_positive, config.memory.n_negative),
            exemplar_max_chars=config.memory.exemplar_max_chars, seed=config.seed,
        )  # fmt: skip
        self.hint_writer = HintWriter(sampler, tokenizer, config.hints, context_len=context or 4096)
        self.policy = agent_policy or ModelPolicy(
            sampler, tokenizer, temperature=config.rollout.temperature, top_p=config.rollout.top_p,
            top_k=config.rollout.top_k, seed=config.seed,
        )  # fmt: skip
        self.engine = RolloutEngine(
            pool, self.policy, tokenizer, config.rollout, max_context=context, hint_template=config.hints.template
        )
        self.progress = LearningProgress(config.reward.lp_gamma_fast, config.reward.lp_gamma_slow)
        self.rng = random.Random(config.seed)
        self.current: list[PlayableEnv] = []

    # ----------------------------------------------------------------------------------- designing
    def targets(self, n: int) -> list[DesignTarget]:
        """n (kind, skill) targets, skills cycling in a seeded random order."""
        out = []
        for _ in range(n):
            kind = self.rng.choice(list(self.config.kinds))
            pool = self.config.skills or (TOOL_DOMAINS if kind == "tool" else SKILLS)
            out.append(DesignTarget(kind, self.rng.choice(list(pool))))
        return out

    def design(self, step: int, n: int | None = None) -> list[DesignResult]:
        """Designs n environments (default envs_per_step); every attempt lands in the memory."""
        return self.designer.design(self.targets(n or self.config.envs_per_step), step)

    def from_archive(self, n: int, exclude: set[str] = frozenset()) -> list[PlayableEnv]:
        """n archived environments (in-band ones first, then any), for steps with too few valid designs."""
        entries = [r for r in self.memory.archive() if r.id not in exclude and r.kind in self.config.kinds]
        lo, hi = self.config.memory.positive_band
        self.rng.shuffle(entries)
        entries.sort(key=lambda r: 0 if (r.measured and lo <= r.win_rate_no_hint <= hi) else 1)
        return [PlayableEnv(r.id, r.code, r.kind, r.skill) for r in entries[:n]]

    # ---------------------------------------------------------------------------------------- hints
    def attach_hints(self, envs: list[PlayableEnv], step: int) -> None:
        """Env-provided hints where allowed and defined, model-written ones (one batched call) otherwise."""
        source = self.config.hints.source
        need_model = []
        for env in envs:
            env.env_hint = source in ("env", "env_or_model") and defines_hint(env.source)
            if not env.env_hint and source in ("model", "env_or_model") and env.hint is None:
                need_model.append(env)
        if need_model:
            written = self.hint_writer.write([(e.source, e.kind) for e in need_model], seed=step * 7919 + 1)
            for env, (hint, _) in zip(need_model, written):
                env.hint = hint or None

    # ------------------------------------------------------------------------------------ measuring
    def play(self, envs: list[PlayableEnv], step: int, k: int | None = None) -> RolloutResult:
        """K hinted and K unhinted episodes of every environment, all in one batched rollout."""
        k = k or self.config.plays_per_condition
        specs = []
        for env in envs:
            for cond in (HINT, NO_HINT):
                for i in range(k):
                    specs.append(EpisodeSpec(env.env_id, env.source, episode_seed(env.env_id, step, i), cond,
                                             env.hint, env.env_hint, env.kind))  # fmt: skip
        return self.engine.run(specs)

    def step(self, step: int) -> SelfPlayBatch:
        """One full self-play step; returns the samples of both roles and the step's measurements."""
        designs: list[DesignResult] = []
        if not self.current or step % max(1, self.config.regen_interval) == 0:
            designs = self.design(step)
            envs = [PlayableEnv(d.env_id, d.source, d.target.kind, d.target.skill) for d in designs if d.valid]
            if self.config.fill_from_archive and len(envs) < self.config.envs_per_step:
                envs += self.from_archive(self.config.envs_per_step - len(envs), {e.env_id for e in envs})
            self.current = envs
            self.attach_hints(self.current, step)
        return self.measure(self.current, step, designs)

    def measure(self, envs: list[PlayableEnv], step: int, designs: list[DesignResult] = ()) -> SelfPlayBatch:
        """Plays `envs`, computes regret and rewards, updates the memory, and builds the batch."""
        result = self.play(envs, step) if envs else RolloutResult(episodes=[])
        per_env: dict[str, dict[str, list]] = defaultdict(lambda: {HINT: [], NO_HINT: []})
        timeouts: Counter = Counter()
        for ep in result.episodes:
            if ep.end_reason == "timeout":
                timeouts[ep.env_id] += 1
            if not ep.discarded:
                per_env[ep.env_id][ep.condition].append(ep)
        k = self.config.plays_per_condition
        stats_by_env: dict[str, RegretStats] = {}
        rewards_by_env: dict[str, float] = {}
        rows = []
        for env in envs:
            h, u = per_env[env.env_id][HINT], per_env[env.env_id][NO_HINT]
            st = measure_regret([e.episode_return for e in h], [e.episode_return for e in u],
                                [e.won for e in h], [e.won for e in u], expected_plays=k,
                                min_plays_fraction=self.config.reward.min_plays_fraction)  # fmt: skip
            reward = designer_reward(st, self.config.reward, skill=env.skill, progress=self.progress)
            if timeouts[env.env_id]:
                reward = self.config.reward.timeout_reward
            stats_by_env[env.env_id], rewards_by_env[env.env_id] = st, reward
            if st.measured and self.memory.get(env.env_id) is not None:  # envs outside memory: not archived
                self.memory.update_stats(env.env_id, win_rate_hint=st.win_rate_hint,
                                         win_rate_no_hint=st.win_rate_no_hint, return_hint=st.return_hint,
                                         return_no_hint=st.return_no_hint, regret=st.regret,
                                         designer_reward=reward, plays=st.n_hint + st.n_no_hint)  # fmt: skip
            rows.append({"env_id": env.env_id, "kind": env.kind, "skill": env.skill, "hint": env.hint,
                         "env_hint": env.env_hint, "designer_reward": reward, "timeouts": timeouts[env.env_id],
                         **asdict(st)})  # fmt: skip
        by_skill: dict[str, list[float]] = defaultdict(list)
        for env in envs:
            if stats_by_env[env.env_id].measured:
                by_skill[env.skill].append(stats_by_env[env.env_id].win_rate)
        for skill, rates in by_skill.items():
            self.progress.update(skill, sum(rates) / len(rates))

        batch = SelfPlayBatch(envs=rows)
        for ep in result.kept:
            if ep.condition == HINT and not self.config.train_agent_on_hinted:
                continue
            if not ep.completion_ids or not ep.prompt_ids:
                continue
            batch.samples.append(SelfPlaySample(
                "agent", ep.prompt_ids, ep.completion_ids, ep.completion_mask, ep.logprobs, ep.episode_return,
                f"agent/{step}/{ep.env_id}/{ep.condition}", ep.raw_logprobs,
                {"env_id": ep.env_id, "condition": ep.condition, "turns": ep.turns, "end": ep.end_reason,
                 "won": ep.won, "seed": ep.spec.seed},
            ))  # fmt: skip
        if step >= self.config.designer_train_start:
            for d in designs:
                attempts = d.attempts if self.config.designer.train_on_repairs else d.attempts[:1]
                for a in attempts:
                    reward = rewards_by_env.get(a.record_id, 0.0) if a.valid else 0.0
                    batch.samples.append(SelfPlaySample(
                        "designer", a.prompt_ids, a.completion_ids, [1] * len(a.completion_ids), a.logprobs,
                        reward, f"designer/{step}/{d.target.skill}", a.raw_logprobs,
                        {"record_id": a.record_id, "attempt": a.attempt, "gate": a.verdict.gate,
                         "valid": a.valid, "kind": d.target.kind, "skill": d.target.skill},
                    ))  # fmt: skip
        batch.stats = self._stats(result, designs, stats_by_env, rewards_by_env)
        return batch

    def _stats(self, result: RolloutResult, designs, stats_by_env, rewards_by_env) -> dict[str, float]:
        out = {f"rollout/{k}": v for k, v in result.stats().items()}
        out.update({f"rollout/failure_{k}": float(v) for k, v in result.failures.items()})
        if designs:
            attempts = [a for d in designs for a in d.attempts]
            out["design/targets"] = float(len(designs))
            out["design/valid_frac"] = sum(d.valid for d in designs) / len(designs)
            out["design/attempts"] = float(len(attempts))
            out["design/repaired"] = float(sum(d.valid and len(d.attempts) > 1 for d in designs))
            for gate, n in Counter(a.verdict.gate for a in attempts if not a.valid).items():
                out[f"design/failed_{gate}"] = float(n)
        measured = [s for s in stats_by_env.values() if s.measured]
        if measured:
            out["env/regret_mean"] = sum(s.regret for s in measured) / len(measured)
            out["env/win_rate_no_hint_mean"] = sum(s.win_rate_no_hint for s in measured) / len(measured)
            out["env/win_rate_hint_mean"] = sum(s.win_rate_hint for s in measured) / len(measured)
        if rewards_by_env:
            out["env/designer_reward_mean"] = sum(rewards_by_env.values()) / len(rewards_by_env)
        out.update({f"memory/{k}": float(v) for k, v in self.memory.summary().items()})
        return out

    # ---------------------------------------------------------------------------------- checkpoints
    def get_state(self) -> dict:
        """JSON-able state for exact resume (corpus position, memory snapshot, RNGs, current envs)."""
        rng = self.rng.getstate()
        return {
            "corpus": self.corpus.get_state() if self.corpus is not None else None,
            "memory": self.memory.get_state(),
            "progress": self.progress.get_state(),
            "rng": [rng[0], list(rng[1]), rng[2]],
            "current": [asdict(e) for e in self.current],
            "designer_calls": self.designer.calls,
            "policy_calls": getattr(self.policy, "calls", 0),
        }

    def set_state(self, state: dict) -> None:
        """Restores `get_state()`."""
        if self.corpus is not None and state.get("corpus") is not None:
            self.corpus.set_state(state["corpus"])
        self.memory.set_state(state["memory"])
        self.progress.set_state(state["progress"])
        v, internal, gauss = state["rng"]
        self.rng.setstate((v, tuple(internal), gauss))
        self.current = [PlayableEnv(**e) for e in state["current"]]
        self.designer.calls = int(state.get("designer_calls", 0))
        if hasattr(self.policy, "calls"):
            self.policy.calls = int(state.get("policy_calls", 0))

    def close(self) -> None:
        self.engine.close()
