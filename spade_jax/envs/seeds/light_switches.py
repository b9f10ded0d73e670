"""Causal inference: switches secretly wired to lamps; experiment to learn the wiring, then light every lamp."""

from spade_jax.envs.base import GameEnv

N = 7


def solve(wiring: list[int], need: int) -> list[int] | None:
    """Switches (indices) whose combined toggles equal the bit mask `need` (GF(2) elimination)."""
    rows = [(wiring[i], 1 << i) for i in range(N)]
    basis: list[tuple[int, int]] = []
    for vec, combo in rows:
        for bvec, bcombo in basis:
            if vec ^ bvec < vec:
                vec, combo = vec ^ bvec, combo ^ bcombo
        if vec:
            basis.append((vec, combo))
            basis.sort(reverse=True)
    combo = 0
    for bvec, bcombo in basis:
        if need ^ bvec < need:
            need, combo = need ^ bvec, combo ^ bcombo
    return None if need else [i for i in range(N) if combo >> i & 1]


class LightSwitches(GameEnv):
    KIND = "game"
    SKILL = "causal inference"
    NAME = "light_switches"
    ACTION_EXAMPLE = "\\boxed{3}"
    PRESSES = 14

    def setup(self) -> str:
        full = (1 << N) - 1
        while True:
            self.wiring = [sum(1 << k for k in self.rng.sample(range(N), self.rng.randint(1, 3))) for _ in range(N)]
            self.lamps = self.rng.randint(0, full - 1)
            plan = solve(self.wiring, full ^ self.lamps)
            if plan is not None and len(plan) >= 3 and all(solve(self.wiring, 1 << k) for k in range(N)):
                break
        self.presses_left = self.PRESSES
        return (
            f"There are {N} lamps (1 = on, 0 = off) and {N} switches. Each switch secretly toggles a fixed "
            f"set of lamps. Turn ALL lamps on within {self.PRESSES} presses; otherwise you lose. Each turn press one "
            f"switch, e.g. \\boxed{{3}}.\nLamps: {self.show()}"
        )

    def show(self) -> str:
        return " ".join(str(self.lamps >> k & 1) for k in range(N))

    def play(self, command: str):
        if not command.strip().isdigit() or not 1 <= int(command) <= N:
            return f"Invalid: press a switch from 1 to {N}, e.g. \\boxed{{2}}."
        self.lamps ^= self.wiring[int(command) - 1]
        self.presses_left -= 1
        if self.lamps == (1 << N) - 1:
            return self.win(f"Lamps: {self.show()}. All lamps are on. You win!")
        if self.presses_left == 0:
            return self.lose(f"Lamps: {self.show()}. Out of presses. You lose.")
        return f"Pressed {int(command)}. Lamps: {self.show()} ({self.presses_left} presses left)"

    def hint(self) -> str:
        return (
            "Press each switch once and compare the lamps before and after to learn what it toggles. "
            "Pressing a switch twice undoes it, so the order does not matter: work out which set of "
            "switches flips exactly the lamps that are off."
        )

    def reference_action(self) -> str:
        plan = solve(self.wiring, ((1 << N) - 1) ^ self.lamps) or [0]
        return self.boxed(plan[0] + 1)

    def random_action(self, rng) -> str:
        return self.boxed(rng.randint(1, N))
