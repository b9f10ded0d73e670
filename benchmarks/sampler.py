"""Decode throughput of our Sampler vs `transformers` generate on SmolLM2-135M, same machine, same prompts.

Greedy, a fixed number of new tokens per row (eos ignored on both sides), batch 1 / 8 / 32 by default. Each
framework runs in its own subprocess so its peak memory (max RSS) is its own. Also measures the machine's
copy bandwidth and reports batch-1 throughput as a fraction of the memory-bandwidth bound
(bandwidth / bytes of weights read per token).

    .venv/bin/python benchmarks/sampler.py              # float32, plus ours with bfloat16 weights
    .venv/bin/python benchmarks/sampler.py --configs float32 --batches 1,8 --new-tokens 64
    .venv/bin/python benchmarks/sampler.py --configs float32 --batches 1,2 --context 1200   # long prompts

Configs for ours: "float32" (weights and compute), "bf16-weights" (bfloat16 weights, float32 activations: each
matmul runs in bfloat16 with float32 accumulation). transformers always runs float32.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain recursion to a child in two sentences.",
    "List three prime numbers greater than 100 and say why they are prime.",
    "Translate 'good morning, how are you today?' into Spanish and German.",
    "What is 17 * 23? Show your work step by step.",
    "Give me a Python function that reverses a string, with a docstring.",
    "Describe the water cycle briefly, mentioning evaporation, condensation and precipitation.",
]
# Reference figures from the issue (same machine type, quiet, fp32, greedy, 128 new tokens), tokens/s.
REFERENCE = {"transformers": {1: 13.3, 8: 82.9, 32: 161.0}, "tunix": {1: 26.6, 8: 104.0, 32: 168.0}}
CONFIGS = {"float32": ("float32", "float32"), "bf16-weights": ("bfloat16", "float32")}  # (param dtype, compute)


def copy_bandwidth(n_bytes: int = 256 * 2**20, repeats: int = 10) -> float:
    """Best-of-N numpy copy bandwidth in bytes/s, counting bytes read plus bytes written (STREAM 'copy')."""
    a = np.ones(n_bytes // 4, np.float32)
    b = np.empty_like(a)
    np.copyto(b, a)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best


def prompt_ids(batch: int, context: int = 0) -> list[list[int]]:
    """Chat-rendered prompts (mixed lengths), cycled to the batch size; token ids from our tokenizer. With
    `context`, each question follows a document (a few Python modules of this project) cut to `context` tokens,
    as a designer's or a long game's prompt would."""
    from spade_jax.model.loading import load_tokenizer

    tok = load_tokenizer("smollm2-135m")
    doc = ""
    if context:
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "spade_jax", "sampling")
        text = "".join(open(os.path.join(src, f)).read() for f in sorted(os.listdir(src)) if f.endswith(".py"))
        doc = tok.decode(tok.encode(text)[:context]) + "\n\n"
    rows = [tok.encode_chat([{"role": "user", "content": doc + p}]) for p in PROMPTS]
    return [rows[i % len(rows)] for i in range(batch)]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_jax(args) -> dict:
    from spade_jax.model.loading import load_model
    from spade_jax.sampling import Sampler, SamplingParams

    param_dtype, dtype = CONFIGS[args.config]
    cfg, model, tok = load_model("smollm2-135m", param_dtype=param_dtype, dtype=dtype)
    load_rss = _rss_mb()
    sampler = Sampler(model, tok, max_total_len=1024 + args.context)
    params = SamplingParams(max_new_tokens=args.new_tokens, greedy=True, ignore_eos=True)
    out = {"framework": f"ours-{args.config}", "weight_bytes": cfg.num_params * (2 if param_dtype == "bfloat16" else 4)}
    for b in args.batches:
        prompts = prompt_ids(b, args.context)
        t = time.perf_counter()
        sampler.generate(prompts, params)  # compiles every program this shape needs
        warm = time.perf_counter() - t
        times, cpu = [], []
        for _ in range(args.repeats):
            t, c = time.perf_counter(), time.process_time()
            res = sampler.generate(prompts, params)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            assert all(len(r.token_ids) == args.new_tokens for r in res)
        out[str(b)] = {"times": times, "cpu": cpu, "warmup_s": warm, "compiles": sampler.compile_count}
        print(f"  ours {args.config} batch {b}: {b * args.new_tokens / min(times):.1f} tok/s", file=sys.stderr)
    out["peak_rss_mb"], out["load_rss_mb"] = _rss_mb(), load_rss
    return out


def worker_hf(args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from spade_jax.model.embedded import embedded_gguf_path

    torch.set_num_threads(os.cpu_count() or 1)
    path = embedded_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    load_rss = _rss_mb()
    out = {"framework": "transformers", "weight_bytes": sum(p.numel() * 4 for p in model.parameters())}
    for b in args.batches:
        rows = prompt_ids(b, args.context)
        width = max(len(r) for r in rows)
        ids = torch.tensor([[2] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])

        def run(n: int, ids=ids, mask=mask, width=width) -> None:
            with torch.inference_mode():
                g = model.generate(
                    ids, attention_mask=mask, do_sample=False, max_new_tokens=n, min_new_tokens=n, pad_token_id=2
                )
            assert g.shape[1] == width + n

        run(8)
        times, cpu = [], []
        for _ in range(args.repeats):
            t, c = time.perf_counter(), time.process_time()
            run(args.new_tokens)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        out[str(b)] = {"times": times, "cpu": cpu}
        print(f"  transformers batch {b}: {b * args.new_tokens / min(times):.1f} tok/s", file=sys.stderr, flush=True)
    out["peak_rss_mb"], out["load_rss_mb"] = _rss_mb(), load_rss
    return out


def spawn(kind: str, args, config: str = "float32") -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, "--config", config, "--new-tokens", str(args.new_tokens)]
    cmd += ["--batches", ",".join(map(str, args.batches)), "--repeats", str(args.repeats)]
    cmd += ["--context", str(args.context)]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if res.returncode:
        raise SystemExit(f"{kind} worker failed (exit {res.returncode})")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,8,32", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--context", type=int, default=0, help="a document of this many tokens before each question")
    ap.add_argument("--configs", default="float32,bf16-weights", help=f"our configs to run, of {sorted(CONFIGS)}")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--worker", choices=["jax", "hf"], help=argparse.SUPPRESS)
    ap.add_argument("--config", default="float32", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps((worker_jax if args.worker == "jax" else worker_hf)(args)))
        return 0

    bw = copy_bandwidth()
    from spade_jax.infra import malloc

    kind = "our GLIBC_TUNABLES" if malloc.applied() else "system default"
    print(f"copy bandwidth (read+write): {bw / 1e9:.1f} GB/s, {os.cpu_count()} CPUs, malloc: {kind}", flush=True)
    results = []
    if not args.skip_hf:
        results.append(spawn("hf", args))
    for config in args.configs.split(","):
        if config not in CONFIGS:
            raise SystemExit(f"unknown config {config!r}; expected some of {sorted(CONFIGS)}")
        results.append(spawn("jax", args, config))
    bw = max(bw, copy_bandwidth())  # measured again after the runs: keep the better (quieter) figure

    tps = lambda r, b: b * args.new_tokens / min(r[str(b)]["times"])
    hf = next((r for r in results if r["framework"] == "transformers"), None)
    prompts = f"chat prompts after a {args.context}-token document" if args.context else "mixed-length chat prompts"
    print(f"\nnew tokens/s (best of {args.repeats}; greedy, {args.new_tokens} new tokens, {prompts}; prefill included)")
    head = f"{'batch':>5} " + " ".join(f"{r['framework']:>16}" for r in results)
    print(head + ("   ratios vs transformers" if hf else ""))
    for b in args.batches:
        row = f"{b:>5} " + " ".join(f"{tps(r, b):>16.1f}" for r in results)
        if hf:
            row += "   " + "  ".join(f"{r['framework']}: {tps(r, b) / tps(hf, b):.2f}x" for r in results if r is not hf)
        print(row)
    cores = os.cpu_count() or 1
    print(
        f"\nsame, per CPU-second of the worker process (less sensitive to other load on the machine; x{cores} cores):"
    )
    for b in args.batches:
        per_cpu = [b * args.new_tokens / min(r[str(b)]["cpu"]) for r in results]
        print(f"{b:>5} " + " ".join(f"{x:>16.1f}" for x in per_cpu))
    print("\npeak memory (max RSS of each worker process, model loaded + all runs):")
    for r in results:
        print(f"  {r['framework']:>16}: {r['peak_rss_mb']:.0f} MB (after load {r['load_rss_mb']:.0f} MB)")
    if 1 in args.batches:
        print(f"\nbatch-1 memory-bandwidth bound ({bw / 1e9:.1f} GB/s / weight bytes per token):")
        for r in results:
            bound = bw / r["weight_bytes"]
            print(f"  {r['framework']:>16}: {tps(r, 1):.1f} of {bound:.1f} tok/s = {100 * tps(r, 1) / bound:.0f}%")
    print("\nreference (issue, quiet machine): transformers", REFERENCE["transformers"], "tunix", REFERENCE["tunix"])
    summary = {
        "bandwidth_gbs": bw / 1e9,
        "tokens_per_s": {r["framework"]: {b: tps(r, b) for b in args.batches} for r in results},
        "median_tokens_per_s": {
            r["framework"]: {b: b * args.new_tokens / statistics.median(r[str(b)]["times"]) for b in args.batches}
            for r in results
        },
    }
    print("\n" + json.dumps(summary))
    return 0


if __name__ == "__main__":
    from spade_jax.infra import malloc

    malloc.reexec_with_tunables()  # both peers run with the same malloc settings (see the module)
    sys.exit(main())
