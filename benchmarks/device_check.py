"""Accelerator check: decode tokens/s and HBM share, learner MFU, and two steps of the self-play loop (issues 19, 46).

Sections, each a function of its own (a figure that cannot be measured, out of memory or an error, is one printed
line and the check goes on):

- **decode** (`decode_figures`): random-init models with the real configs (default Qwen3-1.7B, 4B and 8B; no
  download), the engine's own compiled loop (`sampling.decode.decode_chunk` calling `Transformer.decode`) at each
  batch size, every row a `--prompt`-token prompt prefilled by `sampling.prefill.prefill`, then `--decode-steps`
  tokens per row under the paper's sampling (temperature 0.6, top-k 20, top-p 0.95), bfloat16 weights and cache.
  Printed: tokens/s, ms per step, the useful bytes a step must read (the weights once, the KV each row attends)
  over the step time, and that rate as a share of the chip's HBM bandwidth (`--hbm-gbps`, else from the device
  kind). On `--kernel-model` the decode attention runs both ways, "xla" and "pallas" (each row's live KV slots
  only, model/decode_attention.py), after one decode step of each is compared (max |logit difference|).
- **learner** (`learner_figures`, the learner half of issue 46 extends it): one `rl.learner.Learner` step as the
  paper presets run it (float32 master weights, bfloat16 compute, remat), `--train-rows` rows of `--train-len`
  tokens in micro-batches of `--train-micro`; MFU = (6 N + 6 layers * heads * head_dim * L) FLOPs per token over
  the step time against `--peak-tflops`, and the first step's seconds (compile included).
- **self-play** (`selfplay_figures`): `--selfplay-steps` steps of the real loop (`run.loop.run`: designer,
  hints, plays in the sandbox pool, learner) with `--selfplay-model` at the paper's batch shape (the
  `paper-qwen3-4b` preset: 24 designs, its plays per environment), token budgets cut to fit the check's minutes
  (`SELFPLAY_OVERRIDES`); per step, seconds per phase (self-play, learner, compiling) and the sampler's slot
  utilisation and live KV share, read from the run's metrics.jsonl.

`--cpu-smoke` runs the same code paths with tiny shapes on a CPU (the tiny model, batches 2 and 4, a two-step
self-play run of the tiny random model): what this machine can check of a script meant for a device. Results go
to `--out` as JSON as they come. `benchmarks/device_check.sh` runs this on a device machine.

    python benchmarks/device_check.py [--models qwen3-1.7b,qwen3-4b,qwen3-8b] [--batches 64,256] [--prompt 512]
        [--decode-steps 128] [--kernel-model qwen3-1.7b] [--train-rows 16] [--train-len 2048] [--train-micro 8]
        [--selfplay-steps 2] [--skip-learner] [--skip-selfplay] [--cpu-smoke] [--out device_check.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

PAPER_SAMPLING = dict(temperature=0.6, top_k=20, top_p=0.95)
# HBM bandwidth (GB/s) by device kind, the datasheets' figures; --hbm-gbps for another chip
HBM_GBPS = {"H200": 4800.0, "H100 PCIe": 2000.0, "H100": 3350.0, "A100": 2039.0, "TPU v5p": 2765.0,
            "TPU v6": 1640.0, "TPU v5 lite": 819.0, "TPU v4": 1228.0}  # fmt: skip


def _model(name: str, param_dtype: str, dtype: str, **kw):
    from flax import nnx

    from spade_jax.model.presets import load_preset
    from spade_jax.model.transformer import Transformer

    cfg = load_preset(name).model.replace(param_dtype=param_dtype, dtype=dtype, **kw)
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


def hbm_gbps(kind: str, given: float) -> float | None:
    """The chip's HBM bandwidth in GB/s: `given` when > 0, else the datasheet figure for its device kind."""
    if given > 0:
        return given
    return next((v for k, v in HBM_GBPS.items() if k.lower() in kind.lower()), None)


def decode_figures(name: str, batches: list[int], prompt: int, steps: int, impls: tuple[str, ...],
                   hbm: float | None) -> list[dict]:  # fmt: skip
    """Per batch size and decode attention: prefill once, then `steps` decode steps (compiled first, timed second)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from spade_jax.model import decode_attention
    from spade_jax.model.kv_cache import KVCache
    from spade_jax.sampling import decode
    from spade_jax.sampling.prefill import prefill

    # the form the sampler decodes from in a paper run (run.parts.decode_weights): bfloat16, one module per layer
    cfg, model = _model(name, "bfloat16", "bfloat16", scan_layers=False)
    graphdef, state = nnx.split(model)
    cache_len = prompt + steps
    weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    kv_bytes_per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2

    @jax.jit
    def run_prefill(st, tokens):
        b = tokens.shape[0]
        return prefill(nnx.merge(graphdef, st), tokens, jnp.zeros((b,), jnp.int32), cache_len=cache_len)

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
    if len(impls) > 1:
        _compare_attention(name, graphdef, state, cache_all, logits_all, prompt, impls)
    for impl in impls:
        for b in batches:
            try:
                cache = KVCache(k=[x[:b] for x in cache_all.k], v=[x[:b] for x in cache_all.v])
                dstate, consts = _decode_inputs(logits_all[:b], prompt, steps, b)
                t0 = time.perf_counter()
                with decode_attention.use(impl):  # traced (and so compiled) with this attention
                    compiled = jax.jit(run_decode).lower(state, cache, dstate, consts).compile()
                t_compile = time.perf_counter() - t0
                res, t = _timed(compiled, state, cache, dstate, consts)
                generated = int(np.asarray(res[1].generated).sum())
                mean_ctx = prompt + steps / 2
                step_bytes = weight_bytes + b * mean_ctx * kv_bytes_per_token  # the useful bytes of a step
                gbps = step_bytes * steps / t / 1e9
                row = dict(model=name, attention=impl, batch=b, prompt=prompt, steps=steps, tokens=generated,
                           decode_s=t, tokens_per_s=generated / t, ms_per_step=1e3 * t / steps, read_gb_per_s=gbps,
                           hbm_share=gbps / hbm if hbm else None, prefill_tokens_per_s=top * prompt / t_pf,
                           compile_s=t_compile, prefill_compile_s=t_compile_pf)  # fmt: skip
                share = f", {100 * row['hbm_share']:.0f}% of {hbm:,.0f} GB/s HBM" if hbm else ""
                print(
                    f"decode {name} {impl} batch {b}: {row['tokens_per_s']:,.0f} tokens/s ({row['ms_per_step']:.1f}"
                    f" ms/step, {gbps:,.0f} GB/s of useful reads{share}), prefill"
                    f" {row['prefill_tokens_per_s']:,.0f} tokens/s, compile {t_compile:.0f}s (prefill"
                    f" {t_compile_pf:.0f}s)",
                    flush=True,
                )
                out.append(row)
                del cache, res
            except Exception as e:  # noqa: BLE001 - one figure lost, the check goes on
                _failed(f"decode {name} {impl} batch {b}", e)
    return out


def _compare_attention(name, graphdef, state, cache_all, logits_all, prompt: int, impls: tuple[str, ...]) -> None:
    """One decode step of 8 rows with each attention: the largest logit difference from the first (printed)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from spade_jax.model import decode_attention
    from spade_jax.model.kv_cache import KVCache

    try:
        b = min(8, logits_all.shape[0])
        cache = KVCache(k=[x[:b] for x in cache_all.k], v=[x[:b] for x in cache_all.v])
        tokens = jnp.argmax(logits_all[:b], axis=-1).astype(jnp.int32)
        pad = jnp.zeros((b,), jnp.int32)
        positions = jnp.full((b,), prompt, jnp.int32)

        def step(st, cache, tokens):
            return nnx.merge(graphdef, st).decode(tokens, positions, cache, prompt, pad)[0]

        got = {}
        for impl in impls:
            with decode_attention.use(impl):
                got[impl] = np.asarray(jax.jit(step).lower(state, cache, tokens).compile()(state, cache, tokens))
        first = got[impls[0]]
        for impl in impls[1:]:
            diff = float(np.max(np.abs(got[impl] - first)))
            top = float(np.max(np.abs(first)))
            print(f"decode {name}: {impl} vs {impls[0]} attention, one step of {b} rows: max |logit difference|"
                  f" {diff:.3g} (bfloat16 logits up to {top:.3g})", flush=True)  # fmt: skip
    except Exception as e:  # noqa: BLE001 - reported, the check goes on
        _failed(f"decode {name} attention comparison", e)


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


# ------------------------------------------------------------------------------------------------- self-play
# The paper preset's batch shape (24 designs; plays per environment as the preset) with token budgets cut to fit
# the check's minutes; --cpu-smoke cuts the shape too.
SELFPLAY_OVERRIDES = (
    "max_total_len=4096", "loop.eval_every=0", "loop.checkpoint_every=1000", "num_workers=16",
    "selfplay.designer.max_new_tokens=1024", "selfplay.designer.context_len=4096", "selfplay.hints.max_new_tokens=256",
    "selfplay.rollout.max_turns=4", "selfplay.rollout.max_new_tokens_per_turn=128",
    "selfplay.rollout.max_episode_tokens=4096", "selfplay.fill_from_archive=true",
    "selfplay.memory.seed_from_library=true",
)  # fmt: skip
SMOKE_OVERRIDES = (
    "num_workers=2", "selfplay.envs_per_step=2", "selfplay.plays_per_condition=2", "selfplay.agent_batch=4",
    "selfplay.designer.max_new_tokens=32", "selfplay.hints.max_new_tokens=16", "selfplay.rollout.max_turns=2",
    "selfplay.rollout.max_new_tokens_per_turn=16", "loop.global_batch=8", "learner.grad_accum_steps=1",
)  # fmt: skip


def selfplay_figures(model: str, steps: int, smoke: bool) -> list[dict]:
    """`steps` steps of the real loop at the paper preset's batch shape; per step, seconds per phase."""
    from spade_jax.config.run import load_run_config
    from spade_jax.run.loop import run

    overrides = [f"model={model}", f"loop.steps={steps}", *SELFPLAY_OVERRIDES, *(SMOKE_OVERRIDES if smoke else ())]
    try:
        cfg = load_run_config("paper-qwen3-4b", overrides)
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            run(cfg, Path(tmp) / "run")
            total = time.perf_counter() - t
            rows = [json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
    except Exception as e:  # noqa: BLE001 - reported, the check goes on
        _failed(f"self-play {model}", e)
        return []
    keys = ("time/selfplay", "time/learner", "time/compile", "time/step", "perf/slot_utilisation",
            "perf/kv_live_share", "perf/selfplay_tokens_per_s")  # fmt: skip
    out = []
    for r in rows:
        row = {"model": model, "step": r.get("step"), **{k: r.get(k) for k in keys}}
        out.append(row)
        phases = ", ".join(f"{k.split('/')[1]} {row[k]:.1f}s" for k in keys[:4] if row[k] is not None)
        perf = ", ".join(f"{k.split('/')[1]} {row[k]:.3g}" for k in keys[4:] if row[k] is not None)
        print(f"self-play {model} step {row['step']}: {phases}; {perf}", flush=True)
    print(f"self-play {model}: {len(rows)} steps in {total:.0f}s (model load, pool start and checkpoint included)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen3-1.7b,qwen3-4b,qwen3-8b")
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode-steps", type=int, default=128)
    ap.add_argument("--kernel-model", default="qwen3-1.7b", help="the model decoded with both attentions")
    ap.add_argument("--hbm-gbps", type=float, default=0.0, help="HBM bandwidth (default: by device kind)")
    ap.add_argument("--train-rows", type=int, default=16)
    ap.add_argument("--train-len", type=int, default=2048)
    ap.add_argument("--train-micro", type=int, default=8)
    ap.add_argument("--train-steps", type=int, default=3)
    ap.add_argument("--learner-models", default="qwen3-1.7b,qwen3-4b")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100/H200 datasheet)")
    ap.add_argument("--selfplay-model", default="smollm2-135m")
    ap.add_argument("--selfplay-steps", type=int, default=2)
    ap.add_argument("--skip-learner", action="store_true")
    ap.add_argument("--skip-selfplay", action="store_true")
    ap.add_argument("--cpu-smoke", action="store_true", help="the same code paths with tiny shapes (a CPU check)")
    ap.add_argument("--out", default="device_check.json")
    args = ap.parse_args(argv)
    if args.cpu_smoke:  # tiny everything; the self-play run on the tiny random model
        args.models = args.learner_models = args.kernel_model = "tiny"
        args.batches, args.prompt, args.decode_steps = "2,4", 16, 8
        args.train_rows, args.train_len, args.train_micro, args.train_steps = 2, 32, 1, 1
        args.selfplay_model = "tiny-smollm"

    from spade_jax.model.presets import load_preset

    names = [n for n in args.models.split(",") if n]
    for name in {*names, *args.learner_models.split(","), args.selfplay_model} - {""}:
        try:  # a bad name is one line before any work
            load_preset(name)
        except ValueError as e:
            print(f"--models: {e}")
            return 2
    import jax

    device = jax.devices()[0]
    hbm = hbm_gbps(device.device_kind, args.hbm_gbps)
    print(f"jax {jax.__version__}, devices {jax.devices()} ({device.device_kind}; HBM "
          f"{f'{hbm:,.0f} GB/s' if hbm else 'unknown: --hbm-gbps'})", flush=True)  # fmt: skip
    results: dict = {"jax": jax.__version__, "device": str(device), "device_kind": device.device_kind,
                     "hbm_gbps": hbm, "decode": [], "learner": [], "selfplay": []}  # fmt: skip
    save = lambda: Path(args.out).write_text(json.dumps(results, indent=2))  # noqa: E731
    t0 = time.perf_counter()
    batches = [int(b) for b in args.batches.split(",") if b]  # "": no decode figures
    for name in names:
        impls = ("xla", "pallas") if name == args.kernel_model else ("xla",)
        results["decode"] += batches and decode_figures(name, batches, args.prompt, args.decode_steps, impls, hbm)
        save()
        jax.clear_caches()
    # ---- learner: the learner half of issue 46 extends this section (MFU, first-step compile seconds)
    if not args.skip_learner:
        for name in [n for n in args.learner_models.split(",") if n]:
            row = learner_figures(
                name, args.train_rows, args.train_len, args.train_micro, args.train_steps, args.peak_tflops
            )
            if row:
                results["learner"].append(row)
            save()
            jax.clear_caches()
    if not args.skip_selfplay:
        results["selfplay"] = selfplay_figures(args.selfplay_model, args.selfplay_steps, args.cpu_smoke)
        save()
    print(f"total {time.perf_counter() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
