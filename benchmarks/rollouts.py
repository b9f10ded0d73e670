"""Agent rollout throughput, continuous batching vs the per-turn engine, side by side in one run.

A multi-turn workload on seed environments of the library: `--episodes` concurrent episodes (half hinted),
up to `--turns` turns each, replies of mixed lengths: up to `--max-new-tokens` each, ended earlier where the
model emits eos (a random model, e.g. `tiny-smollm`, gets its eos embedding tilted so a reply ends after
`--mean-reply` tokens on average, geometrically). For each model, the same episodes are played by

- the per-turn engine (the loop this project had before issue 19, kept here as the baseline): all live
  episodes' turns go to the sampler in one `generate` call per round (every row waits for the round's longest
  reply, the environments step only between calls, each turn's whole conversation is prefilled), its batch
  kept whole for the call as it was;
- the continuous engine (`RolloutEngine` with a streaming `ModelPolicy`): each reply is admitted into a free
  decode slot as soon as its episode's environment has answered, finished rows free their slots at once, and
  a conversation's next turn is prefilled on top of the rows its previous turn left.

Each engine plays the episodes once to compile, then again (the same seeds, so the same shapes) for the
figures: episodes/s and slot utilisation (useful generated tokens / decode slot-steps computed). Usage:

    python benchmarks/rollouts.py [--models tiny-smollm,smollm2-135m] [--episodes 64] [--workers 8] [--sessions 8]
                                  [--slots 64] [--turns 4] [--envs number_target,secret_word,...]
                                  [--sandbox auto] [--chunk 32]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

BUCKETS = (1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64)  # the continuous engine: finer steps waste fewer rows
ENVS = "number_target,secret_word,code_breaker,sequence_next,balance_scale,nim_duel,light_switches,knights_knaves"


def tilt_eos(model: Any, tok: Any, mean_reply: float, measure: Any) -> float:
    """For a random model (near-uniform next-token distributions, so replies never end before the budget): points
    the eos embedding (tied head) along the mean final hidden state, scaled (by bisection) so that
    `measure(model)`, the mean first reply of the workload, is about `mean_reply` tokens. Returns that mean."""
    import jax.numpy as jnp
    import numpy as np

    eos = tok.eos_ids[0]
    ids = tok.encode_chat([{"role": "user", "content": "Guess a number between 1 and 100."}])
    reply = np.random.default_rng(0).integers(0, model.cfg.vocab_size, 256).tolist()  # what it samples: ~uniform
    hidden = np.asarray(model(jnp.asarray([ids + reply]), return_hidden=True)[0][0], np.float64)[len(ids) :]
    direction = hidden.mean(0) / np.linalg.norm(hidden.mean(0))
    table = np.array(model.embed_tokens.embedding[...])

    def mean_len(scale: float) -> float:
        table[eos] = scale * direction
        model.embed_tokens.embedding[...] = jnp.asarray(table, model.embed_tokens.embedding[...].dtype)
        return measure(model)

    lo, hi = 0.0, 64.0  # longer replies at lo, shorter at hi
    for _ in range(8):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_len(mid) > mean_reply else (lo, mid)
    return mean_len((lo + hi) / 2)


def per_turn_engine() -> type:
    """The rollout loop before continuous batching: one policy `act` call per round of turns."""
    from spade_jax.selfplay.rollouts import RolloutEngine

    class PerTurn(RolloutEngine):
        def _play_all(self, lives: list, result: Any) -> None:
            waiting, live = list(reversed(lives)), []
            while True:
                if waiting and len(live) < self.max_live:
                    batch = [waiting.pop() for _ in range(min(self.max_live - len(live), len(waiting)))]
                    t = time.perf_counter()
                    started = list(self._executor.map(self._start, batch))
                    result.pool_s += time.perf_counter() - t
                    for lv, ok in zip(batch, started):
                        if ok:
                            live.append(lv)
                        else:
                            result.failures[lv.ep.error or "start"] += 1
                            self._release([lv])
                    continue
                if not live:
                    break
                done: list = []
                requests = self._next_turns(live, done, result)
                stepping = []
                if requests:
                    t = time.perf_counter()
                    replies = self.policy.act(requests)
                    result.policy_s += time.perf_counter() - t
                    result.turns += 1
                    for req, reply in zip(requests, replies):
                        lv = lives[req.index]
                        self._record_reply(lv, reply)
                        if reply.finish_reason == "context":
                            self._finish(lv, "context")
                            done.append(lv)
                        else:
                            stepping.append((lv, reply))
                t = time.perf_counter()
                steps = list(self._executor.map(lambda a: a[0].session.step(self._action(a[0], a[1].text)), stepping))
                for (lv, reply), res in zip(stepping, steps):
                    if not self._apply_step(lv, reply, res, result):
                        done.append(lv)
                self._release(done)
                result.pool_s += time.perf_counter() - t
                finished = {id(lv) for lv in done}
                live = [lv for lv in live if id(lv) not in finished]

    return PerTurn


def play(name: str, engine_cls: type, policy: Any, sampler: Any, pool: Any, tok: Any, cfg: Any, specs: list,
         console: Console) -> dict:  # fmt: skip
    """Warm-up run, then the measured run of the same episodes (the policy's seeds replayed)."""
    engine = engine_cls(pool, policy, tok, cfg, max_context=sampler.max_total_len)
    t = time.perf_counter()
    engine.run(specs)
    console.print(f"  {name}: warm-up {time.perf_counter() - t:.1f} s ({sampler.compile_count} programs compiled)")
    policy.calls = 0
    compiled, slots0, tokens0 = sampler.compile_seconds, sampler.slot_steps, sampler.tokens_generated
    res = engine.run(specs)
    engine.close()
    slots, tokens = sampler.slot_steps - slots0, sampler.tokens_generated - tokens0
    st = res.stats()
    rt = getattr(sampler, "_rt", None)
    console.print(f"  {name}: {st['episodes_per_s']:.3f} episodes/s, utilisation {tokens / max(slots, 1):.1%} "
                  f"({tokens} tokens / {slots} slot-steps), {res.wall_s:.1f} s")  # fmt: skip
    return {
        "engine": name, "episodes/s": st["episodes_per_s"], "utilisation": tokens / max(slots, 1), "tokens": tokens,
        "slot_steps": slots, "wall_s": res.wall_s, "turns/ep": st.get("turns_mean", 0.0),
        "policy_share": st["policy_share"], "compile_s": sampler.compile_seconds - compiled,
        "stats": dict(getattr(getattr(sampler, "engine", None), "stats", {})), "failures": dict(res.failures),
        "programs": dict(collections.Counter(k[0] for k in getattr(rt, "programs", {}))),
        "compile_by_kind": {k: round(v, 1) for k, v in getattr(rt, "compile_by_kind", {}).items()},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny-smollm,smollm2-135m")
    ap.add_argument("--envs", default=ENVS, help="seed environments, dealt to the episodes in turn")
    ap.add_argument("--episodes", type=int, default=64, help="concurrent episodes (half hinted, half not)")
    ap.add_argument("--workers", type=int, default=8, help="sandbox workers")
    ap.add_argument("--sessions", type=int, default=8, help="episodes one sandbox worker serves at once")
    ap.add_argument("--slots", type=int, default=64, help="decode slots of the continuous engine")
    ap.add_argument("--turns", type=int, default=4, help="max turns per episode")
    ap.add_argument("--chunk", type=int, default=32, help="decode steps per compiled chunk")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="reply budget per turn")
    ap.add_argument("--mean-reply", type=float, default=40.0, help="a random model's mean reply length (eos tilt)")
    ap.add_argument("--context", type=int, default=2048, help="sampler max_total_len and episode token budget")
    ap.add_argument("--sandbox", default="auto")
    args = ap.parse_args(argv)
    console = Console(width=140)

    from spade_jax.config.selfplay import RolloutConfig
    from spade_jax.envs.seeds import list_seeds, load_seed_source
    from spade_jax.model.loading import load_model
    from spade_jax.sampling import Sampler
    from spade_jax.sandbox.host_pool import HostPool
    from spade_jax.sandbox.launchers import SandboxConfig
    from spade_jax.selfplay.rollouts import EpisodeSpec, ModelPolicy, RolloutEngine

    kinds = {s.name: s.kind for s in list_seeds()}
    names = args.envs.split(",")
    unknown = [n for n in names if n not in kinds]
    if unknown:
        console.print(f"unknown seed environments {unknown}; known: {', '.join(sorted(kinds))}")
        return 2
    half = max(1, args.episodes // 2)
    specs = [EpisodeSpec(names[i % len(names)], load_seed_source(names[i % len(names)]), 1000 + i, cond,
                         env_hint=True, kind=kinds[names[i % len(names)]])
             for cond in ("hint", "no_hint") for i in range(half)]  # fmt: skip
    cfg = RolloutConfig(max_turns=args.turns, max_new_tokens_per_turn=args.max_new_tokens,
                        max_episode_tokens=args.context)  # fmt: skip
    t = time.perf_counter()
    pool = HostPool(
        num_workers=args.workers, sandbox=SandboxConfig(level=args.sandbox), sessions_per_worker=args.sessions
    )
    console.print(f"host pool: {args.workers} workers x {args.sessions} sessions, sandbox level {pool.level} "
                  f"({time.perf_counter() - t:.2f} s); "
                  f"{len(specs)} episodes on {', '.join(names)}, <= {args.turns} turns, replies <= "
                  f"{args.max_new_tokens} tokens; continuous engine: {args.slots} decode slots, chunks of "
                  f"{args.chunk} steps")  # fmt: skip
    rows = []
    try:
        for model_name in args.models.split(","):
            preset, model, tok = load_model(model_name)
            tilted = ""
            if model_name.startswith("tiny"):  # random weights: replies would never end before the budget
                probe = Sampler(model, tok, max_total_len=args.context, min_reuse=0)
                first = dataclasses.replace(cfg, max_turns=1)

                def measure(m: Any, probe: Any = probe, tok: Any = tok, first: Any = first) -> float:
                    probe.update_model(m)
                    engine = RolloutEngine(pool, ModelPolicy(probe, tok, temperature=0.6, seed=2), tok, first)
                    eps = engine.run(specs).kept
                    engine.close()
                    return sum(len(e.completion_ids) for e in eps) / max(len(eps), 1)

                reached = tilt_eos(model, tok, args.mean_reply, measure)
                tilted = f" (random weights, eos tilted: {reached:.1f} tokens a reply on average)"
            console.print(f"[bold]{model_name}[/bold]{tilted}")
            common = dict(max_total_len=args.context, chunk_steps=args.chunk)
            base = Sampler(model, tok, min_reuse=0, shrink_batch=False, **common)
            policy = ModelPolicy(base, tok, temperature=0.6, seed=1)
            rows.append((model_name, play("per-turn", per_turn_engine(), policy, base, pool, tok, cfg, specs, console)))
            cont = Sampler(model, tok, decode_slots=args.slots, batch_buckets=BUCKETS, **common)
            policy = ModelPolicy(cont, tok, temperature=0.6, seed=1)
            rows.append((model_name, play("continuous", RolloutEngine, policy, cont, pool, tok, cfg, specs, console)))
            del base, cont
    finally:
        pool.close()

    table = Table(
        title=f"agent rollouts: {len(specs)} concurrent episodes, "
        f"{args.workers} sandbox workers x {args.sessions} sessions"
    )
    for col in ("model", "engine", "episodes/s", "speed-up", "utilisation", "tokens", "slot-steps", "turns/ep",
                "wall s", "sampler share", "compile s"):  # fmt: skip
        table.add_column(col, justify="right")
    for (model_name, r), (_, ref) in zip(rows, [rows[i - i % 2] for i in range(len(rows))]):
        table.add_row(model_name, r["engine"], f"{r['episodes/s']:.3f}", f"{r['episodes/s'] / ref['episodes/s']:.2f}x",
                      f"{r['utilisation']:.1%}", str(r["tokens"]), str(r["slot_steps"]), f"{r['turns/ep']:.2f}",
                      f"{r['wall_s']:.1f}", f"{r['policy_share']:.0%}", f"{r['compile_s']:.1f}")  # fmt: skip
    console.print(table)
    for model_name, r in rows:
        if r["failures"]:
            console.print(f"{model_name} {r['engine']}: failures {r['failures']}")
        console.print(
            f"{model_name} {r['engine']}: engine events {r['stats']}; compiled programs {r['programs']} "
            f"(compile seconds {r['compile_by_kind']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
