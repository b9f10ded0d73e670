"""Accelerator check: decode tokens/s and learner MFU of random-init models with real configs (issue 19).

For each model preset (default: the real Qwen3-1.7B and Qwen3-4B configs, random weights, no download):

- **decode**: the engine's own compiled loop (`sampling.decode.decode_chunk`, calling `Transformer.decode`)
  at each batch size, every row a `--prompt`-token prompt prefilled by `sampling.prefill.prefill`, then
  `--decode-steps` tokens per row under the paper's sampling (temperature 0.6, top-k 20, top-p 0.95), bfloat16
  weights and cache. Printed: tokens/s, ms per step, and the bytes a step must read (weights + the KV it
  attends) over the step time, against the chip's copy bandwidth.
- **learner**: one `rl.learner.Learner` step (forward, backward, AdamW) as the paper presets run it (float32
  master weights, bfloat16 compute, remat), `--train-rows` rows of `--train-len` tokens in micro-batches of
  `--train-micro`. MFU = (6 N + 6 layers * heads * head_dim * L) FLOPs per token (causal attention; remat's
  recompute not counted) over the step time, against `--peak-tflops`.

A figure that cannot be measured (out of memory, an error) is printed as one line and the check goes on to the
next. Results go to `--out` as JSON as they come. `benchmarks/device_check.sh` runs this on a device machine.

    python benchmarks/device_check.py [--models qwen3-1.7b,qwen3-4b] [--batches 64,256] [--prompt 512]
        [--decode-steps 128] [--train-rows 16] [--train-len 2048] [--train-micro 8] [--out device_check.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

PAPER_SAMPLING = dict(temperature=0.6, top_k=20, top_p=0.95)


def _model(name: str, param_dtype: str, dtype: str):
    from flax import nnx

    from spade_jax.model.presets import load_preset
    from spade_jax.model.transformer import Transformer

    cfg = load_preset(name).model.replace(param_dtype=param_dtype, dtype=dtype)
    return cfg, Transformer(cfg, rngs=nnx.Rngs(0))


def _failed(what: str, e: Exception) -> None:
    """One line naming the lost figure and why, then a short traceback; the check goes on."""
    first = (str(e).splitlines() or [""])[0][:200]
    print(f"{what}: failed ({type(e).__name__}: {first})", flush=True)
    traceback.print_exc(limit=3)


def _timed(fn, *args):
    """(result, seconds) of fn(*args), waiting for the device."""
    import jax

    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t


def decode_figures(name: str, batches: list[int], prompt: int, steps: int) -> list[dict]:
    """Per batch size: prefill once, then `steps` decode steps (compiled first, timed second)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from spade_jax.model.kv_cache import KVCache
    from spade_jax.sampling import decode
    from spade_jax.sampling.prefill import prefill

    cfg, model = _model(name, "bfloat16", "bfloat16")
    graphdef, state = nnx.split(model)
    cache_len = prompt + steps
    weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    kv_bytes_per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2

    @jax.jit
    def run_prefill(st, tokens):
        b = tokens.shape[0]
        return prefill(nnx.merge(graphdef, st), tokens, jnp.zeros((b,), jnp.int32), cache_len=cache_len)

    @jax.jit
    def run_decode(st, cache, dstate, consts):
        return decode.decode_chunk(
            nnx.merge(graphdef, st), cache, dstate, consts, steps, dstate.done.shape[0] + 1, width=steps
        )

    out = []
    try:  # one prefill at the largest batch; smaller batches take its first rows (one program fewer to compile)
        top = max(batches)
        tokens = jnp.asarray(np.random.default_rng(0).integers(3, cfg.vocab_size, (top, prompt)), jnp.int32)
        _, t_compile_pf = _timed(run_prefill, state, tokens)
        (logits_all, cache_all), t_pf = _timed(run_prefill, state, tokens)
    except Exception as e:  # noqa: BLE001 - reported, the check goes on
        _failed(f"prefill {name} batch {max(batches)}", e)
        return out
    for b in batches:
        try:
            cache = KVCache(k=[x[:b] for x in cache_all.k], v=[x[:b] for x in cache_all.v])
            dstate, consts = _decode_inputs(logits_all[:b], prompt, steps, b)
            _, t_compile = _timed(run_decode, state, cache, dstate, consts)
            res, t = _timed(run_decode, state, cache, dstate, consts)
            generated = int(np.asarray(res[1].generated).sum())
            mean_ctx = prompt + steps / 2
            step_bytes = weight_bytes + b * mean_ctx * kv_bytes_per_token
            row = dict(
                model=name,
                batch=b,
                prompt=prompt,
                steps=steps,
                tokens=generated,
                decode_s=t,
                tokens_per_s=generated / t,
                ms_per_step=1e3 * t / steps,
                read_gb_per_s=step_bytes * steps / t / 1e9,
                prefill_tokens_per_s=top * prompt / t_pf,
                compile_s=t_compile,
                prefill_compile_s=t_compile_pf,
            )
            print(
                f"decode {name} batch {b}: {row['tokens_per_s']:,.0f} tokens/s ({row['ms_per_step']:.1f} ms/step,"
                f" {row['read_gb_per_s']:,.0f} GB/s read), prefill {row['prefill_tokens_per_s']:,.0f} tokens/s,"
                f" compile {row['compile_s']:.0f}s (prefill {t_compile_pf:.0f}s)",
                flush=True,
            )
            out.append(row)
            del cache, res
        except Exception as e:  # noqa: BLE001 - one figure lost, the check goes on
            _failed(f"decode {name} batch {b}", e)
    return out


def _decode_inputs(logits, prompt: int, steps: int, b: int):
    """The loop's starting state and per-row settings: every row live, the paper's sampling, no stop."""
    import jax
    import jax.numpy as jnp

    from spade_jax.sampling.decode import LENGTH, DecodeState, RowConsts

    dstate = DecodeState(
        logits=logits,
        generated=jnp.zeros((b,), jnp.int32),
        column=jnp.int32(prompt),
        done=jnp.zeros((b,), bool),
        finish=jnp.zeros((b,), jnp.int32),
        recent=jnp.full((b, 4), -1, jnp.int32),
    )
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), b))
    consts = RowConsts(
        pad_len=jnp.zeros((b,), jnp.int32),
        budget=jnp.full((b,), steps + 1, jnp.int32),
        budget_code=jnp.full((b,), LENGTH, jnp.int32),
        greedy=jnp.zeros((b,), bool),
        temperature=jnp.full((b,), PAPER_SAMPLING["temperature"], jnp.float32),
        top_k=jnp.full((b,), PAPER_SAMPLING["top_k"], jnp.int32),
        top_p=jnp.full((b,), PAPER_SAMPLING["top_p"], jnp.float32),
        keys=keys,
        stop_ids=jnp.full((b, 1), -1, jnp.int32),
        stop_seqs=jnp.full((b, 1, 4), -2, jnp.int32),
        stop_used=jnp.zeros((b, 1, 4), bool),
    )
    return dstate, consts


def learner_figures(name: str, rows: int, length: int, micro: int, steps: int, peak_tflops: float) -> dict | None:
    """One learner step compiled, then `steps` timed: tokens/s and MFU."""
    from spade_jax.rl.batch import Sample, pack_sequences
    from spade_jax.rl.learner import Learner, LearnerConfig

    try:
        cfg, model = _model(name, "float32", "bfloat16")
        rng = np.random.default_rng(0)
        prompt = length // 4
        samples = [
            Sample(
                prompt_ids=rng.integers(3, cfg.vocab_size, size=prompt).tolist(),
                completion_ids=rng.integers(3, cfg.vocab_size, size=length - prompt).tolist(),
                advantage=float(1 if i % 2 == 0 else -1),
            )
            for i in range(rows)
        ]
        batch = pack_sequences(samples, length_buckets=(length,), batch_buckets=(rows,), pack=False)
        learner = Learner(model, LearnerConfig(lr=1e-6, remat=True, micro_batch_size=micro, compute_entropy=False))
        t = time.perf_counter()
        learner.train_step(batch)
        compile_s = time.perf_counter() - t
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            learner.train_step(batch)  # returns host floats: the step has finished
            times.append(time.perf_counter() - t)
        step_s = float(np.median(times))
        tokens = rows * length
        flops_per_token = 6 * cfg.num_params + 6 * cfg.num_layers * cfg.num_heads * cfg.head_dim * length
        mfu = flops_per_token * tokens / step_s / (peak_tflops * 1e12)
        row = dict(
            model=name,
            rows=rows,
            length=length,
            micro=micro,
            step_s=step_s,
            tokens_per_s=tokens / step_s,
            mfu=mfu,
            peak_tflops=peak_tflops,
            compile_s=compile_s,
            params=cfg.num_params,
        )
        print(
            f"learner {name} {rows}x{length} (micro {micro}, remat, fp32 master, bf16 compute): {step_s:.2f}s/step,"
            f" {row['tokens_per_s']:,.0f} tokens/s, MFU {100 * mfu:.1f}% of {peak_tflops:.0f} TFLOP/s,"
            f" compile {compile_s:.0f}s",
            flush=True,
        )
        return row
    except Exception as e:  # noqa: BLE001 - one figure lost, the check goes on
        _failed(f"learner {name}", e)
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen3-1.7b,qwen3-4b")
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode-steps", type=int, default=128)
    ap.add_argument("--train-rows", type=int, default=16)
    ap.add_argument("--train-len", type=int, default=2048)
    ap.add_argument("--train-micro", type=int, default=8)
    ap.add_argument("--train-steps", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100/H200 datasheet)")
    ap.add_argument("--skip-learner", action="store_true")
    ap.add_argument("--out", default="device_check.json")
    args = ap.parse_args(argv)

    from spade_jax.model.presets import load_preset

    for name in args.models.split(","):  # a bad name is one line before any work
        try:
            load_preset(name)
        except ValueError as e:
            print(f"--models: {e}")
            return 2
    import jax

    print(f"jax {jax.__version__}, devices {jax.devices()}", flush=True)
    results: dict = {"jax": jax.__version__, "device": str(jax.devices()[0]), "decode": [], "learner": []}
    t0 = time.perf_counter()
    for name in args.models.split(","):
        batches = [int(b) for b in args.batches.split(",") if b]  # "": no decode figures
        results["decode"] += batches and decode_figures(name, batches, args.prompt, args.decode_steps)
        Path(args.out).write_text(json.dumps(results, indent=2))
        if not args.skip_learner:
            row = learner_figures(
                name, args.train_rows, args.train_len, args.train_micro, args.train_steps, args.peak_tflops
            )
            if row:
                results["learner"].append(row)
        Path(args.out).write_text(json.dumps(results, indent=2))
        jax.clear_caches()
    print(f"total {time.perf_counter() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
