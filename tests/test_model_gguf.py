"""The real embedded SmolLM2-135M-Instruct GGUF: our import vs `transformers` reading the same file itself.

transformers dequantises the GGUF with the `gguf` package and undoes llama.cpp's q/k permutation with its own
code, so it is an independent reference for our tensor mapping, un-permutation and forward pass.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from spade_jax.cli import main as cli_main  # noqa: E402
from spade_jax.model.config import ModelConfig  # noqa: E402
from spade_jax.model.embedded import embedded_gguf_path  # noqa: E402
from spade_jax.model.gguf_io import _unpermute_rows, load_gguf  # noqa: E402
from spade_jax.model.hf_io import params_from_hf_state_dict  # noqa: E402
from spade_jax.model.loading import load_model, resolve  # noqa: E402

pytestmark = pytest.mark.slow

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a careful Python tutor."},
        {"role": "user", "content": "Write a function that returns the n-th Fibonacci number, iteratively."},
    ],
    [
        {
            "role": "user",
            "content": "Solve: a train leaves at 3:15 pm and travels 120 km at 80 km/h. When does it arrive?",
        },
        {"role": "assistant", "content": "It travels for 1.5 hours, so it arrives at 4:45 pm."},
        {"role": "user", "content": "And if it left 20 minutes later? Answer in \\boxed{}."},
    ],
    [{"role": "user", "content": "Translate to German: 'The weather is nice today 🌞, let's go hiking!'"}],
]


@pytest.fixture(scope="module")
def gguf_path():
    return embedded_gguf_path()


@pytest.fixture(scope="module")
def ckpt(gguf_path):
    return load_gguf(gguf_path)


@pytest.fixture(scope="module")
def ours(ckpt):
    """(Our loading path end to end is exercised by the convert test, which goes through load_model.)"""
    cfg = ModelConfig.from_hf(ckpt.hf_config, param_dtype="float32", dtype="float32")
    return cfg, params_from_hf_state_dict(cfg, ckpt.state_dict), ckpt.tokenizer


@pytest.fixture(scope="module")
def reference(gguf_path):
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
    )
    return ref.eval()


@pytest.fixture(scope="module")
def batch(ours):
    """All chats tokenised and right-padded into one [B, T] batch (causal attention: padding never reaches the
    real positions), so each model runs once and compiles once."""
    _, _, tok = ours
    seqs = [tok.encode_chat(chat) for chat in CHATS]
    tokens = np.full((len(seqs), max(map(len, seqs))), tok.eos_id, np.int32)
    for i, ids in enumerate(seqs):
        tokens[i, : len(ids)] = ids
    return tokens, [len(ids) for ids in seqs]


def _torch_logits(model, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(tokens.astype(np.int64))).logits.float().numpy()


@pytest.fixture(scope="module")
def ref_logits(reference, batch):
    return _torch_logits(reference, batch[0])


@pytest.fixture(scope="module")
def our_logits(ours, batch):
    logits, _ = ours[1](batch[0])
    return np.asarray(logits)


def test_config_from_metadata(ours, reference):
    cfg, _, _ = ours
    rc = reference.config
    assert cfg.arch == "llama" and cfg.num_layers == rc.num_hidden_layers == 30
    assert (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads) == (rc.hidden_size, rc.num_attention_heads, 3)
    assert cfg.vocab_size == rc.vocab_size == 49152 and cfg.tie_embeddings
    assert cfg.intermediate_size == rc.intermediate_size
    assert cfg.rope_theta == pytest.approx(rc.rope_parameters["rope_theta"])
    assert cfg.rms_norm_eps == pytest.approx(rc.rms_norm_eps, rel=1e-6)


def test_logits_match_transformers_on_real_chat_prompts(our_logits, ref_logits, batch):
    tokens, lengths = batch
    assert our_logits.shape == ref_logits.shape == (*tokens.shape, 49152)
    worst = 0.0
    for i, n in enumerate(lengths):
        assert n > 20
        a, b = our_logits[i, :n], ref_logits[i, :n]
        diff = float(np.abs(a - b).max())
        worst = max(worst, diff)
        assert diff <= 1e-3, f"max abs logit diff {diff:.2e} on {CHATS[i][-1]['content'][:40]!r}"
        mismatch = np.flatnonzero(a.argmax(-1) != b.argmax(-1))
        assert mismatch.size == 0, f"argmax differs at positions {mismatch.tolist()} of chat {i}"
    print(f"\nSmolLM2 GGUF vs transformers: max abs logit diff {worst:.2e}, {sum(lengths)} positions, same argmax")


def test_unpermute_inverts_llama_cpp_permute():
    """llama.cpp's converter: w.reshape(n_head, 2, rows // n_head // 2, *rest).swapaxes(1, 2)."""
    rng = np.random.default_rng(0)
    for n_head, rows, cols in ((9, 576, 8), (3, 192, 5), (2, 8, 1)):
        w = rng.standard_normal((rows, cols)).astype(np.float32)
        permuted = w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)
        assert not np.array_equal(permuted, w)
        np.testing.assert_array_equal(_unpermute_rows(permuted, n_head), w)


def test_state_dict_matches_transformers_tensors(ckpt, reference):
    """Every tensor we read equals the one transformers loaded (names, layout, dequantised values)."""
    ref_sd = reference.state_dict()
    assert set(ckpt.state_dict) == {k for k in ref_sd if k != "lm_head.weight"}
    for name in (
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.7.self_attn.k_proj.weight",
        "model.layers.29.mlp.down_proj.weight",
        "model.embed_tokens.weight",
        "model.norm.weight",
    ):
        np.testing.assert_array_equal(ckpt.state_dict[name], ref_sd[name].numpy(), err_msg=name)


def test_convert_cli_output_loads_in_transformers(tmp_path, ours, batch, our_logits, ref_logits):
    out = tmp_path / "smollm2-hf"
    assert cli_main(["convert", "--from", "smollm2-135m", "--to", str(out)]) == 0  # preset -> gguf:embedded
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (out / f).is_file(), f
    converted = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    conv = _torch_logits(converted, batch[0])
    for i, n in enumerate(batch[1]):
        assert np.abs(conv[i, :n] - ref_logits[i, :n]).max() <= 1e-4
        assert np.abs(conv[i, :n] - our_logits[i, :n]).max() <= 1e-3
    _, _, tok = ours
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(out))
    for chat in CHATS:
        text = tok.apply_chat_template(chat)
        assert hf_tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == text
        assert hf_tok(text, add_special_tokens=False)["input_ids"] == tok.encode_chat(chat)
    cfg2, model2, tok2 = load_model(str(out))  # and back in through our HF-directory path
    assert cfg2.num_layers == 30 and tok2.apply_chat_template(CHATS[2]) == tok.apply_chat_template(CHATS[2])
    assert tok2.encode_chat(CHATS[3]) == tok.encode_chat(CHATS[3]) and tok2.eos_id == tok.eos_id
    assert np.abs(np.asarray(model2(batch[0])[0]) - our_logits).max() <= 1e-5


def test_specs_resolve_and_bad_specs_give_clear_errors(tmp_path, capsys):
    assert resolve("gguf:embedded").path == embedded_gguf_path() and resolve("gguf:embedded").kind == "gguf"
    assert resolve(str(embedded_gguf_path())).kind == "gguf"
    assert resolve("smollm2-135m").path == embedded_gguf_path()
    with pytest.raises(ValueError, match="unknown model preset 'no-such-model'"):
        resolve("no-such-model")
    with pytest.raises(FileNotFoundError, match="not found locally"):
        resolve("qwen3-0.6b")  # a preset whose HF weights are not on this machine
    assert cli_main(["convert", "--from", "no-such-model", "--to", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spade-jax convert: error: unknown model preset") and "\n" not in err
    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        resolve(str(tmp_path / "missing.gguf"))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        resolve(str(tmp_path))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"definitely not a gguf file")
    with pytest.raises(ValueError, match="not a readable GGUF"):
        load_model(str(junk))
    (tmp_path / "x.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match="must be a .gguf"):
        resolve(str(tmp_path / "x.bin"))
    with pytest.raises(ValueError, match="empty model spec"):
        resolve("  ")


def test_tiny_preset_is_random_with_byte_tokenizer():
    cfg, model, tok = load_model("tiny")
    assert cfg.num_layers == 2 and tok.vocab_size <= cfg.vocab_size
    text = tok.apply_chat_template([{"role": "user", "content": "héllo 😀"}])
    ids = tok.encode(text)
    assert tok.decode(ids) == text and ids[0] == cfg.bos_token_id and cfg.eos_token_ids[0] in tok.eos_ids
    logits, _ = model(np.asarray([ids], np.int32))
    assert logits.shape == (1, len(ids), cfg.vocab_size) and np.isfinite(np.asarray(logits)).all()
