"""The supervised warm start: reference-policy conversations through the real sandbox pool, designer examples
built from seed sources, and `spade-jax warmstart` saving step 0 of a run that `selfplay --resume` continues."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spade_jax.config.selfplay import RolloutConfig
from spade_jax.envs.seeds import list_seeds
from spade_jax.run.warmstart import agent_examples

ONE_TURN_SEEDS = ("knights_knaves", "linear_system", "date_offset")


POOL_WORKERS = 2
POOL_CALL_TIMEOUT_S = 5.0  # for the `pool` fixture in conftest.py


def test_agent_examples_are_winning_reference_conversations(pool, tokenizer) -> None:
    seeds = [s for s in list_seeds() if s.name in ONE_TURN_SEEDS]
    cfg = RolloutConfig(max_turns=2, max_episode_tokens=2048, max_new_tokens_per_turn=64)
    samples = agent_examples(pool, tokenizer, seeds, cfg, episodes=2)
    assert len(samples) == 2 * len(seeds), "the reference policy wins every episode of these seeds"
    for s in samples:
        assert s.role == 0 and s.advantage == 1.0
        trained = [t for t, m in zip(s.completion_ids, s.completion_mask) if m]
        text = tokenizer.decode(trained)
        assert "\\boxed{" in text, text  # the reference answer itself is what gets trained on


@pytest.mark.slow
def test_warmstart_cli_saves_step_zero_and_selfplay_resumes(tmp_path: Path) -> None:
    run_dir = tmp_path / "ws"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    common = ["--preset", "tiny", "--run-dir", str(run_dir)]
    ws = [
        "warmstart.epochs=8", "warmstart.lr=3e-3", "warmstart.agent_episodes_per_seed=1",
        "warmstart.designer_seeds=1", "warmstart.probe_designs=1", "warmstart.batch_size=32",
    ]  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "spade_jax.cli", "warmstart", *common, *ws],
                         env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    first = rows[0]
    assert first["step"] == 0
    assert 0.0 <= first["warmstart/valid_rate_before"] <= 1.0 and 0.0 <= first["warmstart/valid_rate_after"] <= 1.0
    assert first["warmstart/examples"] >= 5  # reference conversations won within the tiny budget + 1 design
    assert first["warmstart/loss_last"] < first["warmstart/loss_first"] - 1.0, first  # it fits the data (nats)
    assert (run_dir / "checkpoints" / "0").exists()

    cont = subprocess.run([sys.executable, "-m", "spade_jax.cli", "selfplay", *common, "--resume", "loop.steps=1",
                           "loop.eval_plays=0"], env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert cont.returncode == 0, cont.stderr[-3000:]
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1], "the warm start ran once; self-play continued from it"


def test_mutation_examples_show_a_parent_and_answer_with_a_variant_of_it(tokenizer) -> None:
    """The designer's warm start for mutations: the first example shows the seed itself, unmeasured (a run's
    start); the others a variant with the win rate that calls for the change; every answer is a variant of
    the same seed that the gates' novelty check accepts as a parameter variant of its parent."""
    from spade_jax.config.selfplay import DesignerConfig, MemoryConfig
    from spade_jax.gates.novelty import NoveltyConfig, NoveltyIndex
    from spade_jax.run.warmstart import mutation_examples
    from spade_jax.selfplay.designer import Designer
    from spade_jax.selfplay.memory import Memory

    seed = next(s for s in list_seeds() if s.name == "sonar_hunt")
    mem = Memory(config=MemoryConfig(seed_from_library=False, max_param_variants=3))
    designer = Designer(None, tokenizer, None, mem, DesignerConfig(contract="short", mutation_contract=False))
    samples = mutation_examples(designer, tokenizer, [seed], 3, rng_seed=0)
    assert len(samples) == 3 and all(s.role == 1 and s.advantage == 1.0 for s in samples)
    prompts = [tokenizer.decode(s.prompt_ids) for s in samples]
    answers = [tokenizer.decode(s.completion_ids) for s in samples]
    assert "not yet played" in prompts[0] and "GRID = 8" in prompts[0] and "PINGS = 4" in prompts[0]  # the seed
    assert all("wins" in p and "not yet played" not in p for p in prompts[1:])
    assert all("# Environment contract" not in p for p in prompts)  # mutation_contract=False
    for prompt, answer in zip(prompts, answers):
        parent = prompt.split("```python\n", 1)[1].split("```", 1)[0]
        child = answer.split("```python\n", 1)[1].split("```", 1)[0]
        assert child != parent
        index = NoveltyIndex(NoveltyConfig(max_param_variants=3))
        index.add("parent", parent)
        assert index.check(child).reason.startswith("parameter variant of 'parent'"), index.check(child).reason
