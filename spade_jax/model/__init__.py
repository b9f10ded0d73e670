"""The Flax NNX decoder (llama, qwen2, qwen3, qwen3-moe) and everything that moves it in and out.

`transformer.py` (forward and one-token decode over `kv_cache.py`), `config.py` / `presets.py` (architectures),
`sharding.py` (mesh and logical-axis rules, a leaf) and `placement.py` (putting a model on a mesh),
`loading.py` (`load_model`: preset, GGUF or HF directory), `hf_io.py` / `safetensors_io.py` / `gguf_*.py`
(formats), `checkpoint.py` (Orbax), `tokenizer.py` and `chat_template.py`. Imports nothing else of ours.
"""
