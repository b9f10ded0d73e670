"""What the whole test run shares: one XLA compile cache, the order files run in, a real sandbox pool per
module and the embedded SmolLM2 tokenizer.

The suite runs on two worker processes (`make test`: pytest-xdist, whole files per worker, `--dist loadfile`)
and has to fit CI's budget, so:
- compiled programs are kept in one folder for the run (`SPADE_JAX_TEST_XLA_CACHE`, removed at the end): a
  program a test compiled is loaded, not compiled again, by a later test of either worker, and by the command-line
  runs the tests start (`spade-jax selfplay`/`warmstart` read it as `SPADE_JAX_COMPILE_CACHE`); a user's own
  cache (~/.cache/spade-jax/xla) is never read or written by the tests;
- files run longest first (`tests/durations.json`, seconds per file from a full run; a file missing from it runs
  first), so that the two workers finish together instead of one waiting on the last long file;
- `make test-fast` (`-m "not slow"`) is the edit loop: besides the tests marked `slow` by hand, a test counts as
  slow when it took `FAST_TEST_S` or more in the last full run, or sits in a file that took over `FAST_FILE_S` (its
  module fixtures, a model or a pool, would land on whichever of its tests ran first). A new test counts as fast
  until `scripts/test_durations.py` refreshes the file from a full run.
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
FAST_TEST_S = 1.0
FAST_FILE_S = 60.0


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


def recorded_slow(nodeid: str, recorded: dict) -> bool:
    """Whether the last full run (`tests/durations.json`) puts this test out of `make test-fast`."""
    file = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return recorded["tests"].get(nodeid, 0.0) >= FAST_TEST_S or recorded["files"].get(file, 0.0) > FAST_FILE_S


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first, each file's tests in their own order (every worker sorts alike: xdist requires it); the
    slow ones of the last full run marked `slow`."""
    try:
        recorded = json.loads(DURATIONS.read_text(encoding="utf-8"))
        files, _ = recorded["files"], recorded["tests"]  # both parts, or neither is used
    except (OSError, ValueError, KeyError, TypeError):
        return
    for item in items:
        if recorded_slow(item.nodeid, recorded):
            item.add_marker(pytest.mark.slow)
    unknown = max(files.values(), default=0) + 1
    order = {item: i for i, item in enumerate(items)}
    items.sort(key=lambda it: (-files.get(it.path.name, unknown), str(it.path), order[it]))


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
