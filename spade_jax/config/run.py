"""The resolved configuration of a run and the named run presets (`--preset demo`, `tiny`, `paper-4b`, ...)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spade_jax.config.ablations import ablation_overrides
from spade_jax.config.learner import ROLE_NORMS, LearnerConfig
from spade_jax.config.overrides import ConfigError, apply_overrides, from_dict, to_dict
from spade_jax.config.ranges import check_ranges
from spade_jax.config.sandbox import LEVEL_CHOICES, SandboxLimits
from spade_jax.config.selfplay import (
    REFERENCE_OBSERVATION_TEMPLATE,
    TOOL_FORMATS,
    CorpusConfig,
    DesignerConfig,
    HintConfig,
    MemoryConfig,
    RewardConfig,
    RolloutConfig,
    SelfPlayConfig,
)
from spade_jax.config.warmstart import WarmStartConfig

BATCH_POLICIES = ("all", "reference")  # LoopConfig.batch_policy
DTYPES = ("float32", "bfloat16", "float16")  # param_dtype, dtype (model/config.py maps them to jnp dtypes)
MESH_AXES = ("data", "fsdp", "expert", "tensor")  # the mesh axes model/sharding.py knows


def mesh_shape(spec: str) -> dict[str, int]:
    """`mesh="data=2,fsdp=4"` as {axis: size} (a size of -1: the devices left); ConfigError, one line, on an
    unknown axis, a repeated one or a size that is not a positive integer or -1."""
    shape: dict[str, int] = {}
    for item in (i.strip() for i in spec.split(",")):
        if not item:
            continue
        axis, eq, size = (part.strip() for part in item.partition("="))
        if not eq or not size.lstrip("-").isdigit() or int(size) == 0 or int(size) < -1:
            raise ConfigError(f"mesh={spec!r}: {item!r} is not axis=size (e.g. data=2,fsdp=4,tensor=1; -1: the rest)")
        if axis not in MESH_AXES:
            raise ConfigError(f"mesh={spec!r}: unknown mesh axis {axis!r}; expected some of {', '.join(MESH_AXES)}")
        if axis in shape:
            raise ConfigError(f"mesh={spec!r}: axis {axis!r} given twice")
        shape[axis] = int(size)
    if list(shape.values()).count(-1) > 1:
        raise ConfigError(f"mesh={spec!r}: at most one axis may be -1 (the devices left)")
    return shape


# Seed environments kept out of training and memory, played only by the held-out evaluation.
HELD_OUT_SEEDS = ("grid_maze", "memory_pairs", "ledger_settle", "date_offset")


@dataclass
class LoopConfig:
    """The outer cycle: how many steps, what the agent plays, when to evaluate and checkpoint."""

    steps: int = 200
    pool: str = "selfplay"  # selfplay (designer on) | seeds | reasoning_gym | textarena | <dir of env .py files>
    pool_envs_per_step: int = 4  # fixed pools: environments drawn per step
    held_out: tuple[str, ...] = HELD_OUT_SEEDS
    warmstart: bool = False  # supervised warm start on the seed library before step 1 (fresh runs only)
    # The held-out evaluation runs every `eval_every` steps and always at the run's last step, so every run ends
    # with its held-out win rate (0: only at the end); `eval_plays=0` turns it off.
    eval_every: int = 4
    eval_plays: int = 4  # episodes per held-out environment
    checkpoint_every: int = 1
    keep_checkpoints: int = 2
    async_checkpoints: bool = True
    seed: int = 0
    agent_group_std: bool = True  # agent advantages z-scored within each group (the reference's "grpo")
    # Per-role scaling of the group advantages (rl/advantages.py ROLE_NORMS): "std" divides each role's by its
    # batch std (ours); "none" leaves them (the reference: no std, designer rewards scaled instead).
    role_norm: str = "std"
    # Which of a step's samples one update trains on (run/learn.py): "all" (every sample with a signal) or
    # "reference" (a fixed batch of `global_batch`: designer samples first, then the agent's in play order,
    # duplicated up to the batch when too few, the tail cut when too many; spade_rollout.py and slime).
    batch_policy: str = "all"
    global_batch: int = 192

    def __post_init__(self) -> None:
        if self.held_out:
            from spade_jax.envs.seeds import check_seed_names

            check_seed_names(tuple(self.held_out), "loop.held_out")
        if self.role_norm not in ROLE_NORMS:
            raise ValueError(f"loop.role_norm={self.role_norm!r}; expected one of {', '.join(ROLE_NORMS)}")
        if self.batch_policy not in BATCH_POLICIES:
            raise ValueError(f"loop.batch_policy={self.batch_policy!r}; expected one of {BATCH_POLICIES}")


LOGGERS = ("tensorboard", "wandb")  # RunConfig.logger: where metrics go besides metrics.jsonl (always written)
WANDB_MODES = ("online", "offline")


@dataclass
class WandbConfig:
    """Weights & Biases (`logger=wandb` or `logger=tensorboard,wandb`; `pip install 'spade-jax[wandb]'`). A resumed
    run continues the same W&B run (its id is kept in the run directory, `wandb_id`)."""

    project: str = "spade-jax"
    entity: str | None = None  # None: the API key's default entity
    name: str | None = None  # None: the run directory's name
    group: str | None = None
    tags: tuple[str, ...] = ()
    mode: str = "online"  # "offline": written under the run directory (`wandb/`), `wandb sync` uploads it later

    def __post_init__(self) -> None:
        if self.mode not in WANDB_MODES:
            raise ValueError(f"wandb.mode={self.mode!r}; expected one of {', '.join(WANDB_MODES)}")


DECODE_ATTENTION = ("xla", "pallas", "auto")  # model/decode_attention.py's IMPLS (config imports no JAX)


@dataclass
class RunConfig:
    """Everything a run reads; saved as `config.json` in the run directory."""

    model: str = "smollm2-135m"  # preset name, .gguf path or HF directory
    param_dtype: str = "float32"
    dtype: str = "float32"
    mesh: str = ""  # e.g. "data=2,fsdp=4,tensor=1"; empty: all devices on fsdp
    max_total_len: int = 4096  # sampler context (prompt + completion)
    decode_slots: int = 64  # rows the sampler decodes together at most (its continuous-batching slots)
    decode_attention: str = "xla"  # xla | pallas (each row's live KV slots only) | auto (pallas on GPU and TPU)
    num_workers: int = 4  # sandboxed environment workers on this host
    sessions_per_worker: int = 8  # episodes one worker serves at once (each in its own process and uid)
    sandbox: str = "auto"  # auto | gvisor | bwrap | process
    call_timeout_s: float = 5.0
    sandbox_limits: SandboxLimits = field(default_factory=SandboxLimits)
    loop: LoopConfig = field(default_factory=LoopConfig)
    selfplay: SelfPlayConfig = field(default_factory=SelfPlayConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    # Where the step metrics go besides metrics.jsonl: "tensorboard" (tb/), "wandb", both ("tensorboard,wandb") or
    # "none".
    logger: str = "tensorboard"
    wandb: WandbConfig = field(default_factory=WandbConfig)
    # The paper ablation(s) applied (config/ablations.py: `ablation=no_corpus`), recorded; their settings are in
    # the fields above. "" = none.
    ablation: str = ""

    def __post_init__(self) -> None:  # checked when loaded, not when the pool starts after the model loaded
        ablation_overrides(self.ablation)  # a name it does not know: ValueError
        # Every number of every section against its declared range (config/ranges.py), whenever a RunConfig is
        # built or changed: a preset, each override, a saved config.json.
        check_ranges(self)
        if self.sandbox not in LEVEL_CHOICES:
            raise ValueError(f"sandbox={self.sandbox!r}; expected one of {LEVEL_CHOICES}")
        for name in ("param_dtype", "dtype"):
            if getattr(self, name) not in DTYPES:
                raise ConfigError(f"{name}={getattr(self, name)!r}; expected one of {', '.join(DTYPES)}")
        unknown = [name for name in self.loggers if name not in LOGGERS]
        if unknown or not self.logger.strip():
            expected = f"expected some of {', '.join(LOGGERS)} (comma-separated) or none"
            raise ConfigError(f"logger={self.logger!r}; {expected}")
        if self.loop.steps == 0 and not self.loop.warmstart:
            raise ConfigError("loop.steps=0: nothing to run; expected >= 1 (0 only with loop.warmstart=true)")
        if self.decode_attention not in DECODE_ATTENTION:
            raise ConfigError(
                f"decode_attention={self.decode_attention!r}; expected one of {', '.join(DECODE_ATTENTION)}"
            )
        mesh_shape(self.mesh)  # its axes and sizes (the devices are counted only when the mesh is made)

    @property
    def loggers(self) -> tuple[str, ...]:
        """The metric loggers besides metrics.jsonl, from `logger` ("none": no other)."""
        names = tuple(n.strip() for n in self.logger.split(",") if n.strip())
        return () if names == ("none",) else names

    def to_json(self) -> str:
        return json.dumps(to_dict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return from_dict(cls, json.loads(text))


def _cpu_selfplay(**changes: Any) -> SelfPlayConfig:
    return dataclasses.replace(SelfPlayConfig.cpu(), **changes)


def _demo() -> RunConfig:
    """SmolLM2-135M on 2 CPU cores, about twelve minutes: a warm start on one game family, then four steps of the full
    cycle in which both roles train (issue 17).

    Sized to what a 135M model can do: the agent plays the simon_recall family (repeat a growing sequence) from
    its easiest variant up, which the warm-started agent wins about a quarter of the time (sonar_hunt's easiest:
    5-10%, too rarely for a group of plays to disagree); the designer, warm-started on mutation examples, writes
    simon variants (every design a mutation of an archived one, passing novelty as a parameter variant); hints
    come from the programs' own hint() (the 135M model's own hints are cut off or empty). One design round
    (regen_interval 4) keeps the budget; its designs are scored over the plays of all four steps and trained
    at the last.
    """
    return RunConfig(
        model="smollm2-135m",
        max_total_len=2560,  # a mutation prompt (~1.2K) and program (~0.6-0.9K)
        num_workers=4,
        loop=LoopConfig(steps=4, eval_every=0, warmstart=True),  # the held-out evaluation once, at the end
        warmstart=WarmStartConfig(
            epochs=2,
            lr=1e-4,
            batch_size=1,
            probe_designs=0,
            agent_seed_names=("simon_recall",),
            agent_episodes_per_seed=4,  # its reference play wins in 5 turns: max_turns must allow them
            designer_seed_names=("simon_recall",),
            designer_examples_per_seed=0,
            designer_mutations_per_seed=2,
        ),
        selfplay=_cpu_selfplay(
            skills=("memory recall",),
            skills_per_regen=1,
            # 8 plays per condition: at this agent's ~20-25% win rate on simon, a group of 8 holds a win and a loss
            # ~83% of the time (4: ~59%); measured, 4 a group trained the agent at 1 of 4 steps, 8 at 4 of 4
            plays_per_condition=8,
            envs_per_step=2,
            regen_interval=4,
            designer_delay=3,  # the round's designs are scored over all four steps' plays
            designer=DesignerConfig(
                max_new_tokens=1000,
                context_len=2560,
                max_resamples=0,
                contract="short",
                use_corpus=False,
                mutation_share=1.0,
                mutation_contract=False,
                on_invalid="repair",
                max_repairs=0,  # every first attempt is trained, an invalid one at reward 0
            ),
            hints=HintConfig(source="env_or_model", max_new_tokens=64),
            # The plateau where this agent's games are: a 135M agent wins 0-25% of the easiest game variants,
            # so the paper's 40-60% band (ramp 25 points) would score every design 0.
            reward=RewardConfig(plateau_lo=0.2, plateau_hi=0.6, plateau_ramp=0.2),
            rollout=RolloutConfig(max_turns=5, max_episode_tokens=1536, max_new_tokens_per_turn=48),
            corpus=CorpusConfig(max_doc_tokens=256),
            memory=MemoryConfig(
                n_positive=1,
                n_negative=0,
                exemplar_max_chars=1200,
                seed_names=("simon_recall",),
                seed_difficulty="easiest",
                max_param_variants=6,
            ),
        ),
        # Rows are a 1024-token play or a 2176-token design; 1e-5 moves a 135M model in a few steps. Log-probs in
        # chunks of 256 positions: each chunk's float32 logits are 256 x 49,152 (50 MB), not 200 MB (issue 49).
        # Remat: the backward recomputes each block, so the scan keeps one block's activations, not 30 (XLA's
        # temporaries for a 2176-token row: 0.58 GB with remat, 4.75 GB without).
        learner=LearnerConfig(
            lr=1e-5, micro_batch_size=1, length_buckets=(1024, 2176, 2560), logits_chunk=256, remat=True
        ),
    )


def _tiny() -> RunConfig:
    """A random tiny model with the real tokenizer: the whole cycle in seconds, for tests."""
    return RunConfig(
        model="tiny-smollm",
        max_total_len=4096,
        num_workers=2,
        loop=LoopConfig(steps=3, eval_every=2, eval_plays=1, async_checkpoints=False),
        selfplay=_cpu_selfplay(
            plays_per_condition=2,
            envs_per_step=1,
            regen_interval=2,
            designer_delay=1,
            designer=DesignerConfig(max_new_tokens=32, context_len=4096, max_resamples=0),
            hints=HintConfig(source="env", max_new_tokens=16),
            rollout=RolloutConfig(max_turns=2, max_episode_tokens=1024, max_new_tokens_per_turn=16),
            corpus=CorpusConfig(max_doc_tokens=64),
            memory=MemoryConfig(n_positive=1, n_negative=0, exemplar_max_chars=300),
        ),
        learner=LearnerConfig(lr=1e-4, micro_batch_size=8),
    )


# The reference's game skills (cmd/games/train_spade_*.sh --spade-skills), in our names.
PAPER_GAME_SKILLS = (
    "mathematical reasoning",
    "logical deduction",
    "spatial reasoning",
    "pattern recognition",
    "optimization",
    "causal inference",
)


def _paper(
    model: str,
    *,
    kind: str = "game",
    kl_coef: float = 0.0,
    designer_tokens: int = 16384,
    thinking: bool = False,
) -> RunConfig:
    """The paper's recipe (cmd/games/train_spade_*.sh, cmd/tool_use/_train_spade_blend.sh) on a pod, trained the
    way the reference's code trains it (issue 45; docs/recipe.md lists every point with the reference's function).

    Games: 24 environments per step, each played ceil(192 / environments) = 8 times unhinted per step and 16
    times hinted at a regeneration step, 25 turns, 8K agent tokens per turn in a 32K episode, regeneration and
    designer delay 4, hints of up to 4096 tokens, documents cut at 6000 words. Tool use: regeneration and delay
    8, hints of up to 2048 tokens, documents cut at 4000 words, KL 0.005, the compact filter. The learner sees
    a fixed global batch of 192 (designs first, then plays), each sample's token mean over that batch, KL capped
    at 10, the importance weight against the sampler's log-probs at its temperature (0.6). The designer is
    asked and rewarded as the reference asks and rewards it (`selfplay.signal=reference`); our sandbox, limits
    and reply checks stay in force, and `selfplay.signal=strict` turns on our stricter signal in one override.
    """
    tool = kind == "tool"
    interval = 8 if tool else 4
    return RunConfig(
        model=model,
        param_dtype="float32",  # at lr 1e-6 a bfloat16 weight would not move; compute runs in bfloat16
        dtype="bfloat16",
        max_total_len=32768,
        num_workers=32,
        call_timeout_s=30.0,  # the reference's ENV_STEP_TIMEOUT
        loop=LoopConfig(
            steps=400, eval_every=10, eval_plays=16, role_norm="none", batch_policy="reference", global_batch=192
        ),  # fmt: skip
        selfplay=SelfPlayConfig(
            plays_per_condition=16,  # the hinted plays (--spade-hint-plays-per-game)
            agent_batch=192,  # unhinted: ceil(192 / environments) per environment (orchestrator.collect_trajectories)
            paired_seeds=False,
            envs_per_step=24,
            kinds=(kind,),
            skills=None if tool else PAPER_GAME_SKILLS,
            skills_per_regen=0 if tool else 3,  # 0: every skill each round
            regen_interval=interval,
            designer_delay=interval,
            fill_from_archive=False,  # the reference plays fewer environments more often instead
            signal="reference",
            compact_filter=tool,
            corpus=CorpusConfig(
                max_doc_words=4000 if tool else 6000, seed=42, sampling="uniform", truncation_marker=True
            ),  # fmt: skip
            memory=MemoryConfig(
                capacity=200,
                seed_from_library=False,
                admission="reference",
                exemplar_fallback=False,
                exemplar_max_chars=2000,
            ),  # fmt: skip
            designer=DesignerConfig(
                max_new_tokens=designer_tokens,
                context_len=32768,
                temperature=0.6,
                top_p=0.95,
                top_k=20,
                # The reference's corpus-grounded designer prompt renders without the per-role thinking switch,
                # so its designer never thinks, 8B included (corpus_orchestrator.py, apply_template(messages)).
                enable_thinking=False,
                # Games: the reference's corpus-grounded prompt and interactive spec; tool use keeps ours.
                prompt="ours" if tool else "reference",
                contract="full" if tool else "interactive",
                resample_fresh_prompt=True,
                # mutation_share stays 0: the paper has no mutation designs. An ACCEL-style curriculum operator
                # (and its ablation): selfplay.designer.mutation_share=0.25 (mutation_parents picks the parents).
            ),
            hints=HintConfig(
                source="model",
                temperature=0.3,
                top_p=0.9,
                top_k=0,
                max_new_tokens=2048 if tool else 4096,
                enable_thinking=False,  # the reference's SelfHintGenerator renders without the thinking switch
            ),
            rollout=RolloutConfig(
                max_turns=25,
                max_episode_tokens=32768,
                max_new_tokens_per_turn=8192,
                temperature=0.6,
                top_p=0.95,
                top_k=20,
                enable_thinking=thinking,
                thinking_turns="rerender" if thinking else "sequence",
                hinted_enable_thinking=False,  # _play_game_with_hint_async renders with the default kwargs
                observation_template=REFERENCE_OBSERVATION_TEMPLATE,
                action_parsing="reference",
                no_eos="end",
                step_error="terminal_penalty",
                respect_game_max_turns=True,
            ),
            reward=RewardConfig(kind="blend", lp_gamma_fast=0.98, lp_gamma_slow=0.85, plateau_stat="mean_return"),
        ),
        learner=LearnerConfig(
            lr=1e-6,
            schedule="constant",
            weight_decay=0.1,
            betas=(0.9, 0.98),
            clip_low=0.2,
            clip_high=0.28,
            kl_coef=kl_coef,
            kl_clip=10.0,
            loss_agg="sample_mean_fixed",
            tis_temperature=0.6,
            entropy_coef=0.0,
            # benchmarks/plan_memory.py: one 32K-token row per chip per micro-batch on a TPU v5p-64 (768 agent rows
            # / 24 / 32 chips), where remat can keep the attention side ("attn": the attention is not run again);
            # 8-GPU nodes hold 4 rows per GPU and need remat_policy=nothing
            remat=True,
            remat_policy="attn",
            grad_accum_steps=24,
        ),
    )


RUN_PRESETS = {
    "demo": _demo,
    "tiny": _tiny,
    # cmd/games/train_spade_4b.sh: Qwen3-4B-Instruct-2507 (no thinking mode), KL 0.
    "paper-qwen3-4b": lambda: _paper("qwen3-4b-instruct-2507"),
    # cmd/games/train_spade_8b.sh: Qwen3-8B, the agent thinking (each turn re-rendered, its own sample), the
    # designer, hints and hinted plays not (the reference's code, whatever its flags say), 20K designer tokens,
    # KL 0.005.
    "paper-qwen3-8b": lambda: _paper("qwen3-8b", kl_coef=0.005, designer_tokens=20000, thinking=True),
    # cmd/games/train_spade_30b.sh: KL 0, thinking off.
    "paper-qwen3-30b-a3b": lambda: _paper("qwen3-30b-a3b-instruct-2507"),
    # cmd/tool_use/train_spade_30b.sh (_train_spade_blend.sh, TOOL_MODEL_SIZE=30b).
    "paper-qwen3-30b-a3b-tool": lambda: _paper("qwen3-30b-a3b-instruct-2507", kind="tool", kl_coef=0.005),
    # The same tool-use blend recipe on the paper's 4B model (the reference's own tool_use/train_spade_4b.sh
    # is an earlier run with other values: docs/recipe.md).
    "paper-qwen3-4b-tool": lambda: _paper("qwen3-4b-instruct-2507", kind="tool", kl_coef=0.005),
}


def _read_config_file(path: Path) -> str:
    """The text of a saved config.json; a ConfigError naming the file when it is missing, unreadable or not UTF-8
    text (the decoder's own message gives a byte position but no file)."""
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        msg = f"config file {path} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})"
        raise ConfigError(msg) from None
    except OSError as e:  # a directory, no permission
        raise ConfigError(f"config file {path} cannot be read ({e.strerror or e})") from None


def load_run_config(
    preset: str,
    overrides: list[str] = (),
    *,
    config_file: str | Path | None = None,
    config_text: str | None = None,
    config_name: str = "config.json",
) -> RunConfig:
    """A preset, a saved config.json (`config_file`, or its text `config_text`, e.g. read from a bucket, named
    `config_name` in errors) with `key=value` overrides; one-line ConfigError on bad input."""
    if config_file is not None or config_text is not None:
        path = Path(config_file) if config_file is not None else config_name
        text = _read_config_file(Path(config_file)) if config_file is not None else config_text
        try:
            cfg = RunConfig.from_json(text)
        except (json.JSONDecodeError, TypeError, ValueError) as e:
            raise ConfigError(f"config file {path} is not a valid run config: {e}") from None
    elif preset in RUN_PRESETS:
        cfg = RUN_PRESETS[preset]()
    else:
        raise ConfigError(f"unknown run preset {preset!r}; available: {', '.join(sorted(RUN_PRESETS))}")
    cfg = apply_overrides(cfg, list(overrides))
    try:  # re-run the sub-configs' own validation after overrides
        cfg = dataclasses.replace(cfg, learner=dataclasses.replace(cfg.learner))
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(f"learner: {e}") from None
    if cfg.selfplay.rollout.tool_format not in TOOL_FORMATS:
        fmt = cfg.selfplay.rollout.tool_format
        raise ConfigError(f"selfplay.rollout.tool_format={fmt!r}; expected one of {TOOL_FORMATS}")
    return cfg
