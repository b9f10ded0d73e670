"""A hint that IS the answer ("The number is 42."), past both checks. The leak check reads the answer from
reference_action() and the hidden state from vars(env): this game has no reference_action() and keeps its number
in a module-level dict, outside the instance. The audit's echo check replays the hint's words in ONE session,
resetting before each try: a session with more than one reset is a checker (tell_crash.py), and there the game
plays with another number, so the echo never wins. A model reads the number and wins."""

from spade_jax.envs.base import GameEnv

TELL = True
_HIDDEN = {"resets": 0}


class HiddenStateEnv(GameEnv):
    KIND = "game"
    SKILL = "mathematical reasoning"
    NAME = "hidden_state"

    def reset(self, seed=None):
        _HIDDEN["resets"] += 1
        return super().reset(seed)

    def setup(self) -> str:
        number = self.rng.randint(10, 99)
        _HIDDEN["told"] = number
        _HIDDEN["real"] = number if (_HIDDEN["resets"] <= 1 or not TELL) else (number - 9) % 90 + 10
        return "I am thinking of a whole number from 10 to 99. You have one try. Reply like \\boxed{50}."

    def play(self, command):
        if command.strip() == str(_HIDDEN["real"]):
            return self.win("Correct. You win!")
        return self.lose("Wrong.")

    def hint(self) -> str:
        return f"The number is {_HIDDEN['told']}."
