"""Causal self-attention of the forward without a cache (training): packed rows told apart by segment ids, one
implementation per backend.

A query attends to the keys at or before it in its own segment; segment 0 is padding, which attends to nothing
and comes out as zeros. Segments are runs of one id, as `rl.batch` packs them (ids 1, 2, ... in order, padding at
the end). Implementations (`IMPLS`, picked by `resolve`; "auto" follows the backend):

- "xla" (CPU, and the reference everywhere): the whole score matrix for rows of at most one query chunk; longer
  rows a flash loop (`flash_attention`: online softmax over the blocks on and below the diagonal, with its own
  backward pass), so no row computes scores above the diagonal and memory stays linear in the row length.
- "cudnn" (GPU): cuDNN's fused flash attention through JAX, causal, with each segment given to it as a packed
  sequence (offsets and lengths per row).
- "splash" (TPU): JAX's Pallas splash-attention kernel with a causal mask and `SegmentIds`, per KV head
  (grouped queries share their key/value head), mapped over the mesh's devices with `shard_map`.

The kernels raise where their backend is absent; `resolve("auto")` only picks one on its own backend. Nothing
here changes values beyond float rounding: every implementation is tested against `attention` on a dense mask.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name

IMPLS = ("auto", "xla", "cudnn", "splash")
NEG_INF = -1e30  # the dense paths' masked score (finite: a fully masked row stays finite)
SPLASH_BLOCK = 128  # the TPU kernel's block (rows are padded to a multiple of it)
RESIDUAL_NAME = "attn_residual"  # checkpoint name of the kernels' output and log-sum-exp (what remat may keep)


def resolve(impl: str, backend: str | None = None) -> str:
    """The implementation "auto" means on `backend` (default: JAX's): cudnn on GPU, splash on TPU, xla elsewhere;
    any other name as given. ValueError for an unknown name."""
    if impl not in IMPLS:
        raise ValueError(f"attention implementation {impl!r}; expected one of {IMPLS}")
    if impl != "auto":
        return impl
    backend = backend or jax.default_backend()
    return {"gpu": "cudnn", "cuda": "cudnn", "tpu": "splash"}.get(backend, "xla")


def scores_f32(spec: str, q: jax.Array, k: jax.Array) -> jax.Array:
    """`jnp.einsum(spec, q, k)` accumulating in float32 (attention scores, and the flash loop's other products).
    XLA:CPU has no bfloat16 x bfloat16 -> float32 dot for some operand layouts (it fails at run time: "Unsupported
    element type for DotThunk"), so on CPU bfloat16 operands are widened first: the same values (a product of two
    bfloat16 numbers is exact in float32). Elsewhere the dot takes bfloat16 as it is."""
    if jax.default_backend() == "cpu" and jnp.bfloat16 in (q.dtype, k.dtype):
        q, k = q.astype(jnp.float32), k.astype(jnp.float32)
    return jnp.einsum(spec, q, k, preferred_element_type=jnp.float32)


def allowed(seg_q: jax.Array, seg_k: jax.Array, pos_q: jax.Array, pos_k: jax.Array) -> jax.Array:
    """bool [B, Tq, Tk]: query (segment seg_q [B, Tq], slot pos_q [Tq]) may attend key (seg_k [B, Tk], pos_k [Tk]):
    same segment, at or before it, not padding."""
    same = (seg_q[:, :, None] == seg_k[:, None, :]) & (seg_q[:, :, None] > 0)
    return same & (pos_q[:, None] >= pos_k[None, :])[None]


def segment_mask(segment_ids: jax.Array) -> jax.Array:
    """The dense bool [B, T, T] mask of packed rows (what every implementation computes, never built by them)."""
    pos = jnp.arange(segment_ids.shape[1])
    return allowed(segment_ids, segment_ids, pos, pos)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """q [B, T, K, G, D] over k, v [B, S, K, D] where mask [B, T, S] allows -> [B, T, K, G, D]: the whole score
    matrix in float32 (the reference every implementation is tested against)."""
    scores = scores_f32("btkgd,bskd->bkgts", q, k)
    scores = scores * (q.shape[-1] ** -0.5)
    scores = jnp.where(mask[:, None, None, :, :], scores, NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bkgts,bskd->btkgd", probs, v)


def causal_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None, *, impl: str = "xla", chunk: int = 0
) -> jax.Array:
    """Packed causal self-attention: q [B, T, K, G, D], k, v [B, T, K, D], segment_ids int [B, T] (None: one
    segment per row) -> [B, T, K, G, D], zeros on padding rows. `impl` one of IMPLS; `chunk` the "xla" query
    rows per block (0: the whole matrix)."""
    if segment_ids is None:
        segment_ids = jnp.ones(q.shape[:2], jnp.int32)
    impl = resolve(impl)
    if impl == "cudnn":
        out = cudnn_attention(q, k, v, segment_ids)
    elif impl == "splash":
        out = splash_attention(q, k, v, segment_ids)
    elif blocks_apply(q.shape[1], chunk):
        out = block_attention(q, k, v, segment_ids, chunk)
    else:
        out = attention(q, k, v, segment_mask(segment_ids))
    return jnp.where((segment_ids > 0)[:, :, None, None, None], out, 0).astype(q.dtype)


# ----- "xla": the flash loop -----


def blocks_apply(t: int, chunk: int) -> bool:
    """Whether `block_attention` splits T query rows (a chunk shorter than T; any T: the rows are padded)."""
    return 0 < chunk < t


def block_attention(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array, chunk: int) -> jax.Array:
    """Causal attention of packed rows by blocks of `chunk` query rows and `chunk` keys (`flash_attention`), so
    neither the score matrix nor its upper triangle is ever computed. Rows are padded to a whole number of blocks
    with padding (segment 0), dropped from the output.

    On XLA:CPU (forward and backward, 8 heads of 64, 2 rows) this took 0.9 s at T = 2048 where the earlier query
    blocks over all keys took 7.8 s, and 41-50 ms at T = 512 where 4 unrolled causal blocks took 61-148 ms; blocks
    of 128 rows beat blocks of 512 there (they stay in cache)."""
    t = q.shape[1]
    tp = -(-t // chunk) * chunk
    heads_major = lambda x: jnp.moveaxis(x, 1, -2)  # [B, T, ..., D] -> [B, ..., T, D]: batched matmul layout
    qh, kh, vh = heads_major(q * q.shape[-1] ** -0.5), heads_major(k), heads_major(v)  # scale the smaller side
    seg = jnp.pad(segment_ids, ((0, 0), (0, tp - t)))
    if tp > t:
        pad = lambda x: jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, tp - t), (0, 0)])
        qh, kh, vh = pad(qh), pad(kh), pad(vh)
    return jnp.moveaxis(flash_attention(qh, kh, vh, seg, chunk)[..., :t, :], -2, 1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, seg: jax.Array, rows: int) -> jax.Array:
    """Causal packed attention by blocks of `rows`: q [B, K, G, T, D] (already scaled), k, v [B, K, T, D], seg int
    [B, T], T % rows == 0 -> [B, K, G, T, D].

    A loop over the (query block, key block) pairs on or below the diagonal keeps a running max, sum and weighted
    sum per query row (online softmax, as FlashAttention does), so work is the causal half of the matrix and no
    float32 score block outlives its step. The backward pass (`_flash_bwd`) walks the same pairs, recomputing each
    block's probabilities from the saved log-sum-exp, and needs memory linear in T."""
    return _flash_fwd(q, k, v, seg, rows)[0]


def _split_rows(x: jax.Array, rows: int, axis: int) -> jax.Array:
    """x with its axis `axis` of T split into [T / rows, rows], the block index moved to the front."""
    shape = x.shape[:axis] + (x.shape[axis] // rows, rows) + x.shape[axis + 1 :]
    return jnp.moveaxis(x.reshape(shape), axis, 0)


def _join_rows(x: jax.Array, axis: int) -> jax.Array:
    """The inverse of `_split_rows`."""
    x = jnp.moveaxis(x, 0, axis)
    return x.reshape(x.shape[:axis] + (x.shape[axis] * x.shape[axis + 1],) + x.shape[axis + 2 :])


def _pairs(n: int) -> tuple[jax.Array, jax.Array]:
    """(query block, key block) index pairs on or below the diagonal of an n x n block grid, row by row."""
    i, j = np.tril_indices(n)
    return jnp.asarray(i, jnp.int32), jnp.asarray(j, jnp.int32)


def _block_scores(qb, kb, sb, i, j, rows: int) -> jax.Array:
    """float32 scores [B, K, G, r, r] of query block i against key block j, -inf where not allowed."""
    s = scores_f32("bkgqd,bksd->bkgqs", qb[i], kb[j])
    pos = jnp.arange(rows)
    ok = allowed(sb[i], sb[j], i * rows + pos, j * rows + pos)
    return jnp.where(ok[:, None, None], s, -jnp.inf)


def _blocks(q, k, v, seg, rows):
    return _split_rows(q, rows, 3), _split_rows(k, rows, 2), _split_rows(v, rows, 2), _split_rows(seg, rows, 1)


def _flash_fwd(q, k, v, seg, rows):
    qb, kb, vb, sb = _blocks(q, k, v, seg, rows)
    f32 = jnp.float32

    def step(carry, ij):
        acc, m, total = carry  # running weighted sum, max and sum of exp(score - max) per query row
        i, j = ij
        s = _block_scores(qb, kb, sb, i, j, rows)
        m_new = jnp.maximum(m[i], s.max(-1))
        base = jnp.where(jnp.isfinite(m_new), m_new, 0.0)  # rows with nothing allowed yet: exp(-inf) = 0 below
        p = jnp.exp(s - base[..., None])
        scale = jnp.exp(m[i] - base)
        pv = scores_f32("bkgqs,bksd->bkgqd", p.astype(vb.dtype), vb[j])
        acc = acc.at[i].set(acc[i] * scale[..., None] + pv)
        total = total.at[i].set(total[i] * scale + p.sum(-1))
        return (acc, m.at[i].set(m_new), total), None

    acc = jnp.zeros(qb.shape, f32)
    m = jnp.full(qb.shape[:-1], -jnp.inf, f32)
    (acc, m, total), _ = jax.lax.scan(step, (acc, m, jnp.zeros(qb.shape[:-1], f32)), _pairs(qb.shape[0]))
    live = total > 0
    safe = jnp.where(live, total, 1.0)
    out = jnp.where(live[..., None], acc / safe[..., None], 0.0)
    lse = jnp.where(live, m + jnp.log(safe), jnp.inf)  # inf: every probability is 0
    # named, so a remat policy that saves RESIDUAL_NAME keeps them and the backward does not rerun the loop
    out = checkpoint_name(_join_rows(out, 3).astype(q.dtype), RESIDUAL_NAME)
    return out, (q, k, v, seg, out, checkpoint_name(lse, RESIDUAL_NAME))


def _flash_bwd(rows, res, dout):
    q, k, v, seg, out, lse = res
    f32 = jnp.float32
    qb, kb, vb, sb = _blocks(q, k, v, seg, rows)
    dob = _split_rows(dout, rows, 3)
    delta = jnp.sum(dob.astype(f32) * _split_rows(out, rows, 3).astype(f32), axis=-1)  # rowsum(dO * O)

    def step(carry, ij):
        dq, dk, dv = carry
        i, j = ij
        p = jnp.exp(_block_scores(qb, kb, sb, i, j, rows) - lse[i][..., None])
        dv = dv.at[j].add(scores_f32("bkgqs,bkgqd->bksd", p.astype(vb.dtype), dob[i].astype(vb.dtype)))
        dp = scores_f32("bkgqd,bksd->bkgqs", dob[i].astype(vb.dtype), vb[j])
        ds = (p * (dp - delta[i][..., None])).astype(qb.dtype)
        dq = dq.at[i].add(scores_f32("bkgqs,bksd->bkgqd", ds, kb[j]))
        dk = dk.at[j].add(scores_f32("bkgqs,bkgqd->bksd", ds, qb[i]))
        return (dq, dk, dv), None

    init = (jnp.zeros(qb.shape, f32), jnp.zeros(kb.shape, f32), jnp.zeros(vb.shape, f32))
    (dq, dk, dv), _ = jax.lax.scan(step, init, _pairs(qb.shape[0]))
    return (_join_rows(dq, 3).astype(q.dtype), _join_rows(dk, 2).astype(k.dtype), _join_rows(dv, 2).astype(v.dtype),
            None)  # fmt: skip


flash_attention.defvjp(_flash_fwd, _flash_bwd)


# ----- "cudnn": GPU -----


def packed_segments(segment_ids: jax.Array, max_segments: int) -> tuple[jax.Array, jax.Array]:
    """(lengths int32 [B, M], offsets int32 [B, M + 1]) of segments 1..M of each row, in cuDNN's packed layout:
    segment m's token count and first slot, -1 past a row's last segment (segments are runs of ids 1, 2, ... in
    order, as `rl.batch` packs them; padding, id 0, belongs to none)."""
    ids = jnp.arange(1, max_segments + 1, dtype=segment_ids.dtype)
    lengths = jnp.sum(segment_ids[:, None, :] == ids[None, :, None], axis=-1).astype(jnp.int32)  # [B, M]
    starts = jnp.cumsum(lengths, axis=1) - lengths
    offsets = jnp.pad(jnp.where(lengths > 0, starts, -1), ((0, 0), (0, 1)), constant_values=-1)
    return jnp.where(lengths > 0, lengths, -1), offsets


def cudnn_attention(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """cuDNN fused causal attention (GPU, compute capability >= 8.0) with every segment of a row as its own packed
    sequence; grouped-query heads go to cuDNN as they are. The segment table has room for T segments, the most
    a row of T tokens can hold (a smaller bound would silently drop segments)."""
    from jax._src.cudnn.fused_attention_stablehlo import MaskType
    from jax._src.cudnn.fused_attention_stablehlo import dot_product_attention as cudnn_dpa

    b, t, kh, g, d = q.shape
    lengths, offsets = packed_segments(segment_ids, t)
    out = cudnn_dpa(
        q.reshape(b, t, kh * g, d), k, v, q_seqlen=lengths, kv_seqlen=lengths, q_offsets=offsets,
        kv_offsets=offsets, scale=d**-0.5, mask_type=MaskType.PADDING_CAUSAL, qkv_layout="BTNH",
    )  # fmt: skip
    return out.reshape(b, t, kh, g, d)


# ----- "splash": TPU -----


def splash_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array, *, interpret: bool = False
) -> jax.Array:
    """JAX's Pallas splash-attention kernel (TPU; `interpret=True` runs it on CPU for tests), causal with segment
    ids: each KV head's G query heads in one multi-query call, mapped over rows and KV heads; under a mesh, each
    device runs its own rows and heads (`shard_map`). Rows are padded to a multiple of SPLASH_BLOCK."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    b, t, kh, g, d = q.shape
    tp = -(-t // SPLASH_BLOCK) * SPLASH_BLOCK
    pad = lambda x: jnp.pad(x, [(0, 0), (0, tp - t)] + [(0, 0)] * (x.ndim - 2))
    qh = jnp.moveaxis(pad(q * d**-0.5), 1, 3)  # [B, K, G, T, D]
    kh_, vh = jnp.moveaxis(pad(k), 1, 2), jnp.moveaxis(pad(v), 1, 2)  # [B, K, T, D]
    seg = pad(segment_ids)
    sizes = sk.BlockSizes(block_q=SPLASH_BLOCK, block_kv=SPLASH_BLOCK, block_kv_compute=SPLASH_BLOCK,
                          block_q_dkv=SPLASH_BLOCK, block_kv_dkv=SPLASH_BLOCK, block_kv_dkv_compute=SPLASH_BLOCK,
                          block_q_dq=SPLASH_BLOCK, block_kv_dq=SPLASH_BLOCK)  # fmt: skip
    kernel = sk.make_splash_mqa_single_device(
        sm.MultiHeadMask([sm.CausalMask((tp, tp)) for _ in range(g)]), block_sizes=sizes, interpret=interpret,
        residual_checkpoint_name=RESIDUAL_NAME,
    )  # fmt: skip

    def local(qh, kh_, vh, seg):
        one = lambda qr, kr, vr, sr: kernel(qr, kr, vr, sk.SegmentIds(q=sr, kv=sr))  # [G, T, D] over [T, D]
        per_head = jax.vmap(one, in_axes=(0, 0, 0, None))
        return jax.vmap(per_head)(qh, kh_, vh, seg)

    out = _per_device(local, qh, kh_, vh, seg)
    return jnp.moveaxis(out, 3, 1)[:, :t]


def _per_device(fn, qh: jax.Array, kh: jax.Array, vh: jax.Array, seg: jax.Array) -> jax.Array:
    """fn(qh, kh, vh, seg) on each device's rows and KV heads when a mesh is active (a Pallas kernel has no
    sharding rule of its own), else as it is."""
    from spade_jax.model.sharding import _ACTIVE_RULES, MESH_AXES

    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or not set(mesh.axis_names) & set(MESH_AXES):
        return fn(qh, kh, vh, seg)
    rules = _ACTIVE_RULES.get()
    names = ("batch", "kv_heads", None, None, None)
    q_spec = rules.activation_spec(names, qh.shape, mesh)
    kv_spec = rules.activation_spec(names[:2] + names[3:], kh.shape, mesh)
    seg_spec = rules.activation_spec(("batch", None), seg.shape, mesh)
    smap = jax.shard_map(fn, mesh=mesh, in_specs=(q_spec, kv_spec, kv_spec, seg_spec), out_specs=q_spec)
    return smap(qh, kh, vh, seg)
