"""Kernel proxies of issue 46 (`benchmarks/kernel_proxies.py`; not `kernels.py`, which would shadow the `kernels`
package transformers looks for whenever benchmarks/ is on the path): each measured beside the implementation it
replaced, in the same run.

Runs on whatever backend JAX has (XLA:CPU here, a GPU or TPU on a device machine). The code a proxy replaced is kept
verbatim in `benchmarks/kernels_baseline.py`; where a proxy measures the whole tree instead (programs compiled by
the engine), run the script once with the older tree first on `PYTHONPATH` for the "before" figure.

Decode (issue 46, points 1 to 5):
- `decode/sampling`: ms per sampling step at B = 16 / 64 over V = 151,936 (paper settings on LLM-like logits,
  hint settings, greedy), and whether the outputs are equal (tokens, log-probs, raw log-probs);
- `decode/attention`: ms of one decode attention (Qwen3-1.7B heads, bfloat16 cache of 1,024 slots + a 32-slot
  chunk) and the float32 arrays of a KV layer's size its optimised HLO makes;
- `decode/step_costs`: executed over counted FLOPs and bytes of one decode step of Qwen3-1.7B (XLA cost analysis
  of the config lowered abstractly, no weights): float32 stacked masters + the old attention vs the bfloat16
  per-layer copy (`run.parts.decode_weights`);
- `decode/loop_state`: float32 arrays the decode loop carries between steps (from the optimised HLO; two layers
  of Qwen3-1.7B);
- `decode/kv_live_share`: the share of KV slots a decode step attends that running rows hold (what a kernel
  reading live slots only reads; the XLA path reads them all), over a self-play-like mix of prompt lengths;
- `decode/programs`: decode programs compiled by one sampler over a designer round, hints and three agent turns
  (the settings of each phase differ: per-mode keys would compile more).

Learner (issue 46, points 6 to 9; benchmarks/kernels_learner.py, which these rows call):
- `learner/compile`: seconds to compile a whole learner step at 2 / 8 / 28 layers, one module per layer (the
  baseline) against stacked blocks under one scan;
- `learner/flops`: executed over counted FLOPs of a Qwen3-1.7B learner step per remat policy (the baseline: the
  "nothing" policy the presets used before).

Timings on a shared machine move with its load: read the ratios (baseline and current in the same process, back
to back, the minimum of repeats), the counts and the bytes, not the absolute milliseconds.

    .venv/bin/python benchmarks/kernel_proxies.py [--only decode/sampling,learner/compile] [--reps 5] [--out k.json]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's spade_jax, wherever it runs from
sys.path.insert(0, str(Path(__file__).resolve().parent))  # kernels_baseline, kernels_learner

V_QWEN = 151_936
PAPER = (0.6, 20, 0.95)  # temperature, top-k, top-p of the paper's designer and agent
HINTS = (0.3, 0, 0.9)
Row = dict[str, Any]


def _row(case: str, baseline: float | None, now: float | None, unit: str, note: str = "", **extra: Any) -> Row:
    ratio = baseline / now if baseline is not None and now not in (None, 0) else None
    return dict(case=case, baseline=baseline, now=now, unit=unit, ratio=ratio, note=note, **extra)


def _best_ms(fn: Callable, *args: Any, reps: int) -> float:
    """The fastest of `reps` calls (after one warm-up call), ms, waiting for the device."""
    import jax

    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return 1e3 * best


def _cost(compiled: Any) -> dict[str, float]:
    c = compiled.cost_analysis()
    c = c[0] if isinstance(c, list) else c
    return {"flops": float(c.get("flops", 0.0)), "bytes": float(c.get("bytes accessed", 0.0))}


# ======================================================================================================= decode
def sampling(args: argparse.Namespace) -> list[Row]:
    """Sampling step ms, today's `pick` against the baseline's per-mode pick, at equal outputs."""
    import jax
    import jax.numpy as jnp
    import kernels_baseline as old

    from spade_jax.sampling import sampling_fns as now

    traced = "mode" not in inspect.signature(now.pick).parameters  # the older tree keys programs by mode
    old_pick = jax.jit(old.pick, static_argnums=0)
    new_pick = jax.jit(now.pick) if traced else jax.jit(now.pick, static_argnums=0)
    rows = []
    rng = np.random.default_rng(0)
    for b in (16, 64):
        x = np.log(rng.zipf(1.3, (b, V_QWEN)).astype(np.float64)) * 4 + rng.normal(0, 0.5, (b, V_QWEN))
        logits = jnp.asarray(x, jnp.float32)
        u = jnp.asarray(rng.uniform(size=b), jnp.float32)
        for name, (t, k, p), greedy in (("paper", PAPER, False), ("hints", HINTS, False), ("greedy", PAPER, True)):
            settings = (jnp.full((b,), t), jnp.full((b,), k, jnp.int32), jnp.full((b,), p), jnp.full((b,), greedy))
            mode = "greedy" if greedy else old.mode_of(False, k, p)
            reps = args.reps if b == 16 else max(1, args.reps // 2)
            base = _best_ms(old_pick, mode, logits, u, *settings, reps=reps)
            call = functools.partial(new_pick, logits, u, *settings) if traced else functools.partial(
                new_pick, mode, logits, u, *settings)  # fmt: skip
            cur = _best_ms(call, reps=reps)
            a, c = old_pick(mode, logits, u, *settings), call()
            same = float(np.mean(np.asarray(a[0]) == np.asarray(c[0])))
            dlp = float(np.max(np.abs(np.asarray(a[1]) - np.asarray(c[1]))))
            draw = float(np.max(np.abs(np.asarray(a[2]) - np.asarray(c[2]))))
            rows.append(_row(f"B={b} {name} (T, k, p = {t}, {k}, {p})", base, cur, "ms",
                             f"tokens equal {same:.0%}, max |d logprob| {dlp:.1e}, max |d raw| {draw:.1e}",
                             tokens_equal=same, max_dlogprob=dlp))  # fmt: skip
    return rows


def attention(args: argparse.Namespace) -> list[Row]:
    """One decode attention, Qwen3-1.7B heads (8 KV heads x 2, head_dim 128), bfloat16 cache."""
    import jax
    import jax.numpy as jnp
    import kernels_baseline as old

    from spade_jax.infra import hlo
    from spade_jax.model import kv_cache

    attend = kv_cache.attend_one  # today's XLA path (the older tree's is the baseline's)
    k, g, d, s, w = 8, 2, 128, 1024, 32
    rows = []
    rng = np.random.default_rng(1)
    for b in (16, 64):
        q = jnp.asarray(rng.normal(size=(b, k, g, d)), jnp.bfloat16)
        arrays = [jnp.asarray(rng.normal(size=shape), jnp.bfloat16) for shape in
                  ((b, k, d, s), (b, k, s, d), (b, k, d, w), (b, k, w, d))]  # fmt: skip
        valid = jnp.asarray(np.arange(s)[None] >= rng.integers(0, s // 2, (b, 1)))
        own = jnp.broadcast_to(jnp.arange(w) <= 7, (b, w))
        parts = [(arrays[0], arrays[1], valid), (arrays[2], arrays[3], own)]
        fns = {name: jax.jit(lambda q, p, f=f: f(q, p, d)) for name, f in (("old", old.attend_one), ("new", attend))}
        kv = b * k * d * s
        f32 = {n: len(hlo.made_arrays(f.lower(q, parts).compile().as_text(), "f32", kv)) for n, f in fns.items()}
        reps = args.reps if b == 16 else max(1, args.reps // 2)
        base, cur = (_best_ms(fns[n], q, parts, reps=reps) for n in ("old", "new"))
        diff = float(
            jnp.max(jnp.abs(fns["old"](q, parts).astype(jnp.float32) - fns["new"](q, parts).astype(jnp.float32)))
        )
        rows.append(_row(f"B={b} time", base, cur, "ms", f"max |difference| {diff:.1e} (bf16 output)"))
        rows.append(_row(f"B={b} float32 arrays of a KV layer's size (HLO)", f32["old"], f32["new"], "arrays"))
    return rows


@contextlib.contextmanager
def _old_attention():
    """Transformer.decode with the baseline's attention (whichever module today's model calls it through)."""
    import kernels_baseline as old

    from spade_jax.model import kv_cache

    saved = [(kv_cache, "attend_one", kv_cache.attend_one)]
    kv_cache.attend_one = old.attend_one
    try:
        from spade_jax.model import decode_attention

        saved.append((decode_attention, "attend", decode_attention.attend))
        decode_attention.attend = lambda q, parts, head_dim, impl=None: old.attend_one(q, parts, head_dim)
    except ImportError:  # the older tree: the model calls kv_cache.attend_one
        pass
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def _abstract(cfg: Any) -> tuple[Any, Any]:
    """(graphdef, abstract state) of a Transformer for `cfg`: shapes and dtypes only, no weights."""
    from flax import nnx

    from spade_jax.model.transformer import Transformer

    return nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))


def step_costs(args: argparse.Namespace) -> list[Row]:
    """Executed over counted FLOPs and bytes of one decode step (Transformer.decode into a chunk), Qwen3-1.7B."""
    import jax

    from spade_jax.model.presets import load_preset

    base_cfg = load_preset("qwen3-1.7b").model.replace(num_layers=args.layers)  # float32 masters, bf16 compute
    b, s, w, live = 64, 1024, 32, 512  # live: the slots each row attends (a cache half full)
    copy = base_cfg.replace(param_dtype="bfloat16", scan_layers=False)  # what run.parts.decode_weights makes
    cfgs = {
        "baseline: float32 masters, old attention": base_cfg,
        "now: bfloat16 copy per layer, one dot per KV head": copy,
    }
    out = {}
    for name, cfg in cfgs.items():
        ctx = _old_attention() if name.startswith("baseline") else contextlib.nullcontext()
        with ctx:
            out[name] = _cost(_compiled_step(cfg, b, s, w, live))
    cfg = base_cfg
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(_abstract(cfg)[1]))
    kv_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim  # K and V elements per token
    attn_flops = 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim * (live + 9) * b
    counted_flops = 2 * n_params * b + attn_flops  # every weight once per row (the tied head included)
    counted_bytes = 2 * n_params + 2 * kv_token * (live + 9) * b + 4 * b * cfg.vocab_size  # bf16 weights, KV, logits
    rows = []
    (bn, bc), (nn, nc) = out.items()
    for what, counted in (("flops", counted_flops), ("bytes", counted_bytes)):
        rows.append(_row(f"executed / counted {what} ({args.layers} layers, B={b}, {live} live of {s} slots)",
                         bc[what] / counted, nc[what] / counted, "x",
                         f"counted {counted:.3g}; executed {bc[what]:.3g} -> {nc[what]:.3g}"))  # fmt: skip
    return rows


def _compiled_step(cfg: Any, b: int, s: int, w: int, live: int) -> Any:
    """One decode step of `cfg` compiled from shapes alone: B rows attending `live` cache slots and 9 chunk slots."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from spade_jax.model.kv_cache import DecodeLayouts, KVCache

    graphdef, state = _abstract(cfg)
    cache = jax.eval_shape(lambda: KVCache.zeros(cfg, b, s))
    chunk = jax.eval_shape(lambda: KVCache.zeros(cfg, b, w))
    head = jax.ShapeDtypeStruct((cfg.hidden_size, cfg.vocab_size), cfg.jnp_param_dtype)

    def step(st, head, cache, chunk, tok, pad):
        model = nnx.merge(graphdef, st)
        return model.decode(tok, pad, cache, s - live + 8, pad, layouts=DecodeLayouts(head=head), chunk=chunk,
                            chunk_index=8)  # fmt: skip

    tok = jax.ShapeDtypeStruct((b,), jnp.int32)
    return jax.jit(step).lower(state, head, cache, chunk, tok, tok).compile()


def _loop_hlo(cfg: Any, b: int, s: int, w: int) -> str:
    """The optimised HLO of a decode chunk of `cfg` (paper sampling), compiled from shapes alone."""
    import jax
    from flax import nnx

    from spade_jax.model.kv_cache import DecodeLayouts, KVCache
    from spade_jax.sampling import decode

    graphdef, state = _abstract(cfg)
    cache = jax.eval_shape(lambda: KVCache.zeros(cfg, b, s))
    head = jax.ShapeDtypeStruct((cfg.hidden_size, cfg.vocab_size), cfg.jnp_param_dtype)
    dstate, consts = _decode_inputs(cfg, b)
    mode = {} if "mode" not in inspect.signature(decode.decode_chunk).parameters else {"mode": "top_k_top_p"}

    def run(st, head, cache, ds, cs):
        return decode.decode_chunk(nnx.merge(graphdef, st), cache, ds, cs, w, b + 1, width=w,
                                   layouts=DecodeLayouts(head=head), **mode)  # fmt: skip

    return jax.jit(run).lower(state, head, cache, dstate, consts).compile().as_text()


def loop_state(args: argparse.Namespace) -> list[Row]:
    """float32 arrays carried by the decode loop (every `while` state of the compiled decode chunk), two layers of
    Qwen3-1.7B at B = 16: the baseline's float32 masters and attention vs today's bfloat16 copy."""
    from spade_jax.infra import hlo
    from spade_jax.model.presets import load_preset

    base = load_preset("qwen3-1.7b").model.replace(num_layers=2)
    found = {}
    for name, cfg in (("baseline", base), ("now", base.replace(param_dtype="bfloat16", scan_layers=False))):
        ctx = _old_attention() if name == "baseline" else contextlib.nullcontext()
        with ctx:
            text = _loop_hlo(cfg, 16, 1024, 32)
        big = [sh for st in hlo.while_states(text) for sh in st if sh[0] == "f32" and hlo.elements(sh) >= 2**16]
        found[name] = (len(big), sum(4 * hlo.elements(sh) for sh in big) / 2**20, big)
    (bn, bm, bl), (nn, nm, nl) = found["baseline"], found["now"]
    return [_row("float32 arrays >= 64K elements carried by the decode loop", bn, nn, "arrays",
                 f"baseline: {sorted(set(sh[1] for sh in bl))[:6]}..."),
            _row("their bytes", bm, nm, "MiB", f"now: {[sh[1] for sh in nl]}")]  # fmt: skip


def _decode_inputs(cfg: Any, b: int) -> tuple[Any, Any]:
    import jax.numpy as jnp

    from spade_jax.sampling.decode import LENGTH, DecodeState, RowConsts

    t, k, p = PAPER
    dstate = DecodeState(logits=jnp.zeros((b, cfg.vocab_size), jnp.float32), generated=jnp.zeros((b,), jnp.int32),
                         column=jnp.int32(512), done=jnp.zeros((b,), bool), finish=jnp.zeros((b,), jnp.int32),
                         recent=jnp.full((b, 4), -1, jnp.int32))  # fmt: skip
    consts = RowConsts(pad_len=jnp.zeros((b,), jnp.int32), budget=jnp.full((b,), 999, jnp.int32),
                       budget_code=jnp.full((b,), LENGTH, jnp.int32), greedy=jnp.zeros((b,), bool),
                       temperature=jnp.full((b,), t), top_k=jnp.full((b,), k, jnp.int32), top_p=jnp.full((b,), p),
                       keys=jnp.zeros((b, 2), jnp.uint32), stop_ids=jnp.full((b, 1), -1, jnp.int32),
                       stop_seqs=jnp.full((b, 1, 4), -2, jnp.int32), stop_used=jnp.zeros((b, 1, 4), bool))  # fmt: skip
    return dstate, consts


def _tiny_sampler(**kw: Any) -> Any:
    from spade_jax.model.embedded import embedded_gguf_path
    from spade_jax.model.loading import load_model
    from spade_jax.model.tokenizer import Tokenizer
    from spade_jax.sampling import Sampler

    _, model, _ = load_model("tiny-smollm")
    return Sampler(model, Tokenizer.from_gguf(embedded_gguf_path()), **kw)


def kv_live_share(args: argparse.Namespace) -> list[Row]:
    """Live share of the KV slots decode attends, a self-play-like mix on one engine (tiny model)."""
    from spade_jax.sampling.types import SamplingParams

    sampler = _tiny_sampler(max_total_len=2048, chunk_steps=16, decode_slots=16)
    if not hasattr(sampler, "kv_slot_reads"):
        return [_row("live share of KV slots read", 1.0, None, "share", "this tree does not count it")]
    rng = np.random.default_rng(2)
    lengths = [900, 850] + [int(n) for n in rng.integers(60, 400, 14)]  # two designer prompts, 14 episode turns
    prompts = [rng.integers(100, 40000, n).tolist() for n in lengths]
    budgets = [int(n) for n in rng.integers(8, 96, len(prompts))]
    for i, (prompt, budget) in enumerate(zip(prompts, budgets)):
        sampler.submit(prompt, SamplingParams(max_new_tokens=budget, temperature=0.6, ignore_eos=True), index=i)
    while sampler.pending:
        sampler.step()
    live, total = sampler.kv_slot_reads
    return [_row("share of KV slots read (XLA path: all; the kernel: live)", 1.0, live / total, "share",
                 f"{live:,} live of {total:,} slot reads, prompts of {min(lengths)}-{max(lengths)} tokens, "
                 "budgets 8-96")]  # fmt: skip


def decode_programs(args: argparse.Namespace) -> list[Row]:
    """Decode programs one sampler compiles over a designer round (paper settings), hints (their own settings) and
    three agent turns (paper settings, one greedy evaluation row), tiny model: today's count; the count per-mode keys
    would give (the sampling mode each chunk's rows need, the baseline's key) in the same run."""
    import kernels_baseline as old

    from spade_jax.sampling.engine import DecodeEngine
    from spade_jax.sampling.types import SamplingParams

    sampler = _tiny_sampler(max_total_len=2048, chunk_steps=8)
    chunks: set[tuple] = set()
    real = DecodeEngine._decode

    def spy(self: Any, *a: Any, **kw: Any) -> Any:
        rows = self.rows
        chunks.add((rows.batch, self.cache.length, old.mode_of_rows(rows.greedy | rows.done, rows.top_k, rows.top_p)))
        return real(self, *a, **kw)

    DecodeEngine._decode = spy
    rng = np.random.default_rng(3)
    t0 = time.perf_counter()
    try:
        design = SamplingParams(max_new_tokens=48, temperature=PAPER[0], top_k=PAPER[1], top_p=PAPER[2])
        sampler.generate([rng.integers(100, 40000, 700).tolist() for _ in range(4)], design)
        hints = SamplingParams(max_new_tokens=24, temperature=HINTS[0], top_p=HINTS[2])
        sampler.generate([rng.integers(100, 40000, 300).tolist() for _ in range(4)], hints)
        episodes = [rng.integers(100, 40000, 200).tolist() for _ in range(8)]
        for _ in range(3):
            done = sampler.generate(episodes[:7], design) + sampler.generate(episodes[7:], SamplingParams(
                max_new_tokens=16, greedy=True))  # fmt: skip
            episodes = [e + c.token_ids + rng.integers(100, 40000, 30).tolist() for e, c in zip(episodes, done)]
    finally:
        DecodeEngine._decode = real
    programs = sum(1 for key in sampler._rt.programs if key[0] == "decode")
    per_mode = len(chunks)
    shapes = len({c[:2] for c in chunks})
    return [_row("decode programs compiled (per-mode keys / today's)", per_mode, programs, "programs",
                 f"{shapes} (batch, cache) shapes; {time.perf_counter() - t0:.0f}s for the round")]  # fmt: skip


# ====================================================================================================== learner
# The learner half lives in benchmarks/kernels_learner.py (also a script of its own); these wrap its tables as rows.


def learner_compile(args: argparse.Namespace) -> list[Row]:
    """Seconds to trace, lower and compile a whole learner step at 2 / 8 / 28 layers (tiny preset widths, each
    case in a fresh interpreter, best of --compile-repeats): one module per layer (the baseline) against the
    blocks stacked under one scan."""
    import kernels_learner

    table = kernels_learner.compile_table(kernels_learner.ROOT, args.compile_repeats, skip_scanned=False)
    return [_row(f"learner step compile, {r['layers']} layers", r["per-layer"], r["scanned"], "s") for r in table]


def learner_flops(args: argparse.Namespace) -> list[Row]:
    """Executed over counted FLOPs of a learner step (Qwen3-1.7B, 2 rows of 4,096 tokens, traced abstractly),
    per remat policy; the baseline column is the default policy the presets ran before ("nothing", 1.38x)."""
    import kernels_learner

    table = kernels_learner.flops_table(scanned_available=True)
    before = next(r["executed/counted"] for r in table if r["case"] == "remat nothing")
    return [_row(f"learner executed / counted FLOPs, {r['case']}", before, r["executed/counted"], "x",
                 f"{r['executed_tflop']:.1f} of {r['counted_tflop']:.1f} TFLOP counted") for r in table]  # fmt: skip


PROXIES: dict[str, Callable[[argparse.Namespace], list[Row]]] = {
    "decode/sampling": sampling,
    "decode/attention": attention,
    "decode/step_costs": step_costs,
    "decode/loop_state": loop_state,
    "decode/kv_live_share": kv_live_share,
    "decode/programs": decode_programs,
    "learner/compile": learner_compile,
    "learner/flops": learner_flops,
}


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.3g}" if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help=f"comma-separated proxies (default all): {', '.join(PROXIES)}")
    ap.add_argument("--reps", type=int, default=5, help="timed repeats (half at B=64)")
    ap.add_argument("--layers", type=int, default=28, help="Qwen3-1.7B layers lowered for decode/step_costs")
    ap.add_argument("--compile-repeats", type=int, default=2, help="fresh interpreters per learner compile case")
    ap.add_argument("--out", default="", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(PROXIES)
    unknown = [n for n in names if n not in PROXIES]
    if unknown:
        print(f"--only: unknown proxies {', '.join(unknown)}; expected some of {', '.join(PROXIES)}")
        return 2
    import jax

    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({jax.devices()[0].device_kind})", flush=True)
    results: dict[str, Any] = {"jax": jax.__version__, "device": str(jax.devices()[0]), "proxies": {}}
    for name in names:
        t = time.perf_counter()
        rows = PROXIES[name](args)
        results["proxies"][name] = rows
        print(f"\n{name} ({time.perf_counter() - t:.0f}s)")
        print(f"  {'case':62s} {'baseline':>10s} {'now':>10s} {'unit':>8s} {'base/now':>9s}  note")
        for r in rows:
            print(f"  {r['case']:62s} {_fmt(r['baseline']):>10s} {_fmt(r['now']):>10s} {r['unit']:>8s} "
                  f"{_fmt(r['ratio']):>9s}  {r['note']}", flush=True)  # fmt: skip
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
