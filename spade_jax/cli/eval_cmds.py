"""Evaluation commands: `eval` (held-out suites, results table + JSON) and `eval-compare` (deltas of two runs)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from spade_jax.config.sandbox import LEVEL_CHOICES as SANDBOX_LEVELS


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds `eval` and `eval-compare` to the `spade-jax` parser."""
    p = subparsers.add_parser(
        "eval",
        help="evaluate a model on held-out suites (code, math, reasoning, tool use, games)",
        description="Runs the named suites and prints a results table; writes every item's outcome as JSON. "
        "Suites: humaneval, champ, reasoning_gym, bfcl_{base,miss_func,miss_param,long_context}, textarena; "
        "aliases code, math, reasoning, tool (= bfcl), games, all; user files as aime=F, math500=F, gpqa=F, "
        "livecodebench=F, acebench=F, pool=DIR (or --pool DIR: a directory of environments, either contract).",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="preset name, .gguf file or Hugging Face directory")
    src.add_argument("--run-dir", help="a training run directory (its exported Hugging Face checkpoint)")
    src.add_argument(
        "--bfcl-ground-truth",
        action="store_true",
        help="no model: score BFCL's own ground-truth calls (and a corrupted copy) as a self-check",
    )
    p.add_argument("--suite", default=None, help="comma-separated suites or aliases (default: all)")
    p.add_argument("--pool", default=None, help="also play every environment of this pool directory (= pool=DIR)")
    p.add_argument("--limit", type=int, default=None, help="items per suite (default: all)")
    p.add_argument("--samples", type=int, default=1, help="samples per item; > 1 reports unbiased pass@k")
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature when --samples > 1")
    p.add_argument("--max-new-tokens", type=int, default=256, help="tokens per model reply")
    p.add_argument("--max-total-len", type=int, default=4096, help="sampler context (prompt + reply)")
    p.add_argument("--batch-size", type=int, default=16, help="conversations per generate call")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sandbox", choices=SANDBOX_LEVELS, default="auto", help="isolation for executed code")
    p.add_argument("--workers", type=int, default=2, help="sandbox workers")
    p.add_argument("--bfcl-max-steps", type=int, default=20, help="agent steps per BFCL turn (BFCL: 20)")
    p.add_argument("--bfcl-compact-docs", action="store_true", help="short tool docs (for small contexts)")
    p.add_argument(
        "--bfcl-tool-format",
        choices=("auto", "text"),
        default="auto",
        help="auto: the chat template renders tools and tool results when it can; text: a JSON tool list",
    )
    p.add_argument("--games-max-turns", type=int, default=30, help="replies per game before it counts as lost")
    p.add_argument("--out", default=None, help="results JSON (default: eval_results/<model>-<time>.json)")
    p.set_defaults(func=_eval)

    c = subparsers.add_parser("eval-compare", help="compare two eval result files side by side")
    c.add_argument("a", help="baseline results JSON")
    c.add_argument("b", help="results JSON to compare against the baseline")
    c.set_defaults(func=_compare)


def _model_spec(args: argparse.Namespace) -> str:
    if args.model:
        return args.model
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory not found: {run_dir}")
    for sub in ("hf", "export", "export/hf", "hf_export"):
        if (run_dir / sub / "config.json").is_file():
            return str(run_dir / sub)
    if (run_dir / "config.json").is_file():
        return str(run_dir)
    raise FileNotFoundError(f"{run_dir}: no exported checkpoint (run `spade-jax export-hf` first; looked for hf/)")


def _ground_truth(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from spade_jax.eval.bfcl import ground_truth_check
    from spade_jax.eval.bfcl_data import CATEGORIES
    from spade_jax.eval.sandboxed import default_runner

    console = Console()
    runner = default_runner(args.sandbox, args.workers)
    table = Table(title=f"BFCL ground-truth self-check (sandbox: {runner.level})")
    for col in ("category", "ground truth passed", "corrupted copy failed", "wall s"):
        table.add_column(col)
    ok = True
    try:
        for cat in CATEGORIES:
            t = time.perf_counter()
            good = ground_truth_check(runner, cat, args.limit)
            bad = ground_truth_check(runner, cat, args.limit, wrong=True)
            failed = bad["total"] - bad["passed"]
            ok &= good["passed"] == good["total"]
            table.add_row(cat, f"{good['passed']}/{good['total']}", f"{failed}/{bad['total']}",
                          f"{time.perf_counter() - t:.1f}")  # fmt: skip
            for f in good["failures"][:3]:
                console.print(f"[red]{cat} {f['id']}: {f['error_type']}: {f['message']}[/red]")
    finally:
        runner.close()
    console.print(table)
    return 0 if ok else 1


def _eval(args: argparse.Namespace) -> int:
    if args.bfcl_ground_truth:
        return _ground_truth(args)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from spade_jax.eval.core import EvalContext
    from spade_jax.eval.registry import evaluate, resolve_suites, write_results
    from spade_jax.eval.sandboxed import default_runner
    from spade_jax.eval.tables import results_table

    if args.samples < 1:
        raise ValueError("--samples must be >= 1")
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be >= 1")
    spec_suites = args.suite or ("" if args.pool else "all")
    suites = resolve_suites(",".join(x for x in (spec_suites, f"pool={args.pool}" if args.pool else "") if x))
    if args.pool:
        from spade_jax.envs.pools import load_pool

        load_pool(args.pool)  # a bad pool directory is one line before the model loads
    spec = _model_spec(args)
    console = Console(stderr=True)
    console.print(f"loading {spec} ...")
    from spade_jax.eval.agent import load_chat_model

    model = load_chat_model(spec, max_total_len=args.max_total_len, batch_size=args.batch_size)
    ctx = EvalContext(
        samples=args.samples,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        seed=args.seed,
        runner_factory=lambda: default_runner(args.sandbox, args.workers),
        options={
            "bfcl_max_steps": args.bfcl_max_steps,
            "bfcl_compact_docs": args.bfcl_compact_docs,
            "bfcl_tool_format": args.bfcl_tool_format,
            "games_max_turns": args.games_max_turns,
            "chunk": args.batch_size,
        },  # fmt: skip
    )
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:  # fmt: skip
        tasks: dict[str, int] = {}

        def tick(suite: str, done: int, total: int) -> None:
            if suite not in tasks:
                tasks[suite] = progress.add_task(suite, total=total)
            progress.update(tasks[suite], completed=done, total=total)

        def done(name: str, result) -> None:
            shown = ", ".join(f"{k}={v:.3f}" for k, v in result.metrics.items() if not k.endswith("_stderr"))
            progress.console.print(f"{name}: {shown} ({result.n} items, {result.wall_s:.1f} s)")

        ctx.progress = tick
        results = evaluate(model, suites, ctx, limit=args.limit, on_suite=done)
    out = args.out or f"eval_results/{Path(spec).name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path = write_results(results, out)
    Console().print(results_table(results))
    print(f"results: {path}", file=sys.stderr)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from rich.console import Console

    from spade_jax.eval.registry import load_results
    from spade_jax.eval.tables import compare_table

    a, b = load_results(args.a), load_results(args.b)
    Console().print(compare_table(a, b, Path(args.a).stem, Path(args.b).stem))
    return 0
