"""Whether generated code is a usable training environment, and whether it keeps being one.

- `static.py`: judged without running it (syntax, one environment class, imports, banned names);
- `sandboxed.py`: `validate(source, pool) -> Verdict`, every dynamic gate in a sandbox session, with a one-line
  reason for the first that fails; `novelty.py`: near-duplicates of the archive; `probes.py`: probe replies;
- `audit.py`: the same environments re-checked on the seeds they are trained on, at every step.
No JAX: the gates run beside the sandboxes, and their settings are `spade_jax.config.gates`.
"""
