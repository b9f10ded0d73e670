"""Fixtures shared by the test modules: a real sandbox pool and the embedded SmolLM2 tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def pool(request):
    """A gVisor (else the best available) host pool, one per module; a module may set POOL_WORKERS and
    POOL_CALL_TIMEOUT_S."""
    from spade_jax.sandbox.host_pool import HostPool
    from spade_jax.sandbox.launchers import SandboxConfig

    workers = getattr(request.module, "POOL_WORKERS", 4)
    timeout = getattr(request.module, "POOL_CALL_TIMEOUT_S", 3.0)
    p = HostPool(num_workers=workers, sandbox=SandboxConfig(level="auto", call_timeout_s=timeout))
    yield p
    p.close()


@pytest.fixture(scope="module")
def tokenizer():
    from spade_jax.model.embedded import embedded_gguf_path
    from spade_jax.model.tokenizer import Tokenizer

    return Tokenizer.from_gguf(embedded_gguf_path())
