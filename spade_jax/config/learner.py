"""Configs of the RL half (learner, advantage scaling) and the learner's row lengths: no JAX here, so a run
config loads, and is checked, without importing jax, flax or optax (tests/test_layering.py)."""

from __future__ import annotations

from dataclasses import dataclass

from spade_jax.config.ranges import check_ranges

__all__ = [
    "ATTENTION_IMPLS",
    "LOSS_AGGS",
    "REMAT_POLICY_NAMES",
    "ROLE_NORMS",
    "SCHEDULES",
    "LearnerConfig",
    "length_buckets_for",
]

SCHEDULES = ("constant", "cosine", "linear")
REMAT_POLICY_NAMES = ("nothing", "attn", "mlp", "dots")  # model/transformer.py REMAT_POLICIES: what remat keeps
# training attention (model/train_attention.py): auto = cuDNN on GPU, splash on TPU, XLA blocks on CPU
ATTENTION_IMPLS = ("auto", "xla", "cudnn", "splash")
ROLE_NORMS = ("none", "std")  # per-role scaling of the group advantages (rl/advantages.py)
# How per-token losses become the step's loss: "token_mean" = one mean over every trained token of the batch;
# "sample_mean_fixed" = each sample's (or episode's) token mean, summed, divided by the fixed global batch
# (loop.global_batch), zero-advantage samples counted in it (the reference's slime loss).
LOSS_AGGS = ("token_mean", "sample_mean_fixed")


def length_buckets_for(max_len: int, smallest: int = 128) -> tuple[int, ...]:
    """Learner row lengths that cover samples up to `max_len` tokens (a run's `max_total_len`): powers of two
    from `smallest` below it, then `max_len` rounded up to a multiple of 128 as the largest bucket."""
    if max_len < 1:
        raise ValueError(f"max_len must be positive, got {max_len}")
    top = -(-max_len // 128) * 128
    out, n = [], smallest
    while n < top:
        out.append(n)
        n *= 2
    return (*out, top)


@dataclass
class LearnerConfig:
    """Optimiser and loss settings (defaults from DESIGN.md)."""

    lr: float = 1e-6
    schedule: str = "constant"  # constant | cosine | linear (decay to 0 at total_steps), after warmup_steps
    warmup_steps: int = 0
    total_steps: int = 0  # for cosine / linear
    weight_decay: float = 0.1
    decay_vectors: bool = False  # False: no weight decay on 1-D params (norm scales, biases)
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    grad_clip: float = 1.0  # global-norm clip; 0 disables
    micro_batch_size: int | None = None  # rows per micro-batch; None: derive from grad_accum_steps
    grad_accum_steps: int = 1  # used when micro_batch_size is None: micro = N / grad_accum_steps
    remat: bool = False  # rematerialise each transformer block in the backward pass
    remat_policy: str = "nothing"  # one of REMAT_POLICY_NAMES (benchmarks/plan_memory.py: which fits)
    logits_chunk: int = 1024  # sequence positions per log-softmax chunk (0: no chunking)
    # vocabulary entries per chunk inside a positions chunk (0: the whole vocabulary): set it where
    # [rows, logits_chunk, V] float32 would not fit (benchmarks/plan_memory.py)
    vocab_chunk: int = 0
    attn_query_chunk: int = 128  # query rows (and keys) per block of the XLA causal attention (0: whole matrix)
    attention: str = "auto"  # training attention implementation, one of ATTENTION_IMPLS
    clip_low: float = 0.2
    clip_high: float = 0.28
    is_cap: float = 2.0  # truncation C of the sampler->learner importance weight
    # Low-variance (k3) KL to a frozen reference: the policy when the Learner was built, or when
    # `freeze_reference()` was last called (the loop's warm start does, so it is the policy RL starts from).
    # The reference params (one more copy of the params) are kept only when kl_coef > 0.
    kl_coef: float = 0.0
    kl_clip: float = 0.0  # the k3 term capped at this value (0: no cap; the reference's low_var_kl: 10)
    loss_agg: str = "token_mean"
    # The importance weight's sampler log-probs: 0 = the raw model's at the sampled token (ours: corrects numerics
    # and staleness only); T > 0 = log softmax(logits / T) at the token, unfiltered (the reference's SGLang
    # log-probs at its sampling temperature, 0.6), against the learner's at temperature 1.
    tis_temperature: float = 0.0
    entropy_coef: float = 0.0
    compute_entropy: bool = True  # entropy metric (costs one extra pass over the logits)
    donate: bool = True
    length_buckets: tuple[int, ...] = ()  # learner row lengths; (): derived from the run's max_total_len

    def __post_init__(self) -> None:
        # Each number against its range (config/ranges.py: lr in [0, 1], eps > 0, ...), here too, so that a
        # LearnerConfig built on its own is checked as a run's is. lr 0 is allowed: a control run that does not
        # move (benchmarks/learning.py).
        check_ranges(self, "learner.")
        if len(self.betas) != 2:
            raise ValueError(f"betas={tuple(self.betas)!r}; expected two numbers in [0, 1)")
        if self.loss_agg not in LOSS_AGGS:
            raise ValueError(f"loss_agg={self.loss_agg!r}; expected one of {LOSS_AGGS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}; expected one of {SCHEDULES}")
        if self.attention not in ATTENTION_IMPLS:
            raise ValueError(f"attention={self.attention!r}; expected one of {ATTENTION_IMPLS}")
        if self.remat_policy not in REMAT_POLICY_NAMES:
            raise ValueError(f"remat_policy={self.remat_policy!r}; expected one of {REMAT_POLICY_NAMES}")
        if self.schedule != "constant" and self.total_steps <= self.warmup_steps:
            raise ValueError(f"schedule={self.schedule!r} needs total_steps > warmup_steps")

    def length_buckets_for(self, max_total_len: int) -> tuple[int, ...]:
        """The configured `length_buckets`, or powers of two up to `max_total_len` (see `rl.batch`)."""
        return tuple(sorted(self.length_buckets)) or length_buckets_for(max_total_len)
