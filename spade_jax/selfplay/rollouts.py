"""Multi-turn agent episodes that never wait for each other: each episode's next turn goes to the policy as
soon as its environment has answered, and the policy answers each reply as soon as it is done.

The loop runs in ticks (`_play_all`). A tick: (1) one policy step (`poll`: for the model, admissions plus one
compiled decode chunk on the sampler's continuous-batching engine, which hands finished replies back once a few
are done), while the sessions opened at the previous tick load and reset in threads; (2) the replies are recorded
and their env steps run in threads, waited for together with those openings; (3) finished episodes' sessions are
closed in the background (the worker's cleanup overlaps the next chunk); (4) waiting episodes start in freed
places (opened in threads); (5) the next turns of the episodes that are ready are submitted, in episode order. A
reply's env step is folded in at the tick that produced it, so its episode's next turn joins the very next chunk
(no slot sits empty for a chunk while its environment steps), and every hand-over happens at a fixed tick whatever
the threads' timing, so a run is exactly reproducible. A policy with only `act` (e.g. `ScriptedPolicy`) answers
everything submitted at the next tick. Token-in, token-out: the engine keeps each episode's exact token sequence,
so what the learner trains on is what the sampler saw. A session owns a sandbox worker, so at most `pool.capacity`
(else `pool.num_workers`) episodes hold one; waiting ones start as sessions free up. Per episode it records the
token ids of every turn, the loss mask (1 only on tokens the policy produced), the sampler log-probs, the rewards
and return, the condition (hint / no_hint) and the environment id.

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
a hint is never measured. With `RolloutConfig.check_hint_leaks` the sandbox is asked whether the hint contains
the answer (`EnvSession.leaks`); a leak marks the episode `hint_leaked=True`, a failed check (timeout, crash,
malformed reply) marks it `leak_check="failed"` and counts as not leaked. The environment's `hint()` and the
leak check run in a session of their own (reset with the episode's seed, then closed) before the play's
session opens, so nothing they run inside the environment's process can mark the played session as hinted:
every played session sees reset and step only. Each episode keeps what the environment saw and answered, with
the time before each step (`Episode.trace`), for the audit that replays it (gates/audit.py).

Failure handling: an exception in the loop (the policy's, an interrupt) cancels the policy's pending requests,
waits for the dispatched environment work and closes every session before it propagates. A reply in the
wrong format is the environment's business (it answers with a reminder);
context overflow ends the episode cleanly (CONTEXT, return 0); with `no_eos="end"` so does an unhinted reply
that hit its token limit without an end token (LENGTH, not stepped: the reference's rule); a step that times
out ends it with TIMEOUT (return 0): the hang is the environment's fault, so the self-play step never trains
the agent on it; a step that raised or returned garbage discards the episode, or with
`step_error="terminal_penalty"` ends it terminated with reward -1 (STEP_ERROR, trained: the reference's rule);
any other sandbox failure discards the episode (counted, the run goes on). A step reward outside [-1, 1] ends
the episode with VIOLATION and `violation` saying why (return 0): the environment broke its contract.

Thinking turns (`thinking_turns="rerender"`, the reference's thinking actor): each turn's prompt is rendered by
the chat template from the conversation so far (the template drops earlier turns' think blocks), the episode
keeps each turn's prompt (`Episode.turn_prompts`) and its replies only (`completion_ids`, no observation
tokens), and the cycle makes one training sample per turn. The agent's system prompt, observation wrapper
and action parsing are `AgentPrompt` (agent_prompt.py), which evaluation uses too.
The policy is pluggable (see policies.py): `ModelPolicy` samples from the model; any object with
`act(requests)`, e.g. a `ScriptedPolicy`, can replace it.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

from spade_jax.config.selfplay import ACTION_PARSINGS, TOOL_FORMATS, RolloutConfig
from spade_jax.envs.base import extract_answer, extract_boxed, parse_tool_calls
from spade_jax.envs.outcome import episode_outcome, reward_problem
from spade_jax.interfaces import CallOutcome, EnvPool, EnvSessionLike, TokenizerLike
from spade_jax.selfplay.agent_prompt import AgentPrompt, wrap_observation
from spade_jax.selfplay.episodes import HINT, NO_HINT, EndReason, Episode, EpisodeSpec, RolloutResult
from spade_jax.selfplay.hints import inject_hint
from spade_jax.selfplay.policies import ModelPolicy, Policy, ScriptedPolicy, TurnReply, TurnRequest, as_stream

__all__ = [
    "HINT",
    "NO_HINT",
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
    "wrap_observation",
]

_ASSISTANT_MARK, _OBS_MARK = "\x00ASSISTANT\x00", "\x00OBSERVATION\x00"
# Stands in for an episode's tool schemas when the template pieces around a message are probed.
_PIECE_TOOLS = [{"type": "function", "function": {"name": "probe", "description": "Probe.",
                                                  "parameters": {"type": "object", "properties": {}}}}]  # fmt: skip


# --------------------------------------------------------------------------------------------- engine


class _Live:
    """Book-keeping of one running episode."""

    def __init__(self, index: int, spec: EpisodeSpec):
        self.index, self.spec = index, spec
        self.ep = Episode(spec=spec)
        self.session: EnvSessionLike | None = None
        self.info: dict = {}
        self.consecutive_format_errors = 0
        self.answered_at = 0.0  # when the environment last answered (its reset or step)
        self.sent: tuple[str, float] = ("", 0.0)  # the last action and the seconds before it
        self.next_prompt: list[int] | None = None  # thinking_turns="rerender": the next turn's rendered prompt

    @property
    def total_tokens(self) -> int:
        if self.next_prompt is not None:
            return len(self.next_prompt)
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
        workers = getattr(pool, "capacity", getattr(pool, "num_workers", None))
        self.max_live = max(1, int(max_live or workers or 16))
        if workers is not None:  # a session holds its worker: more live episodes than sessions would deadlock
            self.max_live = min(self.max_live, int(workers))
        self._executor = ThreadPoolExecutor(max_workers=self.max_live, thread_name_prefix="rollout")
        self._closing: list[Future] = []  # sessions being closed in the background (see _release)
        if config.action_parsing not in ACTION_PARSINGS:
            raise ValueError(f"rollout.action_parsing={config.action_parsing!r}; expected one of {ACTION_PARSINGS}")
        if config.tool_format not in TOOL_FORMATS:
            raise ValueError(f"rollout.tool_format={config.tool_format!r}; expected one of {TOOL_FORMATS}")
        self._eos = tuple(getattr(tokenizer, "eos_ids", ()) or ())
        self.prompt = AgentPrompt.of(config)
        self.rerender = config.thinking_turns == "rerender" and tokenizer is not None
        self._chat_kwargs = {"enable_thinking": bool(config.enable_thinking)}
        hinted = config.enable_thinking if config.hinted_enable_thinking is None else config.hinted_enable_thinking
        self._hinted_kwargs = {"enable_thinking": bool(hinted)}
        self._turn_pieces = self._template_pieces() if tokenizer is not None else None
        self._hinted_pieces = (
            self._template_pieces(kwargs=self._hinted_kwargs)
            if tokenizer is not None and self._hinted_kwargs != self._chat_kwargs
            else self._turn_pieces
        )
        # "auto": tool episodes use the template's own tool format when it renders tools and tool messages
        supports = getattr(tokenizer, "supports_tools", None)
        self.native_tools = config.tool_format == "auto" and callable(supports) and bool(supports())
        self._tool_pieces = (
            {role: self._template_pieces(role, _PIECE_TOOLS) for role in ("user", "tool")}
            if self.native_tools
            else None
        )

    # ---------------------------------------------------------------------------- chat template glue
    def _template_pieces(
        self, role: str = "user", tools: list[dict] | None = None, kwargs: dict | None = None
    ) -> tuple[str, str]:
        """(text between an assistant reply and the next observation, text after the observation) when the
        observation is a `role` message (`user`, or `tool` for a tool result in the template's tool format)."""
        msgs = [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": _ASSISTANT_MARK},
            {"role": role, "content": _OBS_MARK},
        ]
        rendered = self.tokenizer.apply_chat_template(
            msgs, tools=tools, add_generation_prompt=True, **(kwargs or self._chat_kwargs)
        )
        after = rendered.split(_ASSISTANT_MARK, 1)[1]
        between, tail = after.split(_OBS_MARK, 1)
        return between, tail

    def _kwargs(self, spec: EpisodeSpec) -> dict:
        """The chat template's arguments for an episode (hinted plays may think otherwise)."""
        return self._hinted_kwargs if spec.condition == HINT else self._chat_kwargs

    def _first_prompt(
        self, messages: list[dict], tools: list[dict] | None = None, kwargs: dict | None = None
    ) -> list[int]:
        """The rendered prompt of a conversation (the first turn's; every turn's when re-rendering); what the
        environment wrote (observation, hint, tool schemas) is text."""
        kw = kwargs or self._chat_kwargs
        return list(self.tokenizer.encode_chat(messages, tools, add_generation_prompt=True, **kw))

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
        return list(self.tokenizer.encode_spans([(between, True), (observation, False), (tail, True)]))

    # ------------------------------------------------------------------------------------------ run
    def run(self, specs: Sequence[EpisodeSpec]) -> RolloutResult:
        """Plays every spec to the end; discarded episodes are returned flagged, never raised.

        At most `max_live` episodes hold a sandbox at once (a session owns its worker); as episodes finish,
        their workers go back to the pool and waiting episodes start, in spec order.
        """
        t_start = time.perf_counter()
        result = RolloutResult(episodes=[])
        lives = [_Live(i, s) for i, s in enumerate(specs)]
        try:
            self._play_all(lives, result)
        finally:  # on every path, an exception included: a session left open would hold its worker forever
            self._release([lv for lv in lives if lv.session is not None])
            wait(self._closing)
            self._closing = []
        result.episodes = [lv.ep for lv in lives]
        result.wall_s = time.perf_counter() - t_start
        return result

    def _play_all(self, lives: list[_Live], result: RolloutResult) -> None:
        """The tick loop of `run` (see module doc)."""
        stream = as_stream(self.policy)
        waiting = collections.deque(lives)
        holding = 0  # episodes holding (or opening) a session
        starting: list[tuple[_Live, Future]] = []
        stepping: list[tuple[_Live, TurnReply, Future]] = []
        try:
            while waiting or holding:
                replies = []
                if stream.pending:
                    t = time.perf_counter()
                    replies = stream.poll(expect=len(starting))
                    result.policy_s += time.perf_counter() - t
                    result.turns += bool(replies)
                t = time.perf_counter()
                done = []
                for req, reply in replies:
                    lv = lives[req.index]
                    self._record_reply(lv, reply)
                    ended = self._ended_by(lv, reply)
                    if ended is not None:  # no room left, or (no_eos="end") a reply cut at its token limit
                        self._finish(lv, ended)
                        done.append(lv)
                    else:
                        action = self.prompt.action(reply.text, lv.spec.kind)
                        stepping.append((lv, reply, self._executor.submit(self._step, lv, action)))
                ready, over = self._collect(starting, stepping, result)
                starting, stepping, done = [], [], done + over
                requests = self._next_turns(sorted(ready, key=lambda lv: lv.index), done, result)
                self._release(done)
                holding -= len(done)
                while waiting and holding < self.max_live:
                    lv = waiting.popleft()
                    starting.append((lv, self._executor.submit(self._start, lv)))
                    holding += 1
                result.pool_s += time.perf_counter() - t
                if requests:
                    stream.submit(requests)
        except BaseException:
            wait([f for *_, f in starting + stepping])
            raise
        finally:  # nothing is left on the policy's engine, and it keeps nothing for the next run
            stream.cancel()

    def _collect(self, starting: list, stepping: list, result: RolloutResult) -> tuple[list[_Live], list[_Live]]:
        """Folds the environment work of the last tick into its episodes: (ready for a turn, over)."""
        ready, done = [], []
        for lv, fut in starting:
            if fut.result():
                ready.append(lv)
            else:
                result.failures[lv.ep.error or "start"] += 1
                done.append(lv)
        for lv, reply, fut in stepping:
            (ready if self._apply_step(lv, reply, fut.result(), result) else done).append(lv)
        return ready, done

    def _ended_by(self, lv: _Live, reply: TurnReply) -> EndReason | None:
        """Why a reply ends its episode before the environment sees it, if it does: the sampler ran out of room
        mid-reply (CONTEXT), or (no_eos="end") an unhinted reply hit its token limit without an end token
        (LENGTH; the reference's hinted plays step such a reply, so ours do too)."""
        if reply.finish_reason == "context":
            return EndReason.CONTEXT
        if reply.finish_reason == "length" and self.config.no_eos == "end" and lv.spec.condition == NO_HINT:
            return EndReason.LENGTH
        return None

    def _next_turns(self, ready: list[_Live], done: list[_Live], result: RolloutResult) -> list[TurnRequest]:
        """The next turn of each ready episode; those whose context has no room left end here (added to done)."""
        requests = []
        for lv in ready:
            max_new = min(self.config.max_new_tokens_per_turn, self.budget - lv.total_tokens)
            if self.tokenizer is not None and max_new < min(
                self.config.min_turn_tokens, self.config.max_new_tokens_per_turn
            ):
                if lv.ep.turns == 0:  # the first observation alone does not fit: nothing to learn from
                    result.failures["context"] += 1
                    self._discard(lv, "context", f"first prompt has {lv.total_tokens} tokens (budget {self.budget})")
                else:
                    self._finish(lv, EndReason.CONTEXT)
                done.append(lv)
                continue
            stops = self.config.tool_stop_strings if lv.spec.kind == "tool" else ()
            if lv.next_prompt is not None:  # re-rendered turns: the prompt is the conversation so far
                prompt = lv.next_prompt
                lv.ep.turn_prompts.append(list(prompt))
            else:
                prompt = lv.ep.prompt_ids + lv.ep.completion_ids
            requests.append(TurnRequest(lv.index, prompt, lv.ep.messages, max_new, stops, lv.spec, lv.ep.hint,
                                        lv.ep.turns, lv.ep.tools))  # fmt: skip
        return requests

    def _release(self, lives: list[_Live]) -> None:
        """Closes finished episodes' sessions in the background (the worker's cleanup overlaps the next decode
        chunk), handing their places back to the pool as each close ends; `run` waits for them before it returns.
        A session opened meanwhile waits in `pool.open` for a free place, so capacity is never exceeded."""
        for lv in lives:
            if lv.session is not None:
                self._closing.append(self._executor.submit(self._close, lv.session))
                lv.session = None

    def _step(self, lv: _Live, action: str) -> CallOutcome:
        """One env step, timed for the audit's replay (the seconds since the environment last answered)."""
        lv.sent = (action, time.monotonic() - lv.answered_at)
        result = lv.session.step(action)
        lv.answered_at = time.monotonic()
        return result

    def _start(self, lv: _Live) -> bool:
        spec, ep = lv.spec, lv.ep
        if spec.condition == HINT and not self._probe_hint(lv):  # hint and leak check: a session of their own
            return False
        obs = self._open_and_reset(lv)
        if obs is None:
            return False
        native = self._native_task(lv) if spec.kind == "tool" and self.native_tools else None
        if native is not None:  # the template shows the schemas (`tools=`); the user message is the task
            obs, ep.tools = native
        first = inject_hint(obs, ep.hint, self.hint_template) if spec.condition == HINT else obs
        ep.messages += self.prompt.first_messages(first, spec.kind)
        if self.tokenizer is not None:
            ep.prompt_ids = self._first_prompt(ep.messages, ep.tools, self._kwargs(spec))
            if self.rerender:
                lv.next_prompt = ep.prompt_ids
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
            kwargs = None if self.config.respect_game_max_turns else {"max_turns": self.config.max_turns}
            lv.session = self.pool.open(spec.source, env_kwargs=kwargs)
        except Exception as e:  # the pool reports failures as results; this is a last line of defence
            return self._discard(lv, "load_error", f"open failed: {e}") or None
        load = getattr(lv.session, "load_result", None)
        if load is not None and not getattr(load, "ok", True):
            return self._discard(lv, getattr(load, "error", None) or "load_error", getattr(load, "message", "")) or None
        res = lv.session.reset(spec.seed)
        lv.answered_at = time.monotonic()
        if not res.ok:
            return self._discard(lv, res.error or "exception", res.message) or None
        try:
            obs, info = res.value
        except (TypeError, ValueError):
            return self._discard(lv, "bad_return", "reset() did not return (observation, info)") or None
        if not isinstance(obs, str):
            return self._discard(lv, "bad_return", "reset() observation is not a str") or None
        lv.info = info if isinstance(info, dict) else {}
        lv.ep.reset_obs = obs
        return obs

    def _probe_hint(self, lv: _Live) -> bool | None:
        """The hinted episode's hint and its leak check, in a session of its own (reset with the episode's seed,
        then the env's `hint()` when asked for, then `leaks`), closed before the play's session opens: whatever
        these run inside the environment's process cannot mark the played session as hinted (it sees reset and
        step only, as every other). Sets `hint` / `hint_source` (the env's own when asked for and usable, else
        the spec's fixed hint), `hint_leaked` / `leak_check` (a failed check is "failed": unknown, not leaked).
        True when the episode can be played; None (discarded) when it has no usable hint."""
        ep, spec = lv.ep, lv.spec
        probe = None
        try:
            probe = self.pool.open(spec.source, env_kwargs={"max_turns": self.config.max_turns})
            loaded = getattr(getattr(probe, "load_result", None), "ok", True)
            reset = probe.reset(spec.seed) if loaded else None
            ready = reset is not None and reset.ok
            if spec.env_hint and ready:
                h = probe.hint()
                if h.ok and isinstance(h.value, str) and h.value.strip():
                    ep.hint, ep.hint_source = h.value.strip(), "env"
            if ep.hint is None and isinstance(spec.hint, str) and spec.hint.strip():
                ep.hint, ep.hint_source = spec.hint.strip(), "spec"
            if ep.hint is None:
                ep.hint_failed = True
                return self._discard(lv, "hint_failed", "the hinted play has no usable hint (regret not measured)")
            if self.config.check_hint_leaks:
                leaks = getattr(probe, "leaks", None)
                res = leaks(ep.hint) if ready and callable(leaks) else None
                value = res.value if res is not None and res.ok else None
                if isinstance(value, dict) and isinstance(value.get("leaked"), bool):
                    ep.hint_leaked = value["leaked"]
                    ep.leak_check = "leaked" if ep.hint_leaked else "clean"
                else:
                    ep.leak_check = "failed"
            return True
        except Exception as e:  # the pool reports failures as results; this is a last line of defence
            return self._discard(lv, "load_error", f"hint probe failed: {e}") or None
        finally:
            if probe is not None:
                self._close(probe)

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
                self._finish(lv, EndReason.TIMEOUT)
                return False
            return self._step_failed(lv, res.error or "exception", res.message, result)
        try:
            obs, reward, terminated, truncated, info = res.value
            problem = reward_problem(reward)
            reward = float(reward)
        except (TypeError, ValueError, OverflowError):  # the pool checks the shape; a stand-in pool may not
            return self._step_failed(lv, "bad_return", "step() did not return a 5-tuple", result)
        ep.trace.append((lv.sent[0], obs, reward, bool(terminated), bool(truncated), lv.sent[1]))
        if problem:
            problem = f"a step {problem}"
            ep.violation = problem
            self._finish(lv, EndReason.VIOLATION)
            return False
        ep.rewards.append(reward)
        info = info if isinstance(info, dict) else {}
        if terminated or truncated:
            self._finish(lv, EndReason.TERMINATED if terminated else EndReason.TRUNCATED)
            return False
        if lv.ep.turns >= self.config.max_turns:  # the env did not enforce the turn limit: truncated by us
            self._finish(lv, EndReason.MAX_TURNS)
            return False
        limit = self.config.max_consecutive_format_errors
        if limit is not None and lv.consecutive_format_errors >= limit:
            self._finish(lv, EndReason.FORMAT)
            return False
        obs = obs if isinstance(obs, str) else str(obs)
        # in the template's tool format the results of a reply's tool calls come back as a tool message; any
        # other observation (format reminder, a wrong answer's feedback) stays a user message
        role = "tool" if ep.tools is not None and parse_tool_calls(reply.text) else "user"
        ep.messages.append({"role": role, "content": obs})
        room = min(self.config.min_turn_tokens, self.config.max_new_tokens_per_turn)
        if self.rerender:
            lv.next_prompt = self._first_prompt(ep.messages, ep.tools, self._kwargs(lv.spec))
            if len(lv.next_prompt) + room > self.budget:
                ep.messages.pop()
                self._finish(lv, EndReason.CONTEXT)
                return False
        elif self.tokenizer is not None:
            hinted = self._hinted_pieces if lv.spec.condition == HINT else None
            pieces = self._tool_pieces[role] if ep.tools is not None else hinted
            delta = self._observation_ids(ep.completion_ids[ep.turn_spans[-1][0] :], obs, pieces)
            if lv.total_tokens + len(delta) + room > self.budget:
                ep.messages.pop()
                self._finish(lv, EndReason.CONTEXT)
                return False
            ep.completion_ids += delta
            ep.completion_mask += [0] * len(delta)
            ep.logprobs += [0.0] * len(delta)
            ep.raw_logprobs += [0.0] * len(delta)
        return True

    def _step_failed(self, lv: _Live, error: str, message: str | None, result: RolloutResult) -> bool:
        """step() raised or returned garbage: the episode is discarded, or (step_error="terminal_penalty", the
        reference's SyntheticGameEnv.step) it ends terminated with reward -1 and is trained. A crashed or
        out-of-memory sandbox is never the agent's reply's doing: discarded either way. Returns False."""
        result.failures[error] += 1
        if self.config.step_error == "terminal_penalty" and error in ("exception", "bad_return"):
            lv.ep.rewards.append(-1.0)
            lv.ep.error = error
            self._finish(lv, EndReason.STEP_ERROR)
            return False
        return self._discard(lv, error, message)

    def _finish(self, lv: _Live, reason: EndReason) -> None:
        """Ends the episode: only a terminal reason counts the last reward (`episode_outcome`)."""
        ep = lv.ep
        ep.end_reason, ep.terminated = reason, reason.terminal
        ep.episode_return, ep.won = episode_outcome(ep.rewards, ep.terminated)

    def _discard(self, lv: _Live, error: str, message: str | None) -> bool:
        ep = lv.ep
        ep.discarded, ep.end_reason = True, EndReason.DISCARDED
        ep.error = error
        ep.messages.append({"role": "error", "content": f"{error}: {(message or '').strip()[:500]}"})
        return False

    @staticmethod
    def _close(session: EnvSessionLike) -> None:
        try:
            session.close()
        except Exception:  # a dead worker is the pool's problem, not the run's
            pass

    def close(self) -> None:
        """Stops the engine's threads."""
        self._executor.shutdown(wait=True)


def _well_formed(text: str, kind: str) -> bool:
    """True when the reply carries an action in the kind's format (\\boxed{...} or a tool call / answer)."""
    if kind == "tool":
        return bool(parse_tool_calls(text)) or extract_answer(text) is not None
    return extract_boxed(text) is not None
