"""`spade-jax sample`: generate from a model (preset, GGUF file or HF directory) with the compiled sampler."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sample",
        help="generate text from a model",
        description="Generates completions for one or more prompts (batched, KV-cached, compiled).",
    )
    p.add_argument("--model", default="smollm2-135m", help="preset name, .gguf file or HF model directory")
    p.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    p.add_argument(
        "--prompts-file",
        help="prompts, one per line; or JSONL lines with {'prompt': text} or {'messages': [...]} (chat)",
    )
    p.add_argument("--chat", action="store_true", help="wrap each text prompt as a user message in the chat template")
    p.add_argument("--system", help="system message for --chat prompts")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--greedy", action="store_true", help="argmax decoding (ignores temperature, top-k, top-p)")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable), kept at the end of the text")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-total-len", type=int, default=4096, help="prompt + completion token budget per row")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default=None, help="weights and compute dtype")
    p.add_argument("--json", action="store_true", help="print one JSON object per prompt (text, token_ids, logprobs)")
    p.set_defaults(func=sample)


def _check_args(args: argparse.Namespace) -> None:
    """Refuses sampling settings outside their ranges before any model is loaded, naming the flag (the sampler's
    own checks name its fields, and a negative temperature it would silently take as greedy)."""
    if not args.temperature >= 0:
        raise ValueError(f"--temperature {args.temperature}: expected >= 0 (0 or --greedy: argmax decoding)")
    if not 0 < args.top_p <= 1:
        raise ValueError(f"--top-p {args.top_p}: expected a number in (0, 1] (1: off)")
    if args.top_k < 0:
        raise ValueError(f"--top-k {args.top_k}: expected >= 0 (0: off)")
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens {args.max_new_tokens}: expected >= 1")
    if args.max_total_len < 1:
        raise ValueError(f"--max-total-len {args.max_total_len}: expected >= 1")


def _read_text(path: Path, flag: str) -> str:
    """A text file's contents; a ValueError naming the flag and file when it is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{flag} {path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})") from None


def _read_prompts(args: argparse.Namespace) -> list[Any]:
    """Text prompts and/or message lists, in order."""
    prompts: list[Any] = list(args.prompt)
    if args.prompts_file:
        path = Path(args.prompts_file)
        if not path.is_file():
            raise FileNotFoundError(f"--prompts-file {path}: no such file")
        for n, line in enumerate(_read_text(path, "--prompts-file").splitlines(), 1):
            if not line.strip():
                continue
            if line.lstrip().startswith("{"):
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"--prompts-file {path}:{n}: bad JSON ({e.msg})") from None
                if "messages" in obj and isinstance(obj["messages"], list):
                    prompts.append(obj["messages"])
                elif isinstance(obj.get("prompt"), str):
                    prompts.append(obj["prompt"])
                else:
                    raise ValueError(f"--prompts-file {path}:{n}: expected a 'prompt' string or a 'messages' list")
            else:
                prompts.append(line)
    if not prompts:
        raise ValueError("no prompts: give --prompt TEXT or --prompts-file FILE")
    return prompts


def sample(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    _check_args(args)
    prompts = _read_prompts(args)
    console = Console(stderr=True)
    from spade_jax.model.loading import load_model
    from spade_jax.sampling import Sampler, SamplingParams

    params = SamplingParams(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        greedy=args.greedy,
        stop_strings=tuple(args.stop),
        seed=args.seed,
    )
    start = time.time()
    with console.status(f"loading {args.model} ..."):
        _, model, tokenizer = load_model(args.model, param_dtype=args.dtype, dtype=args.dtype)
    sampler = Sampler(model, tokenizer, max_total_len=args.max_total_len)
    ids = []
    for p in prompts:
        if isinstance(p, list) or args.chat:
            messages = p if isinstance(p, list) else [{"role": "user", "content": p}]
            if args.system and not (messages and messages[0].get("role") == "system"):
                messages = [{"role": "system", "content": args.system}, *messages]
            ids.append(sampler.render_chat(messages))
        else:
            ids.append(p)
    columns = (TextColumn("generating"), BarColumn(), TextColumn("{task.completed}/{task.total} tokens"))
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("gen", total=None)
        completions = sampler.generate(ids, params, progress=lambda n, m: bar.update(task, completed=n, total=m))
    took = time.time() - start
    for prompt, c in zip(prompts, completions):
        if args.json:
            record = {
                "prompt": prompt,
                "text": c.text,
                "token_ids": c.token_ids,
                "logprobs": c.logprobs,
                "raw_logprobs": c.raw_logprobs,
                "finish_reason": c.finish_reason,
            }
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
        else:
            console.rule(f"[bold]{len(c.prompt_ids)} prompt tokens -> {len(c.token_ids)} ({c.finish_reason})")
            sys.stdout.write(c.text + "\n")
    sys.stdout.flush()
    n_tok = sum(len(c.token_ids) for c in completions)
    console.print(
        f"{len(completions)} completions, {n_tok} tokens in {took:.1f}s "
        f"({sampler.compile_count} programs compiled in {sampler.compile_seconds:.1f}s)"
    )
    return 0
