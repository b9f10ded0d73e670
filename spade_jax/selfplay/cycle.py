"""One self-play step, everything but the gradient: design (every `regen_interval` steps, skills round-robin),
hints, plays, the design rounds' windows, designer rewards, memory updates, and the `SelfPlayBatch`.

At a round's first step each environment is played K times with its hint and K times without; at the
round's other steps K times without. Play k of both conditions uses the same reset seed, which removes the
seed variance from the regret. An environment whose step() hangs is the designer's fault: the hung episode
is discarded (never trained), the environment is retired for the rest of its round and its design earns the
timeout reward. At every step every environment played is also audited on the agent's own seeds
(audit.py); one that broke its contract there, or in the agent's plays, is retired from the round and the
archive, none of its plays of the step is trained, and its design earns the violation reward.
A round's designs are trained `designer_delay` steps later on the window's measurements
(window.py). When too few designs are valid (a small model early on), the step is filled with environments
from the archive so the agent always has something to play.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from spade_jax import streams
from spade_jax.config.selfplay import SelfPlayConfig
from spade_jax.envs.contract import SKILLS, TOOL_DOMAINS
from spade_jax.envs.source import EnvSource
from spade_jax.gates.audit import Auditor, AuditResult
from spade_jax.gates.sandboxed import GateConfig
from spade_jax.infra.hosts import Hosts
from spade_jax.interfaces import EnvPool, SamplerLike, TokenizerLike
from spade_jax.selfplay.batch import SelfPlayBatch
from spade_jax.selfplay.corpus import Corpus
from spade_jax.selfplay.designer import Designer, DesignResult, DesignTarget
from spade_jax.selfplay.hints import HintWriter, defines_hint
from spade_jax.selfplay.memory import EnvRecord, Memory
from spade_jax.selfplay.regret import LearningProgress
from spade_jax.selfplay.rollouts import HINT, NO_HINT, EpisodeSpec, ModelPolicy, Policy, RolloutEngine, RolloutResult
from spade_jax.selfplay.window import DesignSample, EnvWindow, Round, RoundScore, score_round, window_stats
from spade_jax.trajectory import AGENT, DESIGNER, Sample

__all__ = ["FixedPool", "PlayableEnv", "SelfPlay"]


@dataclass
class PlayableEnv:
    """An environment the agent plays this step, with its hint (model-written) or `env_hint` (its own)."""

    env_id: str
    source: str
    kind: str
    skill: str
    hint: str | None = None
    env_hint: bool = False


@dataclass(frozen=True)
class FixedPool:
    """Where a fixed-pool step's environments come from (the baselines: designer off): `per_step` of `envs`
    drawn afresh every step from the run's "pool" stream (`seed` is the run seed)."""

    envs: tuple[EnvSource, ...]
    per_step: int
    seed: int

    def draw(self, step: int) -> list[EnvSource]:
        return streams.rng(self.seed, "pool", step).sample(list(self.envs), min(self.per_step, len(self.envs)))


def gate_key(run_dir: str | Path | None) -> str:
    """The run's secret for gate seeds (`GateConfig.seed_key`): made once, kept in the run directory (so a resumed
    run validates with the same seeds), never sent to an environment. Without a run directory: the default key."""
    if run_dir is None:
        return GateConfig.seed_key
    path = Path(run_dir) / "gate_key"
    try:
        key = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        key = ""
    if len(key) < 16:  # missing or damaged: a new secret (only the seeds of later validations change)
        key = secrets.token_hex(16)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(key)
        tmp.replace(path)
    return key


class SelfPlay:
    """Owns the memory, corpus, designer, hint writer and rollout engine of a run."""

    def __init__(
        self,
        config: SelfPlayConfig,
        *,
        sampler: SamplerLike | None,
        tokenizer: TokenizerLike,
        pool: EnvPool,
        run_dir: str | Path | None = None,
        memory: Memory | None = None,
        corpus: Corpus | None = None,
        agent_policy: Policy | None = None,
        gate_config: GateConfig | None = None,
        library: Sequence | None = None,
        hosts: Hosts = Hosts(),
    ):
        config = config.seeded(config.seed)  # the memory and corpus streams follow the run seed
        self.config, self.sampler, self.tokenizer, self.pool = config, sampler, tokenizer, pool
        self.hosts = hosts
        writer = run_dir is not None and hosts.is_leader  # the other hosts keep their copy in RAM
        self.memory = memory or Memory(Path(run_dir) / "memory.sqlite" if writer else ":memory:", config.memory)
        if config.memory.seed_from_library:  # `library`: the seeds to archive (None: all; held-out ones left out)
            self.memory.seed_from_library(library)
        if hosts.count > 1:  # every host starts from the leader's rows, so every later write is the same
            rows = hosts.gather(self.memory.dump() if hosts.is_leader else None)[0]
            if not hosts.is_leader:
                self.memory.load(rows)
        if corpus is None and config.designer.use_corpus:
            corpus = Corpus(config.corpus, tokenizer)
        self.corpus = corpus
        context = getattr(sampler, "max_total_len", None)
        if gate_config is None:  # the run's key, made by the leader only
            key = hosts.gather(gate_key(run_dir) if hosts.is_leader else None)[0]
            gate_config = replace(config.gates, max_turns=config.rollout.max_turns, seed_key=key)
        self.gate_config = gate_config
        self.designer = Designer(
            sampler, tokenizer, pool, self.memory, config.designer, corpus=corpus, gate_config=self.gate_config,
            exemplars=(config.memory.n_positive, config.memory.n_negative),
            exemplar_max_chars=config.memory.exemplar_max_chars, seed=config.seed, hosts=hosts,
        )  # fmt: skip
        self.hint_writer = HintWriter(sampler, tokenizer, config.hints, context_len=context or 4096)
        self.policy = agent_policy or ModelPolicy(
            sampler, tokenizer, temperature=config.rollout.temperature, top_p=config.rollout.top_p,
            top_k=config.rollout.top_k, seed=hosts.seed(config.seed),
        )  # fmt: skip
        self.engine = RolloutEngine(
            pool, self.policy, tokenizer, config.rollout, max_context=context, hint_template=config.hints.template
        )
        self.auditor = (
            Auditor(pool, random_plays=config.audit.random_plays, max_turns=config.rollout.max_turns)
            if config.audit.enabled
            else None
        )
        self.progress = LearningProgress(config.reward.lp_gamma_fast, config.reward.lp_gamma_slow)
        self.rng = streams.rng(config.seed, "selfplay")
        self.current: list[PlayableEnv] = []
        self.rounds: list[Round] = []
        self.design_rounds = 0

    # ----------------------------------------------------------------------------------- designing
    def targets(self, n: int) -> list[DesignTarget]:
        """n (kind, skill) targets for the next design round.

        `skills_per_regen` (kind, skill) pairs are active per round, the window advancing round-robin over
        all configured pairs from one round to the next; targets are dealt to the active pairs in turn. At
        most n // 2 pairs are active, so every skill gets at least two designs to be centred against. The last
        round(n * designer.mutation_share) targets (the skills share them evenly) are mutations of an archived
        parent (`mutation_targets`).
        """
        pairs = [(kind, skill) for kind in self.config.kinds
                 for skill in (self.config.skills or (TOOL_DOMAINS if kind == "tool" else SKILLS))]  # fmt: skip
        k = self.config.skills_per_regen or len(pairs)
        k = max(1, min(k, len(pairs), n // 2))
        start = (self.design_rounds * k) % len(pairs)
        active = [pairs[(start + j) % len(pairs)] for j in range(k)]
        return self.mutation_targets([DesignTarget(*active[i % k]) for i in range(n)])

    def mutation_targets(self, targets: list[DesignTarget]) -> list[DesignTarget]:
        """Gives the last round(len * mutation_share) targets a mutation parent of their (kind, skill) (else
        of their kind; `memory.mutation_parents`), spreading a round's mutations over distinct parents where
        there are enough; a target without an eligible parent stays a from-scratch design."""
        cfg = self.config.designer
        m = int(len(targets) * cfg.mutation_share + 0.5)
        if m <= 0:
            return targets
        used: Counter = Counter()
        out = list(targets)
        for i in range(len(out) - m, len(out)):
            t = out[i]
            ranked = self.memory.mutation_parents(t.kind, t.skill, cfg.mutation_parents)
            if ranked:
                parent = min(enumerate(ranked), key=lambda e: (used[e[1].id], e[0]))[1]
                used[parent.id] += 1
                out[i] = DesignTarget(t.kind, t.skill, parent.id)
        return out

    def design(self, step: int, n: int | None = None) -> list[DesignResult]:
        """Designs n environments (default envs_per_step); every attempt lands in the memory."""
        results = self.designer.design(self.targets(n or self.config.envs_per_step), step)
        self.design_rounds += 1
        return results

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
            seed = streams.derive(self.config.seed, "hints", step)
            written = self.hint_writer.write([(e.source, e.kind) for e in need_model], seed=seed, hosts=self.hosts)
            for env, res in zip(need_model, written):
                env.hint = res.hint  # None (empty / cut / error): its hinted plays are discarded ("hint_failed")

    # ------------------------------------------------------------------------------------ measuring
    def play(self, envs: list[PlayableEnv], step: int, k: int | None = None, *, hinted: bool = True) -> RolloutResult:
        """K unhinted (and, with `hinted`, K hinted) episodes of every environment, in one batched rollout.
        An environment without a hint gets no hinted plays: there is nothing to measure regret with."""
        k = k or self.config.plays_per_condition
        specs = []
        for env in envs:
            has_hint = bool(env.hint) or env.env_hint
            for cond in (HINT, NO_HINT) if (hinted and has_hint) else (NO_HINT,):
                for i in range(k):
                    seed = streams.episode_seed(self.config.seed, env.env_id, step, i)
                    specs.append(EpisodeSpec(env.env_id, env.source, seed, cond, env.hint, env.env_hint, env.kind))
        return self.run(specs)

    def run(self, specs: Sequence[EpisodeSpec]) -> RolloutResult:
        """Plays `specs`, each host its block in its own sandboxes; every host gets every episode, in order."""
        if self.hosts.count == 1:
            return self.engine.run(specs)
        block = [specs[i] for i in self.hosts.block(len(specs))]
        return RolloutResult.merge(self.hosts.gather(self.engine.run(block) if block else RolloutResult([])))

    def evaluate(self, envs: Sequence[EnvSource], step: int, plays: int) -> dict[str, list[bool]]:
        """Unhinted plays of environments kept out of training (held-out seeds, evaluation sets): each one's
        outcomes in play order, by name. Reset seeds come from the run's "heldout" stream, so two runs of one seed
        play the same episodes; nothing is archived, scored or trained."""
        run_seed, specs = self.config.seed, []
        for e in envs:
            for k in range(plays):
                seed = streams.derive(run_seed, "heldout", e.name, step, k)
                specs.append(EpisodeSpec(f"heldout-{e.name}", e.source, seed, NO_HINT, kind=e.kind))
        won = {(ep.env_id, ep.spec.seed): bool(ep.won) for ep in self.run(specs).episodes} if specs else {}
        out: dict[str, list[bool]] = {e.name: [] for e in envs}
        for spec in specs:  # in play order
            out[spec.env_id.removeprefix("heldout-")].append(won.get((spec.env_id, spec.seed), False))
        return out

    def step(self, step: int, *, final: bool = False, pool: FixedPool | None = None) -> SelfPlayBatch:
        """One full self-play step; returns the samples of both roles and the step's measurements.

        `final` closes every open round, so the designs of the last rounds are trained too. With `pool` the
        step plays environments drawn from it instead of designing (archived with origin "pool")."""
        if pool is not None:
            return self.play_fixed([self._archived(env, step) for env in pool.draw(step)], step)
        designs: list[DesignResult] = []
        if not self.current or step % self.config.regen_interval == 0:
            designs = self.design(step)
            envs = [PlayableEnv(d.env_id, d.source, d.target.kind, d.target.skill) for d in designs if d.valid]
            if self.config.fill_from_archive and len(envs) < self.config.envs_per_step:
                envs += self.from_archive(self.config.envs_per_step - len(envs), {e.env_id for e in envs})
            self.current = envs
            self.attach_hints(self.current, step)
            self.open_round(step, self.current, designs)
        return self.measure(self.current, step, designs, final=final)

    def _archived(self, env: EnvSource, step: int) -> PlayableEnv:
        """A pool environment as played, entered in the memory the first time it is drawn."""
        env_id = f"pool-{env.name}"
        if self.memory.get(env_id) is None:
            self.memory.add(EnvRecord(id=env_id, code=env.source, kind=env.kind, skill=env.skill, name=env.name,
                                      origin="pool", verdict_valid=True, verdict_gate="pool", step=step))  # fmt: skip
        return PlayableEnv(env_id, env.source, env.kind, env.skill)

    def play_fixed(self, envs: list[PlayableEnv], step: int) -> SelfPlayBatch:
        """A step on given environments (fixed-pool baselines): hints, then a round of its own, scored at once."""
        self.attach_hints(envs, step)
        return self.measure(envs, step)

    def open_round(self, step: int, envs: list[PlayableEnv], designs: Sequence[DesignResult]) -> Round:
        """Starts the window of a regeneration step's environments and keeps its designs for training."""
        rnd = Round(step, {e.env_id: EnvWindow(e.env_id, e.kind, e.skill, "ok" if (e.hint or e.env_hint) else "missing")
                           for e in envs})  # fmt: skip
        for d in designs:
            for a in d.trainable(self.config.designer):
                rnd.samples.append(DesignSample(
                    a.prompt_ids, a.completion_ids, a.logprobs, a.raw_logprobs, a.record_id, d.target.kind,
                    d.target.skill, a.valid, a.attempt, a.verdict.gate,
                ))  # fmt: skip
        self.rounds.append(rnd)
        return rnd

    def measure(self, envs: list[PlayableEnv], step: int, designs: Sequence[DesignResult] = (), *,
                final: bool = False) -> SelfPlayBatch:  # fmt: skip
        """Plays `envs` (hinted too at their round's first step), records the plays in their round, retires
        environments that hung, closes the rounds that are due, and builds the batch of both roles.

        Environments outside the open round (fixed pools, evaluation of given environments) make a round of
        their own that is scored at once."""
        rnd = self.rounds[-1] if self.rounds else None
        adhoc = None
        if rnd is None or not all(e.env_id in rnd.envs for e in envs):
            rnd = adhoc = self.open_round(step, envs, [])
        result = self.play(envs, step, hinted=step == rnd.start) if envs else RolloutResult([])
        audits = self.audit(envs, step, hinted=step == rnd.start)
        hung, broken = self._record(rnd, result, step, audits)
        self.current = [e for e in self.current if e.env_id not in hung | broken]
        batch = SelfPlayBatch(samples=self._agent_samples(result, step, exclude=broken), examples=_examples(result))
        closing = [r for r in self.rounds if final or r is adhoc or r.due(step, self.config.designer_delay)]
        self.rounds = [r for r in self.rounds if r not in closing]
        scores: dict[str, RoundScore] = {}
        for r in closing:
            scores.update(self._close(r, batch, step))
        n_agent = len(batch.samples) - len(batch.by_role("designer"))
        batch.designer_scale = self.designer_scale(n_agent, len(batch.by_role("designer")))
        batch.envs = [{"env_id": env_id, **_score_row(sc)} for env_id, sc in scores.items()]
        batch.stats = self._stats(result, designs, scores, hung, batch)
        batch.stats.update(_audit_stats(audits, broken))
        return batch

    def audit(self, envs: Sequence[PlayableEnv], step: int, *, hinted: bool = True) -> dict[str, AuditResult]:
        """Audits of `envs` on the reset seeds the agent plays at `step` (empty when audits are off); the
        hint checks only where the agent is shown the environment's own hint this step (`hinted`)."""
        if self.auditor is None or not envs:
            return {}
        n, run_seed = self.config.plays_per_condition, self.config.seed
        seeds = {e.env_id: [streams.episode_seed(run_seed, e.env_id, step, k) for k in range(n)] for e in envs}
        items = [(e.env_id, e.source, seeds[e.env_id], e.env_hint and hinted) for e in envs]
        results = self.hosts.map(items, lambda block: list(self.auditor.run(block).values()))  # each host its block
        return {r.env_id: r for r in results}

    def _record(self, rnd: Round, result: RolloutResult, step: int,
                audits: dict[str, AuditResult]) -> tuple[set[str], set[str]]:  # fmt: skip
        """Adds a step's plays to the round's windows (and the running figures to the memory); returns the
        environments that hung and those that broke their contract (audits, plays), both retired from the rest
        of the round; the latter leave the archive too."""
        offset = step - rnd.start
        hung, broken, played = set(), set(), Counter()
        for env_id, audit in audits.items():
            if audit.violation and env_id in rnd.envs:
                rnd.envs[env_id].violations.append(audit.violation)
                broken.add(env_id)
        for ep in result.episodes:
            env = rnd.envs.get(ep.env_id)
            if env is None:
                continue
            if ep.violation:
                env.violations.append(ep.violation)
                broken.add(ep.env_id)
            if ep.end_reason == "timeout":
                env.timeouts += 1
                hung.add(ep.env_id)
            if ep.condition == HINT and ep.hint_failed:
                env.hint_status = "missing"
            if ep.discarded or ep.end_reason == "timeout":
                continue
            played[ep.env_id] += 1
            if ep.condition == NO_HINT:
                env.add_play(offset, ep.episode_return, ep.won)
            elif ep.hint_leaked:
                env.hint_status = "leaked"
            else:
                env.hint_returns.append(ep.episode_return)
                env.hint_wins.append(ep.won)
        for env_id, n in played.items():
            st = window_stats(rnd.envs[env_id], expected_plays=self.config.plays_per_condition,
                              min_plays_fraction=self.config.reward.min_plays_fraction)  # fmt: skip
            if self.memory.get(env_id) is None:  # envs outside memory: not archived
                continue
            if not st.measured:
                self.memory.update_stats(env_id, plays=n)
                continue
            hinted = st.n_hint > 0
            self.memory.update_stats(env_id, win_rate_hint=st.win_rate_hint if hinted else None,
                                     win_rate_no_hint=st.win_rate, return_hint=st.return_hint if hinted else None,
                                     return_no_hint=st.return_no_hint, regret=st.regret, plays=n)  # fmt: skip
        for env_id in broken:
            self.memory.retire(env_id)
        return hung, broken

    def _agent_samples(self, result: RolloutResult, step: int, exclude: set[str] = frozenset()) -> list[Sample]:
        """The agent role's samples: kept, finished plays (never a hung one, nor any play of the step of an
        environment in `exclude`: one that broke its contract)."""
        out = []
        for ep in result.kept:
            if ep.env_id in exclude or ep.end_reason == "timeout":
                continue
            if ep.condition == HINT and not self.config.train_agent_on_hinted:
                continue
            if not ep.completion_ids or not ep.prompt_ids:
                continue
            out.append(Sample(
                ep.prompt_ids, ep.completion_ids, ep.completion_mask, ep.logprobs, role=AGENT,
                reward=ep.episode_return, group_id=f"agent/{step}/{ep.env_id}/{ep.condition}",
                raw_logprobs=ep.raw_logprobs,
                meta={"env_id": ep.env_id, "condition": ep.condition, "turns": ep.turns, "end": ep.end_reason,
                      "won": ep.won, "seed": ep.spec.seed},
            ))  # fmt: skip
        return out

    def _close(self, rnd: Round, batch: SelfPlayBatch, step: int) -> dict[str, RoundScore]:
        """Scores a round's environments over their window, stores the designer rewards in the memory and
        releases the round's designer samples (grouped per round and skill) into the batch."""
        scores = score_round(rnd, self.config.reward, self.progress, expected_plays=self.config.plays_per_condition,
                             min_plays_fraction=self.config.reward.min_plays_fraction)  # fmt: skip
        for env_id, sc in scores.items():
            if self.memory.get(env_id) is not None:
                self.memory.update_stats(env_id, designer_reward=sc.reward)
        if not self.config.train_designer:
            return scores
        for d in rnd.samples:
            reward = scores[d.record_id].reward if (d.valid and d.record_id in scores) else 0.0
            batch.samples.append(Sample(
                d.prompt_ids, d.completion_ids, [1] * len(d.completion_ids), d.logprobs, role=DESIGNER,
                reward=reward, group_id=f"designer/{rnd.start}/{d.kind}/{d.skill}", raw_logprobs=d.raw_logprobs,
                meta={"record_id": d.record_id, "attempt": d.attempt, "gate": d.gate, "valid": d.valid,
                      "kind": d.kind, "skill": d.skill, "round": rnd.start, "delayed_by": step - rnd.start},
            ))  # fmt: skip
        return scores

    def designer_scale(self, n_agent: int, n_designer: int) -> float:
        """The factor on centred designer rewards: fixed, or the reference's automatic one (agent samples per
        designer sample times the regeneration interval, capped)."""
        if self.config.designer_reward_scale > 0:
            return self.config.designer_reward_scale
        if n_agent <= 0 or n_designer <= 0:
            return 1.0
        return min(n_agent / n_designer * self.config.regen_interval, self.config.designer_reward_scale_max)

    def _stats(self, result: RolloutResult, designs, scores: dict[str, RoundScore], hung: set[str],
               batch: SelfPlayBatch) -> dict[str, float]:  # fmt: skip
        out = {f"rollout/{k}": v for k, v in result.stats().items()}
        out.update(result.hint_stats())
        out.update(self.hint_writer.stats())
        out.update({f"rollout/failure_{k}": float(v) for k, v in result.failures.items()})
        out["rollout/timeouts_discarded"] = float(sum(e.end_reason == "timeout" for e in result.episodes))
        out["env/retired_hung"] = float(len(hung))
        if designs:
            attempts = [a for d in designs for a in d.attempts]
            out["design/targets"] = float(len(designs))
            out["design/valid_frac"] = sum(d.valid for d in designs) / len(designs)
            out["design/attempts"] = float(len(attempts))
            out["design/retried_valid"] = float(sum(d.valid and len(d.attempts) > 1 for d in designs))
            for gate, n in Counter(a.verdict.gate for a in attempts if not a.valid).items():
                out[f"design/failed_{gate}"] = float(n)
            if self.config.designer.mutation_share > 0:
                mutations = [d for d in designs if d.mutation_of]
                out["design/mutations"] = float(len(mutations))
                out["design/mutation_fallbacks"] = float(sum(bool(d.target.parent_id and not d.mutation_of)
                                                             for d in designs))  # fmt: skip
                if mutations:
                    out["design/mutation_valid_frac"] = sum(d.valid for d in mutations) / len(mutations)
        out["design/rounds_open"] = float(len(self.rounds))
        released = batch.by_role("designer")
        out["design/samples_released"] = float(len(released))
        if released:  # what the designer is trained on: its designs' rewards, an invalid one's 0 included
            out["design/reward_mean"] = sum(s.reward for s in released) / len(released)
        out["design/reward_scale"] = batch.designer_scale
        if scores:
            measured = [s.stats for s in scores.values() if s.stats.measured]
            out["env/scored"] = float(len(scores))
            if measured:
                out["env/regret_mean"] = sum(s.regret for s in measured) / len(measured)
                out["env/win_rate_no_hint_mean"] = sum(s.win_rate_no_hint for s in measured) / len(measured)
                out["env/win_rate_hint_mean"] = sum(s.win_rate_hint for s in measured) / len(measured)
            # every environment the round played (seed-library ones too), by the designer's reward rule
            out["env/designer_reward_mean"] = sum(s.reward for s in scores.values()) / len(scores)
            for status, n in Counter(s.hint_status for s in scores.values()).items():
                out[f"env/hint_{status}"] = float(n)  # environments scored with a usable / missing / leaked hint
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
            "rounds": [r.to_dict() for r in self.rounds],
            "design_rounds": self.design_rounds,
            "designer_calls": self.designer.calls,
            "policy_calls": getattr(self.policy, "calls", 0),
            "policy_calls_by_host": self.hosts.gather(getattr(self.policy, "calls", 0)),  # each host plays its own
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
        self.rounds = [Round.from_dict(r) for r in state.get("rounds", [])]
        self.design_rounds = int(state.get("design_rounds", 0))
        self.designer.calls = int(state.get("designer_calls", 0))
        if hasattr(self.policy, "calls"):
            by_host = state.get("policy_calls_by_host") or []
            same = len(by_host) == self.hosts.count  # resumed on another number of hosts: the leader's count
            self.policy.calls = int(by_host[self.hosts.index] if same else state.get("policy_calls", 0))

    def close(self) -> None:
        self.engine.close()
        if self.auditor is not None:
            self.auditor.close()


def _score_row(sc: RoundScore) -> dict:
    """An environment's window measurement as a flat row (logs, reports)."""
    return {"designer_reward": sc.reward, "hint_status": sc.hint_status, "timeouts": sc.timeouts,
            "violation": sc.violation, **asdict(sc.stats)}  # fmt: skip


def _audit_stats(audits: dict[str, AuditResult], broken: set[str]) -> dict[str, float]:
    """The step's audit counters: environments audited, audit episodes, inconclusive audits, and environments
    retired for a broken contract (audits and plays)."""
    if not audits and not broken:
        return {}
    return {
        "audit/envs": float(len(audits)),
        "audit/episodes": float(sum(a.episodes for a in audits.values())),
        "audit/inconclusive": float(sum(bool(a.inconclusive) for a in audits.values())),
        "audit/random_wins": float(sum(a.random_wins for a in audits.values())),
        "env/retired_broken": float(len(broken)),
    }


def _examples(result: RolloutResult) -> list[dict[str, Any]]:
    """The first kept play of each environment in each condition, for the report's transcripts."""
    out, seen = [], set()
    for ep in result.kept:
        key = (ep.env_id, ep.condition)
        if key in seen or not ep.completion_ids:
            continue
        seen.add(key)
        out.append({"env_id": ep.env_id, "condition": ep.condition, "return": float(ep.episode_return),
                    "won": bool(ep.won), "turns": ep.turns, "end": ep.end_reason,
                    "prompt_ids": list(ep.prompt_ids), "completion_ids": list(ep.completion_ids)})  # fmt: skip
    return out
