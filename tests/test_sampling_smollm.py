"""Sampler on the real SmolLM2-135M-Instruct (float32) against `transformers` and against our own full forward.

transformers loads the same embedded GGUF (it dequantises it itself), so both sides run the same weights.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers needs it to read GGUF files

from spade_jax.model.embedded import embedded_gguf_path  # noqa: E402
from spade_jax.model.loading import load_model  # noqa: E402
from spade_jax.sampling import Sampler, SamplingParams  # noqa: E402

pytestmark = pytest.mark.slow

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain recursion to a child in two sentences.",
    "List three prime numbers greater than 100.",
    "Translate 'good morning' into Spanish and German.",
    "What is 17 * 23? Show your work.",
    "Give me a Python function that reverses a string.",
    "Describe the water cycle briefly, mentioning evaporation, condensation and precipitation, and explain why "
    "it matters for farmers who depend on rain.",
]
NEW = 64


@pytest.fixture(scope="module")
def models():
    path = embedded_gguf_path()
    try:
        hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    except (ImportError, ValueError) as e:  # e.g. a transformers without GGUF support
        pytest.skip(f"transformers cannot load the GGUF: {e}")
    cfg, model, tok = load_model("smollm2-135m", param_dtype="float32", dtype="float32")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # torch's spinning thread pool is very slow on a busy 2-core machine
    yield hf.eval(), model, tok, Sampler(model, tok, max_total_len=512)
    torch.set_num_threads(threads)


def hf_generate(hf, rows: list[list[int]]):
    """Greedy transformers generate over left-padded rows -> (new token lists, raw log-softmax per step)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[2] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    with torch.inference_mode():
        g = hf.generate(
            ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=NEW,
            pad_token_id=2,
            eos_token_id=2,
            output_logits=True,
            return_dict_in_generate=True,
        )
    logp = torch.log_softmax(torch.stack(g.logits, 1).float(), -1).numpy()  # [B, steps, V]
    outs = []
    for seq in g.sequences[:, width:].tolist():
        outs.append(seq[: seq.index(2) + 1] if 2 in seq else seq)
    return outs, logp


def our_full_logprobs(model, rows: list[list[int]]) -> list[np.ndarray]:
    """log-softmax of one batched (right-padded) forward of our model over each full sequence."""
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int32)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    logits, _ = model(ids)
    logits = np.asarray(logits, np.float64)
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return [logp[i, : len(r)] for i, r in enumerate(rows)]


def test_greedy_matches_transformers_token_for_token(models):
    hf, model, tok, sampler = models
    convs = [[{"role": "user", "content": q}] for q in QUESTIONS]
    ours = sampler.chat(convs, SamplingParams(max_new_tokens=NEW, greedy=True))
    rows = [c.prompt_ids for c in ours]
    assert len({len(r) for r in rows}) >= 4, "prompts should have mixed lengths"
    assert rows[0] == tok.encode(tok.apply_chat_template(convs[0]), add_special_tokens=False)
    ref, ref_logp = hf_generate(hf, rows)
    for i, c in enumerate(ours):
        want = ref[i]
        if c.token_ids != want:  # transformers' own batch padding can flip a near-tie: compare with the row alone
            alone, alone_logp = hf_generate(hf, [rows[i]])
            want, ref_logp[i] = alone[0], alone_logp[0]
        assert c.token_ids == want, f"row {i}: {tok.decode(c.token_ids)!r} vs {tok.decode(want)!r}"
        assert c.finish_reason == ("eos" if want[-1] == 2 else "length")
        # our raw log-probs match transformers' scores (log-softmax of its logits) on the greedy tokens
        steps = np.arange(len(want))
        np.testing.assert_allclose(c.raw_logprobs, ref_logp[i][steps, want], atol=2e-4)
    # and they equal a separate full forward pass of our model over prompt + completion
    full = our_full_logprobs(model, [c.prompt_ids + c.token_ids for c in ours])
    for c, lp in zip(ours, full):
        n = len(c.prompt_ids)
        want = lp[n - 1 : n - 1 + len(c.token_ids)][np.arange(len(c.token_ids)), c.token_ids]
        np.testing.assert_allclose(c.raw_logprobs, want, atol=1e-4)


def test_sampled_logprobs_equal_a_full_forward(models):
    _, model, tok, sampler = models
    temperature, top_p = 0.6, 0.9
    convs = [[{"role": "user", "content": q}] for q in QUESTIONS[:4]]
    params = SamplingParams(max_new_tokens=32, temperature=temperature, top_p=top_p, seed=11)
    ours = sampler.chat(convs, params)
    full = our_full_logprobs(model, [c.prompt_ids + c.token_ids for c in ours])
    for c, lp in zip(ours, full):
        n, m = len(c.prompt_ids), len(c.token_ids)
        raw = lp[n - 1 : n - 1 + m]
        steps = np.arange(m)
        np.testing.assert_allclose(c.raw_logprobs, raw[steps, c.token_ids], atol=1e-4)
        # the sampling distribution: temperature then nucleus, renormalised (sort-based reference)
        z = raw / temperature
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        for j, t in enumerate(c.token_ids):
            order = np.argsort(-p[j], kind="stable")
            before = np.cumsum(p[j][order]) - p[j][order]
            kept = order[before < top_p]
            assert t in kept
            np.testing.assert_allclose(c.logprobs[j], np.log(p[j][t] / p[j][kept].sum()), atol=1e-4)


def test_stop_string_on_real_text(models):
    _, _, tok, sampler = models
    conv = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]
    (free,) = sampler.chat([conv], SamplingParams(max_new_tokens=60, greedy=True))
    assert "5" in free.text
    (c,) = sampler.chat([conv], SamplingParams(max_new_tokens=60, greedy=True, stop_strings=("5",)))
    assert c.finish_reason == "stop_string" and c.text.endswith("5") and free.text.startswith(c.text)
    assert c.token_ids == free.token_ids[: len(c.token_ids)]
