"""Agent rollout throughput on a seed environment: episodes/s, and the share of wall time spent waiting on the
host pool vs. on the sampler; for the model, the slot utilisation (tokens returned / decode slot-steps computed).

Two runs on the same episodes: (1) a scripted policy (no model: the pool and the engine alone), (2) the model
(SmolLM2-135M by default) as the agent. Usage:

    python benchmarks/rollouts.py [--env number_target] [--episodes 16] [--workers 4] [--turns 4]
                                  [--max-new-tokens 48] [--model smollm2-135m] [--sandbox auto] [--no-model]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from rich.console import Console
from rich.table import Table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="number_target", help="seed environment name")
    ap.add_argument("--episodes", type=int, default=16, help="episodes per run (half hinted, half not)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--turns", type=int, default=4, help="max turns per episode")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="model tokens per turn")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--sandbox", default="auto")
    ap.add_argument("--no-model", action="store_true", help="only the scripted-policy run")
    args = ap.parse_args(argv)
    console = Console(width=120)

    from spade_jax.envs.host_pool import HostPool
    from spade_jax.envs.sandbox import SandboxConfig
    from spade_jax.envs.seeds import list_seeds, load_seed_source
    from spade_jax.model.embedded import embedded_gguf_path
    from spade_jax.model.tokenizer import Tokenizer
    from spade_jax.selfplay.config import RolloutConfig
    from spade_jax.selfplay.rollouts import EpisodeSpec, ModelPolicy, RolloutEngine, ScriptedPolicy

    names = {s.name: s for s in list_seeds()}
    if args.env not in names:
        console.print(f"unknown seed environment {args.env!r}; known: {', '.join(sorted(names))}")
        return 2
    info, source = names[args.env], load_seed_source(args.env)
    half = max(1, args.episodes // 2)
    specs = [EpisodeSpec(args.env, source, 1000 + i, cond, env_hint=True, kind=info.kind)
             for cond in ("hint", "no_hint") for i in range(half)]  # fmt: skip
    cfg = RolloutConfig(max_turns=args.turns, max_new_tokens_per_turn=args.max_new_tokens, max_episode_tokens=4096)

    t = time.perf_counter()
    pool = HostPool(num_workers=args.workers, sandbox=SandboxConfig(level=args.sandbox))
    console.print(f"host pool: {args.workers} workers, sandbox level {getattr(pool, 'level', args.sandbox)} "
                  f"(started in {time.perf_counter() - t:.2f} s)")  # fmt: skip
    tokenizer = Tokenizer.from_gguf(embedded_gguf_path())
    rows = []

    def scripted(req):
        rng = random.Random(req.spec.seed * 100 + req.turn)
        nums = [w for w in req.messages[-1]["content"].replace(",", " ").split() if w.strip(".").isdigit()]
        return "\\boxed{" + (rng.choice(nums).strip(".") if nums else "1") + "}"

    engine = RolloutEngine(pool, ScriptedPolicy(scripted), tokenizer, cfg)
    engine.run(specs[:2])  # warm the workers
    res = engine.run(specs)
    engine.close()
    rows.append(("scripted", res))

    if not args.no_model:
        from spade_jax.model.loading import load_model
        from spade_jax.sampling import Sampler

        t = time.perf_counter()
        _, model, tok = load_model(args.model)
        sampler = Sampler(model, tok, max_total_len=4096)
        console.print(f"model {args.model} loaded in {time.perf_counter() - t:.1f} s")
        engine = RolloutEngine(pool, ModelPolicy(sampler, tok, temperature=0.6), tok, cfg, max_context=4096)
        t = time.perf_counter()
        engine.run(specs)  # the same episodes once, so the measured run reuses the compiled programs
        console.print(f"warm-up run {time.perf_counter() - t:.1f} s ({sampler.compile_count} programs compiled)")
        compiled = sampler.compile_seconds
        slots0, tokens0 = sampler.slot_steps, sampler.tokens_generated
        res = engine.run(specs)
        slots, tokens = sampler.slot_steps - slots0, sampler.tokens_generated - tokens0
        console.print(f"slot utilisation of the per-turn engine: {tokens / max(slots, 1):.0%} "
                      f"({tokens} tokens returned of {slots} slot-steps computed; the rest is padding rows and "
                      "rows waiting for the call's longest reply)")  # fmt: skip
        engine.close()
        compile_s = sampler.compile_seconds - compiled
        if compile_s > 0:
            console.print(f"note: {compile_s:.1f} s of the measured run went to compiling new programs")
        rows.append((args.model, res))
    pool.close()

    table = Table(title=f"rollouts on {args.env} ({len(specs)} episodes, <= {args.turns} turns)")
    for col in ("policy", "episodes/s", "turns/ep", "wall s", "pool share", "sampler share", "engine share"):
        table.add_column(col, justify="right")
    for name, r in rows:
        s = r.stats()
        other = max(0.0, 1.0 - s["pool_share"] - s["policy_share"])
        table.add_row(name, f"{s['episodes_per_s']:.2f}", f"{s.get('turns_mean', 0):.1f}", f"{r.wall_s:.2f}",
                      f"{s['pool_share']:.0%}", f"{s['policy_share']:.0%}", f"{other:.0%}")  # fmt: skip
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
