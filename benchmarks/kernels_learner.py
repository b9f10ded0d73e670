"""Learner kernels benchmark (issue 46, learner half): compile seconds against depth, and executed over counted
FLOPs of a learner step. The learner rows of `benchmarks/kernel_proxies.py` (the decode half lives there).

    python benchmarks/kernels_learner.py                  # both parts, this checkout
    python benchmarks/kernels_learner.py --repo /work/main --skip-scanned   # "before": today's code, same script

Compile seconds: trace + lower + compile of the whole learner step (gradient, clip, AdamW; `Learner._fused`) of
the `tiny` preset's architecture at 2, 8 and 28 layers, 4 rows of 512 tokens holding two packed samples each,
remat on (policy "nothing"), attention blocks of 128 rows, log-softmax chunks of 1024: stacked blocks under one
scan against one module per layer (the layout the code had before), each case in a fresh interpreter, best of
`--repeats`. Wall-clock seconds on a shared machine: compare rows of one run, not runs.

FLOPs: the step's gradient program for a Qwen3-1.7B config, traced abstractly (no weights), 2 rows of 4096 tokens.
Executed FLOPs are counted from the program itself (every dot_general, times the trip count of the loops around
it, recomputation under remat included); XLA's cost analysis counts a loop's body once, so it is used only to
check the counter on a loop-free program (printed). Counted FLOPs are what an MFU figure credits: 6 x matmul
parameters x tokens, plus causal attention 6 x T^2 x heads x head_dim x layers per row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LAYERS = (2, 8, 28)


def _import_repo(repo: Path) -> None:
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))


# ----- compile seconds -----


def _samples(n: int, length: int) -> list[Any]:
    import numpy as np

    from spade_jax.rl.batch import Sample

    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        c = length - 16
        out.append(Sample(prompt_ids=rng.integers(1, 500, 16).tolist(), completion_ids=rng.integers(1, 500, c).tolist(),
                          logprobs=(-rng.random(c)).tolist(), advantage=float(rng.normal()), role=i % 2))  # fmt: skip
    return out


def compile_case(layers: int, scanned: bool) -> float:
    """Seconds to trace, lower and compile one learner step (see the module doc)."""
    from flax import nnx

    from spade_jax.model.config import ModelConfig
    from spade_jax.model.presets import load_preset
    from spade_jax.model.transformer import Transformer
    from spade_jax.rl.batch import pack_sequences
    from spade_jax.rl.learner import Learner, LearnerConfig

    cfg = load_preset("tiny").model.replace(num_layers=layers)
    if "scan_layers" in {f.name for f in dataclasses.fields(ModelConfig)}:
        cfg = cfg.replace(scan_layers=scanned)
    elif scanned:
        raise SystemExit("this checkout has no stacked layers")
    lcfg = LearnerConfig(remat=True, remat_policy="nothing", attn_query_chunk=128, logits_chunk=1024)
    learner = Learner(Transformer(cfg, rngs=nnx.Rngs(0)), lcfg)
    batch = pack_sequences(_samples(8, 256), length_buckets=(512,), batch_buckets=(4,))
    params, rest = learner._split()
    args = (params, rest, learner.opt_state, learner._put(batch), learner._norms(batch))
    t = time.perf_counter()
    learner._fused.lower(*args, kind="rl").compile()
    return time.perf_counter() - t


def compile_table(repo: Path, repeats: int, skip_scanned: bool) -> list[dict[str, Any]]:
    rows = []
    for layers in LAYERS:
        row: dict[str, Any] = {"layers": layers}
        for scanned in (False,) if skip_scanned else (False, True):
            runs = []
            for _ in range(repeats):
                cmd = [sys.executable, __file__, "--repo", str(repo), "--compile-case", str(layers), str(int(scanned))]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=_cpu_env())
                runs.append(float(out.stdout.strip().splitlines()[-1]))
            row["scanned" if scanned else "per-layer"] = min(runs)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _cpu_env() -> dict[str, str]:
    import os

    return {**os.environ, "JAX_PLATFORMS": "cpu"}


# ----- FLOPs -----


def dot_flops(jaxpr: Any) -> int:
    """FLOPs of every dot_general in a jaxpr, loops multiplied out (scan: its length; cond: the dearest branch;
    calls, remat and custom-derivative bodies: once per appearance)."""
    import numpy as np
    from jax.extend import core

    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            k = math.prod(eqn.invars[0].aval.shape[d] for d in contract)
            total += 2 * k * int(np.prod(eqn.outvars[0].aval.shape))
        elif name == "scan":
            total += eqn.params["length"] * dot_flops(eqn.params["jaxpr"].jaxpr)
        elif name == "cond":
            total += max(dot_flops(b.jaxpr) for b in eqn.params["branches"])
        else:
            for v in eqn.params.values():
                if isinstance(v, core.ClosedJaxpr):
                    total += dot_flops(v.jaxpr)
                elif isinstance(v, core.Jaxpr):
                    total += dot_flops(v)
    return total


def counted_flops(cfg: Any, rows: int, t: int) -> float:
    """The MFU formula's FLOPs of one step: 6 x matmul parameters x tokens + causal attention."""
    e, d, f = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    per_layer = e * d * (2 * cfg.num_heads + 2 * cfg.num_kv_heads) + 3 * e * f
    matmul = cfg.num_layers * per_layer + cfg.vocab_size * e
    attention = 6 * t * t * cfg.num_heads * d * cfg.num_layers * rows
    return 6.0 * matmul * rows * t + attention


def _step(cfg: Any, lcfg: Any, rows: int, t: int, *, scanned: bool | None) -> tuple[Any, tuple]:
    """The learner's gradient function (its forward, log-probs and policy loss) and abstract arguments for it."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from spade_jax.model.transformer import ForwardOptions, Transformer
    from spade_jax.rl.learner import forward_hidden
    from spade_jax.rl.losses import policy_loss, token_logprobs

    if scanned is not None:
        cfg = cfg.replace(scan_layers=scanned)
    graphdef, params, rest = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))), nnx.Param, ...)
    opts = {"remat": lcfg.remat, "remat_policy": lcfg.remat_policy, "query_chunk": lcfg.attn_query_chunk}
    if "attention" in {f.name for f in dataclasses.fields(ForwardOptions)}:
        opts["attention"] = "xla"
    ints = jax.ShapeDtypeStruct((rows, t), jnp.int32)
    floats = jax.ShapeDtypeStruct((rows, t), jnp.float32)

    def loss(params, tokens, positions, segment_ids, adv):
        model = nnx.merge(graphdef, params, rest)
        hidden = forward_hidden(model, tokens, positions, segment_ids, options=ForwardOptions(**opts))
        kw = {}
        if getattr(lcfg, "vocab_chunk", 0):
            kw = {"head": model.head(), "vocab_chunk": lcfg.vocab_chunk}
        logp, ent = token_logprobs(model.logits, hidden, tokens, chunk_size=lcfg.logits_chunk, **kw)
        mask = (segment_ids > 0).astype(jnp.float32)
        return policy_loss(logp, jax.lax.stop_gradient(logp), logp, adv, mask, entropy=ent)[0]

    return jax.grad(loss), (params, ints, ints, ints, floats)


def _step_jaxpr(cfg: Any, lcfg: Any, rows: int, t: int, *, scanned: bool | None) -> Any:
    import jax

    fn, args = _step(cfg, lcfg, rows, t, scanned=scanned)
    return jax.make_jaxpr(fn)(*args)


def flops_table(scanned_available: bool) -> list[dict[str, Any]]:
    from spade_jax.model.presets import load_preset
    from spade_jax.rl.learner import LearnerConfig

    cfg = load_preset("qwen3-1.7b").model.replace(param_dtype="float32", dtype="bfloat16")
    rows, t = 2, 4096
    counted = counted_flops(cfg, rows, t)
    fields = {f.name for f in dataclasses.fields(LearnerConfig)}
    from spade_jax.config.learner import REMAT_POLICY_NAMES

    cases: list[tuple[str, dict[str, Any]]] = [("no remat", dict(remat=False))]
    cases += [(f"remat {p}", dict(remat=True, remat_policy=p)) for p in REMAT_POLICY_NAMES]
    if "vocab_chunk" in fields:
        cases.append(("remat dots, vocab chunks 16384", dict(remat=True, remat_policy="dots", vocab_chunk=16384)))
    out = []
    for name, kw in cases:
        lcfg = LearnerConfig(attn_query_chunk=128, logits_chunk=1024, **kw)
        executed = dot_flops(_step_jaxpr(cfg, lcfg, rows, t, scanned=True if scanned_available else None).jaxpr)
        row = {"case": name, "executed_tflop": executed / 1e12, "counted_tflop": counted / 1e12,
               "executed/counted": executed / counted}  # fmt: skip
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def check_counter(scanned_available: bool) -> dict[str, float]:
    """The counter against XLA's cost analysis on a program without loops (one module per layer, whole attention
    matrix, whole log-softmax): XLA also counts elementwise work, so its figure is a little higher."""
    import jax

    from spade_jax.model.presets import load_preset
    from spade_jax.rl.learner import LearnerConfig

    cfg = load_preset("tiny").model
    lcfg = LearnerConfig(remat=True, attn_query_chunk=0, logits_chunk=0)
    fn, args = _step(cfg, lcfg, 2, 64, scanned=False if scanned_available else None)
    xla = jax.jit(fn).lower(*args).cost_analysis()["flops"]
    return {"counter_flops": float(dot_flops(jax.make_jaxpr(fn)(*args).jaxpr)), "xla_cost_analysis_flops": float(xla)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose spade_jax is measured")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-scanned", action="store_true", help="a checkout without stacked layers")
    parser.add_argument("--part", choices=("all", "compile", "flops"), default="all")
    parser.add_argument("--compile-case", nargs=2, type=int, metavar=("LAYERS", "SCANNED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _import_repo(args.repo.resolve())
    import jax

    jax.config.update("jax_platforms", "cpu")
    if args.compile_case:
        print(compile_case(args.compile_case[0], bool(args.compile_case[1])))
        return 0
    if args.part in ("all", "flops"):
        print(json.dumps(check_counter(not args.skip_scanned)), flush=True)
        flops_table(not args.skip_scanned)
    if args.part in ("all", "compile"):
        compile_table(args.repo.resolve(), args.repeats, args.skip_scanned)
    return 0


if __name__ == "__main__":
    sys.exit(main())
