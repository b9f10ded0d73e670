"""Valid-design rate of the designer prompt's contracts on one model: ours ("full", "short") vs the paper's
Gym-style format ("gym"), on the same targets, seeds and gates.

Each contract gets the same from-scratch targets (kind, skill) and sampling seeds, no exemplars and no grounding
document (so no prompt shows code of one contract or the other beyond its own text); every completion runs the
full gates in the sandbox. Prints valid designs / designs with a 95% Wilson interval, and where the others
failed (gate histogram). Usage:

    python benchmarks/designer_contracts.py [--model smollm2-135m] [--designs 8] [--contracts short,gym]
                                            [--max-new-tokens 900] [--kind game] [--workers 2]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter

from rich.console import Console
from rich.table import Table


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of k successes in n trials."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="preset name, .gguf file or Hugging Face directory")
    ap.add_argument("--designs", type=int, default=8, help="designs per contract")
    ap.add_argument("--contracts", default="short,gym", help="comma-separated: full, short, gym")
    ap.add_argument("--max-new-tokens", type=int, default=900)
    ap.add_argument("--context", type=int, default=2560)
    ap.add_argument("--kind", default="game", choices=("game", "tool"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sandbox", default="auto")
    args = ap.parse_args(argv)
    console = Console(width=120)

    from spade_jax.config.selfplay import DesignerConfig
    from spade_jax.envs.contract import SKILLS, TOOL_DOMAINS
    from spade_jax.model.loading import load_model
    from spade_jax.sampling import Sampler
    from spade_jax.sandbox.host_pool import HostPool
    from spade_jax.sandbox.launchers import SandboxConfig
    from spade_jax.selfplay.designer import Designer, DesignTarget
    from spade_jax.selfplay.memory import Memory

    contracts = [c.strip() for c in args.contracts.split(",") if c.strip()]
    skills = SKILLS if args.kind == "game" else TOOL_DOMAINS
    targets = [DesignTarget(args.kind, skills[i % len(skills)]) for i in range(args.designs)]
    _, model, tokenizer = load_model(args.model)
    sampler = Sampler(model, tokenizer, max_total_len=args.context)
    pool = HostPool(args.workers, SandboxConfig(level=args.sandbox))
    table = Table(title=f"valid designs per contract ({args.model}, {args.designs} {args.kind} targets)")
    for col in ("contract", "valid", "rate", "95% interval", "failed at", "s"):
        table.add_column(col)
    try:
        for contract in contracts:
            memory = Memory(":memory:")
            memory.seed_from_library()  # novelty is judged against the seed library, as in a run
            cfg = DesignerConfig(contract=contract, max_new_tokens=args.max_new_tokens, context_len=args.context,
                                 max_resamples=0, use_corpus=False)  # fmt: skip
            designer = Designer(sampler, tokenizer, pool, memory, cfg, exemplars=(0, 0), seed=0)
            t0 = time.monotonic()
            try:
                results = designer.design(targets, step=0)
            except ValueError as e:  # the prompt does not fit the context: say so, go on with the next one
                console.print(f"{contract}: {e}")
                table.add_row(contract, "-", "-", "-", "prompt does not fit", "0")
                continue
            seconds = time.monotonic() - t0
            gates = Counter(r.attempts[-1].verdict.gate for r in results if not r.valid)
            k, n = sum(r.valid for r in results), len(results)
            lo, hi = wilson(k, n)
            table.add_row(contract, f"{k}/{n}", f"{k / n:.0%}", f"[{lo:.0%}, {hi:.0%}]",
                          ", ".join(f"{g} {c}" for g, c in gates.most_common()), f"{seconds:.0f}")  # fmt: skip
            console.print(f"{contract}: {k}/{n} valid, failed at {dict(gates)}, {seconds:.0f} s")
            for r in results:
                verdict = r.attempts[-1].verdict
                console.print(f"  {r.target.skill}: {verdict.gate}: {verdict.reason[:80]}")
            memory.close()
    finally:
        pool.close()
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
