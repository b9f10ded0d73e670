"""Dataclass configs of the self-play half of the cycle (corpus, memory, designer, hints, rollouts, rewards).

Defaults follow the paper's recipe where one value serves every model (16 + 16 plays, 25 turns, 16K designer
tokens, temperature 0.6, hint temperature 0.3, grounding documents cut at 6,000 words, archive of 200); the
paper run presets in `config/run.py` add the sampling filters (top_p 0.95, top_k 20), the observation wrapper
and the per-script values (docs/recipe.md, generated from them). `SelfPlayConfig.cpu()` is the small
preset that runs on a laptop CPU with SmolLM2-135M.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from spade_jax.config.gates import GateConfig

__all__ = [
    "REFERENCE_OBSERVATION_TEMPLATE",
    "SIGNALS",
    "AuditConfig",
    "CorpusConfig",
    "DesignerConfig",
    "HintConfig",
    "MUTATION_PARENTS",
    "MemoryConfig",
    "RewardConfig",
    "RolloutConfig",
    "SelfPlayConfig",
]

# The reference's `qwen3_game` actor wrapper of a game's first observation (spade/core/orchestrator.py).
REFERENCE_OBSERVATION_TEMPLATE = (
    "You are playing a language game. Make valid actions to win.\n"
    "Observation: {observation}\n"
    "Please reason step by step, and put your final answer within \\boxed{{}}."
)


@dataclass
class CorpusConfig:
    """Grounding documents: `paths` (files or globs of .jsonl/.parquet/.arrayrecord) or None = embedded corpus."""

    paths: tuple[str, ...] | None = None
    text_field: str = "text"
    id_field: str = "id"
    seed: int | None = None  # None: the run's "corpus" stream (spade_jax/streams.py); the paper presets pin 42
    # The reference cuts documents at `--spade-corpus-max-doc-tokens` WHITESPACE WORDS (spade/core/corpus.py,
    # text.split()); 0 = no word cut. `max_doc_tokens` is an extra cut in tokenizer tokens (0 = none).
    max_doc_words: int = 6000
    max_doc_tokens: int = 0
    min_doc_chars: int = 200
    # "epochs": a seeded shuffle, reshuffled every epoch (no document twice in an epoch); "uniform": the
    # reference's independent uniform draw per designer attempt (spade/core/corpus.py, rng.sample(docs, 1)).
    sampling: str = "epochs"
    # The reference appends "\n[Document truncated at ~N words]" to a document cut at max_doc_words.
    truncation_marker: bool = False

    def __post_init__(self) -> None:
        if self.sampling not in CORPUS_SAMPLINGS:
            raise ValueError(f"corpus.sampling={self.sampling!r}; expected one of {CORPUS_SAMPLINGS}")


CORPUS_SAMPLINGS = ("epochs", "uniform")
ADMISSIONS = ("running", "reference")  # MemoryConfig.admission


@dataclass
class MemoryConfig:
    """Environment archive: size bound and exemplar selection (DESIGN.md)."""

    capacity: int = 200
    n_positive: int = 2
    n_negative: int = 1
    positive_band: tuple[float, float] = (0.15, 0.85)
    negative_low: float = 0.1
    negative_high: float = 0.9
    exemplar_max_chars: int = 4000
    seed_from_library: bool = True
    seed_names: tuple[str, ...] = ()  # the library seeds archived at a run's start (empty: all of them)
    # "easiest": each seed enters the archive as its easiest variant (envs.variants.extremes, every gate passed):
    # the easy end of a curriculum, for an agent too small to win the default games; "default": as written;
    # "spread": the easiest variant and `seed_spread - 1` more evenly spaced over the table up to the hardest,
    # each its own archive entry (envs.variants.spread): parents across difficulty for mutation designs.
    seed_difficulty: str = "default"
    seed_spread: int = 4
    max_invalid_rows: int = 5000
    seed: int | None = None  # None: the run's "memory" stream (spade_jax/streams.py)
    # Novelty: a copy with other difficulty constants is archived as a parameter variant while its family holds at
    # most this many programs (gates/novelty.py); 0: it is a duplicate (the default; small models: a few).
    max_param_variants: int = 0
    # What the memory knows of an environment's difficulty: "running" = its window's figures, updated at every
    # step it is played (ours); "reference" = written once, after its regeneration step's plays, with that
    # step's share of positive returns and regret, never updated (spade_rollout.py, _ENV_MEMORY.add).
    admission: str = "running"
    # Exemplars of another skill or kind when the target's has none, and unmeasured seeds standing in for
    # positives (ours); False: the target's kind and skill only, measured entries only (the reference's).
    exemplar_fallback: bool = True

    def __post_init__(self) -> None:
        if self.admission not in ADMISSIONS:
            raise ValueError(f"memory.admission={self.admission!r}; expected one of {ADMISSIONS}")
        if self.max_param_variants < 0:
            raise ValueError(f"memory.max_param_variants={self.max_param_variants}; expected >= 0")
        if self.seed_difficulty not in SEED_DIFFICULTIES:
            raise ValueError(f"memory.seed_difficulty={self.seed_difficulty!r}; expected one of {SEED_DIFFICULTIES}")
        if self.seed_spread < 1:
            raise ValueError(f"memory.seed_spread={self.seed_spread}; expected >= 1")
        if self.seed_names:
            from spade_jax.envs.seeds import check_seed_names

            check_seed_names(self.seed_names, "memory.seed_names")


SEED_DIFFICULTIES = ("default", "easiest", "spread")  # MemoryConfig.seed_difficulty
ON_INVALID = ("resample", "repair")
MUTATION_PARENTS = ("band_then_regret", "band", "regret", "seeds")  # DesignerConfig.mutation_parents
CONTRACTS = ("full", "short", "gym", "interactive")  # DesignerConfig.contract (spade_jax.envs.contract.CONTRACTS)
DESIGNER_PROMPTS = ("ours", "reference")  # DesignerConfig.prompt


@dataclass
class DesignerConfig:
    """Designer generation: budget, sampling, and what happens to a design that fails a gate.

    `on_invalid="resample"` (the reference's): draw a fresh design from the same prompt, up to `max_resamples`
    more times, and train only valid designs. `"repair"`: show the model the failing gate's reason, up to
    `max_repairs` times, and train the attempts (`train_on_repairs`: all of them, else the first), invalid ones
    at reward 0.

    Mutation designs (ACCEL's and OMNI-EPIC's editing of what already works; the paper has none): a share
    `mutation_share` of a round's targets shows the designer one measured archive entry of the target's kind
    (of its skill where one exists), with its unhinted win rate and regret, and asks for a changed complete
    file: harder when the win rate is above `memory.positive_band`, easier below it, a twist inside it. The
    gates apply as to any design (novelty against the archive, the parent included). `mutation_parents`:
    "band_then_regret" = entries in the band first, ranked by regret, then any measured entry by regret, then
    unmeasured ones (seeds at a run's start: the prompt asks for a variant); "band" = in-band entries only;
    "regret" = any measured entry by regret, then unmeasured ones; "seeds" = the archive's seeds alone, ranked as
    "band_then_regret" (the parents stand still while the designer learns: benchmarks/designer_learning.py). No
    eligible parent, or a parent whose prompt does not fit the context: a from-scratch design. `place_parents`
    > 0: before a round's prompts are written, every unmeasured seed among the parents is played that many times,
    unhinted (nothing archived, scored or trained but its win rate), so its prompt shows a measured win rate.
    """

    max_new_tokens: int = 16384
    temperature: float = 0.6
    top_p: float = 1.0  # the paper presets: 0.95
    top_k: int = 0  # 0 = off; the paper presets: 20
    enable_thinking: bool = False  # Qwen3 templates: False renders the empty think block (`{"enable_thinking": false}`)
    on_invalid: str = "resample"
    max_resamples: int = 4
    max_repairs: int = 1
    context_len: int = 32768
    min_doc_tokens: int = 256
    use_corpus: bool = True
    use_memory: bool = True
    train_on_repairs: bool = True
    mutation_share: float = 0.0
    mutation_parents: str = "band_then_regret"
    place_parents: int = 0
    # The contract text in the prompt: our base classes in "full" or "short" (< 700 tokens, small models), or
    # "gym": the paper's plain reset()/step() classes (spade_jax.envs.formats). The gates take either from any.
    contract: str = "full"
    mutation_contract: bool = True  # False: mutation prompts leave the contract out (the parent shows it)
    # The prompt's layout: "ours" (contract, task, document, exemplars, closing rules) or "reference" (the
    # reference's corpus-grounded prompt: a one-sentence system prompt, the document, the contract, the target
    # skill with its DIFFICULTY, the memory's exemplars last; prompts/corpus_template.py).
    prompt: str = "ours"
    difficulty: str = "medium"  # the reference prompt's DIFFICULTY (easy: 2+ steps; medium, hard: 3+)
    # A resample draws a new grounding document and new exemplars (the reference's); False: the same prompt.
    resample_fresh_prompt: bool = False

    def __post_init__(self) -> None:
        if self.prompt not in DESIGNER_PROMPTS:
            raise ValueError(f"designer.prompt={self.prompt!r}; expected one of {DESIGNER_PROMPTS}")
        if self.difficulty not in ("easy", "medium", "hard"):
            raise ValueError(f"designer.difficulty={self.difficulty!r}; expected easy, medium or hard")
        if not 0.0 <= self.mutation_share <= 1.0:
            raise ValueError(f"designer.mutation_share={self.mutation_share}; expected a fraction in [0, 1]")
        if self.place_parents < 0:
            raise ValueError(f"designer.place_parents={self.place_parents}; expected >= 0")
        if self.mutation_parents not in MUTATION_PARENTS:
            raise ValueError(f"designer.mutation_parents={self.mutation_parents!r}; expected one of {MUTATION_PARENTS}")
        if self.mutation_share > 0 and not self.use_memory:
            raise ValueError("designer.mutation_share > 0 needs designer.use_memory (parents come from the memory)")
        if self.on_invalid not in ON_INVALID:
            raise ValueError(f"designer.on_invalid={self.on_invalid!r}; expected one of {ON_INVALID}")
        if self.contract not in CONTRACTS:
            raise ValueError(f"designer.contract={self.contract!r}; expected one of {CONTRACTS}")
        if self.max_resamples < 0 or self.max_repairs < 0:
            raise ValueError("designer.max_resamples and designer.max_repairs must be >= 0")

    @property
    def max_attempts(self) -> int:
        """Generations per target, the first included."""
        return 1 + (self.max_resamples if self.on_invalid == "resample" else self.max_repairs)


HINT_SOURCES = ("model", "env", "env_or_model")  # HintConfig.source


@dataclass
class HintConfig:
    """Where hints come from: 'model' (the paper's: written by the policy from the environment's source, never
    its hidden state), 'env' (the environment's own hint(), which sees the hidden state and may leak the
    answer), 'env_or_model' (hint() where defined, else model-written)."""

    source: str = "model"
    temperature: float = 0.3
    top_p: float = 1.0  # the paper presets: 0.9 (the reference's hint call leaves top_p at its adapter default)
    top_k: int = 0  # 0 = off (the reference's hints: slime's --rollout-top-k default, -1 = off)
    enable_thinking: bool = False
    max_new_tokens: int = 256
    max_words: int = 100
    max_sentences: int = 3
    template: str = "{observation}\n\nHINT: {hint}"

    def __post_init__(self) -> None:
        if self.source not in HINT_SOURCES:  # an unknown source would silently give no hints at all
            raise ValueError(f"hints.source={self.source!r}; expected one of {HINT_SOURCES}")


TOOL_FORMATS = ("auto", "text")  # RolloutConfig.tool_format
ACTION_PARSINGS = ("raw", "reference")  # RolloutConfig.action_parsing
NO_EOS = ("step", "end")  # RolloutConfig.no_eos
STEP_ERRORS = ("discard", "terminal_penalty")  # RolloutConfig.step_error
THINKING_TURNS = ("sequence", "rerender")  # RolloutConfig.thinking_turns


@dataclass
class RolloutConfig:
    """Agent episodes: turns, token budgets, sampling, failure handling."""

    max_turns: int = 25
    max_episode_tokens: int = 8192
    max_new_tokens_per_turn: int = 2048
    min_turn_tokens: int = 16
    temperature: float = 0.6
    top_p: float = 1.0  # the paper presets: 0.95
    top_k: int = 0  # 0 = off; the paper presets: 20
    enable_thinking: bool = False  # Qwen3 templates: False renders the empty think block
    # The first observation of a game as the agent sees it ({observation}: the env's text, hint included);
    # None = as is. The paper presets use the reference's `qwen3_game` wrapper (REFERENCE_OBSERVATION_TEMPLATE).
    observation_template: str | None = None
    # What step() receives: "raw" = the reply text; "reference" = the reference's parse_action: `\boxed{x}`
    # with x its extract_boxed_answer (first flat box, else the last box), or the stripped reply without one.
    action_parsing: str = "raw"
    # Tool episodes: "auto" renders tool schemas (`tools=`) and results (`role: "tool"`) with the chat template
    # when it supports them, else the env's textual tool list; "text" always the textual list.
    tool_format: str = "auto"
    check_hint_leaks: bool = True
    max_consecutive_format_errors: int | None = None
    system_prompt: str | None = None
    tool_stop_strings: tuple[str, ...] = ("</tool_call>", "</answer>")
    # A reply that hit its token limit without an end token: "step" = the environment gets it (ours); "end" = the
    # episode ends there, truncated, return 0, the reply trained (the reference's unhinted plays; its hinted plays
    # do not check, so hinted plays always step).
    no_eos: str = "step"
    # step() raised or returned garbage: "discard" = the play is dropped (ours); "terminal_penalty" = reward -1,
    # terminated, trained like any play (the reference's SyntheticGameEnv.step).
    step_error: str = "discard"
    # With enable_thinking: "sequence" = one growing token sequence per episode, earlier think blocks kept;
    # "rerender" = each turn's prompt rendered from the messages by the chat template (which drops earlier think
    # blocks) and each turn its own sample (the reference's 8B thinking actor).
    thinking_turns: str = "sequence"
    hinted_enable_thinking: bool | None = None  # the hinted plays' thinking (None: enable_thinking)
    # False: the environment is built with max_turns=self.max_turns (ours); True: with its own defaults (the
    # reference's respect_game_max_turns), the episode still cut at max_turns replies.
    respect_game_max_turns: bool = False

    def __post_init__(self) -> None:  # checked here too, not only when the rollout engine is built mid-run
        for name, allowed in (("no_eos", NO_EOS), ("step_error", STEP_ERRORS), ("thinking_turns", THINKING_TURNS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"rollout.{name}={getattr(self, name)!r}; expected one of {allowed}")
        if self.action_parsing not in ACTION_PARSINGS:
            raise ValueError(f"rollout.action_parsing={self.action_parsing!r}; expected one of {ACTION_PARSINGS}")
        if self.tool_format not in TOOL_FORMATS:
            raise ValueError(f"rollout.tool_format={self.tool_format!r}; expected one of {TOOL_FORMATS}")


REWARD_KINDS = ("blend", "regret", "solve_band", "learning_progress")
PLATEAU_STATS = ("win_rate", "mean_return")  # RewardConfig.plateau_stat
SIGNALS = ("strict", "reference")  # SelfPlayConfig.signal


@dataclass
class RewardConfig:
    """Designer reward: 'blend' (paper), 'regret', 'solve_band' or 'learning_progress'."""

    kind: str = "blend"
    regret_weight: float = 0.4
    plateau_weight: float = 0.6
    regret_scale: float = 0.15
    plateau_lo: float = 0.4
    plateau_hi: float = 0.6
    plateau_ramp: float = 0.25
    lp_gamma_fast: float = 0.98
    lp_gamma_slow: float = 0.85
    min_plays_fraction: float = 0.5
    timeout_reward: float = -0.5  # strict signal only (SelfPlayConfig.signal)
    violation_reward: float = -0.5  # an environment that broke its contract on the training seeds (audit.py)
    # What the plateau reads over the window's unhinted plays: the share of wins (ours) or the mean raw return
    # (the reference's recompute_delayed_env_rewards_blend: partial rewards and a crashing step's -1 count).
    plateau_stat: str = "win_rate"

    def __post_init__(self) -> None:
        if self.plateau_stat not in PLATEAU_STATS:
            raise ValueError(f"reward.plateau_stat={self.plateau_stat!r}; expected one of {PLATEAU_STATS}")
        if self.kind not in REWARD_KINDS:
            raise ValueError(f"reward.kind={self.kind!r}; expected one of {REWARD_KINDS}")
        if not 0.0 <= self.lp_gamma_slow < self.lp_gamma_fast <= 1.0:
            raise ValueError("reward: need 0 <= lp_gamma_slow < lp_gamma_fast <= 1")


@dataclass
class AuditConfig:
    """Re-checks of every environment on the seeds it is trained on, at every step (audit.py):
    a no-op play on each, random plays on the first `random_plays` (the first one twice); a violation earns the designer
    `reward.violation_reward` and retires the environment."""

    enabled: bool = True
    random_plays: int = 4

    def __post_init__(self) -> None:
        if self.random_plays < 0:
            raise ValueError(f"audit.random_plays={self.random_plays!r}; expected an int >= 0")


def _check_kinds(kinds: tuple[str, ...]) -> None:
    """`selfplay.kinds`: one or more environment kinds the designer writes (envs.base.KINDS), checked
    when the config is built, since an unknown kind would otherwise surface only in the first design round."""
    from spade_jax.envs.base import KINDS

    if isinstance(kinds, str) or not kinds:
        raise ValueError(f"selfplay.kinds={kinds!r}; expected a non-empty list of kinds from {KINDS}")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"selfplay.kinds: unknown environment kind {unknown[0]!r}; expected kinds from {KINDS}")


@dataclass
class SelfPlayConfig:
    """Everything the self-play half needs; `plays_per_condition` = K hinted and K unhinted plays per env.

    `agent_batch` > 0 plays each environment ceil(agent_batch / environments) times unhinted per step instead
    (the reference: its global batch of 192 over 24 games, 8 each); `paired_seeds` gives hinted play k the reset
    seed of unhinted play k (ours; the reference draws them apart). `signal` says which designs are trained and
    at what reward: "strict" (ours: every gate, the training-seed audit, the hint-leak check, hangs and broken
    contracts charged, too few plays scored 0) or "reference" (the reference's validation and blend arithmetic;
    our sandbox, limits and reply checks stay in force either way). `compact_filter`: a play that did not end by
    termination is kept in the batch with no trained token (the reference's tool recipe).

    Designs are made every `regen_interval` steps (a round). `skills_per_regen` skills are active per round
    (rotating round-robin over the configured (kind, skill) pairs, 0 = all) and the round's designs are
    assigned to them in turn, so each skill gets several designs to be compared with. The hinted plays run
    at the round's first step; the unhinted plays run every step. Designs made at step K are trained at step
    K + `designer_delay` (0 = the same step) on the reward measured over the plays of that window, centred
    per skill over the round and scaled by `designer_reward_scale` (0 = the reference's automatic scale,
    agent samples / designer samples * regen_interval, at most `designer_reward_scale_max`).
    """

    plays_per_condition: int = 16
    envs_per_step: int = 24
    kinds: tuple[str, ...] = ("game",)
    skills: tuple[str, ...] | None = None
    skills_per_regen: int = 3
    train_agent_on_hinted: bool = False
    regen_interval: int = 4
    designer_delay: int = 4  # the reference's --spade-proposer-training-delay (4 games, 8 tool use)
    train_designer: bool = True
    # False: the agent's samples are played, scored and logged but not trained (run/learn.py), so only the designer
    # learns (benchmarks/designer_learning.py). Both roles share the weights: the agent still moves with them.
    train_agent: bool = True
    designer_reward_scale: float = 0.0
    designer_reward_scale_max: float = 50.0
    fill_from_archive: bool = True
    agent_batch: int = 0
    paired_seeds: bool = True
    signal: str = "strict"
    compact_filter: bool = False
    seed: int = 0  # the run seed: a run sets it to loop.seed (`seeded`); every stream derives from it by name
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    designer: DesignerConfig = field(default_factory=DesignerConfig)
    hints: HintConfig = field(default_factory=HintConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    # The validation gates' episode counts and limits (`selfplay.gates.max_random_win_rate=0.1`, ...); a run sets
    # their max_turns to rollout.max_turns and their seed_key to its own secret (cycle.gate_key).
    gates: GateConfig = field(default_factory=GateConfig)

    @classmethod
    def cpu(cls) -> SelfPlayConfig:
        """Small preset for a CPU and SmolLM2-135M: few plays, short budgets."""
        return cls(
            plays_per_condition=4,
            envs_per_step=2,
            corpus=CorpusConfig(max_doc_tokens=512),
            memory=MemoryConfig(n_positive=1, n_negative=1, exemplar_max_chars=2500),
            designer=DesignerConfig(max_new_tokens=768, context_len=4096, max_resamples=1),
            hints=HintConfig(max_new_tokens=96),
            rollout=RolloutConfig(max_turns=6, max_episode_tokens=2048, max_new_tokens_per_turn=96),
        )

    def __post_init__(self) -> None:
        if self.regen_interval < 1 or self.designer_delay < 0 or self.skills_per_regen < 0:
            raise ValueError("regen_interval must be >= 1, designer_delay and skills_per_regen >= 0")
        if self.designer_reward_scale < 0:
            raise ValueError("designer_reward_scale must be >= 0 (0: automatic)")
        if self.signal not in SIGNALS:
            raise ValueError(f"selfplay.signal={self.signal!r}; expected one of {SIGNALS}")
        _check_kinds(self.kinds)

    @property
    def strict(self) -> bool:
        """True under our signal (see the class doc)."""
        return self.signal == "strict"

    def unhinted_plays(self, envs: int) -> int:
        """Unhinted plays per environment in a step that plays `envs` environments."""
        if self.agent_batch > 0 and envs > 0:
            return -(-self.agent_batch // envs)
        return self.plays_per_condition

    def replace(self, **changes) -> SelfPlayConfig:
        """Copy with top-level fields changed."""
        return dataclasses.replace(self, **changes)

    def seeded(self, run_seed: int) -> SelfPlayConfig:
        """This config in a run seeded `run_seed`: `seed` set, and the memory and corpus seeds left unset derived
        from it by name (spade_jax/streams.py); pinned ones are kept."""
        from spade_jax import streams

        memory = dataclasses.replace(self.memory, seed=streams.seed_of(self.memory.seed, run_seed, "memory"))
        corpus = dataclasses.replace(self.corpus, seed=streams.seed_of(self.corpus.seed, run_seed, "corpus"))
        return dataclasses.replace(self, seed=run_seed, memory=memory, corpus=corpus)
