"""Language understanding: guess a hidden word from its dictionary-style definition, letter by letter."""

from spade_jax.envs.base import GameEnv

WORDS = {
    "banana": "a long curved fruit with a yellow skin",
    "anchor": "a heavy metal object that keeps a ship in place",
    "violin": "a string instrument played with a bow, held under the chin",
    "candle": "a stick of wax with a wick that gives light when it burns",
    "pillow": "a soft cushion on which you rest your head in bed",
    "rabbit": "a small animal with long ears that hops",
    "winter": "the coldest season of the year",
    "bridge": "a structure that carries a road over a river",
    "mirror": "a glass surface in which you see your reflection",
    "garden": "a piece of land where flowers or vegetables are grown",
    "ladder": "a set of rungs used to climb up to high places",
    "pencil": "a tool for writing or drawing made of wood and graphite",
    "thunder": "the loud noise that follows lightning",
    "blanket": "a large warm cover used on a bed",
    "library": "a building where books are kept to be borrowed",
    "compass": "a device whose needle points north",
    "harvest": "the time when ripe crops are gathered",
    "kitchen": "the room in which food is cooked",
    "volcano": "a mountain that can erupt with lava",
    "dolphin": "an intelligent sea mammal that breathes through a blowhole",
}
MAX_MISSES = 5


class SecretWord(GameEnv):
    KIND = "game"
    SKILL = "language understanding"
    NAME = "secret_word"
    ACTION_EXAMPLE = "\\boxed{e}"

    def setup(self) -> str:
        self.word = self.rng.choice(sorted(WORDS))
        self.guessed: set[str] = set()
        self.misses = 0
        return (
            f"Guess my secret word ({len(self.word)} letters). Definition: {WORDS[self.word]}.\n"
            f"Each turn guess one letter, e.g. \\boxed{{e}}, or the whole word, e.g. \\boxed{{house}}. "
            f"{MAX_MISSES} wrong guesses (letters or words) and you lose.\nWord: {self.pattern()}"
        )

    def pattern(self) -> str:
        return " ".join(c if c in self.guessed else "_" for c in self.word)

    def play(self, command: str):
        guess = command.strip().lower()
        if not guess.isalpha():
            return "Invalid: send one letter or one word, e.g. \\boxed{a}."
        if len(guess) > 1:
            if guess == self.word:
                return self.win(f"Yes, the word is {self.word}. You win!")
            self.misses += 1
            msg = f"No, it is not {guess}."
        elif guess in self.guessed:
            return f"You already tried {guess}. Word: {self.pattern()}"
        else:
            self.guessed.add(guess)
            if guess in self.word:
                msg = f"Yes, {guess} is in the word."
                if all(c in self.guessed for c in self.word):
                    return self.win(f"{msg} The word is {self.word}. You win!")
            else:
                self.misses += 1
                msg = f"No {guess}."
        if self.misses >= MAX_MISSES:
            return self.lose(f"{msg} Too many misses; the word was {self.word}. You lose.")
        return f"{msg} Word: {self.pattern()} (misses {self.misses}/{MAX_MISSES})"

    def hint(self) -> str:
        return (
            "Read the definition carefully and think of a common word of exactly that length before guessing letters."
        )

    def reference_action(self) -> str:
        return self.boxed(self.word)

    def random_action(self, rng) -> str:
        return self.boxed(rng.choice("abcdefghijklmnopqrstuvwxyz"))
