"""`Sampler`: batched generation with a KV cache, compiled prefill + decode loops, and per-token log-probs.

One call: prompts are tokenized, split into batches of at most the largest batch bucket, left-padded to a
prompt-length bucket, prefilled, then decoded in compiled chunks of `chunk_steps` tokens. Between chunks the
host checks stop strings and grows the KV cache to the next length bucket when it fills, so attention only
reads about as many cache slots as the rows have used. Compiled programs are keyed by (batch bucket, lengths,
sampling mode); `compile_count` counts them.

Length policy: `max_total_len` bounds prompt + completion per row. A prompt that leaves no room raises a
ValueError naming the lengths (`overflow="error"`, the default: silently dropping the start of an RL prompt,
e.g. its system message, would corrupt the episode), or keeps its last `max_total_len - max_new_tokens` tokens
(`overflow="truncate_left"`, recorded as `extra["truncated_prompt_tokens"]`). A row that reaches
`max_total_len` while generating ends with finish_reason "context".

With bfloat16 weights and float32 compute, decode matmuls run in bfloat16 with float32 accumulation (faster on
CPUs with AVX512-BF16 from batch ~8 up; slower at batch 1); log-probs are then those of that computation.
On CPU, a batch of one row decodes with the projection kernels transposed to [out, in] (`matvec_layout`, a
copy made on first use), the layout XLA's matrix-vector code streams fastest; the head of a tied embedding is
copied to [E, V] (`transpose_head`), the layout the GEMM library takes for larger batches.

Shared prefixes: when the rows of a batch start with the same `min_shared_prefix` or more tokens (designer
prompts share the contract) and sharing spares at least `min_prefix_saving` prompt tokens (shared length x
(rows - 1); below that one more compiled program costs more than it saves), that prefix is prefilled once, as
one row, and its KV placed in every row; the last `prefix_cache` such prefixes are kept, keyed by their token
ids, for later calls, and dropped by `update_model` (KV of old weights is never reused). Same values as a full
prefill, to float rounding.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from spade_jax.model.kv_cache import DecodeLayouts, KVCache
from spade_jax.model.sharding import DEFAULT_RULES, activation_sharding, use_rules
from spade_jax.sampling import buckets as bk
from spade_jax.sampling import decode as dec
from spade_jax.sampling import sampling_fns, stops
from spade_jax.sampling.prefill import prefill, prefix_kv
from spade_jax.sampling.types import Completion, SamplingParams

_REASONS = {
    dec.EOS: "eos",
    dec.STOP_SEQ: "stop_string",
    dec.HOST_STOP: "stop_string",
    dec.LENGTH: "length",
    dec.CONTEXT: "context",
}

ProgressFn = Callable[[int, int], None]  # (tokens generated so far in this call, upper bound)


def _common_prefix_len(rows: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every row has in common."""
    first, n = rows[0], min(len(r) for r in rows)
    for r in rows[1:]:
        n = next((i for i in range(n) if r[i] != first[i]), n)
    return n


def _signature(state: Any) -> Any:
    return jax.tree.map(lambda x: (x.shape, x.dtype, getattr(x, "sharding", None)), state)


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
        chunk_steps: int = 32,
        cache_growth: bool = True,
        overflow: str = "error",
        transpose_head: bool = True,
        matvec_layout: bool = True,
        min_shared_prefix: int = 256,
        min_prefix_saving: int = 4096,
        prefix_cache: int = 2,
    ):
        if overflow not in ("error", "truncate_left"):
            raise ValueError(f"overflow must be 'error' or 'truncate_left', got {overflow!r}")
        self.cfg = model.cfg
        self.tokenizer = tokenizer
        self.mesh = mesh
        self.rules = rules or DEFAULT_RULES
        self.max_total_len = int(max_total_len)
        self.prompt_buckets = tuple(sorted(prompt_buckets or bk.length_buckets(self.max_total_len)))
        self.cache_buckets = bk.length_buckets(2 * self.max_total_len + self.prompt_buckets[-1], smallest=64)
        batch_buckets = sorted(batch_buckets)
        if mesh is not None:  # keep the batch divisible by the data axes so it really splits
            n = int(np.prod([mesh.shape[a] for a in ("data", "fsdp", "expert") if a in mesh.shape]))
            batch_buckets = sorted({-(-b // n) * n for b in batch_buckets})
        self.batch_buckets = tuple(batch_buckets)
        self.chunk_steps = int(chunk_steps)
        self.cache_growth = cache_growth
        self.overflow = overflow
        self.transpose_head = transpose_head
        self.matvec_layout = matvec_layout
        self.min_shared_prefix = int(min_shared_prefix)  # 0: never share
        self.min_prefix_saving = int(min_prefix_saving)
        self.prefix_cache = int(prefix_cache)
        self._prefixes: collections.OrderedDict[tuple[int, ...], KVCache] = collections.OrderedDict()
        self.prefix_tokens_reused = 0  # prompt tokens not prefilled thanks to a shared prefix (all calls)
        self.slot_steps = 0  # decode steps times batch rows computed (padding and finished rows included)
        self.tokens_generated = 0  # tokens returned: slot utilisation = tokens_generated / slot_steps
        self._programs: dict[tuple, Any] = {}
        self.compile_count = 0
        self.compile_seconds = 0.0
        self.graphdef, self.state, self._sig, self._head, self._kernels_t = None, None, None, None, None
        self.update_model(model)

    # ----------------------------------------------------------------------------------------------- public API

    def update_model(self, model: nnx.Module) -> None:
        """Samples from new parameters from now on (the arrays are referenced, not copied). Compiled programs are
        kept when every parameter keeps its shape, dtype and sharding."""
        graphdef, state = nnx.split(model)
        sig = _signature(state)
        if graphdef != self.graphdef or sig != self._sig:
            self._programs.clear()
        self.graphdef, self.state, self._sig, self.cfg = graphdef, state, sig, model.cfg
        self._head, self._kernels_t = None, None
        self._prefixes.clear()  # their KV came from the old weights
        if self.transpose_head and model.cfg.tie_embeddings:  # a device-side [E, V] copy of the tied embedding
            self._head = self._run(
                ("head",), lambda st: nnx.merge(graphdef, st).decode_layouts(head=True).head, (state,)
            )

    def generate(
        self,
        prompts: Sequence[Sequence[int]] | Sequence[str],
        params: SamplingParams,
        *,
        progress: ProgressFn | None = None,
    ) -> list[Completion]:
        """One Completion per prompt (token-id lists, or strings encoded with the tokenizer), in order."""
        ids = [self._encode(p) for p in prompts]
        stop_spec = stops.build_stop_spec(
            self.tokenizer, params.stop_token_ids, params.stop_strings, eos=not params.ignore_eos
        )
        out: list[Completion] = []
        pieces = bk.split_batch(len(ids), self.batch_buckets)
        for n, (a, b) in enumerate(pieces):
            out += self._generate_batch(ids[a:b], params, stop_spec, n, progress)
        return out

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
        """Prompt token ids for a conversation (the template writes its own special tokens)."""
        text = self.tokenizer.apply_chat_template(list(messages), tools=tools, add_generation_prompt=True)
        return self.tokenizer.encode(text, add_special_tokens=False)

    # ------------------------------------------------------------------------------------------------ internals

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

    def _put(self, x: Any, names: tuple = ()) -> jax.Array:
        """Host value -> device array; on a mesh split by the activation names (replicated when names=())."""
        x = x if isinstance(x, jax.Array) else jnp.asarray(x)
        if self.mesh is None:
            return x
        if not names:
            return jax.device_put(x, jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec()))
        return jax.device_put(x, activation_sharding(self.mesh, names, x.shape, self.rules))

    def _program(self, key: tuple, fn: Callable, args: tuple, donate: tuple[int, ...] = ()) -> Any:
        prog = self._programs.get(key)
        if prog is None:
            t = time.perf_counter()
            with self._mesh_ctx():
                prog = jax.jit(fn, donate_argnums=donate).lower(*args).compile()
            self.compile_seconds += time.perf_counter() - t
            self.compile_count += 1
            self._programs[key] = prog
        return prog

    def _mesh_ctx(self):
        import contextlib

        stack = contextlib.ExitStack()
        if self.mesh is not None:
            stack.enter_context(jax.set_mesh(self.mesh))
            stack.enter_context(use_rules(self.rules))
        return stack

    def _run(self, key: tuple, fn: Callable, args: tuple, donate: tuple[int, ...] = ()) -> Any:
        prog = self._program(key, fn, args, donate)
        with self._mesh_ctx():
            return prog(*args)

    def _prefill(self, rows: list[list[int]], tokens: np.ndarray, pad_len: np.ndarray, cache_len: int):
        graphdef = self.graphdef
        shared, kv = self._shared_prefix(rows)
        args = (self.state, self._put(tokens, ("batch", "length")), self._put(pad_len, ("batch",)))
        if kv is None:

            def fn(state, tokens, pad_len):
                return prefill(nnx.merge(graphdef, state), tokens, pad_len, cache_len=cache_len)

            return self._run(("prefill", *tokens.shape, cache_len), fn, args)

        def fn_shared(state, tokens, pad_len, prefix, start):
            model = nnx.merge(graphdef, state)
            return prefill(model, tokens, pad_len, cache_len=cache_len, prefix=prefix, start=start)

        start = int(pad_len[: len(rows)].min()) + shared
        self.prefix_tokens_reused += shared * (len(rows) - 1)
        key = ("prefill-shared", *tokens.shape, cache_len, kv.length)
        return self._run(key, fn_shared, (*args, kv, self._put(np.int32(start))))

    def _shared_prefix(self, rows: list[list[int]]) -> tuple[int, KVCache | None]:
        """(length, one-row KV) of the prompt prefix all rows share, from the prefix cache or computed now;
        (0, None) below `min_shared_prefix` tokens, when it would spare fewer than `min_prefix_saving` tokens, or
        for a single row. The length is rounded down to a multiple of 64, so calls whose rows share slightly
        different prefixes still find it."""
        shared = _common_prefix_len(rows) // 64 * 64 if len(rows) > 1 and self.min_shared_prefix > 0 else 0
        if shared < max(self.min_shared_prefix, 64) or shared * (len(rows) - 1) < self.min_prefix_saving:
            return 0, None
        key = tuple(rows[0][:shared])
        kv = self._prefixes.pop(key, None)
        if kv is None:
            padded = np.zeros((1, bk.pick(self.prompt_buckets, shared)), np.int32)
            padded[0, :shared] = key
            fn = lambda state, tokens: prefix_kv(nnx.merge(self.graphdef, state), tokens)
            kv = self._run(("prefix", padded.shape[1]), fn, (self.state, self._put(padded)))
        self._prefixes[key] = kv
        while len(self._prefixes) > self.prefix_cache:
            self._prefixes.popitem(last=False)
        return shared, kv

    def _decode(self, cache, state, consts, n_steps: int, mode: str):
        graphdef, width = self.graphdef, self.chunk_steps

        def fn(params, layouts, cache, state, consts, n_steps):
            model = nnx.merge(graphdef, params)
            return dec.decode_chunk(model, cache, state, consts, n_steps, mode=mode, width=width, layouts=layouts)

        b = state.logits.shape[0]
        head, kernels_t = self._head, None
        if b == 1 and self.matvec_layout and self.mesh is None and jax.default_backend() == "cpu":
            if self._kernels_t is None:  # made on first use, kept until update_model
                kernels = lambda st: nnx.merge(graphdef, st).decode_layouts(kernels=True).kernels
                self._kernels_t = self._run(("kernels_t",), kernels, (self.state,))
            head, kernels_t = None, self._kernels_t
        key = ("decode", b, cache.length, mode, width)
        layouts = DecodeLayouts(head=head, kernels=kernels_t)
        args = (self.state, layouts, cache, state, consts, self._put(np.int32(n_steps)))
        return self._run(key, fn, args, donate=(2, 3))

    def _grow(self, cache: KVCache, length: int) -> KVCache:
        key = ("grow", cache.k[0].shape[0], cache.length, length)
        return self._run(key, lambda c: c.grow(length), (cache,))

    def _generate_batch(
        self, rows: list[list[int]], params: SamplingParams, spec: stops.StopSpec, piece: int, progress
    ) -> list[Completion]:
        fitted = [self._fit(r, params) for r in rows]
        dropped = [len(r) - len(f[0]) for r, f in zip(rows, fitted)]
        rows = [f[0] for f in fitted]
        n = len(rows)
        b = bk.pick(self.batch_buckets, n)
        p = bk.pick(self.prompt_buckets, max(len(r) for r in rows))
        budgets = [f[1] for f in fitted] + [1] * (b - n)
        codes = [f[2] for f in fitted] + [dec.LENGTH] * (b - n)
        need = max(budgets)
        s_final = bk.pick(self.cache_buckets, p + need)
        s_cur = bk.pick(self.cache_buckets, p + min(need, max(p, self.chunk_steps))) if self.cache_growth else s_final
        s_cur = min(s_cur, s_final)

        tokens = np.zeros((b, p), np.int32)
        pad_len = np.full((b,), p - 1, np.int32)
        for i, r in enumerate(rows):
            tokens[i, p - len(r) :] = r
            pad_len[i] = p - len(r)
        logits, cache = self._prefill(rows, tokens, pad_len, s_cur)

        mode = sampling_fns.mode_of(params.is_greedy, params.top_k, params.top_p)
        done0 = np.arange(b) >= n  # padding rows are finished from the start
        state = dec.DecodeState(
            logits=logits,
            generated=self._put(np.zeros(b, np.int32), ("batch",)),
            step=self._put(np.int32(0)),
            done=self._put(done0, ("batch",)),
            finish=self._put(np.where(done0, dec.LENGTH, dec.RUNNING).astype(np.int32), ("batch",)),
            recent=self._put(np.full((b, stops.MAX_STOP_SEQ_LEN), -1, np.int32), ("batch", None)),
            key=self._put(jax.random.fold_in(jax.random.key(params.seed), piece)),
        )
        consts = dec.DecodeConsts(
            prompt_slots=self._put(np.int32(p)),
            pad_len=self._put(pad_len, ("batch",)),
            budget=self._put(np.asarray(budgets, np.int32), ("batch",)),
            budget_code=self._put(np.asarray(codes, np.int32), ("batch",)),
            temperature=self._put(np.float32(max(params.temperature, 1e-6))),
            top_k=self._put(np.int32(params.top_k)),
            top_p=self._put(np.float32(params.top_p)),
            stop_ids=self._put(spec.ids),
            stop_seqs=self._put(spec.seqs),
            stop_used=self._put(spec.used),
        )

        toks: list[list[int]] = [[] for _ in range(b)]
        lps: list[list[float]] = [[] for _ in range(b)]
        raws: list[list[float]] = [[] for _ in range(b)]
        host_done = done0.copy()
        step = 0
        while True:
            if p + step >= cache.length:
                if cache.length >= s_final:
                    break
                cache = self._grow(cache, min(s_final, bk.pick(self.cache_buckets, 2 * cache.length)))
            n_steps = min(self.chunk_steps, cache.length - p - step, need - step)
            cache, state, t, lp, raw = self._decode(cache, state, consts, n_steps, mode)
            self.slot_steps += b * n_steps
            t, lp, raw, gen, done = jax.device_get((t, lp, raw, state.generated, state.done))
            step = int(jax.device_get(state.step))
            for i in range(n):
                if host_done[i]:
                    continue
                before = len(toks[i])
                k = int(gen[i]) - before
                toks[i] += t[i, :k].tolist()
                lps[i] += lp[i, :k].tolist()
                raws[i] += raw[i, :k].tolist()
                if done[i]:
                    host_done[i] = True
                elif stops.tail_has_stop(self.tokenizer, toks[i], before, params.stop_strings):
                    host_done[i] = True
            if progress is not None:
                progress(sum(len(x) for x in toks), sum(budgets[:n]))
            if host_done.all() or step >= need:
                break
            if (host_done & ~np.asarray(done)).any():  # rows the host stopped: mark them done on device too
                state = state.replace(done=self._put(host_done, ("batch",)))
        finish = np.asarray(jax.device_get(state.finish))
        self.tokens_generated += sum(len(t) for t in toks[:n])
        out = [self._completion(rows[i], toks[i], lps[i], raws[i], int(finish[i]), params) for i in range(n)]
        for c, d in zip(out, dropped):
            if d:
                c.extra["truncated_prompt_tokens"] = d
        return out

    def _completion(self, prompt, toks, lps, raws, code, params: SamplingParams) -> Completion:
        reason = _REASONS.get(code, "length")
        stop = None
        text_ids = toks
        if reason == "eos" and toks:
            stop = self.tokenizer.decode(toks[-1:])
            text_ids = toks[:-1]  # the eos / stop token itself is not part of the text
        text = self.tokenizer.decode(text_ids)
        extra = {"stop_check": "device"} if code == dec.STOP_SEQ else {}
        if params.stop_strings:
            cut = stops.trim_at_stop(self.tokenizer, text_ids, params.stop_strings)
            if cut is not None:
                kept, text, stop = cut
                if len(kept) < len(toks) or code != dec.STOP_SEQ:
                    extra = {"stop_check": "host"}
                toks, lps, raws = toks[: len(kept)], lps[: len(kept)], raws[: len(kept)]
                reason = "stop_string"
        return Completion(
            prompt_ids=list(prompt),
            token_ids=list(toks),
            logprobs=list(lps),
            raw_logprobs=list(raws),
            text=text,
            finish_reason=reason,
            stop=stop,
            extra=extra,
        )
