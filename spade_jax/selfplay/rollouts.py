"""Batched multi-turn agent episodes: all live episodes advance together, one sampler call per turn.

Each turn the conversations of every live episode go to the policy in ONE call (token-in, token-out: the
engine keeps each episode's exact token sequence, so what the learner trains on is what the sampler saw),
the replies go to the host pool in parallel, and finished episodes drop out (a session owns a sandbox
worker, so at most `pool.num_workers` episodes are live; waiting ones start as workers free up). Per
episode it records the token ids of every turn, the loss mask (1 only on tokens the policy produced), the
sampler log-probs, the rewards and return, the condition (hint / no_hint) and the environment id.

Returns and wins follow `spade_jax.envs.outcome.episode_outcome`: the terminal reward, clipped to [-1, 1],
counted only when the environment terminated the episode; 0 (and never a win) when it was truncated by the
environment, the turn limit or the context/token budget. The step rewards stay on the episode for logging.

Tool episodes (`RolloutConfig.tool_format`): with "auto" and a chat template that renders tools (probed once per
template, `Tokenizer.supports_tools`), the first prompt is the task (reset's `info["task"]` plus its
`instructions`) with the schemas (`info["tools"]`) given to the template as `tools=`, and the results of a reply's
tool calls come back as `role: "tool"` messages, whose tokens are the template's own text around a tool message
(as for user messages, probed once); any other observation stays a user message. An env that gives no schemas
apart from its text, a template without tool support (SmolLM2's ChatML) and "text" keep the env's textual list.

Hints: a hinted episode gets its spec's fixed hint (model-written) or, with `env_hint`, the environment's own
`hint()` (the fixed hint is the fallback). When neither gives a non-empty str, the hinted episode is
DISCARDED before its first turn (`error="hint_failed"`, `hint_failed=True`, counted): a "hinted" play without
a hint is never measured. With `RolloutConfig.check_hint_leaks` the worker is asked after reset whether the
hint contains the answer (`EnvSession.leaks`, run inside the sandbox); a leak marks the episode
`hint_leaked=True`, and a failed check (timeout, crash, malformed reply) marks it `leak_check="failed"` and
counts as not leaked; after a failed call the episode is reopened and reset with the same seed (the worker
may have killed it), and plays on.

Failure handling: a reply in the wrong format is the environment's business (it answers with a reminder);
context overflow ends the episode cleanly ('context', return 0); a step that times out ends it with
`end_reason="timeout"` (return 0): the hang is the environment's fault, so the self-play step never trains the
agent on it and gives the designer the timeout reward instead; any other sandbox failure discards the episode
(counted, the run goes on). A step reward outside [-1, 1] ends the episode with `end_reason="violation"` and
`violation` saying why (return 0): the environment broke its contract (selfplay/audit.py).
The policy is pluggable (see policies.py): `ModelPolicy` samples from the model; any object with
`act(requests)`, e.g. a `ScriptedPolicy`, can replace it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from spade_jax.envs.base import canonical_action, extract_answer, extract_boxed, parse_tool_calls
from spade_jax.envs.outcome import episode_outcome
from spade_jax.interfaces import CallOutcome, EnvPool, EnvSessionLike, TokenizerLike
from spade_jax.selfplay.audit import reward_violation
from spade_jax.selfplay.config import ACTION_PARSINGS, TOOL_FORMATS, RolloutConfig
from spade_jax.selfplay.hints import inject_hint
from spade_jax.selfplay.policies import ModelPolicy, Policy, ScriptedPolicy, TurnReply, TurnRequest

__all__ = [
    "Episode",
    "EpisodeSpec",
    "ModelPolicy",
    "Policy",
    "RolloutEngine",
    "RolloutResult",
    "ScriptedPolicy",
    "TurnReply",
    "TurnRequest",
    "episode_outcome",
]

HINT, NO_HINT = "hint", "no_hint"
_ASSISTANT_MARK, _OBS_MARK = "\x00ASSISTANT\x00", "\x00OBSERVATION\x00"
# Stands in for an episode's tool schemas when the template pieces around a message are probed.
_PIECE_TOOLS = [{"type": "function", "function": {"name": "probe", "description": "Probe.",
                                                  "parameters": {"type": "object", "properties": {}}}}]  # fmt: skip


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play: which environment, which reset seed, and whether the agent gets the hint.

    `hint` is a fixed hint (e.g. written by the model); with `env_hint` the engine asks the environment's own
    `hint()` after reset (falling back to `hint` when that fails or is empty). A hinted spec left without any
    hint is discarded with `error="hint_failed"`.
    """

    env_id: str
    source: str
    seed: int
    condition: str = NO_HINT
    hint: str | None = None
    env_hint: bool = False
    kind: str = "game"


@dataclass
class Episode:
    """A finished episode. `completion_*` cover everything after the first prompt (agent turns and the
    observations in between); `completion_mask` is 1 exactly on the agent's own tokens.

    `tools` are the tool schemas the chat template rendered (`tools=`) for a tool episode played in the
    template's own tool format (tool results are then `role: "tool"` messages); None when the tools were the
    environment's textual list (or the episode is no tool episode).
    `rewards` are the step rewards (logging only); `episode_return` / `won` follow `episode_outcome`.
    `terminated` is True only when the environment ended the episode. Hint fields (hinted episodes only):
    `hint` is the text the agent saw; `hint_source` "env" or "spec"; `hint_failed` True when there was no
    usable hint (the episode is then discarded, `error="hint_failed"`); `hint_leaked` True when the sandbox
    found the answer in the hint; `leak_check` "" (not run), "clean", "leaked" or "failed" (unknown, treated
    as not leaked). `violation` is '' or how the environment broke its contract during the episode (a reward
    out of range); the episode then ends with `end_reason="violation"`.
    """

    spec: EpisodeSpec
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    raw_logprobs: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)
    tools: list[dict] | None = None
    rewards: list[float] = field(default_factory=list)
    episode_return: float = 0.0
    won: bool = False
    terminated: bool = False
    end_reason: str = ""
    discarded: bool = False
    error: str | None = None
    format_errors: int = 0
    hint: str | None = None
    hint_source: str = ""
    hint_failed: bool = False
    hint_leaked: bool = False
    leak_check: str = ""
    violation: str = ""

    @property
    def condition(self) -> str:
        return self.spec.condition

    @property
    def env_id(self) -> str:
        return self.spec.env_id

    @property
    def turns(self) -> int:
        return len(self.turn_spans)

    @property
    def agent_tokens(self) -> int:
        return int(sum(self.completion_mask))


@dataclass
class RolloutResult:
    """All episodes (discarded ones included, flagged) plus timing and failure counts."""

    episodes: list[Episode]
    wall_s: float = 0.0
    policy_s: float = 0.0
    pool_s: float = 0.0
    turns: int = 0
    failures: Counter = field(default_factory=Counter)
    by_host: list[tuple[int, float]] = field(default_factory=list)  # (episodes, wall_s) per host, when several

    @classmethod
    def merge(cls, parts: Sequence[RolloutResult]) -> RolloutResult:
        """The hosts' results of one divided rollout as one, episodes in host order (the order of the specs):
        the wall time is the slowest host's, the policy and pool times the hosts' mean."""
        n = max(len(parts), 1)
        return cls(
            episodes=[e for p in parts for e in p.episodes],
            wall_s=max((p.wall_s for p in parts), default=0.0),
            policy_s=sum(p.policy_s for p in parts) / n,
            pool_s=sum(p.pool_s for p in parts) / n,
            turns=sum(p.turns for p in parts),
            failures=sum((p.failures for p in parts), Counter()),
            by_host=[(len(p.episodes), p.wall_s) for p in parts],
        )

    @property
    def kept(self) -> list[Episode]:
        return [e for e in self.episodes if not e.discarded]

    def stats(self) -> dict[str, float]:
        """Summary for logging."""
        kept = self.kept
        out = {
            "episodes": float(len(self.episodes)),
            "discarded": float(len(self.episodes) - len(kept)),
            "wall_s": self.wall_s,
            "policy_share": self.policy_s / self.wall_s if self.wall_s else 0.0,
            "pool_share": self.pool_s / self.wall_s if self.wall_s else 0.0,
            "episodes_per_s": len(self.episodes) / self.wall_s if self.wall_s else 0.0,
        }
        for cond in (HINT, NO_HINT):
            eps = [e for e in kept if e.condition == cond]
            if eps:
                out[f"return_{cond}"] = sum(e.episode_return for e in eps) / len(eps)
                out[f"win_rate_{cond}"] = sum(e.won for e in eps) / len(eps)
        if kept:
            out["turns_mean"] = sum(e.turns for e in kept) / len(kept)
            out["format_errors_mean"] = sum(e.format_errors for e in kept) / len(kept)
        for reason, n in Counter(e.end_reason for e in self.episodes).items():
            out[f"end_{reason}"] = float(n)
        if len(self.by_host) > 1:  # the load of a divided rollout: the busiest and the idlest host
            eps, wall = [n for n, _ in self.by_host], [w for _, w in self.by_host]
            out.update(host_episodes_max=float(max(eps)), host_episodes_min=float(min(eps)),
                       host_wall_s_max=max(wall), host_wall_s_min=min(wall))  # fmt: skip
        return out

    def hint_stats(self) -> dict[str, float]:
        """Hint counters over the hinted episodes: `hints/failed` (no usable hint: discarded), `hints/leaked`
        (the hint contains the answer), `hints/leak_check_failed` (unknown, counted as not leaked)."""
        hinted = [e for e in self.episodes if e.condition == HINT]
        return {
            "hints/episodes": float(len(hinted)),
            "hints/failed": float(sum(e.hint_failed for e in hinted)),
            "hints/leaked": float(sum(e.hint_leaked for e in hinted)),
            "hints/leak_check_failed": float(sum(e.leak_check == "failed" for e in hinted)),
        }


# --------------------------------------------------------------------------------------------- engine


class _Live:
    """Book-keeping of one running episode."""

    def __init__(self, index: int, spec: EpisodeSpec):
        self.index, self.spec = index, spec
        self.ep = Episode(spec=spec)
        self.session: EnvSessionLike | None = None
        self.info: dict = {}
        self.consecutive_format_errors = 0

    @property
    def total_tokens(self) -> int:
        return len(self.ep.prompt_ids) + len(self.ep.completion_ids)


class RolloutEngine:
    """Plays many episodes at once through `policy` (the sampler side) and `pool` (the sandbox side)."""

    def __init__(
        self,
        pool: EnvPool,
        policy: Policy,
        tokenizer: TokenizerLike | None = None,
        config: RolloutConfig = RolloutConfig(),
        *,
        max_context: int | None = None,
        hint_template: str = "{observation}\n\nHINT: {hint}",
        max_live: int | None = None,
    ):
        self.pool, self.policy, self.tokenizer, self.config = pool, policy, tokenizer, config
        self.budget = min(config.max_episode_tokens, max_context or config.max_episode_tokens)
        self.hint_template = hint_template
        workers = getattr(pool, "num_workers", None)
        self.max_live = max(1, int(max_live or workers or 16))
        if workers is not None:  # a session holds its worker: more live episodes than workers would deadlock
            self.max_live = min(self.max_live, int(workers))
        self._executor = ThreadPoolExecutor(max_workers=self.max_live, thread_name_prefix="rollout")
        if config.action_parsing not in ACTION_PARSINGS:
            raise ValueError(f"rollout.action_parsing={config.action_parsing!r}; expected one of {ACTION_PARSINGS}")
        if config.tool_format not in TOOL_FORMATS:
            raise ValueError(f"rollout.tool_format={config.tool_format!r}; expected one of {TOOL_FORMATS}")
        self._eos = tuple(getattr(tokenizer, "eos_ids", ()) or ())
        self._chat_kwargs = {"enable_thinking": bool(config.enable_thinking)}
        self._turn_pieces = self._template_pieces() if tokenizer is not None else None
        # "auto": tool episodes use the template's own tool format when it renders tools and tool messages
        supports = getattr(tokenizer, "supports_tools", None)
        self.native_tools = config.tool_format == "auto" and callable(supports) and bool(supports())
        self._tool_pieces = (
            {role: self._template_pieces(role, _PIECE_TOOLS) for role in ("user", "tool")}
            if self.native_tools
            else None
        )

    # ---------------------------------------------------------------------------- chat template glue
    def _template_pieces(self, role: str = "user", tools: list[dict] | None = None) -> tuple[str, str]:
        """(text between an assistant reply and the next observation, text after the observation) when the
        observation is a `role` message (`user`, or `tool` for a tool result in the template's tool format)."""
        msgs = [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": _ASSISTANT_MARK},
            {"role": role, "content": _OBS_MARK},
        ]
        rendered = self.tokenizer.apply_chat_template(
            msgs, tools=tools, add_generation_prompt=True, **self._chat_kwargs
        )
        after = rendered.split(_ASSISTANT_MARK, 1)[1]
        between, tail = after.split(_OBS_MARK, 1)
        return between, tail

    def _first_prompt(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, **self._chat_kwargs
        )
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _observation_ids(
        self, reply_ids: list[int], observation: str, pieces: tuple[str, str] | None = None
    ) -> list[int]:
        """Tokens that close the agent's turn (unless it already emitted the end token) and open the next;
        `pieces` are the template's text around the observation message (default: a user message)."""
        between, tail = pieces or self._turn_pieces
        if reply_ids and reply_ids[-1] in self._eos:
            end_text = self.tokenizer.decode([reply_ids[-1]])
            if between.startswith(end_text):
                between = between[len(end_text) :]
        return list(self.tokenizer.encode(between + observation + tail, add_special_tokens=False))

    # ------------------------------------------------------------------------------------------ run
    def run(self, specs: Sequence[EpisodeSpec]) -> RolloutResult:
        """Plays every spec to the end; discarded episodes are returned flagged, never raised.

        At most `max_live` episodes hold a sandbox at once (a session owns its worker); as episodes finish,
        their workers go back to the pool and waiting episodes start, joining the next sampler call.
        """
        t_start = time.perf_counter()
        result = RolloutResult(episodes=[])
        lives = [_Live(i, s) for i, s in enumerate(specs)]
        try:
            self._play_all(lives, result)
        finally:  # on every path, an exception included: a session left open would hold its worker forever
            self._release([lv for lv in lives if lv.session is not None])
        result.episodes = [lv.ep for lv in lives]
        result.wall_s = time.perf_counter() - t_start
        return result

    def _play_all(self, lives: list[_Live], result: RolloutResult) -> None:
        """The turn loop of `run`: starts waiting episodes as workers free up, steps the live ones together."""
        waiting = list(reversed(lives))
        live: list[_Live] = []
        while True:
            if waiting and len(live) < self.max_live:
                batch = [waiting.pop() for _ in range(min(self.max_live - len(live), len(waiting)))]
                t = time.perf_counter()
                started = list(self._executor.map(self._start, batch))
                result.pool_s += time.perf_counter() - t
                for lv, ok in zip(batch, started):
                    if ok:
                        live.append(lv)
                    else:
                        result.failures[lv.ep.error or "start"] += 1
                        self._release([lv])
                continue
            if not live:
                break
            requests, done = [], []
            for lv in live:
                max_new = min(self.config.max_new_tokens_per_turn, self.budget - lv.total_tokens)
                if self.tokenizer is not None and max_new < min(
                    self.config.min_turn_tokens, self.config.max_new_tokens_per_turn
                ):
                    if lv.ep.turns == 0:  # the first observation alone does not fit: nothing to learn from
                        result.failures["context"] += 1
                        self._discard(
                            lv, "context", f"first prompt has {lv.total_tokens} tokens (budget {self.budget})"
                        )
                    else:
                        self._finish(lv, "context")
                    done.append(lv)
                    continue
                stops = self.config.tool_stop_strings if lv.spec.kind == "tool" else ()
                requests.append(TurnRequest(lv.index, lv.ep.prompt_ids + lv.ep.completion_ids, lv.ep.messages,
                                            max_new, stops, lv.spec, lv.ep.hint, lv.ep.turns,
                                            lv.ep.tools))  # fmt: skip
            stepping = []
            if requests:
                t = time.perf_counter()
                replies = self.policy.act(requests)
                result.policy_s += time.perf_counter() - t
                result.turns += 1
                by_index = {lv.index: lv for lv in live}
                for req, reply in zip(requests, replies):
                    lv = by_index[req.index]
                    self._record_reply(lv, reply)
                    if reply.finish_reason == "context":  # the sampler ran out of room mid-reply: end cleanly
                        self._finish(lv, "context")
                        done.append(lv)
                    else:
                        stepping.append((lv, reply))
            t = time.perf_counter()
            steps = list(self._executor.map(lambda a: a[0].session.step(self._action(a[0], a[1].text)), stepping))
            for (lv, reply), res in zip(stepping, steps):
                if not self._apply_step(lv, reply, res, result):
                    done.append(lv)
            self._release(done)
            result.pool_s += time.perf_counter() - t
            finished = {id(lv) for lv in done}
            live = [lv for lv in live if id(lv) not in finished]

    def _action(self, lv: _Live, text: str) -> str:
        """What step() receives for a reply (see RolloutConfig.action_parsing; tool episodes always get the text)."""
        if self.config.action_parsing == "reference" and lv.spec.kind != "tool":
            return canonical_action(text)
        return text

    def _release(self, lives: list[_Live]) -> None:
        """Closes finished episodes' sessions in parallel, handing their workers back to the pool."""
        if lives:
            list(self._executor.map(self._close, lives))
            for lv in lives:
                lv.session = None

    def _start(self, lv: _Live) -> bool:
        spec, ep = lv.spec, lv.ep
        obs = self._open_and_reset(lv)
        if obs is None:
            return False
        if spec.condition == HINT:
            ep.hint, ep.hint_source = self._fetch_hint(lv)
            if ep.hint is None:
                ep.hint_failed = True
                return self._discard(lv, "hint_failed", "the hinted play has no usable hint (regret not measured)")
            if self.config.check_hint_leaks and self._check_leak(lv) is None:
                return False
        native = self._native_task(lv) if spec.kind == "tool" and self.native_tools else None
        if native is not None:  # the template shows the schemas (`tools=`); the user message is the task
            obs, ep.tools = native
        first = inject_hint(obs, ep.hint, self.hint_template) if spec.condition == HINT else obs
        first = wrap_observation(first, self.config.observation_template, spec.kind)
        if self.config.system_prompt:
            ep.messages.append({"role": "system", "content": self.config.system_prompt})
        ep.messages.append({"role": "user", "content": first})
        if self.tokenizer is not None:
            ep.prompt_ids = self._first_prompt(ep.messages, ep.tools)
        return True

    @staticmethod
    def _native_task(lv: _Live) -> tuple[str, list[dict]] | None:
        """(first observation without the textual tool list, tool schemas) from reset's info (`task`, `tools`,
        optional `instructions`: see ToolEnv.reset); None when the env does not provide them (text fallback)."""
        info = lv.info
        task, tools, instructions = info.get("task"), info.get("tools"), info.get("instructions")
        if not isinstance(task, str) or not task.strip() or not isinstance(tools, list) or not tools:
            return None
        functions = [t.get("function") or t if isinstance(t, dict) else None for t in tools]
        if not all(isinstance(f, dict) and isinstance(f.get("name"), str) for f in functions):
            return None
        if isinstance(instructions, str) and instructions.strip():
            task = f"{task}\n\n{instructions}"
        return task, tools

    def _open_and_reset(self, lv: _Live) -> str | None:
        """Opens a session for the episode and resets it with the spec's seed: the first observation, or None
        (the episode is then discarded with the failure as its error)."""
        spec = lv.spec
        try:
            lv.session = self.pool.open(spec.source, env_kwargs={"max_turns": self.config.max_turns})
        except Exception as e:  # the pool reports failures as results; this is a last line of defence
            return self._discard(lv, "load_error", f"open failed: {e}") or None
        load = getattr(lv.session, "load_result", None)
        if load is not None and not getattr(load, "ok", True):
            return self._discard(lv, getattr(load, "error", None) or "load_error", getattr(load, "message", "")) or None
        res = lv.session.reset(spec.seed)
        if not res.ok:
            return self._discard(lv, res.error or "exception", res.message) or None
        try:
            obs, info = res.value
        except (TypeError, ValueError):
            return self._discard(lv, "bad_return", "reset() did not return (observation, info)") or None
        if not isinstance(obs, str):
            return self._discard(lv, "bad_return", "reset() observation is not a str") or None
        lv.info = info if isinstance(info, dict) else {}
        return obs

    def _fetch_hint(self, lv: _Live) -> tuple[str | None, str]:
        """(hint, source) of a hinted episode: the env's own `hint()` when asked for and usable (a non-empty
        str), else the spec's fixed hint; (None, "") when neither is usable."""
        if lv.spec.env_hint:
            h = lv.session.hint()
            if h.ok and isinstance(h.value, str) and h.value.strip():
                return h.value.strip(), "env"
        fixed = lv.spec.hint
        if isinstance(fixed, str) and fixed.strip():
            return fixed.strip(), "spec"
        return None, ""

    def _check_leak(self, lv: _Live) -> bool | None:
        """Asks the sandbox whether the hint contains the answer; sets `hint_leaked` / `leak_check`.

        Any failure is "unknown" (`leak_check="failed"`, not leaked). After a failed call the session is
        reopened and reset with the same seed (the worker may have killed it; the episode is deterministic);
        None when even that fails (the episode is then discarded)."""
        ep = lv.ep
        leaks = getattr(lv.session, "leaks", None)
        res = leaks(ep.hint) if callable(leaks) else None
        value = res.value if res is not None and res.ok else None
        if isinstance(value, dict) and isinstance(value.get("leaked"), bool):
            ep.hint_leaked = value["leaked"]
            ep.leak_check = "leaked" if ep.hint_leaked else "clean"
            return ep.hint_leaked
        ep.leak_check = "failed"
        if res is not None and not res.ok:  # the worker may have killed the episode process: replay it
            self._close(lv)
            if self._open_and_reset(lv) is None:
                return None
        return False

    def _record_reply(self, lv: _Live, reply: TurnReply) -> None:
        ep = lv.ep
        ids = reply.token_ids
        if ids is None and self.tokenizer is not None:
            ids = list(self.tokenizer.encode(reply.text, add_special_tokens=False)) + list(self._eos[:1])
        ids = list(ids or [])
        lp = list(reply.logprobs) if reply.logprobs is not None else [0.0] * len(ids)
        raw = list(reply.raw_logprobs) if reply.raw_logprobs is not None else lp
        start = len(ep.completion_ids)
        ep.completion_ids += ids
        ep.completion_mask += [1] * len(ids)
        ep.logprobs += lp[: len(ids)] + [0.0] * (len(ids) - len(lp))
        ep.raw_logprobs += raw[: len(ids)] + [0.0] * (len(ids) - len(raw))
        ep.turn_spans.append((start, len(ep.completion_ids)))
        ep.messages.append({"role": "assistant", "content": reply.text})
        if not _well_formed(reply.text, lv.spec.kind):
            ep.format_errors += 1
            lv.consecutive_format_errors += 1
        else:
            lv.consecutive_format_errors = 0

    def _apply_step(self, lv: _Live, reply: TurnReply, res: CallOutcome, result: RolloutResult) -> bool:
        """Folds one step result into the episode; False when the episode is over."""
        ep = lv.ep
        if not res.ok:
            if res.error == "timeout":
                result.failures["timeout"] += 1
                self._finish(lv, "timeout")
                return False
            result.failures[res.error or "exception"] += 1
            self._discard(lv, res.error or "exception", res.message)
            return False
        try:
            obs, reward, terminated, truncated, info = res.value
            problem = reward_violation(reward)
            reward = float(reward)
        except (TypeError, ValueError, OverflowError):  # the pool checks the shape; a stand-in pool may not
            result.failures["bad_return"] += 1
            self._discard(lv, "bad_return", "step() did not return a 5-tuple")
            return False
        if problem:
            ep.violation = problem
            self._finish(lv, "violation")
            return False
        ep.rewards.append(reward)
        info = info if isinstance(info, dict) else {}
        if terminated or truncated:
            self._finish(lv, "terminated" if terminated else "truncated")
            return False
        if lv.ep.turns >= self.config.max_turns:  # the env did not enforce the turn limit: truncated by us
            self._finish(lv, "max_turns")
            return False
        limit = self.config.max_consecutive_format_errors
        if limit is not None and lv.consecutive_format_errors >= limit:
            self._finish(lv, "format")
            return False
        obs = obs if isinstance(obs, str) else str(obs)
        # in the template's tool format the results of a reply's tool calls come back as a tool message; any
        # other observation (format reminder, a wrong answer's feedback) stays a user message
        role = "tool" if ep.tools is not None and parse_tool_calls(reply.text) else "user"
        ep.messages.append({"role": role, "content": obs})
        if self.tokenizer is not None:
            pieces = self._tool_pieces[role] if ep.tools is not None else None
            delta = self._observation_ids(ep.completion_ids[ep.turn_spans[-1][0] :], obs, pieces)
            room = min(self.config.min_turn_tokens, self.config.max_new_tokens_per_turn)
            if lv.total_tokens + len(delta) + room > self.budget:
                ep.messages.pop()
                self._finish(lv, "context")
                return False
            ep.completion_ids += delta
            ep.completion_mask += [0] * len(delta)
            ep.logprobs += [0.0] * len(delta)
            ep.raw_logprobs += [0.0] * len(delta)
        return True

    def _finish(self, lv: _Live, reason: str) -> None:
        """Ends the episode: only reason "terminated" counts the terminal reward (`episode_outcome`)."""
        ep = lv.ep
        ep.end_reason, ep.terminated = reason, reason == "terminated"
        ep.episode_return, ep.won = episode_outcome(ep.rewards, ep.terminated)

    def _discard(self, lv: _Live, error: str, message: str | None) -> bool:
        ep = lv.ep
        ep.discarded, ep.end_reason = True, "discarded"
        ep.error = error
        ep.messages.append({"role": "error", "content": f"{error}: {(message or '').strip()[:500]}"})
        return False

    @staticmethod
    def _close(lv: _Live) -> None:
        if lv.session is not None:
            try:
                lv.session.close()
            except Exception:  # a dead worker is the pool's problem, not the run's
                pass

    def close(self) -> None:
        """Stops the engine's threads."""
        self._executor.shutdown(wait=True)


def wrap_observation(observation: str, template: str | None, kind: str = "game") -> str:
    """A game's first observation in `template` (RolloutConfig.observation_template); tool episodes and
    template None keep it as is (the reference wraps game observations only)."""
    if not template or kind == "tool":
        return observation
    return template.format(observation=observation)


def _well_formed(text: str, kind: str) -> bool:
    """True when the reply carries an action in the kind's format (\\boxed{...} or a tool call / answer)."""
    if kind == "tool":
        return bool(parse_tool_calls(text)) or extract_answer(text) is not None
    return extract_boxed(text) is not None
