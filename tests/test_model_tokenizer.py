"""Tokenizer and chat template of the embedded SmolLM2 GGUF vs `transformers` building its own from the same file.

One known, deliberate difference: llama.cpp's "smollm" pre-tokenizer (the one the GGUF names, and the
Digits + ByteLevel chain of SmolLM2's original tokenizer.json) first cuts every digit out on its own, then
applies GPT-2's split. transformers' GGUF path uses GPT-2's split alone, which only differs when a run of
whitespace precedes a digit ("a  1": ours "a","ĠĠ","1"; theirs "a","Ġ","Ġ1"->"Ġ","1"). So texts without that
pattern are compared with transformers as is, and all texts with transformers' tokenizer after giving it
llama.cpp's documented split (regex \\p{N} isolated, then GPT-2's ByteLevel).
"""

from __future__ import annotations

import re

import pytest

transformers = pytest.importorskip("transformers")

from tokenizers import Regex, pre_tokenizers  # noqa: E402
from tokenizers import Tokenizer as BackendTokenizer  # noqa: E402

from spade_jax.model.chat_template import render_chat_template  # noqa: E402
from spade_jax.model.embedded import embedded_gguf_path  # noqa: E402
from spade_jax.model.tokenizer import Tokenizer  # noqa: E402

SAMPLE = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "naïve café, Ångström, façade — “quotes” and ‘single’ … ellipsis",
    "日本語のテキスト、中文文本，한국어 텍스트, Русский текст, العربية",
    "emoji 😀🚀👍🏽 family 👨‍👩‍👧 flags 🇺🇸🇫🇷 ❤️",
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "if (x != y && z >= 0) { return arr[i] ** 2; } // comment\n\t\tindented();",
    "   leading spaces, trailing spaces   ",
    "tabs\tand\ttabs\t\t\tmore\n\n\nnewlines\r\nwindows\r\n",
    "mixed \u00a0nbsp\u2003em-space\u200bzero-width",
    "numbers 12345 and 3.14159 and 1,000,000 and -42 and 0x1F and 2024-01-01",
    "x=123456789;y=0.5e-10",
    "a  123 b\t\t456\n\n789",  # whitespace runs before digits: the known difference
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "I'm sure they'll say it's fine, don't you think? We've seen it.",
    '\\boxed{42} and <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>',
    "",
    " ",
    "\n",
]
_WS_BEFORE_DIGIT = re.compile(r"\s{2,}\d")

CHATS = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Say hello."}],
    [
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another one, bigger than 100?"},
        {"role": "assistant", "content": "101"},
        {"role": "user", "content": "Thanks! 😀"},
    ],
    [
        {"role": "system", "content": "Answer in \\boxed{}."},
        {"role": "user", "content": "  spaced\n\ncontent  "},
        {"role": "assistant", "content": "\\boxed{ok}"},
    ],
]


@pytest.fixture(scope="module")
def ours() -> Tokenizer:
    return Tokenizer.from_gguf(embedded_gguf_path())


@pytest.fixture(scope="module")
def ref():
    p = embedded_gguf_path()
    return transformers.AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)


@pytest.fixture(scope="module")
def ref_llama_cpp_split(ref):
    """transformers' tokenizer (its vocab, merges, added tokens, decoder) with llama.cpp's smollm split."""
    tok = BackendTokenizer.from_str(ref.backend_tokenizer.to_str())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    return tok


def test_ids_match_transformers(ours, ref):
    compared = 0
    for text in SAMPLE:
        if _WS_BEFORE_DIGIT.search(text):
            continue
        assert ours.encode(text) == ref(text)["input_ids"], repr(text)
        compared += 1
    assert compared >= len(SAMPLE) - 2


def test_ids_match_transformers_with_llama_cpp_split(ours, ref_llama_cpp_split):
    for text in SAMPLE:
        assert ours.encode(text) == ref_llama_cpp_split.encode(text).ids, repr(text)


def test_digits_are_split_after_whitespace_runs(ours):
    """Hand-derived from llama.cpp's smollm regexes: '\\p{N}' first, then GPT-2's split."""
    ids = ours.encode("a  123")
    assert [ours.id_to_token(i) for i in ids] == ["a", "ĠĠ", "1", "2", "3"]


def test_decode_round_trip(ours, ref):
    for text in SAMPLE:
        ids = ours.encode(text)
        assert ours.decode(ids) == text, repr(text)
        assert ref.decode(ids) == text, repr(text)


def test_special_tokens(ours, ref):
    assert ours.bos_token == ref.bos_token and ours.eos_token == ref.eos_token
    assert ours.pad_token == ref.pad_token and ours.unk_token == ref.unk_token
    assert ours.encode("<|im_start|><|im_end|>") == [1, 2]
    assert ours.eos_id == 2 and 2 in ours.eos_ids
    assert set(ours.special_tokens) == {ref.convert_ids_to_tokens(i) for i in range(17)}
    assert ours.vocab_size == len(ref) == 49152
    assert ours.decode(ours.encode("<|im_start|>hi<|im_end|>"), skip_special_tokens=True) == "hi"


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_strings_match(ours, ref, add_generation_prompt):
    for chat in CHATS:
        mine = ours.apply_chat_template(chat, add_generation_prompt=add_generation_prompt)
        theirs = ref.apply_chat_template(chat, tokenize=False, add_generation_prompt=add_generation_prompt)
        assert mine == theirs
        ids = ref.apply_chat_template(chat, tokenize=True, add_generation_prompt=add_generation_prompt)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        assert ours.encode_chat(chat, add_generation_prompt=add_generation_prompt) == list(ids)
    assert "You are a helpful AI assistant named SmolLM" in ours.apply_chat_template(CHATS[0])
    assert ours.apply_chat_template(CHATS[0]).endswith("<|im_start|>assistant\n")


# Exercises the Jinja environment itself: trim/lstrip blocks, tojson (no HTML escaping, unicode kept),
# namespace, loop controls, tools, special-token variables, raise_exception.
_TOOL_TEMPLATE = """{{ bos_token }}
{% set ns = namespace(n=0) %}
{% if tools %}
    Tools: {{ tools | tojson }}
    {% for t in tools %}{% if loop.index > 1 %}{% break %}{% endif %}first={{ t.function.name }}{% endfor %}
{% endif %}
{% for m in messages %}
    {% if m.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('bad role ' + m.role) }}{% endif %}
    {% set ns.n = ns.n + 1 %}
<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>
{% endfor %}
{% if add_generation_prompt %}<assistant>{% endif %}
count={{ ns.n }}{{ eos_token }}"""
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "move",
            "description": "Move <up> & down — “fast”",
            "parameters": {"type": "object", "properties": {"dir": {"type": "string", "enum": ["up", "down"]}}},
        },
    },
    {"type": "function", "function": {"name": "look", "description": "Look 👀", "parameters": {"type": "object"}}},
]


def test_jinja_environment_matches_transformers(ours, ref):
    for chat in CHATS:
        for gen in (True, False):
            theirs = ref.apply_chat_template(
                chat, tools=_TOOLS, chat_template=_TOOL_TEMPLATE, tokenize=False, add_generation_prompt=gen
            )
            mine = render_chat_template(
                _TOOL_TEMPLATE,
                chat,
                tools=_TOOLS,
                add_generation_prompt=gen,
                bos_token=ours.bos_token,
                eos_token=ours.eos_token,
            )
            assert mine == theirs
    assert '"Move <up> & down — “fast”"' in mine
    with pytest.raises(Exception, match="bad role tool"):
        render_chat_template(_TOOL_TEMPLATE, [{"role": "tool", "content": "x"}])


def test_saved_hf_files_load_in_transformers(tmp_path, ours):
    ours.save_hf_files(tmp_path)
    loaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for text in SAMPLE:  # includes the whitespace-before-digit texts: the saved tokenizer.json carries our split
        assert loaded(text)["input_ids"] == ours.encode(text), repr(text)
        assert loaded.decode(ours.encode(text)) == text
    assert loaded.eos_token == ours.eos_token and loaded.bos_token == ours.bos_token
    for chat in CHATS:
        assert loaded.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == (
            ours.apply_chat_template(chat)
        )
    again = Tokenizer.from_hf_dir(tmp_path)
    assert again.encode(SAMPLE[12]) == ours.encode(SAMPLE[12])
    assert again.chat_template == ours.chat_template and again.eos_ids[0] == ours.eos_id


def test_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        Tokenizer.from_hf_dir(tmp_path)
    with pytest.raises(ValueError, match="does not parse"):
        render_chat_template("{% for m in messages %}", [])
    with pytest.raises(ValueError, match="pre-tokenizer 'nonsense'"):
        Tokenizer.from_gguf_metadata(
            {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "nonsense", "tokenizer.ggml.tokens": ["a"]}
        )
    with pytest.raises(ValueError, match="tokenizer model 'bert'"):
        Tokenizer.from_gguf_metadata({"tokenizer.ggml.model": "bert"})
