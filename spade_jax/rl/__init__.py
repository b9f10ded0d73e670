"""The learner: group advantages (`advantages.py`), sequence packing (`batch.py`), the clipped policy-gradient
loss with truncated importance sampling and KL (`losses.py`) and the sharded Optax step (`learner.py`).
It sees batches of arrays (`spade_jax.trajectory.Sample`), never environments, prompts or role names.
"""
