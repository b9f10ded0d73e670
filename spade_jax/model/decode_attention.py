"""The decode step's attention, dispatched by implementation: one query token per row over its KV cache parts.

`attend(q, parts, head_dim)` is what `Attention.decode` calls. Each part is (keys [B, K, D, S], values
[B, K, S, D], valid [B, S]) in the cache's own layout (kv_cache.py), and every row's valid slots in a part form
one contiguous run (left padding before it, unwritten slots after it): the read-only cache and the current
decode chunk. One softmax spans all parts.

Implementations (`IMPLS`; chosen per compiled program with `use(impl)` around tracing, as the sharding rules
are, so the model's call signature does not change):

- "xla": `kv_cache.attend_one`, batched dots over every slot of every part (masked). Runs on every backend;
  the reference the kernel is tested against.
- "pallas": reads each row's live slots only. A Pallas kernel per (row, KV head, split of the slots) walks the
  blocks of its split that overlap the row's run [start, end) and keeps a flash-attention running max / sum /
  output; splits and parts are merged outside the kernel by the same log-sum-exp algebra. It follows the
  structure of JAX's `pallas.ops.gpu.decode_attention` (per-row start and length, split-K with residuals) but
  reads keys as [D, S], the cache's layout, so no transposed copy of the cache is made (JAX's kernel takes keys
  as [S, D]; on XLA:CPU that layout made the score dot ~5x slower, so the cache keeps [D, S]). On GPU it
  lowers to Triton; on any other backend it runs in Pallas interpret mode (what the CPU tests run: slow, exact).
  A part whose slot count does not split into blocks of 16 or more goes through the XLA path, merged the same.
  On TPU a Mosaic kernel of the same recurrence (`_tpu_stats`): one program per (row, KV head) steps through
  the blocks of 128 slots, its block index maps clamped to the row's live blocks (the row's start and end
  prefetched as scalars), so steps outside the run fetch nothing and compute nothing; a part whose slots are
  not a multiple of 128 takes the XLA path. JAX's own TPU kernels (`ops.tpu.paged_attention`,
  `ragged_paged_attention`) attend [0, length) of per-row page tables, which this cache (one array per layer,
  rows left-padded, one write column) does not have.
- "auto": "pallas" on GPU and TPU, "xla" elsewhere.

Failure: an unknown implementation name raises ValueError naming the choices, at trace time.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from spade_jax.model import kv_cache as kvc

IMPLS = ("xla", "pallas", "auto")
MAX_SPLITS = 16  # slot splits per (row, KV head): parallel programs for one row's long cache
MAX_BLOCK = 64  # slots per kernel step (a power of two, >= 16: Triton's smallest dot)
_GROUP_PAD = 16  # query heads per KV head padded to this (Triton's smallest dot dimension)
_MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)  # a score no softmax weight survives, finite (no inf - inf)

_impl: contextvars.ContextVar[str] = contextvars.ContextVar("decode_attention", default="xla")

Part = tuple[jax.Array, jax.Array, jax.Array]


def check(impl: str) -> str:
    """`impl` if it names an implementation (ValueError otherwise)."""
    if impl not in IMPLS:
        raise ValueError(f"decode attention {impl!r}: expected one of {', '.join(IMPLS)}")
    return impl


def resolve(impl: str) -> str:
    """The implementation `impl` stands for on this backend ("auto" -> "pallas" on GPU and TPU, else "xla")."""
    if check(impl) == "auto":
        return "pallas" if jax.default_backend() in ("gpu", "tpu") else "xla"
    return impl


@contextlib.contextmanager
def use(impl: str) -> Iterator[None]:
    """Decode attention traced inside this block uses `impl` (a program keeps what it was traced with)."""
    token = _impl.set(resolve(impl))
    try:
        yield
    finally:
        _impl.reset(token)


def current() -> str:
    """The implementation `attend` uses when traced now."""
    return _impl.get()


def attend(q: jax.Array, parts: list[Part], head_dim: int, impl: str | None = None, *,
           backend: str | None = None) -> jax.Array:  # fmt: skip
    """q [B, K, G, D] over one softmax spanning every part (module doc) -> [B, K, G, D] in q's dtype. `backend`
    picks the kernel ("tpu": the Mosaic one, anything else the Triton one; default: JAX's backend); a kernel
    for another backend than JAX's runs in interpret mode (the tests)."""
    impl = resolve(impl) if impl is not None else current()
    if impl == "xla":
        return kvc.attend_one(q, parts, head_dim)
    scale = head_dim**-0.5
    stats = [_part_stats(q, part, scale, backend or jax.default_backend()) for part in parts]
    m = functools.reduce(jnp.maximum, [s[2] for s in stats])  # [B, K, G]
    out = sum(o * jnp.exp(pm - m)[..., None] for o, _, pm in stats)
    total = sum(lsum * jnp.exp(pm - m) for _, lsum, pm in stats)
    return (out / total[..., None]).astype(q.dtype)


def run_of(valid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(start, end) int32 [B] of each row's one contiguous run of valid [B, S] slots (end == start when none)."""
    start = jnp.argmax(valid, axis=-1).astype(jnp.int32)
    return start, start + jnp.sum(valid, axis=-1, dtype=jnp.int32)


def blocking(slots: int) -> tuple[int, int] | None:
    """(splits, block) for a part of `slots` slots: block a power of two in [16, MAX_BLOCK] dividing it, splits
    the most up to MAX_SPLITS that divide its blocks evenly; None when no block of 16 or more divides it."""
    block = next((b for b in (64, 32, 16) if b <= MAX_BLOCK and slots % b == 0), None)
    if block is None:
        return None
    blocks = slots // block
    return max(n for n in range(1, min(MAX_SPLITS, blocks) + 1) if blocks % n == 0), block


def _part_stats(q: jax.Array, part: Part, scale: float, backend: str) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Unnormalised (output [B, K, G, D], weight sum [B, K, G], running max [B, K, G]) of q over one part,
    float32: the backend's kernel over its live slots, or the XLA path when its slots do not block."""
    keys, values, valid = part
    if backend == "tpu":
        block = tpu_blocking(keys.shape[-1])
        if block is not None:
            start, end = run_of(valid)
            interpret = jax.default_backend() != "tpu"
            return _tpu_stats(q, keys, values, start, end, scale, block, interpret=interpret)
    shape = blocking(keys.shape[-1]) if backend != "tpu" else None
    if shape is None:
        scores = jnp.einsum("bkgd,bkds->bkgs", q.astype(keys.dtype), keys, preferred_element_type=jnp.float32)
        scores = jnp.where(valid[:, None, None, :], scores * scale, _MASKED)
        m = scores.max(-1)
        p = jnp.exp(scores - m[..., None])
        out = jnp.einsum("bkgs,bksd->bkgd", p.astype(values.dtype), values, preferred_element_type=jnp.float32)
        return out, p.sum(-1), m
    start, end = run_of(valid)
    return _kernel_stats(q, keys, values, start, end, scale, *shape)


def _kernel_stats(q, keys, values, start, end, scale: float, splits: int, block: int):
    """The kernel over every (row, KV head), its splits merged: float32 (out, sum, max) as `_part_stats`."""
    b, kh, g, d = q.shape
    gp = max(_GROUP_PAD, 1 << (g - 1).bit_length())
    qp = jnp.pad(q.astype(keys.dtype), ((0, 0), (0, 0), (0, gp - g), (0, 0)))  # zero rows: harmless, dropped
    one = functools.partial(_one_head, scale=scale, splits=splits, block=block)
    per_head = jax.vmap(one, in_axes=(0, 0, 0, None, None))  # over KV heads
    o, lsum, m = jax.vmap(per_head, in_axes=(0, 0, 0, 0, 0))(qp, keys, values, start, end)  # [B, K, splits, ...]
    top = m.max(axis=2)  # [B, K, Gp]
    w = jnp.exp(m - top[:, :, None])
    out = (o * w[..., None]).sum(axis=2)
    return out[:, :, :g], (lsum * w).sum(axis=2)[:, :, :g], top[:, :, :g]


def _one_head(q, k, v, start, end, *, scale: float, splits: int, block: int):
    """One (row, KV head): q [Gp, D], keys k [D, S], values v [S, D], live slots [start, end) ->
    per split (out [splits, Gp, D], sum [splits, Gp], max [splits, Gp]), float32, unnormalised."""
    gp, d = q.shape
    s = k.shape[-1]
    split_len = s // splits
    kernel = functools.partial(_kernel, scale=scale, block=block, split_len=split_len)
    return pl.pallas_call(
        kernel,
        grid=(splits,),
        in_specs=[
            pl.BlockSpec((), lambda j: ()),  # start
            pl.BlockSpec((), lambda j: ()),  # end
            pl.BlockSpec((gp, d), lambda j: (0, 0)),
            pl.BlockSpec((d, split_len), lambda j: (0, j)),
            pl.BlockSpec((split_len, d), lambda j: (j, 0)),
        ],
        out_specs=[
            pl.BlockSpec((None, gp, d), lambda j: (j, 0, 0)),
            pl.BlockSpec((None, gp), lambda j: (j, 0)),
            pl.BlockSpec((None, gp), lambda j: (j, 0)),
        ],
        out_shape=[
            jax.ShapeDtypeStruct((splits, gp, d), jnp.float32),
            jax.ShapeDtypeStruct((splits, gp), jnp.float32),
            jax.ShapeDtypeStruct((splits, gp), jnp.float32),
        ],
        compiler_params=_compiler_params(),
        interpret=jax.default_backend() != "gpu",
        name="spade_decode_attention",
    )(start, end, q, k, v)


def _compiler_params():
    return plgpu.CompilerParams(num_warps=4, num_stages=2) if jax.default_backend() == "gpu" else None


def _kernel(start_ref, end_ref, q_ref, k_ref, v_ref, o_ref, l_ref, m_ref, *, scale: float, block: int, split_len: int):
    """One split of one (row, KV head): the blocks of [j * split_len, (j + 1) * split_len) that overlap the
    row's live run [start, end), with a running max m, weight sum l and unnormalised output o (FlashAttention-2's
    recurrence). A split with no live slot writes m = _MASKED, l = 0, o = 0 (weight 0 when merged)."""
    j = pl.program_id(0)
    base = j * split_len
    lo = jnp.maximum(start_ref[()], base)
    hi = jnp.minimum(end_ref[()], base + split_len)
    gp, d = q_ref.shape
    m0 = jnp.full((gp,), _MASKED, jnp.float32)
    l0 = jnp.zeros((gp,), jnp.float32)
    o0 = jnp.zeros((gp, d), jnp.float32)

    def compute():
        q = q_ref[...]
        slots = jnp.arange(block, dtype=jnp.int32)

        def body(i, carry):
            o, m, lsum = carry
            cols = pl.ds(pl.multiple_of(i * block, block), block)
            k = k_ref[:, cols]  # [D, block]: the cache's own key layout, no transpose
            s = plgpu.dot(q, k) * scale  # [Gp, block], float32 accumulation
            at = base + i * block + slots
            live = (at >= lo) & (at < hi)
            s = jnp.where(live[None, :], s, _MASKED)
            m_new = jnp.maximum(m, s.max(axis=-1))
            fix = jnp.exp(m - m_new)
            p = jnp.exp(s - m_new[:, None])
            v = jnp.where(live[:, None], v_ref[cols, :], 0)  # [block, D]: a slot outside the run adds exactly 0
            o = o * fix[:, None] + plgpu.dot(p.astype(v.dtype), v)
            return o, m_new, lsum * fix + p.sum(axis=-1)

        first = (lo - base) // block
        last = (hi - base + block - 1) // block
        return jax.lax.fori_loop(first, last, body, (o0, m0, l0))

    o, m, lsum = jax.lax.cond(lo < hi, compute, lambda: (o0, m0, l0))
    o_ref[...] = o
    l_ref[...] = lsum
    m_ref[...] = m


# --------------------------------------------------------------------------------------------------------- TPU
TPU_BLOCK = 128  # slots per kernel step on TPU: the lane width (keys are [D, block] tiles, values [block, D])
_LANES = 128  # the running max and sum are kept broadcast over one lane tile, as TPU flash kernels keep them


def tpu_blocking(slots: int) -> int | None:
    """The TPU kernel's block for a part of `slots` slots (None: not a multiple of the lane width)."""
    return TPU_BLOCK if slots % TPU_BLOCK == 0 else None


def _tpu_stats(q, keys, values, start, end, scale: float, block: int, interpret: bool = False):
    """The TPU kernel: float32 (out, sum, max) as `_part_stats`. One program per (row, KV head) walks the blocks
    of the cache in order; the block index maps clamp every step to the row's live blocks, so a step outside the
    run names the block already in VMEM and Mosaic fetches nothing for it (per-row start and end are prefetched
    as scalars), and its compute is skipped. interpret: Pallas TPU interpret mode (what the CPU tests run)."""
    from jax.experimental.pallas import tpu as pltpu

    b, kh, g, d = q.shape
    nblk = keys.shape[-1] // block
    gp = -(-g // 8) * 8  # query heads padded to the sublane count
    qp = jnp.pad(q.astype(keys.dtype), ((0, 0), (0, 0), (0, gp - g), (0, 0)))

    def live_block(i, j, st, en):  # step j's block for row i: j clamped to the row's live blocks
        lo = st[i] // block
        return jnp.clip(j, lo, jnp.maximum((en[i] - 1) // block, lo))

    rows = lambda i, h, j, st, en: (i, h, 0, 0)  # noqa: E731
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(b, kh, nblk),
        in_specs=[
            pl.BlockSpec((None, None, gp, d), rows),
            pl.BlockSpec((None, None, d, block), lambda i, h, j, st, en: (i, h, 0, live_block(i, j, st, en))),
            pl.BlockSpec((None, None, block, d), lambda i, h, j, st, en: (i, h, live_block(i, j, st, en), 0)),
        ],
        out_specs=[pl.BlockSpec((None, None, gp, w), rows) for w in (d, _LANES, _LANES)],
        scratch_shapes=[pltpu.VMEM(shape, jnp.float32) for shape in ((gp, _LANES), (gp, _LANES), (gp, d))],
    )
    o, lsum, m = pl.pallas_call(
        functools.partial(_tpu_kernel, scale=scale, block=block, nblk=nblk),
        grid_spec=grid_spec,
        out_shape=[jax.ShapeDtypeStruct((b, kh, gp, w), jnp.float32) for w in (d, _LANES, _LANES)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        interpret=pltpu.InterpretParams() if interpret else False,
        name="spade_decode_attention_tpu",
    )(start, end, qp, keys, values)
    return o[:, :, :g], lsum[:, :, :g, 0], m[:, :, :g, 0]


def _tpu_kernel(st_ref, en_ref, q_ref, k_ref, v_ref, o_ref, l_ref, m_ref, m_sc, l_sc, acc, *, scale: float,
                block: int, nblk: int):  # fmt: skip
    """Step j of one (row, KV head): FlashAttention-2's recurrence over block j when it overlaps the row's run
    [start, end); the results are written at the last step (a row with no live slot: max _MASKED, sum 0)."""
    i, j = pl.program_id(0), pl.program_id(2)
    st, en = st_ref[i], en_ref[i]

    @pl.when(j == 0)
    def _init():
        m_sc[...] = jnp.full(m_sc.shape, _MASKED, jnp.float32)
        l_sc[...] = jnp.zeros(l_sc.shape, jnp.float32)
        acc[...] = jnp.zeros(acc.shape, jnp.float32)

    @pl.when((st < en) & (j >= st // block) & (j <= (en - 1) // block))
    def _step():
        dims = (((1,), (0,)), ((), ()))
        s = jax.lax.dot_general(q_ref[...], k_ref[...], dims, preferred_element_type=jnp.float32) * scale
        at = j * block + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where((at >= st) & (at < en), s, _MASKED)  # [Gp, block]
        m_prev = m_sc[...]
        m_new = jnp.maximum(m_prev, s.max(axis=-1, keepdims=True))  # [Gp, lanes], every lane the same
        p = jnp.exp(s - m_new[:, :1])
        fix = jnp.exp(m_prev - m_new)
        v = v_ref[...]
        slot = j * block + jax.lax.broadcasted_iota(jnp.int32, v.shape, 0)
        v = jnp.where((slot >= st) & (slot < en), v, 0)  # a slot outside the run adds exactly 0
        pv = jax.lax.dot_general(p.astype(v.dtype), v, dims, preferred_element_type=jnp.float32)
        l_sc[...] = l_sc[...] * fix + p.sum(axis=-1, keepdims=True)
        acc[...] = acc[...] * fix[:, :1] + pv
        m_sc[...] = m_new

    @pl.when(j == nblk - 1)
    def _out():
        o_ref[...] = acc[...]
        l_ref[...] = l_sc[...]
        m_ref[...] = m_sc[...]
