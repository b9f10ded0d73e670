"""Prefill time of a designer round with the shared-prefix KV vs without, same model, prompts and machine.

A round of designer prompts (default 8, the contract the presets use, one target each) differs only after the
contract. Each prompt is prefilled and one token generated (prefill dominates), greedy:
- `full prefill`: every row prefilled from its first token (`min_shared_prefix=0`);
- `shared, new weights`: the prefix computed once as one row, placed in every row, then only the rest
  (`update_model` before each run drops the cached prefix, as after a learner step);
- `shared, cached`: the prefix KV kept from the previous call (same weights).
Programs are compiled before timing; best of `--repeats`. Greedy first tokens must agree across the three.

    python benchmarks/prefix.py [--model smollm2-135m] [--designs 8] [--contract full] [--repeats 2]
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="preset name, .gguf file or Hugging Face directory")
    ap.add_argument("--designs", type=int, default=8)
    ap.add_argument("--contract", default="full", choices=("full", "short", "gym"))
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)

    from spade_jax.envs.contract import SKILLS
    from spade_jax.model.loading import load_model
    from spade_jax.sampling import Sampler, SamplingParams
    from spade_jax.selfplay.designer import DesignTarget, PromptParts, design_messages

    _, model, tokenizer = load_model(args.model)
    targets = [DesignTarget("game", SKILLS[i % len(SKILLS)]) for i in range(args.designs)]
    params = SamplingParams(max_new_tokens=1, greedy=True, ignore_eos=True)
    plain = Sampler(model, tokenizer, max_total_len=4096, min_shared_prefix=0)
    shared = Sampler(model, tokenizer, max_total_len=4096)
    prompts = [plain.render_chat(design_messages(PromptParts(target=t), args.contract)) for t in targets]
    lengths = [len(p) for p in prompts]

    def timed(sampler: Sampler, drop_prefix: bool) -> tuple[float, list[int]]:
        best, first = float("inf"), []
        for _ in range(args.repeats):
            if drop_prefix:
                sampler.update_model(model)
            t = time.perf_counter()
            out = sampler.generate(prompts, params)
            best = min(best, time.perf_counter() - t)
            first = [c.token_ids[0] for c in out]
        return best, first

    plain.generate(prompts, params)  # compile
    shared.generate(prompts, params)
    full_s, full_tok = timed(plain, False)
    new_s, new_tok = timed(shared, True)
    cached_s, cached_tok = timed(shared, False)
    reused = shared.prefix_tokens_reused // (1 + 2 * args.repeats)  # calls made on `shared`
    print(f"{args.model}, {args.designs} designer prompts ({args.contract} contract): {min(lengths)}-{max(lengths)} "
          f"tokens, {reused} shared-prefix tokens reused per round")  # fmt: skip
    print(f"  full prefill          {full_s:7.2f} s")
    print(f"  shared, new weights   {new_s:7.2f} s   {full_s / new_s:5.2f}x less")
    print(f"  shared, cached        {cached_s:7.2f} s   {full_s / cached_s:5.2f}x less")
    same = full_tok == new_tok == cached_tok
    print(f"  greedy first tokens agree: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
