"""The paper's ablations as overrides (config/ablations.py), and the switch that trains the designer alone
(`selfplay.train_agent=false`, run/learn.py): what each one changes in the config, key by key, and what the learner
then sees."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spade_jax.config.ablations import ABLATIONS
from spade_jax.config.overrides import ConfigError, changed_keys, to_dict
from spade_jax.config.run import RunConfig, load_run_config
from spade_jax.run.learn import BatchRule, train_on, trained_roles
from spade_jax.selfplay.batch import SelfPlayBatch
from spade_jax.trajectory import AGENT, DESIGNER, Sample

# What each ablation turns off, as the paper describes it (in our config's words).
EXPECTED = {
    "no_corpus": {"selfplay.designer.use_corpus": False},
    "no_memory": {"selfplay.designer.use_memory": False, "selfplay.designer.mutation_share": 0.0},
    "no_designer_training": {"selfplay.train_designer": False},
    "solve_rate": {"selfplay.reward.kind": "solve_band"},
    "learning_potential": {"selfplay.reward.kind": "learning_progress"},
}


def _get(cfg: dict, key: str):
    for part in key.split("."):
        cfg = cfg[part]
    return cfg


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_ablation_changes_only_what_it_names(name: str) -> None:
    base = load_run_config("paper-qwen3-4b")  # corpus, memory and designer training on; the blend reward
    cfg = load_run_config("paper-qwen3-4b", [f"ablation={name}"])
    got = to_dict(cfg)
    changed = set(changed_keys(to_dict(base), got)) - {"ablation"}
    assert changed and changed <= set(EXPECTED[name]), "nothing else changes (mutation_share is 0 here already)"
    assert all(_get(got, k) == v for k, v in EXPECTED[name].items())
    assert cfg.ablation == name and RunConfig.from_json(cfg.to_json()).ablation == name, "recorded in config.json"


def test_ablations_combine_and_later_overrides_win() -> None:
    assert set(ABLATIONS) == set(EXPECTED)
    cfg = load_run_config("demo", ["ablation=no_memory,no_designer_training", "selfplay.reward.kind=regret"])
    assert not cfg.selfplay.designer.use_memory and cfg.selfplay.designer.mutation_share == 0.0
    assert not cfg.selfplay.train_designer and cfg.selfplay.reward.kind == "regret"
    # the demo's designs are all mutations (which need the memory): no_memory turns them off first
    assert load_run_config("demo").selfplay.designer.mutation_share == 1.0


def test_an_unknown_ablation_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError) as e:
        load_run_config("demo", ["ablation=no_agent"])
    msg = str(e.value)
    assert "\n" not in msg and "no_agent" in msg and all(name in msg for name in ABLATIONS)
    with pytest.raises(ConfigError, match="unknown ablation"):
        load_run_config("demo", ["ablation=no_corpus", "ablation=bogus"])


def _sample(role: int, reward: float, group: str) -> Sample:
    return Sample([1, 2], [3, 4], [1, 1], [0.0, 0.0], role=role, reward=reward, group_id=group)


class _Recorder:
    """A learner that keeps what it was given."""

    def __init__(self):
        self.rows = []

    def train_step(self, batch):
        self.rows.append(batch.roles.tolist() if hasattr(batch, "roles") else None)
        return {"loss": 0.0}


def test_a_frozen_agent_plays_but_only_the_designer_trains() -> None:
    samples = [_sample(AGENT, 1.0, "a"), _sample(AGENT, 0.0, "a"), _sample(DESIGNER, 0.6, "d"),
               _sample(DESIGNER, 0.0, "d")]  # fmt: skip
    batch = SelfPlayBatch(agent=tuple(samples[:2]), designer=tuple(samples[2:]))
    same, none = trained_roles(batch, True)
    assert same is batch and none == {}
    kept, stats = trained_roles(batch, False)
    assert [s.role for s in kept.samples] == [DESIGNER, DESIGNER] and stats == {"train/agent_not_trained": 2.0}
    assert len(batch.samples) == 4, "the step's own batch is left as played (its metrics count every play)"

    for train_agent, agents in ((True, 2.0), (False, 0.0)):
        cfg = load_run_config("tiny", [f"selfplay.train_agent={train_agent}"])
        learner = _Recorder()
        learner.config = SimpleNamespace(lr=1e-3)
        stats = train_on(batch, learner, BatchRule.of(cfg), buckets=(64,), pad_id=0, sync=lambda: None)
        assert stats["train/agent_samples"] == agents and stats["train/designer_samples"] == 2.0
        assert stats["train/skipped"] == 0.0 and len(learner.rows) == 1


def _ablations_bench():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "ablations.py"
    spec = importlib.util.spec_from_file_location("ablations_bench", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ablations_bench"] = module
    spec.loader.exec_module(module)
    return module


def test_the_ablations_script_runs_only_what_differs_and_summarises_by_hand() -> None:
    bench = _ablations_bench()
    demo = load_run_config("demo")  # no corpus there: no_corpus is the base run itself
    cfgs, same = bench.configs(demo, ["no_corpus", "no_designer_training"])
    assert list(cfgs) == ["base", "no_designer_training"] and same == {"no_corpus": "base"}
    grounded = load_run_config("demo", ["selfplay.designer.use_corpus=true", "selfplay.designer.mutation_share=0.5"])
    cfgs, same = bench.configs(grounded, ["no_corpus"])
    assert list(cfgs) == ["base", "no_corpus"] and same == {} and not cfgs["no_corpus"].selfplay.designer.use_corpus
    rows = [{"step": 0, "warmstart/examples": 4.0}, {"step": 1, "health/vendi_archive": 1.0},
            {"step": 2, "health/vendi_archive": 2.0, "train/designer_samples": 2.0},
            {"step": 3, "health/vendi_archive": 4.5, "train/designer_samples": 3.0}]  # fmt: skip
    s = bench.summarise(rows)
    assert s["Vendi, archive"] == {"last": 4.5, "mean": 2.5, "steps": 3}
    assert s["designer trained"] == {"last": 3.0, "mean": 5.0, "steps": 2}, "summed over the run"
    assert s["regret mean"] == {"last": None, "mean": None, "steps": 0}
