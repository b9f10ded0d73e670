"""Seed environment library: coverage of skills and kinds, reference policies win, random play mostly loses,
episodes are deterministic and bounded, and every seed wrapped as a gymnasium.Env passes check_env."""

from __future__ import annotations

import ast
import random
import warnings

import pytest
from gymnasium.utils.env_checker import check_env

from spade_jax.envs.base import KINDS, TextEnv, extract_answer, extract_boxed, parse_tool_calls
from spade_jax.envs.contract import ALLOWED_IMPORTS, SKILLS
from spade_jax.envs.gym_wrapper import TextGymEnv
from spade_jax.envs.seeds import list_seeds, load_seed_class, load_seed_source

SEEDS = list_seeds()
NAMES = [s.name for s in SEEDS]
ALLOWED = set(ALLOWED_IMPORTS) | {"spade_jax.envs.base"}


def play(env: TextEnv, seed: int, policy) -> tuple[list[tuple], dict]:
    """Runs one episode; returns the transcript and the last info."""
    obs, info = env.reset(seed=seed)
    transcript = [(obs,)]
    for _ in range(env.max_turns + 1):
        action = policy(env)
        obs, reward, terminated, truncated, info = env.step(action)
        transcript.append((action, obs, reward, terminated, truncated))
        if terminated or truncated:
            return transcript, info
    raise AssertionError(f"{env.NAME}: episode did not end within max_turns={env.max_turns}")


def test_library_covers_every_skill_and_kind():
    assert len(SEEDS) >= 20
    games = {s.skill for s in SEEDS if s.kind == "game"}
    assert set(SKILLS) <= games, f"skills without a game: {set(SKILLS) - games}"
    assert sum(s.kind == "tool" for s in SEEDS) >= 5
    assert sum(s.kind == "reasoning" for s in SEEDS) >= 3
    assert all(s.kind in KINDS for s in SEEDS)
    assert all(s.skill in SKILLS for s in SEEDS if s.kind != "tool")


def test_unknown_seed_names_the_known_ones():
    with pytest.raises(ValueError, match="known: .*code_breaker"):
        load_seed_source("no_such_env")


@pytest.mark.parametrize("name", NAMES)
def test_source_is_self_contained(name):
    """One env class, only allow-listed imports, NAME/KIND/SKILL matching the listing (checked on the AST)."""
    source = load_seed_source(name)
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert all(a.name in ALLOWED for a in node.names), ast.dump(node)
        elif isinstance(node, ast.ImportFrom):
            assert node.module in ALLOWED, node.module
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert len(classes) == 1
    cls = load_seed_class(name)
    info = next(s for s in SEEDS if s.name == name)
    assert (cls.NAME, cls.KIND, cls.SKILL) == (name, info.kind, info.skill)
    for method in ("setup", "reference_action", "random_action", "hint"):
        assert callable(getattr(cls, method, None)), method
    assert len(source.splitlines()) <= 130


@pytest.mark.parametrize("name", NAMES)
def test_reference_policy_wins(name):
    cls = load_seed_class(name)
    for seed in range(6):
        env = cls()
        transcript, info = play(env, seed, lambda e: e.reference_action())
        assert info["won"] and info["return"] == 1.0, (name, seed, transcript[-1])
        assert transcript[-1][3] is True  # terminated, not truncated


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("policy_seed", ["independent", "same"])
def test_random_play_rarely_wins(name, policy_seed):
    """Random play wins <= 15%, also when the policy's generator is seeded with the env's own seed."""
    cls = load_seed_class(name)
    episodes, wins = 50, 0
    for seed in range(episodes):
        rng = random.Random(1_000_003 * (seed + 1) if policy_seed == "independent" else seed)
        env = cls()
        _, info = play(env, seed, lambda e, rng=rng: e.random_action(rng))
        wins += info["won"]
    assert wins / episodes <= 0.15, f"{name}: random play won {wins}/{episodes}"


@pytest.mark.parametrize("name", NAMES)
def test_random_actions_are_well_formed(name):
    cls = load_seed_class(name)
    env = cls()
    env.reset(seed=3)
    assert env.random_action(7) == env.random_action(random.Random(7))  # an int seed works too (RPC)
    rng = random.Random(7)
    for _ in range(20):
        action = env.random_action(rng)
        if cls.KIND == "tool":
            calls = parse_tool_calls(action)
            assert (calls and isinstance(calls[0], dict)) or extract_answer(action) is not None, action
        else:
            assert extract_boxed(action), action


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_and_seed_dependent(name):
    cls = load_seed_class(name)
    runs = []
    for _ in range(2):
        rng = random.Random(11)
        runs.append(play(cls(), 5, lambda e, rng=rng: e.random_action(rng))[0])
    assert runs[0] == runs[1]

    def peeking(e, rng=random.Random(11)):  # hint/reference/random_action must not disturb the episode
        e.hint(), e.reference_action(), e.random_action(99)
        return e.random_action(rng)

    assert play(cls(), 5, peeking)[0] == runs[0]
    episodes = {str(play(cls(), s, lambda e: e.reference_action())[0]) for s in range(6)}
    assert len(episodes) > 1, "hidden state does not depend on the seed"


@pytest.mark.parametrize("name", NAMES)
def test_truncation_and_format_reminder(name):
    cls = load_seed_class(name)
    env = cls(max_turns=3)
    obs, info = env.reset(seed=1)
    assert isinstance(obs, str) and obs.strip() and isinstance(info, dict)
    results = [env.step("I am not sure what to do.") for _ in range(3)]
    for obs, reward, terminated, truncated, _ in results[:2]:
        assert "format" in obs.lower() and reward == 0.0 and not terminated and not truncated
    assert results[2][2] is False and results[2][3] is True  # truncated at max_turns, not terminated
    assert env.done


@pytest.mark.parametrize("name", NAMES)
def test_hint_is_short_and_does_not_end_play(name):
    env = load_seed_class(name)()
    for seed in range(3):
        env.reset(seed=seed)
        hint = env.hint()
        assert isinstance(hint, str) and hint.strip() and len(hint.split()) < 100


@pytest.mark.parametrize("name", NAMES)
def test_gym_wrapper_passes_check_env(name):
    env = TextGymEnv(load_seed_class(name)())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=True)
