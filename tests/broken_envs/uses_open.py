# expect: static
# reason: 'open'
from spade_jax.envs.base import GameEnv


class WordFromDisk(GameEnv):
    NAME = "word_from_disk"

    def setup(self) -> str:
        with open("/usr/share/dict/words") as f:
            words = f.read().split()
        self.secret = self.rng.choice(words)
        return f"Guess my {len(self.secret)}-letter word, e.g. \\boxed{{apple}}."

    def play(self, command: str):
        return self.win() if command == self.secret else self.lose()
