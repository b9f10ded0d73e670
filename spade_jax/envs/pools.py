"""Fixed environment pools for the fixed-environment baselines (`selfplay pool=...`, designer off).

`load_pool(name_or_dir)` returns stdlib-only environment sources, exactly the format a designer writes:
  * "seeds": the hand-written seed library (spade_jax/envs/seeds);
  * "reasoning_gym": items generated here by reasoning-gym (training seeds, disjoint from the eval seeds)
    and baked into one ReasoningEnv source per generator, checked by the same rule as the eval suite;
  * "textarena": our own stdlib re-implementations of textarena single-player games with their rules
    (TowerOfHanoi-v0, Mastermind-v0, LightsOut-v0); the package's other games need its engine, NLTK
    corpora or a second player and are not adapted;
  * a directory: every `*.py` environment file in it, of either contract (ours or the paper's Gym-style
    classes, `spade_jax.envs.formats`); or a directory in the layout of the paper's released pool and of
    `spade-jax export-envs` (`games/game_*.py`, `manifest.jsonl`, `checksums.sha256`), read as untrusted
    input (`pool_files`: regular files inside the pool only, size-bounded; with checksums every game must be
    listed and match; a bad entry is one error line naming it), the manifest's kind, skill and name used.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import replace
from pathlib import Path

from spade_jax.envs.pool_files import CHECKSUMS, MANIFEST, MAX_META_BYTES, read_checksums, read_pool_dir, read_regular
from spade_jax.envs.source import EnvSource

__all__ = [
    "CHECKSUMS",
    "MANIFEST",
    "POOLS",
    "RG_TASKS",
    "check_pool",
    "load_pool",
    "reasoning_gym_sources",
    "verify_checksums",
]

POOLS = ("seeds", "reasoning_gym", "textarena")
_HERE = Path(__file__).resolve().parent
RG_POOL_SEED = 10_000  # training items; the eval suite uses seeds >= 9_000_000
RG_SKILLS = {
    "basic_arithmetic": "mathematical reasoning",
    "chain_sum": "mathematical reasoning",
    "gcd": "mathematical reasoning",
    "lcm": "mathematical reasoning",
    "letter_counting": "language understanding",
    "spell_backward": "language understanding",
    "leg_counting": "mathematical reasoning",
    "fraction_simplification": "mathematical reasoning",
    "base_conversion": "mathematical reasoning",
    "family_relationships": "logical deduction",
    "syllogism": "logical deduction",
    "count_bits": "pattern recognition",
    "calendar_arithmetic": "mathematical reasoning",
    "simple_equations": "mathematical reasoning",
    "caesar_cipher": "language understanding",
    "count_primes": "mathematical reasoning",
    "products": "mathematical reasoning",
    "largest_island": "spatial reasoning",
    "word_sequence_reversal": "language understanding",
    "dice": "mathematical reasoning",
}
# Generators whose reference answer is unique, so exact/numeric matching is a faithful check (the eval suite's too).
RG_TASKS = tuple(RG_SKILLS)


def _from_files(paths: list[Path], manifest: dict[str, dict] | None = None) -> list[EnvSource]:
    """One environment per (trusted, packaged) file, of either contract."""
    return _named([EnvSource.from_file(path, row=(manifest or {}).get(path.name)) for path in paths])


def _named(specs: list[EnvSource]) -> list[EnvSource]:
    """Two files with one NAME (say, mutations) keep their file names."""
    counts = Counter(s.name for s in specs)
    return [replace(s, name=s.path.stem) if counts[s.name] > 1 and s.path else s for s in specs]


def verify_checksums(root: Path) -> int:
    """Checks every file `checksums.sha256` lists (`sha256sum` format) against its digest; the count checked.
    ValueError naming the first file that is missing, damaged, not a regular file or outside `root`."""
    listed = read_checksums(Path(root)) or {}
    for rel, digest in listed.items():
        try:
            data = read_regular(Path(root), rel, MAX_META_BYTES)
        except ValueError as e:
            if "is missing" in str(e):
                raise ValueError(f"{root}: {rel} is listed in {CHECKSUMS} but missing") from None
            raise
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"{root}: {rel} does not match its checksum in {CHECKSUMS} (damaged or edited)")
    return len(listed)


def _from_dir(path: Path) -> list[EnvSource]:
    """A flat directory of environment files, or the released layout (games/, manifest, checksums), read as
    untrusted input (`pool_files.read_pool_dir`: regular files inside the pool only, size-bounded, every game
    listed in the checksums when there are any)."""
    files, manifest = read_pool_dir(path)
    return _named([EnvSource.from_bytes(f.data, f.path, row=manifest.get(f.path.name)) for f in files])


def _rg_check_source() -> str:
    text = (_HERE / "rg_check.py").read_text(encoding="utf-8")
    return text.split('"""', 2)[2].lstrip()  # without the module docstring


_RG_TEMPLATE = '''"""reasoning-gym '{task}' items (generated by spade_jax.envs.pools, training seeds)."""

{check}

from spade_jax.envs.base import ReasoningEnv

ITEMS = {items!r}


class RG{cls}(ReasoningEnv):
    KIND = "reasoning"
    SKILL = {skill!r}
    NAME = "rg_{task}"

    def setup(self) -> str:
        self.question, self.gold = self.rng.choice(ITEMS)
        return self.question

    def check_answer(self, answer: str) -> bool:
        return rg_answer_ok(answer, self.gold)

    def reference_action(self) -> str:
        return self.boxed(self.gold)

    def random_action(self, rng) -> str:
        return self.boxed(rng.choice(ITEMS)[1])

    def hint(self) -> str:
        return "Work through the question one step at a time and check the result before you box it."
'''


def reasoning_gym_sources(items_per_task: int = 64, seed: int = RG_POOL_SEED) -> list[EnvSource]:
    """One ReasoningEnv source per reasoning-gym generator, with `items_per_task` baked-in items."""
    try:
        import reasoning_gym
    except ImportError:
        raise FileNotFoundError("reasoning-gym is not installed (pip install reasoning-gym)") from None
    check = _rg_check_source()
    specs = []
    for t, task in enumerate(RG_TASKS):
        ds = reasoning_gym.create_dataset(task, size=items_per_task, seed=seed + t)
        items = [(str(ds[i]["question"]), str(ds[i]["answer"])) for i in range(items_per_task)]
        cls = "".join(part.capitalize() for part in task.split("_"))
        source = _RG_TEMPLATE.format(task=task, check=check, items=items, cls=cls, skill=RG_SKILLS[task])
        specs.append(EnvSource(f"rg_{task}", source, "reasoning", RG_SKILLS[task]))
    return specs


def check_pool(name_or_dir: str) -> None:
    """Raises the one-line error `load_pool` would, without generating a named pool's items: an unknown name, a
    folder that does not exist or holds no environment file, a released-layout folder whose files do not match
    their checksums. A run calls it before it starts."""
    if name_or_dir in POOLS:
        if name_or_dir == "reasoning_gym":
            import importlib.util

            if importlib.util.find_spec("reasoning_gym") is None:
                raise FileNotFoundError("loop.pool=reasoning_gym needs reasoning-gym: pip install 'spade-jax[eval]'")
        return
    path = Path(name_or_dir).expanduser()
    if not path.is_dir():
        raise ValueError(f"unknown pool {name_or_dir!r}: give one of {', '.join(POOLS)} or a directory of .py files")
    _from_dir(path)


def load_pool(name_or_dir: str) -> list[EnvSource]:
    """The environments of a named pool or of a directory of `.py` environment files."""
    if name_or_dir == "seeds":
        from spade_jax.envs.seeds import list_seeds

        return list_seeds()
    if name_or_dir == "reasoning_gym":
        return reasoning_gym_sources()
    if name_or_dir == "textarena":
        return _from_files(sorted((_HERE / "pool_envs").glob("ta_*.py")))
    path = Path(name_or_dir).expanduser()
    if path.is_dir():
        return _from_dir(path)
    raise ValueError(f"unknown pool {name_or_dir!r}: give one of {', '.join(POOLS)} or a directory of .py files")
