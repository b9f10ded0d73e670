"""Export a run's checkpoint as a Hugging Face directory that `transformers` loads with the same logits.

The folder holds config.json, generation_config.json, the safetensors weights (bfloat16 by default, as models
are shared; `dtype="float32"` keeps a float32 run's weights exactly), the tokenizer files and a model card
(README.md: the base model, the run, its step, the recipe and the figures of that step). The output folder is
checked before anything is loaded and filled beside the target, then renamed into place (export/outdir.py):
a refused or failed export leaves what was there untouched, and files it did not make are never overwritten
without `overwrite`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spade_jax.config.run import RunConfig
from spade_jax.export.outdir import check_out_dir, filling
from spade_jax.rundir.paths import is_remote, read_text

__all__ = ["DTYPES", "export_run", "model_card"]

DTYPES = ("bfloat16", "float32")  # of the saved weights; the first is the default


def export_run(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    step: int | None = None,
    dtype: str = "bfloat16",
    overwrite: bool = False,
) -> Path:
    """Rebuilds the run's model, restores the checkpoint's params into it and writes config, weights (in `dtype`),
    tokenizer and model card to `out_dir`. `run_dir` may be a gs:// run directory (read straight from the bucket).
    ValueError, one line, before any loading: a bad dtype, an output folder that is a file or not empty (without
    `overwrite`), a run directory without config.json."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}; expected one of {', '.join(DTYPES)}")
    check_out_dir(out_dir, overwrite=overwrite)
    root = str(run_dir).rstrip("/") if is_remote(run_dir) else str(Path(run_dir))
    text = read_text(f"{root}/config.json")  # a local folder or gs://
    if text is None:
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.json)")
    cfg = RunConfig.from_json(text)

    from flax import nnx

    from spade_jax.model.hf_io import save_hf_dir
    from spade_jax.model.layer_stack import LayerRelayout
    from spade_jax.model.loading import load_model
    from spade_jax.rundir.checkpoints import Checkpointer

    model_cfg, model, tokenizer = load_model(cfg.model, param_dtype=cfg.param_dtype, dtype=cfg.dtype)
    ckpt = Checkpointer(f"{root}/checkpoints", async_save=False, relayout=LayerRelayout())  # either block layout
    try:
        step = ckpt.latest_step() if step is None else step
        params = nnx.state(model, nnx.Param)
        trees, _ = ckpt.restore(step, {"params": params})
    finally:
        ckpt.close()
    nnx.update(model, trees["params"])
    if dtype != model_cfg.param_dtype:
        import jax

        model_cfg = model_cfg.replace(param_dtype=dtype)
        state = nnx.state(model, nnx.Param)
        nnx.update(model, jax.tree.map(lambda x: x.astype(model_cfg.jnp_param_dtype), state))
    card = model_card(cfg, run_dir=str(run_dir), step=step, dtype=dtype, metrics=_row_of(root, step))
    with filling(out_dir, overwrite=overwrite) as tmp:
        save_hf_dir(model, model_cfg, tmp, tokenizer_files=tokenizer.hf_files())
        (tmp / "README.md").write_text(card, encoding="utf-8")
    return Path(out_dir)


def _row_of(root: str, step: int | None) -> dict[str, Any]:
    """The metrics row of `step` in the run's metrics.jsonl (empty when there is none)."""
    text = read_text(f"{root}/metrics.jsonl") or ""
    for line in reversed(text.splitlines()):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("step") == step:
            return row
    return {}


# The recipe's values a reader of the card needs to know what the weights went through: config key -> label.
_RECIPE = (
    ("loop.warmstart", "supervised warm start on the seed library first"),
    ("loop.pool", "environments (selfplay: designed by the model itself)"),
    ("selfplay.envs_per_step", "environments per step"),
    ("selfplay.plays_per_condition", "plays per environment and condition (hinted, unhinted)"),
    ("selfplay.regen_interval", "steps between design rounds"),
    ("selfplay.reward.kind", "designer reward"),
    ("selfplay.rollout.max_turns", "turns per episode at most"),
    ("selfplay.rollout.temperature", "sampling temperature"),
    ("learner.lr", "learning rate (AdamW)"),
    ("learner.schedule", "learning-rate schedule"),
    ("learner.clip_low", "PPO clip, low"),
    ("learner.clip_high", "PPO clip, high"),
    ("learner.kl_coef", "KL coefficient"),
    ("loop.seed", "run seed"),
)
_FIGURES = ("eval/win_rate", "rollout/win_rate_no_hint", "rollout/win_rate_hint", "design/valid_frac",
            "env/regret_mean")  # fmt: skip


def _get(cfg: RunConfig, key: str) -> Any:
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def model_card(cfg: RunConfig, *, run_dir: str, step: int | None, dtype: str, metrics: dict[str, Any]) -> str:
    """The export's README.md: Hugging Face front matter, then what the weights are and how they were trained."""
    base = cfg.model
    recipe = "\n".join(f"| `{key}` | {label} | {_get(cfg, key)} |" for key, label in _RECIPE)
    figures = "\n".join(f"| `{k}` | {metrics[k]:.3f} |" for k in _FIGURES if isinstance(metrics.get(k), int | float))
    figures = (f"Figures of step {step} (`metrics.jsonl` of the run):\n\n| metric | value |\n|---|---|\n{figures}\n"
               if figures else "")  # fmt: skip
    return f"""---
library_name: transformers
tags:
- spade
- self-play
- reinforcement-learning
base_model_relation: finetune
---

# {Path(run_dir.rstrip("/")).name}: {base} trained by SPADE self-play

Weights of step {step} of the spade-jax run `{run_dir}`, exported in {dtype} by `spade-jax export-hf`.
Base model: `{base}` (a spade-jax model spec: a preset in `models/`, a GGUF file or a Hugging Face directory).

One model plays two roles in SPADE: as the environment designer it writes multi-turn training environments as
Python programs, and as the reasoning agent it plays them; the designer is rewarded by the agent's hint-based
regret (its return with a privileged hint minus its return without). Both roles were trained together with a
clipped policy-gradient loss.

## Recipe

| key | what | value |
|---|---|---|
{recipe}

The whole configuration is the run's `config.json`.

{figures}
## Use

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("path/to/this/folder")
tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")
```
"""
