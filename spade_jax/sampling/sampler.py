"""`Sampler`: generation for token-id or text prompts and chat conversations, with per-token log-probs, on one
continuous-batching decode engine (engine.py).

`generate(prompts, params)` submits every prompt to the engine and steps it until they are done; owners that
interleave their own work with decoding (the agent's rollouts) use `submit` / `step` / `cancel` directly, with
settings of their own per request (rows of different temperatures, filters, stops and budgets share the
batch). A request's random stream is its own (`seed`, `index`): in `generate` prompt i of a call draws from
stream i of params.seed, whichever rows it shares the batch with. At most `decode_slots` rows decode together
(the largest batch bucket); `shrink_batch=False` keeps a call's batch whole until its last row ends (the
per-turn baseline of benchmarks/rollouts.py). Compiled programs are keyed by shapes (batch bucket, prompt
bucket, cache length; sampling settings are traced values, never a key); `compile_count` counts them.

Length policy: `max_total_len` bounds prompt + completion per row. A prompt that leaves no room raises a
ValueError naming the lengths (`overflow="error"`, the default: silently dropping the start of an RL prompt,
e.g. its system message, would corrupt the episode), or keeps its last `max_total_len - max_new_tokens` tokens
(`overflow="truncate_left"`, recorded as `extra["truncated_prompt_tokens"]`). A row that reaches
`max_total_len` while generating ends with finish_reason "context". Either error is raised before anything
is queued.

With bfloat16 weights and float32 compute, decode matmuls run in bfloat16 with float32 accumulation (faster on
CPUs with AVX512-BF16 from batch ~8 up; slower at batch 1); log-probs are then those of that computation.
On CPU, a batch of one row decodes with the projection kernels transposed to [out, in] (`matvec_layout`, a
copy made on first use), the layout XLA's matrix-vector code streams fastest; the head of a tied embedding is
copied to [E, V] (`transpose_head`), the layout the GEMM library takes for larger batches.

Decode attention (`decode_attention`, model/decode_attention.py): "xla" (every backend, every cache slot read),
"pallas" (each row's live slots only: Triton on GPU, Mosaic on TPU, interpret mode elsewhere) or "auto" (pallas on
GPU and TPU).
`kv_slot_reads` counts the live share of the slots decode steps attend.

Computed state from the weights: shared prompt prefixes (prefixes.py: `min_shared_prefix`,
`min_prefix_saving`, `prefix_cache`), rows kept for reuse in the engine's slots (`min_reuse`), and the decode
layouts; `update_model` drops all of it (KV of old weights is never reused) and refuses while requests run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
from flax import nnx

from spade_jax.sampling import buckets as bk
from spade_jax.sampling import decode as dec
from spade_jax.sampling import stops
from spade_jax.sampling.engine import DecodeEngine
from spade_jax.sampling.prefixes import Prefiller
from spade_jax.sampling.requests import Request, key_data
from spade_jax.sampling.runtime import Runtime
from spade_jax.sampling.types import Completion, SamplingParams

ProgressFn = Callable[[int, int], None]  # (tokens generated so far in this call, upper bound)


class Sampler:
    """Generates completions for token-id or text prompts, and for chat conversations (see module doc)."""

    def __init__(
        self,
        model: nnx.Module,
        tokenizer: Any,
        *,
        mesh: jax.sharding.Mesh | None = None,
        rules: Any = None,
        max_total_len: int = 4096,
        prompt_buckets: Sequence[int] | None = None,
        batch_buckets: Sequence[int] = bk.DEFAULT_BATCH_BUCKETS,
        decode_slots: int | None = None,
        chunk_steps: int = 32,
        cache_growth: bool = True,
        overflow: str = "error",
        transpose_head: bool = True,
        matvec_layout: bool = True,
        min_shared_prefix: int = 256,
        min_prefix_saving: int = 4096,
        prefix_cache: int = 2,
        min_reuse: int = 64,
        shrink_batch: bool = True,
        decode_attention: str = "xla",
    ):
        if overflow not in ("error", "truncate_left"):
            raise ValueError(f"overflow must be 'error' or 'truncate_left', got {overflow!r}")
        if decode_slots is not None and decode_slots < 1:
            raise ValueError(f"decode_slots must be >= 1, got {decode_slots}")
        if chunk_steps < 1:
            raise ValueError(f"chunk_steps must be >= 1, got {chunk_steps}")
        self.tokenizer = tokenizer
        self.mesh = mesh
        self.max_total_len = int(max_total_len)
        self.prompt_buckets = tuple(sorted(prompt_buckets or bk.length_buckets(self.max_total_len)))
        self.cache_buckets = bk.length_buckets(2 * self.max_total_len + self.prompt_buckets[-1], smallest=64)
        self.batch_buckets = bk.batch_buckets(batch_buckets, decode_slots, mesh)
        self.chunk_steps = int(chunk_steps)
        self.overflow = overflow
        self._rt = Runtime(model, mesh=mesh, rules=rules, transpose_head=transpose_head, matvec_layout=matvec_layout,
                           attention=decode_attention)  # fmt: skip
        self._prefill = Prefiller(self._rt, self.prompt_buckets, min_shared=min_shared_prefix,
                                  min_saving=min_prefix_saving, keep=prefix_cache)  # fmt: skip
        self.engine = DecodeEngine(
            self._rt, tokenizer, self._prefill, batch_buckets=self.batch_buckets, prompt_buckets=self.prompt_buckets,
            cache_buckets=self.cache_buckets, chunk_steps=self.chunk_steps, cache_growth=cache_growth,
            min_reuse=min_reuse, shrink_batch=shrink_batch,
        )  # fmt: skip
        self._stop_specs: dict[tuple, stops.StopSpec] = {}

    # ------------------------------------------------------------------------------------------ counters
    @property
    def cfg(self) -> Any:
        return self._rt.cfg

    @property
    def decode_slots(self) -> int:
        """Rows decoded together at most (the largest batch bucket)."""
        return self.batch_buckets[-1]

    @property
    def compile_count(self) -> int:
        return self._rt.compile_count

    @property
    def compile_seconds(self) -> float:
        return self._rt.compile_seconds

    @property
    def prefix_tokens_reused(self) -> int:
        """Prompt tokens not prefilled thanks to a shared prefix (all calls)."""
        return self._prefill.tokens_reused

    @property
    def slot_steps(self) -> int:
        """Decode steps times batch rows computed (free and finished rows included)."""
        return self.engine.slot_steps

    @property
    def tokens_generated(self) -> int:
        """Tokens returned: slot utilisation = tokens_generated / slot_steps."""
        return self.engine.tokens_generated

    @property
    def kv_slot_reads(self) -> tuple[int, int]:
        """(live, all): KV cache slots decode steps attended, summed over rows and steps: live ones (a row's own
        tokens) and all of them (every row reads every slot of the cache on the XLA path). live / all is the
        share of cache reads a kernel reading live slots only keeps."""
        return self.engine.kv_live_reads, self.engine.kv_reads

    # ----------------------------------------------------------------------------------------- public API
    def release(self) -> None:
        """Frees the engine's KV cache and parked rows and the shared-prefix caches (sampling goes on after it, each
        first request prefilled anew). A run calls it before the learner steps. RuntimeError while requests run."""
        self.engine.release()
        self._prefill.clear()

    def update_model(self, model: nnx.Module) -> None:
        """Samples from new parameters from now on (the arrays are referenced, not copied). Compiled programs are
        kept when every parameter keeps its shape, dtype and sharding. RuntimeError while requests run."""
        self.engine.invalidate()
        self._prefill.clear()
        self._rt.update(model)

    def generate(
        self,
        prompts: Sequence[Sequence[int]] | Sequence[str],
        params: SamplingParams,
        *,
        progress: ProgressFn | None = None,
    ) -> list[Completion]:
        """One Completion per prompt (token-id lists, or strings encoded with the tokenizer), in order."""
        reqs = [self.make_request(self._encode(p), params, index=i) for i, p in enumerate(prompts)]
        for r in reqs:
            self.engine.submit(r)
        try:
            while not all(r.done for r in reqs):
                self.engine.step()
                if progress is not None:
                    progress(sum(len(r.tokens) for r in reqs), sum(r.budget for r in reqs))
        except BaseException:
            self.engine.cancel(reqs)
            raise
        self.forget()
        return [r.completion for r in reqs]

    def submit(
        self, prompt: Sequence[int] | str, params: SamplingParams, *, index: int = 0, tag: Any = None
    ) -> Request:
        """Queues one prompt (random stream `index` of params.seed); its `completion` is set by the `step` that
        finishes it. ValueError (nothing queued) when the prompt does not fit."""
        req = self.make_request(self._encode(prompt), params, index=index, tag=tag)
        self.engine.submit(req)
        return req

    def step(self, expect: int = 0, eager: bool = False) -> list[Request]:
        """One engine step (admissions + one decode chunk): the requests that finished in it. `expect`: how many
        more requests the caller will submit soon (the batch is kept large enough for them); `eager`: finished
        requests are followed by new ones, so the chunk hands them back early (DecodeEngine.step)."""
        return self.engine.step(expect, eager)

    def cancel(self, requests: Sequence[Request] | None = None) -> None:
        """Drops queued or running requests (all when None); they never complete."""
        self.engine.cancel(requests)

    def forget(self) -> None:
        """When nothing is queued or running: drops the engine's cache and the rows kept for reuse, so the next
        request starts from the state a fresh (or resumed) process starts from. Owners call it when a unit of
        work ends (`generate` does; the rollout engine at the end of `run`): reuse decisions then depend only on
        the requests of that unit, and a resumed run reproduces an uninterrupted one bit for bit."""
        if not self.engine.pending:
            self.engine.cancel()

    @property
    def pending(self) -> int:
        """Requests queued or running."""
        return self.engine.pending

    def chat(
        self,
        conversations: Sequence[Sequence[dict]],
        params: SamplingParams,
        *,
        tools: list[dict] | None = None,
        progress: ProgressFn | None = None,
    ) -> list[Completion]:
        """Renders each conversation with the tokenizer's chat template (add_generation_prompt=True), then generates."""
        prompts = [self.render_chat(c, tools=tools) for c in conversations]
        return self.generate(prompts, params, progress=progress)

    def render_chat(self, messages: Sequence[dict], *, tools: list[dict] | None = None) -> list[int]:
        """Prompt token ids for a conversation: the template writes its own special tokens, the messages' contents
        are text (`Tokenizer.encode_chat`: an environment's `<|im_end|>` is never the token)."""
        return self.tokenizer.encode_chat(list(messages), tools, add_generation_prompt=True)

    def make_request(self, ids: list[int], params: SamplingParams, *, index: int = 0, tag: Any = None) -> Request:
        """A request for prompt ids under the length policy (ValueError when it does not fit)."""
        kept, budget, code = self._fit(ids, params)
        key = (params.stop_token_ids, params.stop_strings, not params.ignore_eos)
        spec = self._stop_specs.get(key)
        if spec is None:
            spec = self._stop_specs[key] = stops.build_stop_spec(
                self.tokenizer, params.stop_token_ids, params.stop_strings, eos=not params.ignore_eos
            )
        return Request(prompt=kept, params=params, budget=budget, budget_code=code, key=key_data(params.seed, index),
                       stop=spec, truncated=len(ids) - len(kept), tag=tag)  # fmt: skip

    # ------------------------------------------------------------------------------------------ internals
    def _encode(self, prompt: Sequence[int] | str) -> list[int]:
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt)
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError("empty prompt: give at least one token")
        bad = [t for t in ids if not 0 <= t < self.cfg.vocab_size]
        if bad:
            raise ValueError(f"prompt token id {bad[0]} is outside the vocabulary (size {self.cfg.vocab_size})")
        return ids

    def _fit(self, ids: list[int], params: SamplingParams) -> tuple[list[int], int, int]:
        """(prompt ids, token budget, finish code at the budget) under max_total_len."""
        room = self.max_total_len - len(ids)
        if room < 1:
            if self.overflow == "error":
                raise ValueError(
                    f"prompt of {len(ids)} tokens leaves no room to generate within max_total_len="
                    f"{self.max_total_len} (use a larger max_total_len or overflow='truncate_left')"
                )
            keep = max(1, self.max_total_len - params.max_new_tokens)
            ids = ids[-keep:]
            room = self.max_total_len - len(ids)
        budget = min(params.max_new_tokens, room)
        return ids, budget, dec.LENGTH if budget == params.max_new_tokens else dec.CONTEXT
