"""`spade-jax selfplay`, `warmstart` and `export-hf`: the main job, its supervised warm start, and export."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="demo", help="run preset (demo, tiny, paper-qwen3-4b, ...)")
    p.add_argument("--config", default=None, help="a saved config.json instead of a preset")
    p.add_argument("--run-dir", default=None, help="run directory (default: runs/<preset>)")
    p.add_argument("--resume", action="store_true", help="continue from the last finished checkpoint")
    p.add_argument(
        "--resume-if-exists",
        action="store_true",
        help="resume when the run directory holds a run, else start one (a requeued or restarted job)",
    )
    p.add_argument("--corpus", default=None, help="grounding documents: JSONL/Parquet/ArrayRecord path or glob")
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (preset or saved config, then the overrides) as JSON and exit",
    )
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. loop.steps=8")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("selfplay", help="run the self-play loop (designer + agent, regret, learner)")
    _add_run_args(p)
    p.set_defaults(func=_selfplay)

    p = sub.add_parser("warmstart", help="supervised warm start on the seed library, saved as step 0 of a run")
    _add_run_args(p)
    p.set_defaults(func=_warmstart)

    p = sub.add_parser("export-hf", help="write a run's latest checkpoint as a Hugging Face model directory")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--out", required=True, help="output HF directory")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
    p.add_argument(
        "--dtype",
        default="bfloat16",
        choices=("bfloat16", "float32"),
        help="dtype of the saved weights (default bfloat16; float32 keeps a float32 run's weights exactly)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace --out when it already holds files")
    p.set_defaults(func=_export_hf)


def _where(args: argparse.Namespace) -> str:
    """The run directory (default runs/<preset>); `--resume-if-exists` becomes `--resume` when it holds a run."""
    where = args.run_dir or f"runs/{args.preset}"
    if args.resume_if_exists and not args.resume:
        from spade_jax.rundir.paths import run_exists

        args.resume = run_exists(where)
    return where


def _resolve_config(args: argparse.Namespace, where: str):
    """The run's config: the preset (or --config), or on --resume the run's saved config.json (a resumed run
    keeps the configuration it was started with), then the overrides. Reads, never writes."""
    from spade_jax.config.run import load_run_config
    from spade_jax.rundir.paths import read_text

    overrides = list(args.overrides)
    if args.corpus:
        overrides.append(f"selfplay.corpus.paths={args.corpus}")
    saved = None
    if args.resume and args.config is None:
        saved = read_text(f"{where.rstrip('/')}/config.json") if not Path(where).is_file() else None
    if saved is not None:
        return load_run_config(args.preset, overrides, config_text=saved, config_name=f"{where}/config.json")
    return load_run_config(args.preset, overrides, config_file=args.config)


def _prepare(args: argparse.Namespace):
    """The run's config and its opened run directory. Every refusal comes first, before anything is written or
    started: the config's values, the run directory (a file, --resume of nothing, a fresh start over a run's
    checkpoints), the model, pool and corpus it names, several processes without a shared run directory. Then
    JAX joins the job and the run directory is opened."""
    from spade_jax.infra.distributed import initialize, process_info_from_env
    from spade_jax.run.preflight import check_inputs, check_run_dir
    from spade_jax.rundir.paths import open_run_dir

    where = _where(args)
    check_run_dir(where, resume=args.resume)
    cfg = _resolve_config(args, where)
    check_inputs(cfg)
    _shared_run_dir(where, process_info_from_env().num_processes)  # before JAX waits for peers
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    compile_cache()
    info = initialize()
    _shared_run_dir(where, info.num_processes)  # Cloud TPU pods: known only once JAX has found the slice
    run_dir = open_run_dir(where, host=info.process_id)  # a gs:// one: its staging copy filled from the bucket
    return cfg, run_dir


def _print_config(args: argparse.Namespace) -> int:
    """`--print-config`: the config the command would run with, as JSON on stdout; checked as a run's is (its
    values, and the model, pool and corpus it names), and nothing is written."""
    from spade_jax.run.preflight import check_inputs, check_run_dir

    where = _where(args)
    if args.resume:
        check_run_dir(where, resume=True)
    cfg = _resolve_config(args, where)
    check_inputs(cfg)
    print(cfg.to_json())
    return 0


def _shared_run_dir(run_dir: str, n: int) -> None:
    """A job of several processes needs a run directory they all see: gs://, or a path the launcher declares
    shared (SPADE_SHARED_RUN_DIR=1: every process on one host, or a cluster file system)."""
    import os

    from spade_jax.rundir.paths import is_remote

    if n > 1 and not is_remote(run_dir) and os.environ.get("SPADE_SHARED_RUN_DIR") != "1":
        raise ValueError(
            f"a job of {n} processes needs a shared run directory, and {run_dir} is local to each host: "
            "pass --run-dir gs://bucket/path (SPADE_SHARED_RUN_DIR=1: a shared file system)"
        )


def compile_cache() -> str:
    """Keeps XLA's compiled programs on disk (SPADE_JAX_COMPILE_CACHE, default ~/.cache/spade-jax/xla; "off"
    disables), so a second run of the same configuration skips minutes of compilation. Returns the folder."""
    import os

    import jax

    path = os.environ.get("SPADE_JAX_COMPILE_CACHE", "~/.cache/spade-jax/xla")
    if path.lower() in ("", "0", "off", "none"):
        return ""
    path = str(Path(path).expanduser())
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 2.0)
    return path


def _print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="spade-jax run", show_header=False)
    for key, value in summary.items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    Console().print(table)


def _selfplay(args: argparse.Namespace) -> int:
    if args.print_config:
        return _print_config(args)
    cfg, run_dir = _prepare(args)  # every refusal first, before JAX is imported
    from spade_jax.run.loop import run

    summary = run(cfg, run_dir, resume=args.resume)
    if not run_dir.writer:  # another host than the leader of a multi-host job: the leader reports
        return 0
    _print_summary(summary)
    print(f"report: {summary['report']}\ntensorboard: tensorboard --logdir {summary['tensorboard']}\n"
          f"checkpoints: {summary['checkpoints']}")  # fmt: skip
    return 0


def _warmstart(args: argparse.Namespace) -> int:
    if args.print_config:
        return _print_config(args)
    cfg, run_dir = _prepare(args)
    from spade_jax.run.loop import run

    cfg = dataclasses.replace(cfg, loop=dataclasses.replace(cfg.loop, warmstart=True, steps=0))
    summary = run(cfg, run_dir, resume=args.resume)
    if not run_dir.writer:
        return 0
    _print_summary(summary)
    print(f"warm-started checkpoint in {summary['checkpoints']}; continue with: "
          f"spade-jax selfplay --run-dir {run_dir} --resume loop.steps=N")  # fmt: skip
    return 0


def _export_hf(args: argparse.Namespace) -> int:
    from spade_jax.export.hf import export_run

    out = export_run(args.run_dir, args.out, step=args.step, dtype=args.dtype, overwrite=args.overwrite)
    print(f"wrote {out}", file=sys.stderr)
    return 0
