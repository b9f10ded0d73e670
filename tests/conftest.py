"""What the whole test run shares: one XLA compile cache, the order files run in, a real sandbox pool per
module and the embedded SmolLM2 tokenizer.

The suite runs on two worker processes (`make test`: pytest-xdist, whole files per worker, `--dist loadfile`)
and has to fit CI's budget, so:
- compiled programs are kept in one folder for the run (`SPADE_JAX_TEST_XLA_CACHE`, removed at the end): a
  program a test compiled is loaded, not compiled again, by a later test of either worker, and by the command-line
  runs the tests start (`spade-jax selfplay`/`warmstart` read it as `SPADE_JAX_COMPILE_CACHE`); a user's own
  cache (~/.cache/spade-jax/xla) is never read or written by the tests;
- files run longest first (`tests/durations.json`, seconds per file from a full run; a file missing from it runs
  first), so that the two workers finish together instead of one waiting on the last long file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DURATIONS = HERE / "durations.json"
CACHE_ENV = "SPADE_JAX_TEST_XLA_CACHE"


def _share_compile_cache() -> str | None:
    """Points this process's JAX, and every process it starts, at the run's compile cache; returns the folder
    when this process made it (the controller, or a run without workers), else None. Runs before jax is imported
    (conftest is imported first), so JAX reads it from its environment variables."""
    made = None
    if CACHE_ENV not in os.environ:  # xdist workers inherit the controller's
        made = tempfile.mkdtemp(prefix="spade-jax-test-xla-")
        os.environ[CACHE_ENV] = made
    folder = os.environ[CACHE_ENV]
    os.environ.setdefault("SPADE_JAX_COMPILE_CACHE", folder)
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", folder)
    # Programs that compile in under half a second are cheaper to compile again than to read and check.
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
    return made


_OWN_CACHE = _share_compile_cache()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWN_CACHE and not hasattr(config, "workerinput"):
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first, each file's tests in their own order (every worker sorts alike: xdist requires it)."""
    try:
        seconds = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    unknown = max(seconds.values(), default=0) + 1
    order = {item: i for i, item in enumerate(items)}
    items.sort(key=lambda it: (-seconds.get(Path(str(it.fspath)).name, unknown), str(it.fspath), order[it]))


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


@pytest.fixture(scope="session")
def tokenizer():
    from spade_jax.model.embedded import embedded_gguf_path
    from spade_jax.model.tokenizer import Tokenizer

    return Tokenizer.from_gguf(embedded_gguf_path())
