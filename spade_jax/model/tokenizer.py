"""Tokenizer: a `tokenizers.Tokenizer` plus special tokens and the model's own Jinja chat template.

Built from GGUF metadata (vocabulary, merges, token types, llama.cpp's pre-tokenizer name) or from a HF
directory (`tokenizer.json` + `tokenizer_config.json`). Chat templates render in the same Jinja environment
`transformers` uses, so prompt strings are identical; `save_hf_files` writes files `AutoTokenizer` loads.

Text that did not come from us (observations, hints, tool results, environment sources, documents) is text:
`encode_text` never turns it into a special token (`<|im_start|>` written by an environment stays the characters
`<`, `|`, ...), and `encode_chat` encodes a chat prompt whose only special tokens are the ones its template
writes: every message content, and every string value of the tool schemas, is encoded as text.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as Backend

# llama.cpp token types (tokenizer.ggml.token_type).
_CONTROL, _USER_DEFINED = 3, 4

# Pre-tokenizer split patterns, by llama.cpp's `tokenizer.ggml.pre` name (facts from the original tokenizer.json).
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT2_PRE = ("default", "gpt2", "gpt-2", "mpt", "olmo", "jais")
_DIGITS_THEN_GPT2_PRE = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")
_QWEN2_PRE = ("qwen2", "deepseek-r1-qwen")
_LLAMA3_PRE = ("llama-bpe", "llama3", "llama-v3", "smaug-bpe", "falcon3", "dbrx")
_CHATML_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Stand-ins for untrusted strings while the template renders (private-use characters no template writes).
_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"
_MARK_RE = re.compile(_MARK_OPEN + r"(\d+)" + _MARK_CLOSE)
# Tokens that end a turn in the chat formats we support; they stop generation when the vocabulary marks them special.
_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>")


def _pre_tokenizer(pre: str) -> tuple[Any, Any, bool]:
    """(normalizer, pre_tokenizer, ignore_merges) for llama.cpp's pre-tokenizer name `pre`."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _GPT2_PRE:
        return None, byte_level, False
    if pre in _DIGITS_THEN_GPT2_PRE:  # each digit on its own, then GPT-2's split
        return None, pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level]), False
    no_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in _QWEN2_PRE:
        split = pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated")
        return normalizers.NFC(), pre_tokenizers.Sequence([split, no_regex]), False
    if pre in _LLAMA3_PRE:
        split = pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated")
        return None, pre_tokenizers.Sequence([split, no_regex]), True
    raise ValueError(f"GGUF pre-tokenizer {pre!r} is not supported")


def _special_content(value: Any) -> str | None:
    """A special token as written in tokenizer_config.json: a string or {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value


class Tokenizer:
    """Text <-> token ids with the model's special tokens and chat template."""

    def __init__(
        self,
        backend: Backend,
        *,
        chat_template: str | None = None,
        bos_token: str | None = None,
        eos_token: str | None = None,
        pad_token: str | None = None,
        unk_token: str | None = None,
        add_bos_token: bool = False,
        add_eos_token: bool = False,
        eos_ids: Sequence[int] = (),
        model_max_length: int | None = None,
    ):
        self.backend = backend
        self.chat_template = chat_template
        self.bos_token, self.eos_token, self.pad_token, self.unk_token = bos_token, eos_token, pad_token, unk_token
        self.add_bos_token, self.add_eos_token = add_bos_token, add_eos_token
        self.model_max_length = model_max_length
        specials = set(self.special_tokens)
        ends = [t for t in (eos_token, *_END_TOKENS) if t is not None and (t == eos_token or t in specials)]
        end_ids = [i for i in map(self.token_to_id, ends) if i is not None]
        self.eos_ids: tuple[int, ...] = tuple(dict.fromkeys([*eos_ids, *end_ids]))  # ids that end a generation

    # ---- construction -------------------------------------------------------------------------------------

    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any]) -> Tokenizer:
        """Rebuilds the tokenizer a GGUF describes (byte-level BPE: gpt2 tokenizer model) from its metadata."""
        kind = meta.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(f"GGUF tokenizer model {kind!r} is not supported (only byte-level BPE, 'gpt2')")
        tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
        types: list[int] = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))
        alphabet = set(_BYTE_SPELLING.values())
        vocab: dict[str, int] = {}
        for i, (tok, kind_) in enumerate(zip(tokens, types)):
            if kind_ not in (_CONTROL, _USER_DEFINED) and not set(tok) <= alphabet:
                tok = "".join(_BYTE_SPELLING[b] for b in tok.encode("utf-8"))  # a normal token stored as raw text
            vocab.setdefault(tok, i)
        merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
        normalizer, pre, ignore_merges = _pre_tokenizer(meta.get("tokenizer.ggml.pre") or "default")
        backend = Backend(
            models.BPE(
                vocab=vocab,
                merges=merges,
                dropout=None,
                continuing_subword_prefix="",
                end_of_word_suffix="",
                fuse_unk=False,
                byte_fallback=False,
                ignore_merges=ignore_merges,
            )
        )
        if normalizer is not None:
            backend.normalizer = normalizer
        backend.pre_tokenizer = pre
        backend.decoder = decoders.ByteLevel()
        control = [
            AddedToken(t, special=True, normalized=False)
            for t, k in zip(tokens, types)
            if k == _CONTROL and set(t) <= alphabet
        ]
        backend.add_special_tokens(control)
        user = [AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types) if k == _USER_DEFINED]
        backend.add_tokens(user)

        def named(key: str) -> str | None:
            i = meta.get(f"tokenizer.ggml.{key}")
            return tokens[i] if i is not None and 0 <= i < len(tokens) else None

        add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
        add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False))
        bos, eos = named("bos_token_id"), named("eos_token_id")
        _set_post_processor(backend, bos if add_bos else None, eos if add_eos else None)
        extra_eos = [meta[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id") if k in meta]
        arch = meta.get("general.architecture")
        return cls(
            backend,
            chat_template=meta.get("tokenizer.chat_template"),
            bos_token=bos,
            eos_token=eos,
            pad_token=named("padding_token_id"),
            unk_token=named("unknown_token_id"),
            add_bos_token=add_bos,
            add_eos_token=add_eos,
            eos_ids=[int(i) for i in extra_eos],
            model_max_length=meta.get(f"{arch}.context_length") if arch else None,
        )

    @classmethod
    def byte_level(cls) -> Tokenizer:
        """A byte tokenizer (ids 0-2: <|endoftext|>, <|im_start|>, <|im_end|>; then the 256 bytes) with a ChatML
        template: any text round-trips, for randomly initialised test models."""
        vocab = {t: i for i, t in enumerate(_CHATML_SPECIALS)}
        vocab.update({_BYTE_SPELLING[b]: len(_CHATML_SPECIALS) + b for b in range(256)})
        backend = Backend(models.BPE(vocab=vocab, merges=[], fuse_unk=False, byte_fallback=False))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        backend.decoder = decoders.ByteLevel()
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in _CHATML_SPECIALS])
        return cls(
            backend,
            chat_template=_CHATML_TEMPLATE,
            bos_token="<|im_start|>",
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            unk_token="<|endoftext|>",
        )

    @classmethod
    def from_gguf(cls, path: str | Path) -> Tokenizer:
        """The tokenizer of a GGUF file (reads metadata only)."""
        from spade_jax.model.gguf_file import open_gguf, read_metadata

        return cls.from_gguf_metadata(read_metadata(open_gguf(path)))

    @classmethod
    def from_hf_dir(cls, path: str | Path) -> Tokenizer:
        """The tokenizer of a HF model directory (tokenizer.json, tokenizer_config.json, chat_template.jinja)."""
        path = Path(path)
        if not (path / "tokenizer.json").is_file():
            raise FileNotFoundError(f"no tokenizer.json in {path}")
        backend = Backend.from_file(str(path / "tokenizer.json"))
        conf = _read_json(path / "tokenizer_config.json")
        template = conf.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if (path / "chat_template.jinja").is_file():
            template = (path / "chat_template.jinja").read_text(encoding="utf-8")
        eos_ids: list[int] = []
        for source in (_read_json(path / "generation_config.json"), _read_json(path / "config.json")):
            eos = source.get("eos_token_id")
            eos_ids += eos if isinstance(eos, list) else ([] if eos is None else [eos])
        max_len = conf.get("model_max_length")
        return cls(
            backend,
            chat_template=template,
            bos_token=_special_content(conf.get("bos_token")),
            eos_token=_special_content(conf.get("eos_token")),
            pad_token=_special_content(conf.get("pad_token")),
            unk_token=_special_content(conf.get("unk_token")),
            add_bos_token=bool(conf.get("add_bos_token", False)),
            add_eos_token=bool(conf.get("add_eos_token", False)),
            eos_ids=[int(i) for i in eos_ids],
            model_max_length=int(max_len) if isinstance(max_len, int | float) and max_len < 1e12 else None,
        )

    # ---- use ----------------------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    @property
    def bos_id(self) -> int | None:
        return None if self.bos_token is None else self.token_to_id(self.bos_token)

    @property
    def eos_id(self) -> int | None:
        return None if self.eos_token is None else self.token_to_id(self.eos_token)

    @property
    def pad_id(self) -> int | None:
        """The padding id (falls back to the eos id when the model names none)."""
        pad = None if self.pad_token is None else self.token_to_id(self.pad_token)
        return pad if pad is not None else self.eos_id

    @cached_property
    def special_tokens(self) -> list[str]:
        """Contents of the added tokens marked special (control tokens)."""
        return [t.content for _, t in sorted(self.backend.get_added_tokens_decoder().items()) if t.special]

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; `add_special_tokens` adds BOS/EOS where the model asks for them."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    @cached_property
    def _text_backend(self) -> Backend:
        """A copy of the backend that matches no added token in its input: neither the special ones (control
        tokens; `encode_special_tokens`, transformers' `split_special_tokens=True`) nor the others, which include
        markers such as Qwen3's `<tool_call>` and `<think>`. A copy, so nothing races an encode on the shared one."""
        data = json.loads(self.backend.to_str())
        data["added_tokens"] = []
        copy = Backend.from_str(json.dumps(data))
        copy.encode_special_tokens = True
        return copy

    def encode_text(self, text: str) -> list[int]:
        """Token ids of `text` as plain text: the spelling of a special token or of an added marker in it is encoded
        as its characters, never as the token (for anything an environment, a document or a user wrote)."""
        with _TEXT_LOCK:
            backend = self._text_backend
        return backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool = True) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)]

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        """The prompt string the model's chat template renders for `messages` (as transformers renders it)."""
        if not self.chat_template:
            raise ValueError("this tokenizer has no chat template")
        from spade_jax.model.chat_template import render_chat_template

        return render_chat_template(
            self.chat_template,
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            **{**self._specials(), **kwargs},
        )

    def supports_tools(self) -> bool:
        """True when the chat template renders tool schemas (`tools=`) and `role: "tool"` results (probed once
        per template, see `chat_template.renders_tools`); False without a template."""
        if not self.chat_template:
            return False
        from spade_jax.model.chat_template import renders_tools

        return renders_tools(self.chat_template, tuple(sorted(self._specials().items())))

    def _specials(self) -> dict[str, str]:
        specials = {"bos_token": self.bos_token, "eos_token": self.eos_token}
        specials.update(unk_token=self.unk_token, pad_token=self.pad_token)
        return {k: v for k, v in specials.items() if v is not None}

    def encode_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> list[int]:
        """Token ids of the chat prompt in which every message content (but the assistant's own replies) and
        every string value of `tools` is text (`encode_text`): the template's own pieces and the model's replies
        are the only source of special tokens.

        The template renders with each such string replaced by a marker; the pieces between markers are encoded
        as template text and each string in its place as plain text (JSON-escaped where the template put it in a
        JSON string, as its `tojson` would). Special-token spellings in tool schema keys (which the template may
        read, so they cannot be replaced) are broken with a word joiner."""
        strings: list[str] = []

        def mark(text: str) -> str:
            strings.append(text)
            return f"{_MARK_OPEN}{len(strings) - 1}{_MARK_CLOSE}"

        # an assistant message is the model's own output, rendered as the template renders it (Qwen3's splits
        # off its reasoning at `</think>`, which a marker would hide); every other content came from outside
        marked = [{**m, "content": mark(m["content"])} if _untrusted(m) else dict(m) for m in messages]
        marked_tools = None if tools is None else [_mark_values(t, mark, self.special_tokens) for t in tools]
        rendered = self.apply_chat_template(marked, marked_tools, add_generation_prompt, **kwargs)
        leftover = _MARK_RE.sub("", rendered)
        if _MARK_OPEN in leftover or _MARK_CLOSE in leftover or "\\ue00" in leftover.lower():
            # the template transformed a marker (escaped or cut it; one it does not render at all is fine): fall
            # back to breaking every special-token spelling inside the untrusted strings, text all the same
            safe = [{**m, "content": _break_specials(m["content"], self.special_tokens)}
                    if _untrusted(m) else dict(m) for m in messages]  # fmt: skip
            safe_tools = None if tools is None else [_mark_values(t, lambda x: _break_specials(x, self.special_tokens),
                                                                  self.special_tokens) for t in tools]  # fmt: skip
            return self.encode(self.apply_chat_template(safe, safe_tools, add_generation_prompt, **kwargs),
                               add_special_tokens=False)  # fmt: skip
        spans: list[tuple[str, bool]] = []
        pos = 0
        for m in _MARK_RE.finditer(rendered):
            text = strings[int(m.group(1))]
            if rendered[m.start() - 1 : m.start()] == '"' and rendered[m.end() : m.end() + 1] == '"':
                text = json.dumps(text, ensure_ascii=False)[1:-1]  # inside a JSON string the template wrote
            spans += [(rendered[pos : m.start()], True), (text, False)]
            pos = m.end()
        return self.encode_spans([*spans, (rendered[pos:], True)])

    def encode_spans(self, spans: Sequence[tuple[str, bool]]) -> list[int]:
        """Token ids of the concatenated spans, each `(text, trusted)`: trusted text (a template's) may hold
        special tokens, untrusted text is encoded as text (`encode_text`).

        Where the untrusted spans hold no special token, the whole text encoded at once has the same special
        tokens: those ids are returned, so a clean prompt tokenizes exactly as `transformers` does it (spans
        encoded apart can split differently where one starts with whitespace)."""
        ids: list[int] = []
        for text, trusted in spans:
            ids += self.encode(text, add_special_tokens=False) if trusted else self.encode_text(text)
        whole = self.encode("".join(text for text, _ in spans), add_special_tokens=False)
        special = self._special_ids
        return whole if [i for i in whole if i in special] == [i for i in ids if i in special] else ids

    @cached_property
    def _special_ids(self) -> frozenset[int]:
        """The ids of every added token (control tokens and markers): what text may never become."""
        return frozenset(self.backend.get_added_tokens_decoder())

    def hf_files(self) -> dict[str, str]:
        """Contents of tokenizer.json, tokenizer_config.json and special_tokens_map.json, by file name."""
        specials = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "unk_token": self.unk_token,
            "pad_token": self.pad_token,
        }
        specials = {k: v for k, v in specials.items() if v is not None}
        conf: dict[str, Any] = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **specials,
            "add_bos_token": self.add_bos_token,
            "add_eos_token": self.add_eos_token,
            "clean_up_tokenization_spaces": False,
        }
        if self.model_max_length:
            conf["model_max_length"] = int(self.model_max_length)
        if self.chat_template:
            conf["chat_template"] = self.chat_template
        extra = [t for t in self.special_tokens if t not in specials.values()]
        dump = lambda obj: json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
        return {
            "tokenizer.json": self.backend.to_str(),
            "tokenizer_config.json": dump(conf),
            "special_tokens_map.json": dump({**specials, "additional_special_tokens": extra}),
        }

    def save_hf_files(self, out_dir: str | Path) -> list[Path]:
        """Writes tokenizer.json, tokenizer_config.json and special_tokens_map.json that AutoTokenizer loads."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, content in self.hf_files().items():
            (out / name).write_text(content, encoding="utf-8")
            paths.append(out / name)
        return paths


_TEXT_LOCK = threading.Lock()  # builds the plain-text backend once


def _break_specials(text: str, specials: Sequence[str]) -> str:
    """`text` with every special-token spelling broken by a word joiner after its first character."""
    for token in specials:
        if token and token in text:
            text = text.replace(token, token[0] + "\u2060" + token[1:])
    return text


def _mark_values(value: Any, mark: Any, specials: Sequence[str]) -> Any:
    """A copy of a tool schema with every string value passed through `mark` and every key made safe."""
    if isinstance(value, str):
        return mark(value)
    if isinstance(value, Mapping):
        return {_break_specials(str(k), specials): _mark_values(v, mark, specials) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mark_values(v, mark, specials) for v in value]
    return value


def _set_post_processor(backend: Backend, bos: str | None, eos: str | None) -> None:
    """Adds BOS / EOS around encoded text when the model wants them (llama.cpp's add_bos/add_eos flags)."""
    if bos is None and eos is None:
        return
    pre, post = ([f"{bos}:0"] if bos else []), ([f"{eos}:0"] if eos else [])
    specials = [(t, backend.token_to_id(t)) for t in (bos, eos) if t is not None]
    backend.post_processor = processors.TemplateProcessing(
        single=[*pre, "$A:0", *post],
        pair=[*pre, "$A:0", *post, *pre, "$B:1", *post],
        special_tokens=list(dict.fromkeys(specials)),
    )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e


def _byte_spelling() -> dict[int, str]:
    """GPT-2's byte -> character table (printable bytes spell themselves, the rest shift above 255)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    table, shift = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shift)
            shift += 1
    return table


_BYTE_SPELLING = _byte_spelling()


def _untrusted(message: Mapping[str, Any]) -> bool:
    """Whether a chat message's content is text from outside the model (anything but an assistant reply)."""
    return isinstance(message.get("content"), str) and message.get("role") != "assistant"
