"""Export a run's checkpoint as a Hugging Face directory that `transformers` loads with the same logits."""

from __future__ import annotations

from pathlib import Path

from flax import nnx

from spade_jax.config.run import RunConfig
from spade_jax.rundir.checkpoints import Checkpointer
from spade_jax.rundir.paths import is_remote, read_text


def export_run(run_dir: str | Path, out_dir: str | Path, *, step: int | None = None, dtype: str | None = None) -> Path:
    """Rebuilds the run's model, restores the checkpoint's params into it and writes config, weights, tokenizer.
    `run_dir` may be a gs:// run directory (read straight from the bucket)."""
    from spade_jax.model.hf_io import save_hf_dir
    from spade_jax.model.layer_stack import LayerRelayout
    from spade_jax.model.loading import load_model

    root = str(run_dir).rstrip("/") if is_remote(run_dir) else str(Path(run_dir))
    text = read_text(f"{root}/config.json")  # a local folder or gs://
    if text is None:
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.json)")
    cfg = RunConfig.from_json(text)
    model_cfg, model, tokenizer = load_model(cfg.model, param_dtype=cfg.param_dtype, dtype=cfg.dtype)
    ckpt = Checkpointer(f"{root}/checkpoints", async_save=False, relayout=LayerRelayout())  # either block layout
    try:
        params = nnx.state(model, nnx.Param)
        trees, _ = ckpt.restore(step, {"params": params})
    finally:
        ckpt.close()
    nnx.update(model, trees["params"])
    if dtype is not None and dtype != model_cfg.param_dtype:
        import jax

        model_cfg = model_cfg.replace(param_dtype=dtype)
        state = nnx.state(model, nnx.Param)
        nnx.update(model, jax.tree.map(lambda x: x.astype(model_cfg.jnp_param_dtype), state))
    return save_hf_dir(model, model_cfg, out_dir, tokenizer_files=tokenizer.hf_files())
