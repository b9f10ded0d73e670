"""The Environment Designer: prompt (contract, kind and skill, grounding document, exemplars), generation,
extraction and gates. A design that fails a gate is either drawn again from the same prompt (`resample`, the
reference's way) or repaired by feeding the failing gate's reason back (`repair`), a bounded number of times.

All designs of a step are generated in one sampler call, validated in parallel in the host pool, and every
attempt (valid or not) is recorded in the memory with its verdict. Prompts are rendered with the model's chat
template and budgeted so prompt + completion fit the context: exemplars are dropped first (negatives, then
positives), then the grounding document is shortened.

A mutation target (`DesignTarget.parent_id`, dealt by the cycle) shows one archived, measured environment and
asks for a changed version of it (harder, easier or a twist, by its win rate): no document, no exemplars; when
that prompt does not fit the budget, the target is designed from scratch instead.

Two prompt layouts (`designer.prompt`): ours (`design_messages`: contract, task, document, exemplars, closing
rules) and the reference's corpus-grounded one (`reference_messages`: a one-sentence system prompt, the
document, the contract, the target skill with its DIFFICULTY, the memory's exemplars last, code cut at
`exemplar_max_chars` without a marker, negatives by name only). With `resample_fresh_prompt` every resample
draws a new document and new exemplars, as the reference does; otherwise it reuses the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from spade_jax import streams
from spade_jax.config.selfplay import DesignerConfig
from spade_jax.envs.contract import contract_text
from spade_jax.envs.formats import source_contract
from spade_jax.gates.sandboxed import GateConfig, Verdict, validate
from spade_jax.infra.hosts import Hosts
from spade_jax.interfaces import EnvPool, GroundingCorpus, SamplerLike, TokenizerLike
from spade_jax.selfplay.corpus import Document
from spade_jax.selfplay.memory import EnvRecord, Memory

__all__ = [
    "DesignAttempt",
    "DesignResult",
    "DesignTarget",
    "Designer",
    "PromptParts",
    "design_messages",
    "mutation_direction",
    "mutation_messages",
]

_SYSTEM = (
    "You are an expert designer of training environments for language-model agents. You write complete, "
    "correct, deterministic Python environments that follow the given contract exactly."
)
# The reference's one-sentence system prompt for game design (prompts/template.py), in our words.
_REFERENCE_SYSTEM = (
    "You are an expert Python programmer and game designer who builds interactive, multi-turn text games, in "
    "which a player makes a sequence of decisions and every action changes the state of the game."
)
# What each skill trains, for the reference prompt's "Target skill" line (our words).
_SKILL_NOTES = {
    "pattern recognition": "finding the rule behind sequences, shapes and repetitions",
    "logical deduction": "drawing conclusions that must follow from given facts and constraints",
    "mathematical reasoning": "solving mathematical problems and equations",
    "spatial reasoning": "reasoning about positions, directions, shapes and movement",
    "strategic planning": "choosing a sequence of moves that reaches a goal",
    "causal inference": "working out what causes what from observed effects",
    "memory recall": "keeping track of information seen earlier and using it later",
    "optimization": "finding the best choice under constraints",
    "language understanding": "reading and using the meaning of words and text",
}
_MIN_STEPS = {"easy": 2, "medium": 3, "hard": 3}
_KIND_NOTES = {
    "game": "a multi-turn GAME with hidden state, a real decision every turn, a win and a lose condition",
    "tool": "a multi-turn TOOL-USE task against a simulated backend, solved by calling tools and then answering",
    "reasoning": "a REASONING question (one or a few turns) with a single verifiable answer",
}


@dataclass(frozen=True)
class DesignTarget:
    """What to design: the kind and the skill (or tool domain); `parent_id`: a mutation of that archived
    environment (None: from scratch)."""

    kind: str
    skill: str
    parent_id: str | None = None


@dataclass
class PromptParts:
    """The variable pieces of a designer prompt (what the budget may trim)."""

    target: DesignTarget
    document: Document | None = None
    positives: list[EnvRecord] = field(default_factory=list)
    negatives: list[EnvRecord] = field(default_factory=list)
    exemplar_max_chars: int = 4000


def _positive_block(recs: Sequence[EnvRecord], max_chars: int) -> str:
    parts = []
    for i, r in enumerate(recs, 1):
        code = r.code if len(r.code) <= max_chars else r.code[:max_chars] + "\n# ... (truncated)\n"
        if r.win_rate_no_hint is None:
            stats = "a well-formed reference environment"
        else:
            stats = f"agent win rate {r.win_rate_no_hint:.2f}, hint regret {r.regret or 0.0:.2f}"
        parts.append(f"### Example {i} ({r.kind}, skill: {r.skill}; {stats})\n```python\n{code.strip()}\n```")
    return "\n\n".join(parts)


def _negative_block(recs: Sequence[EnvRecord]) -> str:
    lines = []
    for r in recs:
        wr = r.win_rate_no_hint or 0.0
        why = "too easy" if wr > 0.5 else "too hard"
        lines.append(f"- {why} (agent win rate {wr:.2f}): {r.name or r.id} ({r.kind}, skill: {r.skill})")
    return "\n".join(lines)


def _naming(contract: str, target: DesignTarget) -> str:
    """How the file names its kind and skill: class attributes in ours, a class named ...Env in the paper's."""
    if contract in ("gym", "interactive"):
        return "Name the class after the game, ending in Env."
    return f'Set KIND = "{target.kind}" and SKILL = "{target.skill}".'


def design_messages(parts: PromptParts, contract: str = "full") -> list[dict]:
    """Chat messages of a designer prompt (`contract`: which contract text, DesignerConfig.contract)."""
    t = parts.target
    sections = [contract_text(contract).strip(), "# Your task"]
    sections.append(
        f'Write a NEW environment of kind "{t.kind}" ({_KIND_NOTES.get(t.kind, t.kind)}) that trains the skill: '
        f"{t.skill}. {_naming(contract, t)}"
    )
    if parts.document is not None:
        sections.append(
            "Ground the environment in the document below: take its theme, entities, rules or facts and turn "
            "them into the environment's hidden state and mechanics (the agent never sees the document).\n"
            f"<document>\n{parts.document.text.strip()}\n</document>"
        )
    if parts.positives:
        sections.append(
            "Environments at the right difficulty for the current agent (learn from their structure, do not "
            "copy them):\n\n" + _positive_block(parts.positives, parts.exemplar_max_chars)
        )
    if parts.negatives:
        sections.append("Do not make environments like these:\n" + _negative_block(parts.negatives))
    sections.append(
        "The agent should be able to win by reasoning well, random play must win at most 15% of episodes, and "
        "the same seed must always give the same episode. Reply with the complete file in ONE ```python code "
        "block, with no other code blocks."
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": "\n\n".join(sections)}]


def reference_messages(parts: PromptParts, contract: str = "interactive", difficulty: str = "medium") -> list[dict]:
    """Chat messages of the reference's corpus-grounded designer prompt (prompts/corpus_template.py and
    `_augment_prompt_with_memory`, in our words): the document, the contract, the target skill and difficulty,
    then the memory's exemplars (positives with their code cut at `exemplar_max_chars`, negatives by name)."""
    t = parts.target
    sections = []
    if parts.document is not None:
        sections.append(
            "You are given a reference document. Create an INTERACTIVE, MULTI-TURN Python game environment "
            "grounded in a concept or technique from it.\n\n"
            f"<REFERENCE_DOCUMENT>\n{parts.document.text.strip()}\n</REFERENCE_DOCUMENT>"
        )
    else:
        sections.append("Create an INTERACTIVE, MULTI-TURN Python game environment.")
    sections.append(contract_text(contract).strip())
    note = _SKILL_NOTES.get(t.skill, _KIND_NOTES.get(t.kind, t.kind))
    sections.append(
        f"Target skill: {t.skill.title()} ({note}). DIFFICULTY: {difficulty}: the goal should need "
        f"{_MIN_STEPS[difficulty]}+ interaction steps.\n\nGenerate the complete Python code in a ```python block."
    )
    if parts.positives:
        shown = []
        for i, r in enumerate(parts.positives, 1):
            stats = f"skill: {r.skill}, win_rate: {r.win_rate_no_hint or 0.0:.2f}, regret: {r.regret or 0.0:.2f}"
            shown.append(f"### Example {i} ({stats})\n```python\n{r.code[: parts.exemplar_max_chars]}\n```")
        sections.append(
            "<REFERENCE_ENVIRONMENTS>\nThese environments were well calibrated: the agent wins some episodes and "
            "loses others. Use them as inspiration, but create a DIFFERENT game.\n\n"
            + "\n\n".join(shown) + "\n</REFERENCE_ENVIRONMENTS>"
        )  # fmt: skip
    if parts.negatives:
        lines = []
        for r in parts.negatives:
            wr = r.win_rate_no_hint or 0.0
            lines.append(f"- {'too easy' if wr > 0.5 else 'too hard'} (win_rate={wr:.2f}): class {r.name or r.id}")
        sections.append("Avoid generating environments like:\n" + "\n".join(lines))
    return [{"role": "system", "content": _REFERENCE_SYSTEM}, {"role": "user", "content": "\n\n".join(sections)}]


_DIRECTIONS = {
    "harder": (
        "The agent wins too often: make the environment HARDER. Turn its difficulty knobs: bigger sizes, boards "
        "or number ranges, fewer turns allowed, more items, pieces or constraints to keep track of, less "
        "informative feedback."
    ),
    "easier": (
        "The agent (almost) never wins: make the environment EASIER. Turn its difficulty knobs the other way: "
        "smaller sizes, boards or number ranges, more turns allowed, fewer items or constraints, more "
        "informative feedback."
    ),
    "twist": (
        "The difficulty is about right: keep it, and add a TWIST: a new rule, mechanic, action or kind of "
        "feedback that changes how the agent has to reason, on a theme of your choice."
    ),
    "new": (
        "Write a VARIANT of it at another difficulty: turn its difficulty knobs (sizes, boards or number ranges, "
        "turns allowed, items or constraints), or add a twist to its rules."
    ),
}


def _measurement(parent: EnvRecord, band: tuple[float, float]) -> str:
    """How the agent plays the parent, in the prompt's words (an unmeasured parent: not played yet)."""
    if not parent.measured:
        return "not yet played by the current agent"
    return (
        f"as the current agent plays it: without a hint the agent wins {parent.win_rate_no_hint:.0%} of its episodes "
        f"(the target range is {band[0]:.0%} to {band[1]:.0%}), and a hint about the approach changes its return by "
        f"{parent.regret or 0.0:+.2f} (the regret)"
    )


def mutation_direction(win_rate: float, band: tuple[float, float]) -> str:
    """'harder' above the win-rate band, 'easier' below it, 'twist' inside it."""
    lo, hi = band
    return "harder" if win_rate > hi else "easier" if win_rate < lo else "twist"


_CHANGE_RULE = {
    False: "Changing only numbers or names is not enough: a program with the same structure as an archived one "
    "counts as a copy and is rejected, so change the code itself (its rules, state, actions or checks).",
    True: "Changing its difficulty constants (the UPPER_CASE numbers: sizes, counts, budgets) is enough; renaming "
    "alone is not: a program equal to an archived one in structure and constants counts as a copy.",
}


def mutation_messages(
    parent: EnvRecord,
    target: DesignTarget,
    band: tuple[float, float],
    contract: str | None = contract_text("full"),
    *,
    constants_ok: bool = False,
) -> list[dict]:
    """Chat messages of a mutation prompt: the parent's complete code, its measured unhinted win rate and
    regret, and the change its win rate calls for (`mutation_direction`). `contract=None` leaves the contract
    out (the parent, a valid environment, shows it) for contexts too small for both. `constants_ok`: the archive
    accepts parameter variants (`memory.max_param_variants`), so new difficulty constants are change enough."""
    direction = mutation_direction(parent.win_rate_no_hint, band) if parent.measured else "new"
    skill_note = (
        f' It trains the skill: {target.skill}.' if parent.skill == target.skill
        else f' It was written for the skill "{parent.skill}"; your version must train the skill: {target.skill}.'
    )  # fmt: skip
    sections = [contract.strip(), "# Your task"] if contract else ["# Your task"]
    sections.append(
        f'Below is an environment of kind "{target.kind}" ({_KIND_NOTES.get(target.kind, target.kind)}) from the '
        f"archive, {_measurement(parent, band)}.{skill_note}\n\n```python\n{parent.code.strip()}\n```"
    )
    keep = " Keep the environment contract this file follows (its base class, imports and methods)."
    gym = source_contract(parent.code) == "gym"
    naming = "End the class name in Env." if gym else f'Set KIND = "{target.kind}" and SKILL = "{target.skill}".'

    sections.append(_DIRECTIONS[direction])
    sections.append(
        f"Write the changed version as a NEW environment with a new class name. {naming} "
        f"{_CHANGE_RULE[constants_ok]}{'' if contract else keep} The agent should be "
        "able to win by reasoning "
        "well, random play must win at most 15% of episodes, and the same seed must always give the same "
        "episode. Reply with the complete file in ONE ```python code block, with no other code blocks."
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": "\n\n".join(sections)}]


def repair_messages(base: list[dict], previous: str, verdict: Verdict) -> list[dict]:
    """The conversation for a repair attempt: the failed reply and the gate's reason."""
    feedback = (
        f"Your environment was rejected at the '{verdict.gate}' gate: {verdict.reason}\n"
        "Fix the problem and reply with the complete corrected file in ONE ```python code block."
    )
    return [*base, {"role": "assistant", "content": previous}, {"role": "user", "content": feedback}]


@dataclass
class DesignAttempt:
    """One generation and its verdict; `record_id` is its row in the memory."""

    attempt: int
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    raw_logprobs: list[float]
    text: str
    finish_reason: str
    verdict: Verdict
    record_id: str
    messages: list[dict] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.verdict.valid


@dataclass
class DesignResult:
    """All attempts for one target; the environment is the last attempt's when that one is valid."""

    target: DesignTarget
    doc_id: str | None
    attempts: list[DesignAttempt] = field(default_factory=list)
    mutation_of: str | None = None  # the parent shown, when the target was designed as a mutation

    @property
    def valid(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].valid

    @property
    def env_id(self) -> str | None:
        return self.attempts[-1].record_id if self.valid else None

    @property
    def source(self) -> str | None:
        return self.attempts[-1].verdict.source if self.valid else None

    def trainable(self, config: DesignerConfig) -> list[DesignAttempt]:
        """The attempts the designer role trains on: with `resample`, the valid one only; with `repair`, all
        attempts (or the first, without `train_on_repairs`), invalid ones at reward 0."""
        if config.on_invalid == "resample":
            return [a for a in self.attempts if a.valid]
        return self.attempts if config.train_on_repairs else self.attempts[:1]


class Designer:
    """Generates, validates, repairs and records environments."""

    def __init__(
        self,
        sampler: SamplerLike,
        tokenizer: TokenizerLike,
        pool: EnvPool,
        memory: Memory,
        config: DesignerConfig = DesignerConfig(),
        *,
        corpus: GroundingCorpus | None = None,
        gate_config: GateConfig = GateConfig(),
        exemplars: tuple[int, int] = (2, 1),
        exemplar_max_chars: int = 4000,
        threads: int = 1,
        seed: int = 0,
        hosts: Hosts = Hosts(),
    ):
        self.sampler, self.tokenizer, self.pool, self.memory = sampler, tokenizer, pool, memory
        self.hosts = hosts  # several: each host generates and gates its block of an attempt's prompts
        self.config, self.corpus, self.gate_config = config, corpus, gate_config
        self.exemplars, self.exemplar_max_chars = exemplars, exemplar_max_chars
        self.threads, self.seed = threads, seed
        sampler_ctx = getattr(sampler, "max_total_len", None) or config.context_len
        self.context_len = min(config.context_len, sampler_ctx)
        # The reference passes its budget to the sampler as is; here the prompt keeps at least half the context
        # or 12,288 tokens, whichever is less (32K context: up to 20,480 new tokens, the 8B recipe's 20,000).
        self.max_new_tokens = min(config.max_new_tokens, max(self.context_len // 2, self.context_len - 12288))
        self.calls = 0

    # --------------------------------------------------------------------------------- prompt budget
    def encode(self, messages: list[dict]) -> list[int]:
        """Token ids of the rendered chat prompt; sources, exemplars and documents in it are text (never a
        special token, `Tokenizer.encode_chat`)."""
        return list(
            self.tokenizer.encode_chat(
                messages, add_generation_prompt=True, enable_thinking=bool(self.config.enable_thinking)
            )
        )

    @property
    def prompt_budget(self) -> int:
        return self.context_len - self.max_new_tokens

    def fit(self, parts: PromptParts, extra: list[dict] | None = None) -> tuple[list[dict], list[int], PromptParts]:
        """Messages and ids of the prompt trimmed to the budget (exemplars first, then the document)."""
        budget = self.prompt_budget

        def render(p: PromptParts) -> tuple[list[dict], list[int]]:
            if self.config.prompt == "reference":
                msgs = reference_messages(p, self.config.contract, self.config.difficulty)
            else:
                msgs = design_messages(p, self.config.contract)
            return msgs, self.encode(msgs + (extra or []))

        msgs, ids = render(parts)
        while len(ids) > budget and (parts.negatives or parts.positives):
            if parts.negatives:
                parts.negatives = parts.negatives[:-1]
            else:
                parts.positives = parts.positives[:-1]
            msgs, ids = render(parts)
        if len(ids) > budget and parts.document is not None:
            doc = parts.document
            doc_ids = list(self.tokenizer.encode_text(doc.text))
            keep = len(doc_ids) - (len(ids) - budget) - 8
            if keep < self.config.min_doc_tokens:
                parts.document = None
            else:
                parts.document = Document(doc.id, self.tokenizer.decode(doc_ids[:keep]), doc.source, True)
            msgs, ids = render(parts)
            while len(ids) > budget and parts.document is not None:  # re-tokenisation can add a few tokens
                cut = parts.document.text[: int(len(parts.document.text) * 0.9)]
                parts.document = Document(doc.id, cut, doc.source, True) if len(cut) > 200 else None
                msgs, ids = render(parts)
        if len(ids) > budget:
            raise ValueError(
                f"designer prompt needs {len(ids)} tokens even without exemplars and document, but only "
                f"{budget} fit (context {self.context_len} - {self.max_new_tokens} new tokens): raise "
                "designer.context_len or lower designer.max_new_tokens"
            )
        return msgs, ids, parts

    def fit_mutation(
        self, target: DesignTarget, extra: list[dict] | None = None
    ) -> tuple[list[dict], list[int], EnvRecord] | None:
        """Messages, ids and parent of a mutation prompt for `target`, or None when its parent is gone (evicted)
        or the prompt with the parent's code does not fit the budget even without the contract (then:
        from scratch)."""
        parent = self.memory.get(target.parent_id) if target.parent_id else None
        if parent is None or parent.status != "valid":
            return None
        contracts = (contract_text(self.config.contract), None) if self.config.mutation_contract else (None,)
        ok = self.memory.config.max_param_variants > 0
        for contract in contracts:  # the contract goes first when both do not fit
            msgs = mutation_messages(parent, target, self.memory.config.positive_band, contract, constants_ok=ok)
            ids = self.encode(msgs + (extra or []))
            if len(ids) <= self.prompt_budget:
                return msgs, ids, parent
        return None

    def parts_for(self, target: DesignTarget) -> PromptParts:
        """Draws a grounding document and exemplars for one target."""
        doc = self.corpus.next() if (self.corpus is not None and self.config.use_corpus) else None
        pos = neg = []
        if self.config.use_memory:
            pos = self.memory.positives(self.exemplars[0], kind=target.kind, skill=target.skill)
            neg = self.memory.negatives(self.exemplars[1], kind=target.kind, skill=target.skill)
        return PromptParts(target, doc, list(pos), list(neg), self.exemplar_max_chars)

    # --------------------------------------------------------------------------------------- design
    def _attempt(self, prompts: list[list[int]]) -> list[tuple[Any, Verdict]]:
        """One completion per prompt and its verdict, in order: each host generates and gates its block (in its
        own sandboxes) and every host gets them all. One sampler call per host and attempt."""
        seed = streams.derive(self.seed, "designer", self.calls)
        self.calls += 1

        def mine(block: list[list[int]]) -> list[tuple[Any, Verdict]]:
            completions = self._generate(block, self.hosts.seed(seed))
            return list(zip(completions, self._validate([c.text for c in completions])))

        return self.hosts.map(prompts, mine)

    def _generate(self, prompts: list[list[int]], seed: int) -> list[Any]:
        from spade_jax.sampling import SamplingParams

        params = SamplingParams(
            max_new_tokens=self.max_new_tokens,
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            top_k=self.config.top_k,
            stop_token_ids=tuple(getattr(self.tokenizer, "eos_ids", ()) or ()),
            seed=seed,
        )
        return self.sampler.generate(prompts, params)

    def _validate(self, texts: list[str]) -> list[Verdict]:
        """Verdicts in order. Serial by default: on Python 3.11, `ast.parse` in concurrent threads can fail
        with a spurious SystemError (CPython gh-106905), and the gates parse; raise `threads` only where
        the gates serialise their parsing."""

        def one(text: str) -> Verdict:
            try:
                return validate(text, self.pool, archive=self.memory.novelty, config=self.gate_config)
            except Exception as e:  # a validator bug must not end the run: the attempt is simply invalid
                return Verdict(False, "internal", f"validation raised {type(e).__name__}: {e}")

        if len(texts) <= 1 or self.threads <= 1:
            return [one(t) for t in texts]
        with ThreadPoolExecutor(max_workers=min(self.threads, len(texts))) as ex:
            return list(ex.map(one, texts))

    def design(self, targets: Sequence[DesignTarget], step: int) -> list[DesignResult]:
        """Designs one environment per target (with resamples or repairs), recording every attempt in the
        memory (a repair's parent is the attempt it repairs)."""
        results: list[DesignResult] = []
        convs: list[list[dict]] = []
        prompts: list[list[int]] = []
        for target in targets:
            mutation = self.fit_mutation(target) if target.parent_id else None
            if mutation is not None:
                msgs, ids, parent = mutation
                results.append(DesignResult(target, None, mutation_of=parent.id))
            else:
                msgs, ids, parts = self.fit(self.parts_for(target))
                results.append(DesignResult(target, parts.document.id if parts.document else None))
            convs.append(msgs)
            prompts.append(ids)
        pending = list(range(len(results)))
        repair = self.config.on_invalid == "repair"
        fresh = not repair and self.config.resample_fresh_prompt
        for attempt in range(self.config.max_attempts):
            if not pending:
                break
            if attempt and fresh:  # the reference: every attempt draws a new document and new exemplars
                for i in pending:
                    if results[i].mutation_of is None:
                        convs[i], prompts[i], parts = self.fit(self.parts_for(results[i].target))
                        results[i].doc_id = parts.document.id if parts.document else None
            outcomes = self._attempt([prompts[i] for i in pending])
            for i, (comp, verdict) in zip(pending, outcomes):
                res = results[i]
                parent = res.attempts[-1].record_id if (res.attempts and repair) else None
                verdict = self._recheck_novelty(verdict)
                rec = self.memory.record_attempt(
                    verdict.source or comp.text, kind=res.target.kind, skill=res.target.skill, step=step,
                    valid=verdict.valid, gate=verdict.gate, reason=verdict.reason, doc_id=res.doc_id,
                    parent_id=parent, attempt=attempt, name=str(verdict.details.get("class_name") or ""),
                    origin="mutation" if res.mutation_of else "designer", mutation_of=res.mutation_of,
                )  # fmt: skip
                res.attempts.append(DesignAttempt(
                    attempt, list(prompts[i]), [int(t) for t in comp.token_ids], [float(x) for x in comp.logprobs],
                    [float(x) for x in getattr(comp, "raw_logprobs", comp.logprobs)], comp.text,
                    comp.finish_reason, verdict, rec.id, convs[i],
                ))  # fmt: skip
            pending = [i for i in pending if not results[i].attempts[-1].valid]
            if repair and attempt + 1 < self.config.max_attempts:
                for i in pending:
                    self._prepare_repair(i, results[i], convs, prompts)
        return results

    def _recheck_novelty(self, verdict: Verdict) -> Verdict:
        """Designs of the same batch may copy each other: recheck against what was recorded meanwhile."""
        if not verdict.valid or verdict.source is None:
            return verdict
        result = self.memory.check_novelty(verdict.source)
        if result.novel:
            return verdict
        return Verdict(False, "novelty", result.reason, verdict.details, verdict.source)

    def _prepare_repair(self, i: int, res: DesignResult, convs: list[list[dict]], prompts: list[list[int]]) -> None:
        last = res.attempts[-1]
        previous = f"```python\n{last.verdict.source.strip()}\n```" if last.verdict.source else last.text
        prev_ids = list(self.tokenizer.encode_text(previous))
        if len(prev_ids) > self.prompt_budget // 2:  # a runaway reply: keep its head so the prompt fits
            previous = self.tokenizer.decode(prev_ids[: self.prompt_budget // 2]) + "\n... (truncated)"
        base = convs[i][:2]
        tail = repair_messages([], previous, last.verdict)
        mutation = self.fit_mutation(res.target, extra=tail) if res.mutation_of else None
        if mutation is not None:  # a mutation's repair keeps its parent in view (else: the from-scratch prompt)
            convs[i], prompts[i] = mutation[0] + tail, mutation[1]
            return
        parts = PromptParts(res.target, None, [], [], self.exemplar_max_chars)
        if self.corpus is not None and self.config.use_corpus and res.doc_id is not None:
            parts.document = _document_in(base)
        msgs, ids, _ = self.fit(parts, extra=tail)
        convs[i] = msgs + tail
        prompts[i] = ids


def _document_in(messages: list[dict]) -> Document | None:
    """The grounding document embedded in a designer prompt (so a repair keeps the same grounding)."""
    text = messages[-1]["content"]
    start, end = text.find("<document>\n"), text.find("\n</document>")
    if start < 0 or end < 0:
        return None
    return Document("repair", text[start + len("<document>\n") : end], "prompt")
