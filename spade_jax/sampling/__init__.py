"""sampling: batched KV-cached generation under jit, returning per-token log-probs (see sampler.Sampler)."""

from spade_jax.sampling.sampler import Sampler
from spade_jax.sampling.types import Completion, SamplingParams

__all__ = ["Completion", "Sampler", "SamplingParams"]
