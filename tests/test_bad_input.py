"""Bad input fails at once with one line naming the key or file and what was expected (issue 18).

Command-line cases run `python -m spade_jax.cli` and check: exit code 2, one non-empty stderr line, no traceback,
the key or file named, and nothing started (no run directory). File-format cases call the loaders directly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spade_jax.config.overrides import ConfigError
from spade_jax.config.run import load_run_config

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> str:
    """Runs the CLI (this checkout's package), asserts a one-line refusal, and returns that line."""
    proc = subprocess.run(
        [sys.executable, "-m", "spade_jax.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].strip(), proc.stderr
    return lines[0]


def _selfplay(tmp_path: Path, *args: str) -> str:
    """A refused `spade-jax selfplay` on the tiny preset; no run directory may have been made."""
    run_dir = tmp_path / "run"
    line = _cli("selfplay", "--preset", "tiny", "--run-dir", str(run_dir), *args)
    assert not run_dir.exists(), "the run started before the input was checked"
    return line


def test_negative_learning_rate(tmp_path) -> None:
    line = _selfplay(tmp_path, "learner.lr=-1")
    assert "learner.lr=-1.0" in line and "expected a value in [0, 1]" in line


@pytest.mark.parametrize(
    "override, expected",
    [
        ("learner.eps=0", "expected > 0"),
        ("learner.clip_low=1.5", "clip_low"),
        ("learner.clip_high=-0.1", "clip_high"),
        ("learner.betas=[0.9,1.5]", "betas"),
        ("learner.grad_clip=-1", "grad_clip"),
        ("learner.weight_decay=-0.1", "weight_decay"),
        ("learner.warmup_steps=-1", "warmup_steps"),
        ("learner.is_cap=0", "is_cap"),
        ("learner.logits_chunk=-1", "logits_chunk"),
    ],
)
def test_learner_numbers_out_of_range(override: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_run_config("tiny", [override])
    assert override.split("=")[0] in str(err.value) and expected in str(err.value)


def test_learner_zero_lr_stays_allowed() -> None:
    assert load_run_config("tiny", ["learner.lr=0"]).learner.lr == 0  # the learning benchmark's control run


def test_unknown_environment_kind(tmp_path) -> None:
    line = _selfplay(tmp_path, 'selfplay.kinds={"a":1}')
    assert "selfplay.kinds" in line and "expected a list" in line


@pytest.mark.parametrize("value, expected", [("game,puzzle", "unknown environment kind 'puzzle'"), ("[]", "non-empty")])
def test_environment_kinds_are_known_names(value: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_run_config("tiny", [f"selfplay.kinds={value}"])
    assert load_run_config("tiny", ["selfplay.kinds=game,tool"]).selfplay.kinds == ("game", "tool")


def test_sample_negative_temperature() -> None:
    # a model that does not exist: the setting must be refused before any model is looked for
    line = _cli("sample", "--model", "/nonexistent/model.gguf", "--prompt", "hi", "--temperature", "-1")
    assert line.startswith("spade-jax sample: error:") and "--temperature" in line and "expected >= 0" in line


@pytest.mark.parametrize(
    "flag, value",
    [("--temperature", "-1"), ("--top-p", "0"), ("--top-p", "1.5"), ("--top-k", "-1"), ("--max-new-tokens", "0"),
     ("--max-total-len", "0")],
)  # fmt: skip
def test_sample_settings_out_of_range(flag: str, value: str) -> None:
    from spade_jax.cli import build_parser
    from spade_jax.cli.sample import _check_args

    args = build_parser("sample").parse_args(["sample", "--prompt", "hi", flag, value])
    with pytest.raises(ValueError, match=f"^{flag} .*expected"):
        _check_args(args)


@pytest.mark.parametrize(
    ("override", "expected"),
    [("num_workers=0", "expected >= 1"), ("call_timeout_s=0", "expected > 0"),
     ("sessions_per_worker=0", "sessions_per_worker=0; expected >= 1"),
     ("selfplay.audit.random_plays=-1", "expected an int >= 0"),
     ("sandbox_limits.memory_mb=0", "memory_mb=0; expected >= 1")],
)  # fmt: skip
def test_run_numbers_out_of_range(override: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_run_config("tiny", [override])


def test_unknown_reward_kind_before_any_step(tmp_path) -> None:
    line = _selfplay(tmp_path, "selfplay.reward.kind=bogus")
    assert "selfplay.reward.kind" in line and "expected one of" in line


@pytest.mark.parametrize(
    "override",
    [
        "selfplay.hints.source=bogus",  # was taken silently: no hints at all
        "selfplay.rollout.action_parsing=bogus",  # was refused only when the rollout engine was built
        "sandbox=bogus",  # was refused only when the pool started, after the model had loaded
    ],
)
def test_choice_fields_are_checked_in_the_config(override: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_run_config("tiny", [override])
    assert override.split("=")[0] in str(err.value) and "expected one of" in str(err.value)


@pytest.mark.parametrize(
    "override, expected",
    [
        ("selfplay.gates.max_random_win_rate=1.5", "expected a rate in"),
        ("selfplay.gates.random_episodes=0", "expected >= 1"),
        ("selfplay.designer.contract=paper", "expected one of"),
    ],
)
def test_gate_and_contract_settings_are_checked(override: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as err:
        load_run_config("tiny", [override])
    assert override.split("=")[0] in str(err.value)


def test_gate_settings_reach_the_run() -> None:
    """The gates' knobs are part of the run config (and its config.json), the run's own key and turn cap kept."""
    from spade_jax.config.run import RunConfig

    cfg = load_run_config("tiny", ["selfplay.gates.max_random_win_rate=0.05", "selfplay.gates.static.max_lines=900"])
    assert (cfg.selfplay.gates.max_random_win_rate, cfg.selfplay.gates.static.max_lines) == (0.05, 900)
    assert RunConfig.from_json(cfg.to_json()).selfplay.gates == cfg.selfplay.gates


def test_malformed_json_list_names_the_key(tmp_path) -> None:
    line = _selfplay(tmp_path, "loop.steps=1", "learner.betas=[0.9")
    assert "learner.betas" in line and "not a valid JSON list" in line


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["selfplay.skills=[1,"], "selfplay.skills"),  # an optional list: the union's one real reason is kept
        (["learner.length_buckets=[512,,1024]"], "learner.length_buckets"),
        (["selfplay.designer.mutation_share=0.5", "loop.held_out=[grid_maze"], "loop.held_out"),  # the bad one
    ],
)
def test_malformed_json_names_the_key(overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + ".*JSON"):
        load_run_config("tiny", overrides)


def test_non_utf8_config_file_is_named(tmp_path) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(b'{"loop": {"steps": 1}, "model": "\xff\xfe"}')
    line = _selfplay(tmp_path, "--config", str(config))
    assert str(config) in line and "UTF-8" in line
    with pytest.raises(ConfigError, match="cannot be read"):  # a directory: named too, not an OSError traceback
        load_run_config("tiny", config_file=tmp_path)


def test_non_utf8_prompts_file_is_named(tmp_path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes(b"hello\n\xff\xfe bad bytes\n")
    line = _cli("sample", "--model", "/nonexistent/model.gguf", "--prompts-file", str(prompts))
    assert str(prompts) in line and "--prompts-file" in line and "UTF-8" in line


def _hf_config() -> dict:
    """A small, otherwise valid llama config.json (head_dim given, so nothing divides hidden_size)."""
    return {
        "model_type": "llama",
        "vocab_size": 64,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 8,
    }


@pytest.mark.parametrize(
    "key, value, expected",
    [("hidden_size", "big", "positive integer"), ("num_hidden_layers", 1.5, "positive integer"),
     ("rope_theta", "fast", "number"), ("eos_token_id", ["x"], "integer token id")],
)  # fmt: skip
def test_hf_config_value_of_the_wrong_type(tmp_path, key: str, value, expected: str) -> None:
    from spade_jax.model.hf_io import load_hf_dir

    (tmp_path / "config.json").write_text(json.dumps({**_hf_config(), key: value}))
    with pytest.raises(ValueError) as err:
        load_hf_dir(tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert str(tmp_path / "config.json") in message and key in message and expected in message


def _tiny_gguf(path: Path) -> bytes:
    """A small valid GGUF written with the `gguf` package (two float32 tensors); returns its bytes."""
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.arange(64 * 8, dtype=np.float32).reshape(64, 8))
    writer.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


@pytest.mark.parametrize("keep", [3, 40, 300, -1])  # inside the magic, the header, a tensor, the last byte
def test_truncated_gguf_says_so(tmp_path, keep: int) -> None:
    from spade_jax.model.gguf_io import open_gguf

    data = _tiny_gguf(tmp_path / "whole.gguf")
    open_gguf(tmp_path / "whole.gguf")  # the uncut file reads
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:keep])
    with pytest.raises(ValueError) as err:
        open_gguf(cut)
    message = str(err.value)
    assert "\n" not in message and str(cut) in message and "truncated or damaged" in message


def test_truncated_gguf_on_the_command_line(tmp_path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(_tiny_gguf(tmp_path / "whole.gguf")[:300])
    line = _cli("sample", "--model", str(cut), "--prompt", "hi")
    assert str(cut) in line and "truncated or damaged" in line


def test_the_cycle_validates_with_the_configured_gates(pool, tokenizer, tmp_path) -> None:
    from spade_jax.selfplay.cycle import SelfPlay, gate_key

    cfg = load_run_config("tiny", ["selfplay.gates.max_random_win_rate=0.05", "selfplay.rollout.max_turns=3"])
    sp = SelfPlay(cfg.selfplay, sampler=None, tokenizer=tokenizer, pool=pool, run_dir=tmp_path, corpus=None)
    assert sp.gate_config.max_random_win_rate == 0.05 and sp.designer.gate_config is sp.gate_config
    assert (sp.gate_config.max_turns, sp.gate_config.seed_key) == (3, gate_key(tmp_path))


def test_a_closed_pipe_ends_the_command_quietly() -> None:
    """`spade-jax validate-env F | head -0`: the reader is gone before the verdict is printed; no traceback."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "spade_jax.cli", "validate-env", "tests/broken_envs/syntax_error.py"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the child has even imported its modules
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err, err
