"""Configs of the RL half (learner, advantage scaling) and the learner's row lengths: no JAX here, so a run
config loads, and is checked, without importing jax, flax or optax (tests/test_layering.py)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ATTENTION_IMPLS", "REMAT_POLICY_NAMES", "ROLE_NORMS", "SCHEDULES", "LearnerConfig", "length_buckets_for"]

SCHEDULES = ("constant", "cosine", "linear")
REMAT_POLICY_NAMES = ("nothing", "attn", "mlp", "dots")  # model/transformer.py REMAT_POLICIES: what remat keeps
# training attention (model/train_attention.py): auto = cuDNN on GPU, splash on TPU, XLA blocks on CPU
ATTENTION_IMPLS = ("auto", "xla", "cudnn", "splash")
ROLE_NORMS = ("none", "std")  # per-role scaling of the group advantages (rl/advantages.py)


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
    micro_batch_size: int = 0  # rows per micro-batch; 0: derive from grad_accum_steps
    grad_accum_steps: int = 1  # used when micro_batch_size is 0: micro = N / grad_accum_steps
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
    entropy_coef: float = 0.0
    compute_entropy: bool = True  # entropy metric (costs one extra pass over the logits)
    donate: bool = True
    length_buckets: tuple[int, ...] = ()  # learner row lengths; (): derived from the run's max_total_len

    def __post_init__(self) -> None:
        self._check_ranges()
        if any(int(b) < 1 for b in self.length_buckets):
            raise ValueError(f"length_buckets={self.length_buckets!r}: every bucket must be positive")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef={self.kl_coef} must be >= 0")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}; expected one of {SCHEDULES}")
        if self.attention not in ATTENTION_IMPLS:
            raise ValueError(f"attention={self.attention!r}; expected one of {ATTENTION_IMPLS}")
        if self.remat_policy not in REMAT_POLICY_NAMES:
            raise ValueError(f"remat_policy={self.remat_policy!r}; expected one of {REMAT_POLICY_NAMES}")
        if self.micro_batch_size < 0 or self.grad_accum_steps < 1:
            raise ValueError("micro_batch_size must be >= 0 and grad_accum_steps >= 1")
        if self.schedule != "constant" and self.total_steps <= self.warmup_steps:
            raise ValueError(f"schedule={self.schedule!r} needs total_steps > warmup_steps")

    def _check_ranges(self) -> None:
        """Numbers outside the range where they mean anything, refused when the config is built (a negative lr
        or an eps of 0 would otherwise run, or fail, only at the first learner step). lr 0 is allowed: a
        control run that does not move (benchmarks/learning.py)."""
        if not self.lr >= 0:
            raise ValueError(f"lr={self.lr}; expected >= 0")
        if self.warmup_steps < 0 or self.total_steps < 0:
            raise ValueError(f"warmup_steps={self.warmup_steps}, total_steps={self.total_steps}; expected >= 0")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay={self.weight_decay}; expected >= 0")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas={tuple(self.betas)!r}; expected two numbers in [0, 1)")
        if not self.eps > 0:
            raise ValueError(f"eps={self.eps}; expected > 0")
        if not self.grad_clip >= 0:
            raise ValueError(f"grad_clip={self.grad_clip}; expected >= 0 (0 disables)")
        if not 0 <= self.clip_low < 1 or not self.clip_high >= 0:
            bounds = "expected 0 <= clip_low < 1 and clip_high >= 0"
            raise ValueError(f"clip_low={self.clip_low}, clip_high={self.clip_high}; {bounds}")
        if not self.is_cap > 0:
            raise ValueError(f"is_cap={self.is_cap}; expected > 0")
        if self.logits_chunk < 0 or self.attn_query_chunk < 0 or self.vocab_chunk < 0:
            chunks = f"logits_chunk={self.logits_chunk}, attn_query_chunk={self.attn_query_chunk}, " \
                f"vocab_chunk={self.vocab_chunk}"  # fmt: skip
            raise ValueError(f"{chunks}; expected >= 0 (0: no chunking)")

    def length_buckets_for(self, max_total_len: int) -> tuple[int, ...]:
        """The configured `length_buckets`, or powers of two up to `max_total_len` (see `rl.batch`)."""
        return tuple(sorted(self.length_buckets)) or length_buckets_for(max_total_len)
