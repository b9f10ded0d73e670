# expect: valid
# reason: valid game environment RecallListEnv
"""Memory recall in the paper's Gym-style format: a list of words is shown once, then asked back.

Relies on the paper loader's tolerance: it uses `random`, `re` and `deque` without importing them.
Partial credit: the terminal reward is the fraction of questions answered correctly.
"""

WORDS = ["anchor", "bramble", "cobalt", "dune", "ember", "fjord", "glacier", "harbor", "iris", "juniper",
         "kestrel", "lantern", "meadow", "nutmeg", "orchid", "pebble", "quartz", "raven", "saffron", "tundra"]
ORDINAL = {1: "1st", 2: "2nd", 3: "3rd"}


class RecallListEnv:
    def __init__(self, max_turns=10, length=7, questions=3):
        self.max_turns, self.length, self.n_questions = max_turns, length, questions

    def _ask(self):
        k = self.pending[0]
        return f"Which word was in position {ORDINAL.get(k, f'{k}th')}? Reply like \\boxed{{word}}."

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.items = rng.sample(WORDS, self.length)
        self.pending = deque(rng.sample(range(1, self.length + 1), self.n_questions))
        self.correct, self.turn, self.done = 0, 0, False
        shown = ", ".join(f"{i}. {w}" for i, w in enumerate(self.items, 1))
        obs = (f"Memorise this list; it will not be shown again.\n{shown}\n"
               f"I will ask {self.n_questions} questions. {self._ask()}")
        return obs, {"questions_left": len(self.pending)}

    def solution(self):
        return "\\boxed{" + self.items[self.pending[0] - 1] + "}"

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turn += 1
        m = re.search(r"\\boxed\{([^{}]*)\}", action or "")
        if m is None:
            if self.turn >= self.max_turns:
                self.done = True
                return "Out of turns.", 0.0, False, True, {"turn": self.turn}
            return "Invalid format. " + self._ask(), -0.1, False, False, {"turn": self.turn}
        k = self.pending.popleft()
        right = m.group(1).strip().lower() == self.items[k - 1]
        self.correct += right
        verdict = "Correct." if right else "Not quite."
        info = {"turn": self.turn, "correct": self.correct, "questions_left": len(self.pending)}
        if not self.pending:
            self.done = True
            score = self.correct / self.n_questions
            return f"{verdict} You recalled {self.correct}/{self.n_questions}.", score, True, False, info
        if self.turn >= self.max_turns:
            self.done = True
            return verdict + " Out of turns.", 0.0, False, True, info
        return f"{verdict} {self._ask()}", 0.0, False, False, info
