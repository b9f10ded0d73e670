"""Hand-written seed environments: each is one self-contained source file, exactly as a designer writes it.

They seed the environment memory and form the fixed-environment baseline. The metadata (KIND, SKILL,
NAME) is read from the source with `ast`, without running it.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

from spade_jax.envs.source import EnvSource

__all__ = ["SEEDS_DIR", "list_seeds", "load_seed_class", "load_seed_source"]

SEEDS_DIR = Path(__file__).resolve().parent


def list_seeds() -> list[EnvSource]:
    """All seed environments (named by file stem), sorted by name."""
    out = []
    for path in sorted(SEEDS_DIR.glob("*.py")):
        if path.name.startswith("_"):
            continue
        seed = EnvSource.from_file(path, name=path.stem)
        if not seed.skill or seed.contract != "ours":
            raise ValueError(f"seed {path.name}: a seed derives from our base classes and sets KIND, SKILL, NAME")
        out.append(seed)
    return out


def check_seed_names(names: tuple[str, ...], option: str) -> None:
    """Raises ValueError naming `option` and every name in `names` that is not a seed of the library."""
    unknown = sorted(set(names) - {s.name for s in list_seeds()})
    if unknown:
        raise ValueError(f"{option}: unknown seed environments {', '.join(unknown)}")


def load_seed_source(name: str) -> str:
    """Source text of the seed called `name` (file stem); ValueError naming the known seeds if absent."""
    path = SEEDS_DIR / f"{name}.py"
    if name.startswith("_") or not path.is_file():
        known = ", ".join(s.name for s in list_seeds())
        raise ValueError(f"unknown seed environment {name!r}; known: {known}")
    return path.read_text(encoding="utf-8")


def load_seed_class(name: str) -> type:
    """The environment class of a seed, executed in-process (trusted code: seeds only, never generated code)."""
    from spade_jax.envs.base import TextEnv

    source = load_seed_source(name)
    module = types.ModuleType(f"spade_jax_seed_{name}")
    module.__file__ = str(SEEDS_DIR / f"{name}.py")
    sys.modules[module.__name__] = module  # dataclasses and pickling look classes up by module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    classes = [
        v
        for v in module.__dict__.values()
        if isinstance(v, type) and issubclass(v, TextEnv) and v.__module__ == module.__name__
    ]
    if len(classes) != 1:
        raise ValueError(f"seed {name}: expected one environment class, found {len(classes)}")
    return classes[0]
