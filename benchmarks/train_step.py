"""Learner throughput: tokens/s of one RL train step (forward, backward, AdamW) in spade-jax vs. PyTorch.

Both sides run the same network (SmolLM2-135M by default, real weights when the embedded GGUF loads, else
random), the same batch (B rows of L tokens, a prompt then a completion, advantages +/-1 by row), the same
on-policy clipped policy-gradient loss (token mean over the completion mask), global-norm clipping 1.0 and
AdamW(lr 1e-6, betas (0.9, 0.98), wd 0.1), float32. The reference is `transformers.LlamaForCausalLM`
(sdpa attention) with `torch.optim.AdamW`. Usage:

    python benchmarks/train_step.py [--model smollm2-135m] [--batch 2] [--length 256] [--steps 2]
                                    [--warmup 1] [--micro 0] [--remat] [--interleave] [--random-init]
                                    [--no-torch]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import numpy as np
from rich.console import Console
from rich.table import Table

console = Console()


def _load(spec: str, random_init: bool):
    from flax import nnx

    from spade_jax.model.transformer import Transformer

    if not random_init:
        try:
            from spade_jax.model.loading import load_model

            cfg, model, _ = load_model(spec, param_dtype="float32", dtype="float32")
            return cfg, model, "pretrained"
        except Exception as e:  # noqa: BLE001 - a benchmark falls back to random weights, loudly
            console.print(f"[yellow]could not load {spec} weights ({e}); using random weights[/]")
    from spade_jax.model.presets import load_preset

    cfg = load_preset(spec).model.replace(param_dtype="float32", dtype="float32")
    return cfg, Transformer(cfg, rngs=nnx.Rngs(0)), "random"


def _batch(vocab: int, rows: int, length: int, seed: int = 0):
    from spade_jax.rl.batch import Sample, pack_sequences

    rng = np.random.default_rng(seed)
    prompt = length // 4
    samples = [
        Sample(
            prompt_ids=rng.integers(3, vocab, size=prompt).tolist(),
            completion_ids=rng.integers(3, vocab, size=length - prompt).tolist(),
            advantage=float(1 if i % 2 == 0 else -1),
        )
        for i in range(rows)
    ]
    return pack_sequences(samples, length_buckets=(length,), batch_buckets=(rows,), pack=False)


def _jax_stepper(model, batch, args) -> tuple[Callable[[], None], float]:
    """A function running one JAX learner step, after the warm-up steps (the first compiles), and the first
    step's grad norm."""
    from spade_jax.rl.learner import Learner, LearnerConfig

    # the torch side computes no entropy, so neither does this side (it is a metric only at entropy_coef 0)
    cfg = LearnerConfig(micro_batch_size=args.micro, remat=args.remat, compute_entropy=False)
    learner = Learner(model, cfg)
    with console.status("jax: compiling + warm-up"):
        t = time.perf_counter()
        first_norm = learner.train_step(batch)["grad_norm"]
        console.print(f"  jax first step (compiles): {time.perf_counter() - t:.1f}s")
        for _ in range(args.warmup - 1):
            learner.train_step(batch)
    return lambda: learner.train_step(batch), first_norm  # returns host floats: the step has finished


def _torch_stepper(cfg, model, batch, args) -> tuple[Callable[[], float], float]:
    """A function running one PyTorch step after the warm-up steps, and the first step's grad norm."""
    import torch
    import transformers

    from spade_jax.model.hf_io import hf_state_items

    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg.to_hf()))
    state = {name: torch.from_numpy(np.asarray(t).astype(np.float32)) for name, t in hf_state_items(model)}
    hf.load_state_dict(state, strict=False)
    hf.tie_weights()
    hf.train()
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-6, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1)
    toks = torch.from_numpy(np.asarray(batch.tokens).astype(np.int64))
    mask = torch.from_numpy(np.asarray(batch.loss_mask)[:, 1:])
    adv = torch.from_numpy(np.asarray(batch.advantages)[:, 1:])

    def step() -> float:
        """One update; returns the pre-clip gradient norm."""
        logits = hf(input_ids=toks).logits.float()
        logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, toks[:, 1:, None])[..., 0]
        ratio = torch.exp(logp - logp.detach())
        pg = -torch.minimum(ratio * adv, torch.clamp(ratio, 0.8, 1.28) * adv)
        loss = (pg * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
        opt.step()
        return float(norm)

    with console.status("torch: warm-up"):
        first_norm = step()
        for _ in range(args.warmup - 1):
            step()
    return step, first_norm


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="model preset / spec for spade_jax.model.loading")
    ap.add_argument("--batch", type=int, default=2, help="rows per step")
    ap.add_argument("--length", type=int, default=256, help="tokens per row")
    ap.add_argument("--steps", type=int, default=2, help="timed steps per side")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps per side (JAX compiles here)")
    ap.add_argument("--interleave", action="store_true", help="alternate the two sides' timed steps")
    ap.add_argument("--micro", type=int, default=0, help="JAX micro-batch rows (0: whole batch)")
    ap.add_argument("--remat", action="store_true", help="JAX: rematerialise blocks")
    ap.add_argument("--random-init", action="store_true", help="skip loading weights")
    ap.add_argument("--no-torch", action="store_true", help="JAX side only")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 1:
        console.print("[red]--steps and --warmup must be >= 1[/]")
        return 2

    t0 = time.perf_counter()
    with console.status(f"loading {args.model}"):
        cfg, model, weights = _load(args.model, args.random_init)
    batch = _batch(cfg.vocab_size, args.batch, args.length)
    tokens = args.batch * args.length
    console.print(
        f"{args.model} ({weights} weights, {cfg.num_params / 1e6:.0f}M params), batch {args.batch} x {args.length}"
        f" = {tokens} tokens/step, float32, {os.cpu_count()} CPUs, loaded in {time.perf_counter() - t0:.1f}s"
    )
    from spade_jax.infra import malloc

    console.print(f"malloc: {'our GLIBC_TUNABLES' if malloc.applied() else 'system default'} (both sides)")
    steppers = {}
    if not args.no_torch:  # torch first: it reads the initial weights, which the JAX learner then updates in place
        steppers["torch (transformers + AdamW)"] = _torch_stepper(cfg, model, batch, args)
    steppers["spade-jax Learner"] = _jax_stepper(model, batch, args)
    # each side's timed steps in a row (its steady state), or the two sides' steps alternating (--interleave: a
    # change in the machine's load hits both alike, but each step starts after the other framework's)
    results = {name: ([], norm) for name, (_, norm) in steppers.items()}
    order = (
        [(i, n) for i in range(args.steps) for n in steppers]
        if args.interleave
        else [(i, n) for n in steppers for i in range(args.steps)]
    )
    for i, name in order:
        t = time.perf_counter()
        steppers[name][0]()
        results[name][0].append(time.perf_counter() - t)
        console.print(f"  {name.split()[0]} step {i + 1}: {results[name][0][-1]:.2f}s")

    table = Table(title="learner train step")
    for col in ("implementation", "median step (s)", "tokens/s", "grad norm, first step (same weights)"):
        table.add_column(col)
    rates = {}
    for name, (times, norm) in results.items():
        med = float(np.median(times))
        rates[name] = tokens / med
        table.add_row(name, f"{med:.2f}", f"{rates[name]:.0f}", f"{norm:.5f}")
    console.print(table)
    if len(rates) == 2:
        jax_rate, torch_rate = rates["spade-jax Learner"], rates["torch (transformers + AdamW)"]
        pairs = [t / j for t, j in zip(*(results[n][0] for n in ("torch (transformers + AdamW)", "spade-jax Learner")))]
        console.print(
            f"ratio spade-jax / torch: {jax_rate / torch_rate:.2f}x of the medians, {np.median(pairs):.2f}x the median"
            f" of the {len(pairs)} step pairs (target >= 1.0)"
        )
    console.print(f"total wall time {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    from spade_jax.infra import malloc

    malloc.reexec_with_tunables()  # both peers run with the same malloc settings (see the module)
    sys.exit(main())
