"""`spade-jax convert`: any model spec (GGUF file, HF directory, preset) -> a plain Hugging Face directory."""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "convert",
        help="write a model (GGUF, HF directory or preset) as a plain Hugging Face directory",
        description="Writes config.json, safetensors weights and tokenizer files that transformers loads.",
    )
    p.add_argument("--from", dest="source", required=True, help="a .gguf file, a HF model directory, or a preset name")
    p.add_argument("--to", dest="out", required=True, help="output directory (created if missing)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="dtype of the saved weights")
    p.add_argument("--overwrite", action="store_true", help="replace --to when it already holds files")
    p.set_defaults(func=convert)


def convert(args: argparse.Namespace) -> int:
    from rich.console import Console

    from spade_jax.export.outdir import check_out_dir, filling
    from spade_jax.model.hf_io import save_hf_dir
    from spade_jax.model.loading import load_model

    console = Console(stderr=True)
    out = Path(args.out)
    if out.is_dir() and out.resolve() == Path(args.source).expanduser().resolve():
        raise ValueError("--to is the same directory as --from")
    check_out_dir(out, overwrite=args.overwrite, flag="--to")  # before loading: a refusal changes nothing
    start = time.time()
    with console.status(f"loading {args.source} ..."):
        cfg, model, tokenizer = load_model(args.source, param_dtype=args.dtype, dtype=args.dtype)
    with console.status(f"writing {out} ..."), filling(out, overwrite=args.overwrite, flag="--to") as tmp:
        save_hf_dir(model, cfg, tmp, tokenizer_files=tokenizer.hf_files())
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    console.print(
        f"wrote {out} ({cfg.arch}, {cfg.num_params / 1e6:.1f}M params, {args.dtype}, {size / 1e6:.0f} MB) "
        f"in {time.time() - start:.1f}s"
    )
    return 0
