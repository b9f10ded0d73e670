"""spade-jax: SPADE self-play in JAX. Kept import-light: the sandbox worker imports spade_jax.envs."""

__version__ = "0.1.0"
