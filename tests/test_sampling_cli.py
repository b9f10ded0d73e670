"""`spade-jax sample` on the tiny preset: JSON output, prompts files, chat rendering, and one-line errors."""

from __future__ import annotations

import json

from spade_jax.cli import main
from spade_jax.model.loading import load_model
from spade_jax.sampling import Sampler, SamplingParams


def test_json_output_matches_the_sampler(tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('plain line prompt\n{"messages": [{"role": "user", "content": "hi"}]}\n\n{"prompt": "ab"}\n')
    rc = main(["sample", "--model", "tiny", "--prompt", "Hello", "--prompts-file", str(prompts)]
              + ["--greedy", "--max-new-tokens", "6", "--json"])  # fmt: skip
    assert rc == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["prompt"] for r in rows] == ["Hello", "plain line prompt", [{"role": "user", "content": "hi"}], "ab"]
    for r in rows:
        assert set(r) >= {"text", "token_ids", "logprobs", "raw_logprobs", "finish_reason"}
        assert len(r["token_ids"]) == len(r["logprobs"]) <= 6
    # the same model and settings through the Python API give the same tokens (chat row rendered by the template)
    _, model, tok = load_model("tiny")
    sampler = Sampler(model, tok)
    params = SamplingParams(max_new_tokens=6, greedy=True)
    want = sampler.generate(["Hello", "plain line prompt"], params)
    want += sampler.chat([[{"role": "user", "content": "hi"}]], params)
    assert [r["token_ids"] for r in rows[:3]] == [c.token_ids for c in want]


def test_bad_input_is_one_clear_line(tmp_path, capsys):
    assert main(["sample", "--model", "tiny", "--prompts-file", str(tmp_path / "missing.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.txt" in err[0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": 3}\n')
    assert main(["sample", "--model", "tiny", "--prompts-file", str(bad)]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
    assert main(["sample", "--model", "tiny"]) == 2
    assert "no prompts" in capsys.readouterr().err
