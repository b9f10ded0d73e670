"""Every number of a run config has a declared range, checked when the config loads (issue 49).

The ranges live in one table (spade_jax/config/ranges.py); these tests walk the config tree, so a numeric field
added without a range fails here, and try the values a user typed in the issue, each refused in one line that
names the key.
"""

from __future__ import annotations

import json

import pytest

from spade_jax.config.learner import LearnerConfig
from spade_jax.config.overrides import ConfigError
from spade_jax.config.ranges import RANGES, Range, check_ranges, numeric_fields
from spade_jax.config.run import RUN_PRESETS, RunConfig, load_run_config, mesh_shape


def test_every_numeric_field_has_a_range_and_every_range_a_field() -> None:
    fields = numeric_fields(RunConfig)
    assert len(fields) > 100  # the walk reaches the nested sections (gates.static, learner, ...)
    missing = [path for path, cls, name in fields if name not in RANGES.get(cls, {})]
    assert missing == []
    declared = {(cls, name) for cls, names in RANGES.items() for name in names}
    stale = declared - {(cls, name) for _, cls, name in fields}
    assert stale == set(), "ranges declared for fields that no longer exist"


def test_every_preset_is_inside_its_ranges() -> None:
    for name in RUN_PRESETS:
        check_ranges(load_run_config(name))


@pytest.mark.parametrize(
    "override, expected",
    [  # the values issue 49 found accepted and run to rc 0, and a few of the same kind
        ("selfplay.rollout.temperature=-0.5", "selfplay.rollout.temperature=-0.5; expected >= 0"),
        ("selfplay.designer.temperature=-3", "selfplay.designer.temperature=-3.0; expected >= 0"),
        ("selfplay.hints.temperature=-1", "selfplay.hints.temperature=-1.0; expected >= 0"),
        ("selfplay.rollout.top_p=7", "selfplay.rollout.top_p=7.0; expected a value in (0, 1]"),
        ("selfplay.designer.top_p=0", "selfplay.designer.top_p=0.0; expected a value in (0, 1]"),
        ("selfplay.rollout.top_k=-5", "selfplay.rollout.top_k=-5; expected >= 0"),
        ("selfplay.plays_per_condition=0", "selfplay.plays_per_condition=0; expected >= 1"),
        ("learner.micro_batch_size=0", "learner.micro_batch_size=0; expected >= 1 or none"),
        ("max_total_len=0", "max_total_len=0; expected >= 1"),
        ("selfplay.rollout.max_turns=0", "selfplay.rollout.max_turns=0; expected >= 1"),
        ("loop.keep_checkpoints=0", "loop.keep_checkpoints=0; expected >= 1"),
        ("learner.lr=1e9", "learner.lr=1000000000.0; expected a value in [0, 1]"),
        ("warmstart.lr=2", "warmstart.lr=2.0; expected a value in [0, 1]"),
        ("loop.steps=0", "loop.steps=0: nothing to run"),
        ("loop.steps=-3", "loop.steps=-3; expected >= 0"),
        ("loop.checkpoint_every=0", "loop.checkpoint_every=0; expected >= 1"),
        ("selfplay.memory.positive_band=[0.2,1.5]", "selfplay.memory.positive_band=(0.2, 1.5); expected a list"),
        ("selfplay.reward.timeout_reward=-3", "selfplay.reward.timeout_reward=-3.0; expected a value in [-1, 1]"),
        ("learner.lr=nan", "learner.lr=nan"),
        ("selfplay.rollout.temperature=inf", "selfplay.rollout.temperature=inf; expected >= 0"),
        ("dtype=int8", "dtype='int8'; expected one of float32, bfloat16, float16"),
        ("param_dtype=float64", "param_dtype='float64'"),
        ("mesh=foo=3", "unknown mesh axis 'foo'"),
        ("mesh=data=x", "'data=x' is not axis=size"),
        ("mesh=data=-1,fsdp=-1", "at most one axis may be -1"),
        ("loop.held_out=grid_maze,no_such_game", "loop.held_out: unknown seed environments no_such_game"),
    ],
)
def test_out_of_range_values_are_refused_in_one_line(override: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_run_config("tiny", [override])
    message = str(err.value)
    assert expected in message and "\n" not in message


@pytest.mark.parametrize(
    "override",
    ["learner.lr=0", "selfplay.rollout.temperature=0", "selfplay.rollout.top_p=1", "selfplay.rollout.top_k=0",
     "learner.micro_batch_size=none", "loop.eval_every=0", "mesh=data=1,fsdp=-1"],
)  # fmt: skip
def test_the_edges_that_mean_something_stay_allowed(override: str) -> None:
    load_run_config("tiny", [override])  # lr 0: the control run; temperature 0: greedy; top_k 0: off; ...


def test_a_warm_start_alone_may_have_no_steps() -> None:
    assert load_run_config("demo", ["loop.steps=0"]).loop.steps == 0  # the demo warm-starts: 0 = only that


def test_a_saved_config_is_checked_too(tmp_path) -> None:
    """A config.json edited by hand: out of range, or of the wrong type (a string, a bool for a count)."""
    data = json.loads(load_run_config("tiny").to_json())
    for section, key, value, expected in [
        ("selfplay", "plays_per_condition", 0, "selfplay.plays_per_condition=0; expected >= 1"),
        ("selfplay", "plays_per_condition", "4", "selfplay.plays_per_condition='4'; expected an integer >= 1"),
        ("loop", "keep_checkpoints", True, "loop.keep_checkpoints=True; expected an integer >= 1"),
        ("learner", "lr", None, "learner.lr=None; expected a number"),
    ]:
        bad = json.loads(json.dumps(data))
        bad[section][key] = value
        path = tmp_path / "config.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match="not a valid run config") as err:
            load_run_config("tiny", config_file=path)
        assert expected in str(err.value), err.value


def test_a_learner_config_built_alone_is_checked_by_the_same_table() -> None:
    with pytest.raises(ValueError, match=r"learner\.eps=0.0; expected > 0"):
        LearnerConfig(eps=0.0)
    assert LearnerConfig(micro_batch_size=None).micro_batch_size is None


def test_range_text_and_bounds() -> None:
    assert str(Range(lo=0, hi=1, lo_open=True)) == "a value in (0, 1]"
    assert str(Range(lo=1, none_ok=True, note="none: off")) == ">= 1 or none (none: off)"
    assert Range(lo=0, hi=1, hi_open=True).holds(0.0) and not Range(lo=0, hi=1, hi_open=True).holds(1.0)
    assert mesh_shape(" data=2 , fsdp=-1 ") == {"data": 2, "fsdp": -1}


def test_config_mesh_axes_are_the_models() -> None:
    from spade_jax.config.run import DTYPES, MESH_AXES
    from spade_jax.model import config as model_config
    from spade_jax.model.sharding import MESH_AXES as MODEL_AXES

    assert MESH_AXES == MODEL_AXES  # the config checks names the model knows (config/ may not import model/)
    assert set(DTYPES) == set(model_config._DTYPES)
