"""The warm start's config (what supervised data, how many passes; run/warmstart.py runs it). No JAX here: a run
config loads and is checked without importing jax, flax or optax (tests/test_layering.py)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WarmStartConfig"]


@dataclass
class WarmStartConfig:
    """How much supervised data and how many passes."""

    epochs: int = 2
    lr: float = 1e-5  # its own AdamW (the RL learner's optimizer state is left untouched)
    agent_episodes_per_seed: int = 2
    designer_examples_per_seed: int = 1  # 0: agent conversations only
    designer_seeds: int = 0  # how many seeds get designer examples (0: all)
    # Programmatic variants (spade_jax.envs.variants: the seed with other difficulty constants and NAME) per
    # seed, each one more designer example answered with the variant's source; 0: the seeds' own code only.
    designer_variants_per_seed: int = 0
    designer_variant_direction: str = "any"  # "any", "easier" or "harder" than the seed
    # Mutation examples per seed (ACCEL-style edits): the mutation prompt with one variant of the seed as the
    # parent, answered with another; the first parent is shown unmeasured (as a run's seeds are), the others
    # with the win rate that calls for the change made (above the band for a harder child, below it for an
    # easier one). They teach the edit, not the numbers.
    designer_mutations_per_seed: int = 0
    designer_seed_names: tuple[str, ...] = ()  # seeds that get designer examples (empty: `designer_seeds`)
    agent_seed_names: tuple[str, ...] = ()  # seeds whose reference play the agent learns (empty: all)
    batch_size: int = 8
    probe_designs: int = 4  # designer attempts measured before and after (valid-environment rate); 0 skips

    def __post_init__(self) -> None:
        from spade_jax.envs.variants import DIRECTIONS

        if self.designer_variant_direction not in DIRECTIONS:
            raise ValueError(
                f"warmstart.designer_variant_direction={self.designer_variant_direction!r}; expected one of "
                f"{DIRECTIONS}"
            )
        if self.designer_seed_names or self.agent_seed_names:
            from spade_jax.envs.seeds import check_seed_names

            check_seed_names(self.designer_seed_names + self.agent_seed_names, "warmstart")
        counts = (self.designer_variants_per_seed, self.designer_examples_per_seed, self.designer_mutations_per_seed)
        if min(counts) < 0:
            raise ValueError("warmstart.designer_{examples,variants,mutations}_per_seed must be >= 0")
