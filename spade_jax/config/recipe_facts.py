"""The reference's recipe as data: the launch scripts compared (`SCRIPTS`), their values and the code's behaviour
(`FACTS`), where our presets differ on purpose (`DIFFERENCES`) and the training-code points (`POINTS`).
`spade_jax.config.recipe` turns them into docs/recipe.md against the preset objects.

`FACTS` is hand-entered from the reference (github spade-rl/spade at 9b2b813, slime at bf14dc21f): the launch
scripts `cmd/games/train_spade_{4b,8b,30b}.sh`, `cmd/tool_use/_train_spade_blend.sh` (the 8B/30B tool-use entry
points) and `cmd/tool_use/train_spade_4b.sh`, with the defaults of `spade/slime/arguments.py` (and slime's) where
a script leaves a flag unset; and, where the training code decides what a flag does not say, the behaviour of
that code (rows naming a file and function). Where a script's flag and the code disagree, the code wins and the
row says so. `DIFFERENCES` lists where we differ on purpose: safety (always on), the signal (`selfplay.signal`),
and the rest, named.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from spade_jax.config.run import PAPER_GAME_SKILLS
from spade_jax.config.selfplay import REFERENCE_OBSERVATION_TEMPLATE

# Reference scripts (columns) and the preset that follows each; None = shown for information only.
SCRIPTS: dict[str, tuple[str, str | None]] = {
    "g4b": ("cmd/games/train_spade_4b.sh", "paper-qwen3-4b"),
    "g8b": ("cmd/games/train_spade_8b.sh", "paper-qwen3-8b"),
    "g30b": ("cmd/games/train_spade_30b.sh", "paper-qwen3-30b-a3b"),
    "tool": ("cmd/tool_use/_train_spade_blend.sh (30b)", "paper-qwen3-30b-a3b-tool"),
    "tool4b": ("cmd/tool_use/train_spade_4b.sh", None),
}
# Presets that follow a script without being its column's preset: (script, keys not compared).
EXTRA_PRESETS: dict[str, tuple[str, tuple[str, ...]]] = {"paper-qwen3-4b-tool": ("tool", ("model",))}

_TOOL_SKILLS = ("API_Orchestration", "Data_Retrieval", "State_Modification", "Error_Recovery", "Tool_Selection",
                "Multi-Step_Workflows")  # fmt: skip


class Fact(NamedTuple):
    """flag: the reference's flag, or its behaviour with the file and function that decide it; ref: value per
    script key ("*" = every script); key: ours (dotted, "" = none); why: set when we differ on purpose (then the
    row is not checked); code: where the launch script's flag and the code disagree, what the code does."""

    flag: str
    ref: dict[str, Any]
    key: str
    why: str = ""
    code: str = ""


def _v(all_: Any = None, **per: Any) -> dict[str, Any]:
    return {"*": all_, **per}


FACTS: tuple[Fact, ...] = (
    Fact(
        "--hf-checkpoint",
        _v(
            None,
            g4b="qwen3-4b-instruct-2507",
            g8b="qwen3-8b",
            g30b="qwen3-30b-a3b-instruct-2507",
            tool="qwen3-30b-a3b-instruct-2507",
            tool4b="qwen3-4b-instruct-2507",
        ),
        "model",
    ),  # fmt: skip
    Fact("--num-rollout", _v(400, tool4b=500), "loop.steps"),
    Fact("--spade-num-games-per-rollout / --rollout-batch-size", _v(24, tool4b=16), "selfplay.envs_per_step"),
    Fact(
        "unhinted plays per game and step: ceil(global batch / games) (spade/core/orchestrator.py::"
        "collect_trajectories, Stage 4)",
        _v(192, tool4b=256),
        "selfplay.agent_batch",
        code="--spade-trajectories-per-game 16 is read only by the fixed-model evaluation (off) and the fixed_env "
        "baselines: 192 / 24 = 8 unhinted plays per game",
    ),  # fmt: skip
    Fact("--spade-hint-plays-per-game (regeneration steps only)", _v(16, tool4b=4), "selfplay.plays_per_condition"),
    Fact(
        "hinted and unhinted reset seeds (orchestrator.py::play_game_async, _play_game_with_hint_async)",
        _v(False),
        "selfplay.paired_seeds",
    ),  # fmt: skip
    Fact("--spade-game-regeneration-interval", _v(4, tool=8, tool4b=32), "selfplay.regen_interval"),
    Fact("--spade-proposer-training-delay", _v(4, tool=8, tool4b=32), "selfplay.designer_delay"),
    Fact("--spade-skills-per-regen", _v(3, tool=0, tool4b=0), "selfplay.skills_per_regen"),
    Fact("--spade-skills (games)", _v(PAPER_GAME_SKILLS, tool=None, tool4b=None), "selfplay.skills"),
    Fact(
        "--spade-skills (tool use)",
        _v(None, tool=_TOOL_SKILLS, tool4b=_TOOL_SKILLS),
        "selfplay.skills",
        "our tool environments name a domain as their SKILL (envs/contract.py TOOL_DOMAINS)",
    ),  # fmt: skip
    Fact("--spade-game-difficulty", _v("medium"), "selfplay.designer.difficulty"),
    Fact(
        "designer prompt (spade/core/corpus_orchestrator.py::_generate_single_game_async, "
        "prompts/corpus_template.py::generate_corpus_grounded_prompt)",
        _v("reference", tool=None, tool4b=None),
        "selfplay.designer.prompt",
    ),  # fmt: skip
    Fact(
        "interactive spec (prompts/corpus_template.py::INTERACTIVE_SPEC)",
        _v("interactive", tool=None, tool4b=None),
        "selfplay.designer.contract",
    ),  # fmt: skip
    Fact(
        "designer prompt (tool use)",
        _v(None, tool="tool prompt", tool4b="tool prompt"),
        "selfplay.designer.prompt",
        "the tool-use designer prompt was not read line by line: ours (contract, task, document, exemplars)",
    ),  # fmt: skip
    Fact(
        "exemplar code cut (corpus_orchestrator.py::_augment_prompt_with_memory, game_code[:2000])",
        _v(2000),
        "selfplay.memory.exemplar_max_chars",
    ),  # fmt: skip
    Fact(
        "exemplars of the target skill only, none while unmeasured (env_memory.py::high_regret_seeds)",
        _v(False),
        "selfplay.memory.exemplar_fallback",
    ),  # fmt: skip
    Fact(
        "resample: new document and exemplars per attempt (corpus_orchestrator.py::_generate_single_game_async)",
        _v(True),
        "selfplay.designer.resample_fresh_prompt",
    ),  # fmt: skip
    Fact(
        "memory admission (spade_rollout.py: _ENV_MEMORY.add at regeneration steps, never updated)",
        _v("reference"),
        "selfplay.memory.admission",
    ),  # fmt: skip
    Fact("seed library in the memory (env_memory.json starts empty)", _v(False), "selfplay.memory.seed_from_library"),
    Fact(
        "corpus draws (spade/core/corpus.py::CorpusLoader.sample, rng.sample(docs, 1) per attempt)",
        _v("uniform"),
        "selfplay.corpus.sampling",
    ),  # fmt: skip
    Fact(
        'corpus cut marker (corpus.py: "\\n[Document truncated at ~N words]")',
        _v(True),
        "selfplay.corpus.truncation_marker",
    ),  # fmt: skip
    Fact(
        "plateau statistic (utils/delayed_env_rewards.py::recompute_delayed_env_rewards_blend: mean raw return)",
        _v("mean_return"),
        "selfplay.reward.plateau_stat",
    ),  # fmt: skip
    Fact(
        "blend: no timeout penalty, negative designer rewards dropped, no play-count threshold "
        "(delayed_env_rewards.py::recompute_delayed_env_rewards_blend, spade_rollout.py proposer_masked)",
        _v("reference"),
        "selfplay.signal",
    ),  # fmt: skip
    Fact(
        "validation: load, reset, 3 probe steps (spade/core/envs/synthetic_game_env.py::_validate_game_execution)",
        _v(False),
        "selfplay.gates.strict",
        "the run sets the gates' strictness from selfplay.signal (reference: our sandboxed load, reset and step "
        "probes only)",
    ),  # fmt: skip
    Fact(
        "a turn without EOS ends the episode, return 0, not stepped (orchestrator.py::play_game_async)",
        _v("end"),
        "selfplay.rollout.no_eos",
    ),  # fmt: skip
    Fact(
        "step() raising: reward -1, terminated, trained (synthetic_game_env.py::SyntheticGameEnv.step)",
        _v("terminal_penalty"),
        "selfplay.rollout.step_error",
    ),  # fmt: skip
    Fact(
        "the game's own max_turns, capped at 25 (make_synthetic_env(respect_game_max_turns=True))",
        _v(True),
        "selfplay.rollout.respect_game_max_turns",
    ),  # fmt: skip
    Fact(
        "no archive fill-in: fewer games played more often (collect_trajectories)",
        _v(False),
        "selfplay.fill_from_archive",
    ),  # fmt: skip
    Fact("--spade-env-temperature", _v(0.6), "selfplay.designer.temperature"),
    Fact("--spade-env-top-p (default)", _v(0.95), "selfplay.designer.top_p"),
    Fact("--spade-env-top-k (default)", _v(20), "selfplay.designer.top_k"),
    Fact("--spade-env-max-tokens", _v(16384, g8b=20000), "selfplay.designer.max_new_tokens"),
    Fact("--spade-actor-temperature", _v(0.6), "selfplay.rollout.temperature"),
    Fact("--spade-actor-top-p (default)", _v(0.95), "selfplay.rollout.top_p"),
    Fact("--spade-actor-top-k (default)", _v(20), "selfplay.rollout.top_k"),
    Fact("--spade-actor-max-tokens / --rollout-max-response-len", _v(8192), "selfplay.rollout.max_new_tokens_per_turn"),
    Fact("--spade-max-context-length", _v(32768), "selfplay.rollout.max_episode_tokens"),
    Fact("--spade-max-context-length (sampler)", _v(32768), "max_total_len"),
    Fact("--spade-max-turns", _v(25), "selfplay.rollout.max_turns"),
    Fact("--spade-actor-template", _v(REFERENCE_OBSERVATION_TEMPLATE), "selfplay.rollout.observation_template"),
    Fact("parse_action (spade/core/utils/parsing.py)", _v("reference"), "selfplay.rollout.action_parsing"),
    Fact(
        "designer thinking (corpus_orchestrator.py: apply_template(messages), the global chat kwargs)",
        _v(False),
        "selfplay.designer.enable_thinking",
        code="train_spade_8b.sh sets --spade-env-enable-thinking, but the corpus path renders without it: off",
    ),  # fmt: skip
    Fact("--spade-actor-enable-thinking / chat kwargs", _v(False, g8b=True), "selfplay.rollout.enable_thinking"),
    Fact(
        "thinking actor: each turn re-rendered, one sample per turn (orchestrator.py::_play_game_thinking_async, "
        "slime/trajectory_converter.py::fan_out_thinking_sample)",
        _v("sequence", g8b="rerender"),
        "selfplay.rollout.thinking_turns",
    ),  # fmt: skip
    Fact(
        "hinted plays' thinking (orchestrator.py::_play_game_with_hint_async, default kwargs)",
        _v(False),
        "selfplay.rollout.hinted_enable_thinking",
    ),  # fmt: skip
    Fact(
        "hint thinking (hint_generator.py::SelfHintGenerator, global --apply-chat-template-kwargs)",
        _v(False),
        "selfplay.hints.enable_thinking",
        code="the 8B script's global chat kwargs turn thinking off; the hint writer has no switch of its own",
    ),  # fmt: skip
    Fact("--spade-hint-mode", _v("model"), "selfplay.hints.source"),
    Fact("--spade-hint-temperature", _v(0.3), "selfplay.hints.temperature"),
    Fact("hint top_p (generate_async default)", _v(0.9), "selfplay.hints.top_p"),
    Fact("hint top_k (slime --rollout-top-k default -1 = off)", _v(0), "selfplay.hints.top_k"),
    Fact("--spade-hint-max-tokens", _v(4096, tool=2048, tool4b=512), "selfplay.hints.max_new_tokens"),
    Fact("--spade-env-reward-variant", _v("blend", tool4b="regret"), "selfplay.reward.kind"),
    Fact("--spade-plateau-weight", _v(0.6, tool4b=None), "selfplay.reward.plateau_weight"),
    Fact("--spade-regret-weight", _v(0.4, tool4b=None), "selfplay.reward.regret_weight"),
    Fact("--spade-regret-scale", _v(0.15, tool4b=None), "selfplay.reward.regret_scale"),
    Fact("--spade-plateau-lo", _v(0.4, tool4b=None), "selfplay.reward.plateau_lo"),
    Fact("--spade-plateau-hi", _v(0.6, tool4b=None), "selfplay.reward.plateau_hi"),
    Fact("--spade-plateau-ramp", _v(0.25, tool4b=None), "selfplay.reward.plateau_ramp"),
    Fact("--spade-gamma1", _v(0.98), "selfplay.reward.lp_gamma_fast"),
    Fact("--spade-gamma2", _v(0.85), "selfplay.reward.lp_gamma_slow"),
    Fact("--spade-corpus-max-doc-tokens (words)", _v(6000, tool=4000, tool4b=4000), "selfplay.corpus.max_doc_words"),
    Fact("--spade-corpus-seed", _v(42), "selfplay.corpus.seed"),
    Fact("--spade-env-memory-max-size", _v(200), "selfplay.memory.capacity"),
    Fact("ENV_STEP_TIMEOUT (orchestrator.py), seconds", _v(30.0), "call_timeout_s"),
    Fact("--lr", _v(1e-6), "learner.lr"),
    Fact("--lr-decay-style", _v("constant"), "learner.schedule"),
    Fact("--weight-decay", _v(0.1), "learner.weight_decay"),
    Fact("--adam-beta1 / --adam-beta2", _v((0.9, 0.98)), "learner.betas"),
    Fact("--eps-clip", _v(0.2), "learner.clip_low"),
    Fact("--eps-clip-high", _v(0.28), "learner.clip_high"),
    Fact("--kl-loss-coef (low_var_kl)", _v(0.005, g4b=0.0, g30b=0.0), "learner.kl_coef"),
    Fact("low_var_kl clamp (slime/utils/ppo_utils.py::compute_approx_kl)", _v(10.0), "learner.kl_clip"),
    Fact(
        "loss: each sample's token mean, summed, / global batch (slime backends/megatron_utils/loss.py, "
        "cp_utils.py::get_sum_of_sample_mean; --calculate-per-token-loss off)",
        _v("sample_mean_fixed"),
        "learner.loss_agg",
    ),  # fmt: skip
    Fact(
        "TIS sampler log-probs: SGLang's log softmax(logits / 0.6), unfiltered; trainer's at 1.0 "
        "(slime loss.py::vanilla_tis_function, --rollout-temperature 1.0)",
        _v(0.6),
        "learner.tis_temperature",
    ),  # fmt: skip
    Fact(
        "--spade-compact-filter (spade_rollout.py: TRUNCATED samples' loss mask zeroed)",
        _v(False, tool=True, tool4b=True),
        "selfplay.compact_filter",
    ),  # fmt: skip
    Fact("--entropy-coef", _v(0.0), "learner.entropy_coef"),
    Fact("--disable-grpo-std-normalization", _v("none"), "loop.role_norm"),
    Fact("--spade-reward-normalization grpo (agent z-score per game)", _v(True), "loop.agent_group_std"),
    Fact(
        "--spade-auto-compute-env-reward-scale (a flag, default on: utils/rewards.py::compute_env_reward_scale)",
        _v(0.0),
        "selfplay.designer_reward_scale",
    ),  # fmt: skip
    Fact("--spade-max-env-reward-scale (default)", _v(50.0), "selfplay.designer_reward_scale_max"),
    Fact("max_attempts of a game generation (spade_rollout.py)", _v(5), "selfplay.designer.max_attempts"),
    Fact("env_repair_turns (default 0: resample)", _v("resample"), "selfplay.designer.on_invalid"),
    Fact("--spade-no-train-on-env-trajectories (not set)", _v(True), "selfplay.train_designer"),
    Fact("--use-tis (tis_clip 2.0, tis_clip_low 0)", _v(2.0), "learner.is_cap"),
    Fact("--global-batch-size", _v(192, tool4b=256), "loop.global_batch"),
    Fact(
        "batch: designer samples first, agent samples in play order, duplicated up to 192 - designs, inert pads, "
        "cut to 192 (spade_rollout.py::spade_generate_rollout; orchestrator.py, Stage 7)",
        _v("reference"),
        "loop.batch_policy",
        code="--use-dynamic-global-batch-size is not a flag of the pinned slime (dropped unread); SPADE rescales "
        "a short batch's rewards by 192 / real instead, when KL and entropy are 0",
    ),  # fmt: skip
    Fact(
        "--use-dynamic-batch-size --max-tokens-per-gpu (micro-batch packing)",
        _v("on"),
        "learner.grad_accum_steps",
        "micro-batches are ours (grad_accum_steps or micro_batch_size); the step's loss is the same",
    ),  # fmt: skip
    Fact("--save-interval", _v(16), "loop.checkpoint_every", "we checkpoint every step (async) for exact resume"),
    Fact(
        "--spade-use-env-validator (tool)",
        _v(None, tool=True, tool4b=True),
        "",
        "our gates validate every design (static checks, sandboxed probes, random-play win rate)",
    ),  # fmt: skip
)


class Difference(NamedTuple):
    """Where we differ from the reference on purpose. kind: "safety" (always on), "signal" (which designs are
    trained and at what reward: off under `selfplay.signal=reference`, on under "strict") or "named" (a
    difference we keep and say); switch: the config key (dotted) that turns it, "" when none."""

    what: str
    reference: str
    ours: str
    kind: str
    switch: str = ""


DIFFERENCES: tuple[Difference, ...] = (
    Difference(
        "where generated code runs",
        "exec in the trainer process with a SIGALRM timeout (spade/core/envs/synthetic_game_env.py::SyntheticGameEnv)",
        "a real sandbox (gVisor, bubblewrap, an rlimited process last), the level in force logged",
        "safety",
        "sandbox",
    ),  # fmt: skip
    Difference(
        "resource limits",
        "30 s per step(), 300 s per play, 60 s validation (orchestrator.py)",
        "per-call time, CPU, memory, process and file limits in the sandbox; a hung step ends its play",
        "safety",
        "sandbox_limits",
    ),  # fmt: skip
    Difference(
        "reply checks",
        "a reward outside [-1, 1] is clipped and trained (utils/rewards.py::episode_reward)",
        "a reward outside [-1, 1] ends the play (violation), which is not trained; the environment is "
        "retired from its round and the archive",
        "safety",
    ),  # fmt: skip
    Difference(
        "the strict gates",
        "load, reset, three probe steps, reset (synthetic_game_env.py::_validate_game_execution)",
        "also determinism, termination, random-play "
        "win rate at most 15%, the hint gate and novelty against the archive: games that never end or that "
        "any reply wins are refused",
        "signal",
        "selfplay.signal",
    ),  # fmt: skip
    Difference(
        "training-seed audit",
        "none",
        "every environment played is re-checked on the agent's own seeds "
        "(no-op and random plays, gates/audit.py); a violation retires it",
        "signal",
        "selfplay.signal",
    ),
    Difference(
        "hint-leak check",
        "none",
        "the sandbox checks whether a hint gives the answer away; a leaking hint measures no regret",
        "signal",
        "selfplay.signal",
    ),  # fmt: skip
    Difference(
        "hung or broken environments",
        "no penalty in the blend: a hung play is dropped and the design "
        "earns the blend of what is left (delayed_env_rewards.py::recompute_delayed_env_rewards_blend)",
        "the design earns reward.timeout_reward / violation_reward (-0.5)",
        "signal",
        "selfplay.signal",
    ),  # fmt: skip
    Difference(
        "negative designer rewards",
        "dropped from training and from the centring (spade_rollout.py, proposer_masked)",
        "trained (they can only come from the penalties above)",
        "signal",
        "selfplay.signal",
    ),  # fmt: skip
    Difference(
        "too few plays",
        "any number of plays is measured",
        "fewer than reward.min_plays_fraction of the expected plays: the design earns 0",
        "signal",
        "selfplay.signal",
    ),  # fmt: skip
    Difference(
        "a play's wall-clock limit",
        "a play longer than 300 s is dropped (FAILED, per_game_timeout)",
        "no wall-clock limit per play (turn and token budgets, per-call limits)",
        "named",
    ),  # fmt: skip
    Difference(
        "hint writer",
        "its HINT_SYSTEM_PROMPT, the raw reply used as is (hint_generator.py)",
        "our prompt and cleaning, cut at 3 sentences / 100 words (selfplay/hints.py)",
        "named",
    ),
    Difference(
        "duplicated plays",
        "the upsampled copies also count in the window's rewards and the memory's win rate (orchestrator.py, Stage 7)",
        "duplicates are made by the learner half, after the window and the memory read the plays",
        "named",
    ),  # fmt: skip
    Difference(
        "reset seeds",
        "unhinted plays reset with seed None; hinted play i with hash(file + i), salted "
        "per process; every play follows a validation that seeds the global random",
        "seeds from the run seed's streams (reproducible); nothing runs between the load and the play",
        "named",
        "selfplay.paired_seeds",
    ),  # fmt: skip
    Difference(
        "skill rotation",
        "rollout_id // 4 (spade_rollout.py)",
        "advances per design round; a round whose environments were all retired is redesigned at once",
        "named",
    ),  # fmt: skip
    Difference(
        "micro-batches",
        "first-fit packing to --max-tokens-per-gpu, Karmarkar-Karp over ranks",
        "learner.grad_accum_steps / micro_batch_size (the step's loss is the same)",
        "named",
    ),
    Difference(
        "checkpoints", "--save-interval 16", "every step (async), for exact resume", "named", "loop.checkpoint_every"
    ),  # fmt: skip
)

# The reference's training dynamics (issue 45), point by point: the config keys and the tests that check them.
POINTS: tuple[tuple[str, str, str], ...] = (
    (
        "plays per environment",
        "selfplay.agent_batch, selfplay.plays_per_condition, selfplay.paired_seeds",
        "tests/test_reference_batch.py::test_unhinted_plays_fill_the_global_batch",
    ),
    (
        "the global batch",
        "loop.batch_policy, loop.global_batch",
        "tests/test_reference_batch.py::test_reference_batch_by_hand",
    ),
    ("loss aggregation", "learner.loss_agg", "tests/test_reference_batch.py::test_sample_mean_fixed_loss_by_hand"),
    (
        "designer reward scale",
        "selfplay.designer_reward_scale",
        "tests/test_reference_batch.py::test_reference_batch_by_hand",
    ),
    (
        "designer prompt, plateau",
        "selfplay.designer.prompt, selfplay.designer.contract, selfplay.memory.*, selfplay.reward.plateau_stat",
        "tests/test_reference_designer.py",
    ),
    (
        "resampling",
        "selfplay.designer.resample_fresh_prompt",
        "tests/test_reference_designer.py::test_every_resample_draws_a_new_document_and_exemplars",
    ),
    (
        "memory admission",
        "selfplay.memory.admission, selfplay.memory.seed_from_library",
        "tests/test_reference_designer.py::test_reference_admission_once_at_the_regeneration_step",
    ),
    (
        "corpus draws",
        "selfplay.corpus.sampling, selfplay.corpus.truncation_marker",
        "tests/test_reference_designer.py::test_corpus_uniform_draws_and_marker",
    ),
    ("negative blends", "selfplay.signal", "tests/test_reference_signal.py"),
    (
        "episode ends",
        "selfplay.rollout.no_eos, selfplay.rollout.step_error",
        "tests/test_reference_signal.py::test_episode_ends_like_the_reference",
    ),
    (
        "8B thinking agent, designer budget",
        "selfplay.rollout.thinking_turns, selfplay.designer.max_new_tokens",
        "tests/test_reference_thinking.py",
    ),
    ("KL", "learner.kl_clip", "tests/test_reference_batch.py::test_kl_is_clamped_and_taken_over_every_sample"),
    (
        "compact filter",
        "selfplay.compact_filter",
        "tests/test_reference_signal.py::test_compact_filter_zeroes_truncated",
    ),
    (
        "TIS temperature",
        "learner.tis_temperature",
        "tests/test_reference_batch.py::test_tis_weight_at_the_sampling_temperature",
    ),
)
