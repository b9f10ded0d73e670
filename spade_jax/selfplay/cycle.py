"""One self-play step, everything but the gradient, read top to bottom in `SelfPlay.step` and `measure`:
design (every `regen_interval` steps, skills round-robin) -> hints -> plays -> the round's windows -> the
memory -> the rounds that close score their designs -> the step's `SelfPlayBatch`, built once.

What carries over from one step to the next (the environments being played, the open rounds) is `CycleState`;
`SelfPlay` holds the parts (memory, corpus, designer, hint writer, rollout engine, auditor) and the schedule.

At a round's first step each environment is played with its hint (`plays_per_condition` times) and without
(`SelfPlayConfig.unhinted_plays`); at the round's other steps without only. With `paired_seeds` hinted play k
uses the reset seed of unhinted play k, which removes the seed variance from the regret. An environment whose
step() hangs is the designer's fault: the hung episode is discarded (never trained), the environment retired
for the rest of its round, and under the strict signal its design earns the timeout reward. Under the strict
signal every environment played is also audited with the agent's own plays (gates/audit.py: replayed, and
replayed with the answers swapped for empty and random ones, in sessions it cannot tell from the agent's); one
that broke its contract there, or in the agent's plays, is retired from the round and the archive, none of its
plays of the step is trained, and its design earns the violation reward. One whose audit the host could not
finish trains none of its plays of that step either (default-deny). A hint whose candidate answers win at once
is leaked (no regret). A round's designs are trained `designer_delay`
steps later on the window's measurements (window.py). When too few designs are valid (a small model early on),
`fill_from_archive` fills the step with archived environments so the agent always has something to play.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from spade_jax import streams
from spade_jax.config.selfplay import SelfPlayConfig
from spade_jax.envs.contract import SKILLS, TOOL_DOMAINS
from spade_jax.envs.source import EnvSource
from spade_jax.gates.audit import AgentPlay, AuditEnv, Auditor, AuditResult
from spade_jax.gates.sandboxed import GateConfig
from spade_jax.infra.hosts import Hosts
from spade_jax.interfaces import EnvPool, SamplerLike, TokenizerLike
from spade_jax.selfplay.admission import remember
from spade_jax.selfplay.batch import SelfPlayBatch, agent_samples, designer_samples
from spade_jax.selfplay.corpus import Corpus
from spade_jax.selfplay.designer import Designer, DesignResult, DesignTarget
from spade_jax.selfplay.hints import HintWriter, defines_hint
from spade_jax.selfplay.memory import EnvRecord, Memory
from spade_jax.selfplay.regret import LearningProgress
from spade_jax.selfplay.rollouts import HINT, NO_HINT, EpisodeSpec, ModelPolicy, Policy, RolloutEngine, RolloutResult
from spade_jax.selfplay.stats import audit_stats, step_stats
from spade_jax.selfplay.window import DesignSample, EnvWindow, HintStatus, Round, RoundScore, record_plays, score_round

__all__ = ["CycleState", "FixedPool", "PlayableEnv", "SelfPlay"]


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


@dataclass
class CycleState:
    """What the cycle carries from one step to the next (checkpointed with the rest of `SelfPlay.get_state`):
    the environments being played, the design rounds still open, and how many rounds were designed."""

    current: list[PlayableEnv] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    design_rounds: int = 0

    def to_dict(self) -> dict:
        return {"current": [asdict(e) for e in self.current], "rounds": [r.to_dict() for r in self.rounds],
                "design_rounds": self.design_rounds}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict) -> CycleState:
        return cls([PlayableEnv(**e) for e in data["current"]], [Round.from_dict(r) for r in data.get("rounds", [])],
                   int(data.get("design_rounds", 0)))  # fmt: skip


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
    """Owns the memory, corpus, designer, hint writer and rollout engine of a run; `step` is the schedule."""

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
        self.gate_config = replace(gate_config, strict=gate_config.strict and config.strict)
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
        rollout = replace(config.rollout, check_hint_leaks=config.rollout.check_hint_leaks and config.strict)
        self.engine = RolloutEngine(pool, self.policy, tokenizer, rollout, max_context=context,
                                    hint_template=config.hints.template)  # fmt: skip
        audit = config.audit.enabled and config.strict
        self.auditor = Auditor(pool, random_plays=config.audit.random_plays, max_turns=config.rollout.max_turns,
                               action_parsing=config.rollout.action_parsing) if audit else None  # fmt: skip
        self.progress = LearningProgress(config.reward.lp_gamma_fast, config.reward.lp_gamma_slow)
        self.rng = streams.rng(config.seed, "selfplay")
        self.state = CycleState()

    # ----------------------------------------------------------------------------------- the step
    def step(self, step: int, *, final: bool = False, pool: FixedPool | None = None) -> SelfPlayBatch:
        """One full self-play step; returns the samples of both roles and the step's measurements.

        `final` closes every open round, so the designs of the last rounds are trained too. With `pool` the
        step plays environments drawn from it instead of designing (archived with origin "pool")."""
        if pool is not None:
            envs = [self._archived(env, step) for env in pool.draw(step)]
            self.attach_hints(envs, step)
            return self.measure(envs, step)
        designs: list[DesignResult] = []
        if not self.state.current or step % self.config.regen_interval == 0:
            designs = self.design(step)
            envs = [PlayableEnv(d.env_id, d.source, d.target.kind, d.target.skill) for d in designs if d.valid]
            if self.config.fill_from_archive and len(envs) < self.config.envs_per_step:
                envs += self.from_archive(self.config.envs_per_step - len(envs), {e.env_id for e in envs})
            self.state.current = envs
            self.attach_hints(envs, step)
            self.open_round(step, envs, designs)
        return self.measure(self.state.current, step, designs, final=final)

    def measure(self, envs: list[PlayableEnv], step: int, designs: Sequence[DesignResult] = (), *,
                final: bool = False) -> SelfPlayBatch:  # fmt: skip
        """Plays `envs` (hinted too at their round's first step), records the plays in their round and the
        memory, retires environments that hung or broke their contract, closes the rounds that are due, and
        builds the step's batch. Environments outside the open round (fixed pools, given environments) make a
        round of their own that is scored at once."""
        rnd = self.state.rounds[-1] if self.state.rounds else None
        adhoc = None
        if rnd is None or not all(e.env_id in rnd.envs for e in envs):
            rnd = adhoc = self.open_round(step, envs, [])
        first = step == rnd.start
        result = self.play(envs, step, hinted=first) if envs else RolloutResult([])
        t_audit = time.perf_counter()
        audits = self.audit(envs, step, result, hinted=first)
        t_audit = time.perf_counter() - t_audit
        recorded = record_plays(rnd, result, step - rnd.start, {k: a.violation for k, a in audits.items()
                                                               if a.violation},
                                leaked={k for k, a in audits.items() if a.hint_leaked})  # fmt: skip
        unchecked = {k for k, a in audits.items() if a.inconclusive}  # default-deny: none of its plays trained
        remember(self.memory, rnd, recorded, step, self.config)
        self.state.current = [e for e in self.state.current if e.env_id not in recorded.retired]
        closing = [r for r in self.state.rounds if final or r is adhoc or r.due(step, self.config.designer_delay)]
        self.state.rounds = [r for r in self.state.rounds if r not in closing]
        scores: dict[str, RoundScore] = {}
        released, masked = [], 0
        for r in closing:
            scored = self._score(r)
            scores.update(scored)
            if self.config.train_designer:
                samples, dropped = designer_samples(r, scored, step, drop_negative=not self.config.strict)
                released += samples
                masked += dropped
        agent = agent_samples(result.episodes, step, exclude=set(recorded.broken) | unchecked,
                              train_hinted=self.config.train_agent_on_hinted,
                              compact_filter=self.config.compact_filter)  # fmt: skip
        stats = step_stats(result, designs, scores, recorded.hung, released, self.memory, self.hint_writer,
                           open_rounds=len(self.state.rounds),
                           mutations=self.config.designer.mutation_share > 0)  # fmt: skip
        stats.update(audit_stats(audits, recorded.broken))
        if audits:
            stats["time/audit"] = t_audit
        return SelfPlayBatch(
            agent=tuple(agent), designer=tuple(released), designs_made=len(designs), designer_masked=masked,
            envs=tuple({"env_id": env_id, **_score_row(sc)} for env_id, sc in scores.items()), stats=stats,
            examples=tuple(_examples(result)),
        )  # fmt: skip

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
        start = (self.state.design_rounds * k) % len(pairs)
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
        self.place_parents(step)
        results = self.designer.design(self.targets(n or self.config.envs_per_step), step)
        self.state.design_rounds += 1
        return results

    def place_parents(self, step: int) -> dict[str, float]:
        """With `designer.place_parents` > 0 and mutation designs on: plays every unmeasured archived seed of the
        run's kinds that many times, unhinted (`evaluate`'s reset seeds), and stores its win rate, so that a
        mutation prompt showing it states a measured difficulty. Returns {id: win rate} of those placed."""
        plays = self.config.designer.place_parents
        if plays <= 0 or self.config.designer.mutation_share <= 0:
            return {}
        seeds = [r for r in self.memory.archive() if r.origin == "seed" and not r.measured
                 and r.kind in self.config.kinds]  # fmt: skip
        if not seeds:
            return {}
        won = self.evaluate([EnvSource(name=r.id, source=r.code, kind=r.kind, skill=r.skill) for r in seeds], step,
                            plays)  # fmt: skip
        rates = {r.id: sum(won[r.id]) / plays for r in seeds}
        for rid, rate in rates.items():
            self.memory.update_stats(rid, win_rate_no_hint=rate, regret=0.0, plays=plays)
        return rates

    def from_archive(self, n: int, exclude: set[str] = frozenset()) -> list[PlayableEnv]:
        """n archived environments (in-band ones first, then any), for steps with too few valid designs."""
        entries = [r for r in self.memory.archive() if r.id not in exclude and r.kind in self.config.kinds]
        lo, hi = self.config.memory.positive_band
        self.rng.shuffle(entries)
        entries.sort(key=lambda r: 0 if (r.measured and lo <= r.win_rate_no_hint <= hi) else 1)
        return [PlayableEnv(r.id, r.code, r.kind, r.skill) for r in entries[:n]]

    def open_round(self, step: int, envs: list[PlayableEnv], designs: Sequence[DesignResult]) -> Round:
        """Starts the window of a regeneration step's environments and keeps its designs for training."""
        windows = {e.env_id: EnvWindow(e.env_id, e.kind, e.skill,
                                       HintStatus.OK if (e.hint or e.env_hint) else HintStatus.MISSING)
                   for e in envs}  # fmt: skip
        rnd = Round(step, windows, plays=self.config.unhinted_plays(len(envs)),
                    hint_plays=self.config.plays_per_condition)  # fmt: skip
        for d in designs:
            for a in d.trainable(self.config.designer):
                rnd.samples.append(DesignSample(
                    a.prompt_ids, a.completion_ids, a.logprobs, a.raw_logprobs, a.record_id, d.target.kind,
                    d.target.skill, a.valid, a.attempt, a.verdict.gate,
                ))  # fmt: skip
        self.state.rounds.append(rnd)
        return rnd

    def _archived(self, env: EnvSource, step: int) -> PlayableEnv:
        """A pool environment as played, entered in the memory the first time it is drawn."""
        env_id = f"pool-{env.name}"
        if self.memory.get(env_id) is None:
            self.memory.add(EnvRecord(id=env_id, code=env.source, kind=env.kind, skill=env.skill, name=env.name,
                                      origin="pool", verdict_valid=True, verdict_gate="pool", step=step))  # fmt: skip
        return PlayableEnv(env_id, env.source, env.kind, env.skill)

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

    # -------------------------------------------------------------------------------------- playing
    def seeds(self, env_id: str, step: int, n: int, condition: str = NO_HINT) -> list[int]:
        """The reset seeds of an environment's n plays in a condition at `step`: play k's from the run's episode
        stream, the hinted ones from a stream of their own unless `paired_seeds`."""
        run_seed = self.config.seed
        if condition == HINT and not self.config.paired_seeds:
            return [streams.derive(run_seed, "hinted", env_id, step, k) for k in range(n)]
        return [streams.episode_seed(run_seed, env_id, step, k) for k in range(n)]

    def play(self, envs: list[PlayableEnv], step: int, *, hinted: bool = True) -> RolloutResult:
        """Every environment's unhinted plays (and, with `hinted`, its hinted ones), in one batched rollout,
        environment by environment, hinted first. An environment without a hint gets no hinted plays: there is
        nothing to measure regret with."""
        counts = {HINT: self.config.plays_per_condition, NO_HINT: self.config.unhinted_plays(len(envs))}
        specs = []
        for env in envs:
            has_hint = bool(env.hint) or env.env_hint
            for cond in (HINT, NO_HINT) if (hinted and has_hint) else (NO_HINT,):
                for seed in self.seeds(env.env_id, step, counts[cond], cond):
                    specs.append(EpisodeSpec(env.env_id, env.source, seed, cond, env.hint, env.env_hint, env.kind))
        return self.run(specs)

    def run(self, specs: Sequence[EpisodeSpec]) -> RolloutResult:
        """Plays `specs`, each host its block in its own sandboxes; every host gets every episode, in order."""
        if self.hosts.count == 1:
            return self.engine.run(specs)
        block = [specs[i] for i in self.hosts.block(len(specs))]
        return RolloutResult.merge(self.hosts.gather(self.engine.run(block) if block else RolloutResult([])))

    def audit(self, envs: Sequence[PlayableEnv], step: int, result: RolloutResult | None = None, *,
              hinted: bool = True) -> dict[str, AuditResult]:  # fmt: skip
        """Audits of `envs` with the agent's plays of `step` (gates/audit.py: each play replayed, agent-shaped
        random and no-op plays, at a step that shows hints their candidate answers); empty when audits are off.
        Without plays (`result` None) the reset seeds the agent plays unhinted at `step` are audited with prose
        replies. Each host audits its block of environments; every host has every play."""
        if self.auditor is None or not envs:
            return {}
        if result is None:
            n = self.config.unhinted_plays(len(envs))
            old = [(e.env_id, e.source, self.seeds(e.env_id, step, n), e.env_hint and hinted) for e in envs]
            results = self.hosts.map(old, lambda block: list(self.auditor.run(block).values()))
        else:
            ids = {e.env_id for e in envs}
            plays = [AgentPlay.from_episode(ep) for ep in result.episodes if ep.env_id in ids]
            items = [AuditEnv(e.env_id, e.source, e.kind, e.env_hint and hinted, e.hint) for e in envs]
            results = self.hosts.map(
                items, lambda block: list(self.auditor.audit_step(block, plays, hint_check=hinted).values())
            )
        return {r.env_id: r for r in results}

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

    # -------------------------------------------------------------------------------------- scoring
    def _score(self, rnd: Round) -> dict[str, RoundScore]:
        """Scores a closing round's environments over their window and stores the designer rewards."""
        scores = score_round(rnd, self.config.reward, self.progress, expected_plays=self.config.plays_per_condition,
                             min_plays_fraction=self.config.reward.min_plays_fraction,
                             strict=self.config.strict)  # fmt: skip
        for env_id, sc in scores.items():
            if self.memory.get(env_id) is not None:
                self.memory.update_stats(env_id, designer_reward=sc.reward)
        return scores

    # ---------------------------------------------------------------------------------- checkpoints
    def get_state(self) -> dict:
        """JSON-able state for exact resume (corpus position, memory snapshot, RNGs, the cycle's state)."""
        rng = self.rng.getstate()
        return {
            "corpus": self.corpus.get_state() if self.corpus is not None else None,
            "memory": self.memory.get_state(),
            "progress": self.progress.get_state(),
            "rng": [rng[0], list(rng[1]), rng[2]],
            **self.state.to_dict(),
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
        self.state = CycleState.from_dict(state)
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
    return {"designer_reward": sc.reward, "hint_status": str(sc.hint_status), "timeouts": sc.timeouts,
            "violation": sc.violation, **asdict(sc.stats)}  # fmt: skip


def _examples(result: RolloutResult) -> list[dict[str, Any]]:
    """The first kept play of each environment in each condition, for the report's transcripts."""
    out, seen = [], set()
    for ep in result.kept:
        key = (ep.env_id, ep.condition)
        if key in seen or not ep.completion_ids:
            continue
        seen.add(key)
        out.append({"env_id": ep.env_id, "condition": str(ep.condition), "return": float(ep.episode_return),
                    "won": bool(ep.won), "turns": ep.turns, "end": str(ep.end_reason),
                    "prompt_ids": list(ep.prompt_ids), "completion_ids": list(ep.completion_ids)})  # fmt: skip
    return out
