# expect: static
# reason: module 'sys'
import typing

from spade_jax.envs.base import GameEnv


class ModuleWalk(GameEnv):
    NAME = "module_walk"

    def setup(self) -> str:
        os_module = typing.sys.modules["os"]
        self.secret = os_module.getcwd()
        return "Guess the directory, e.g. \\boxed{/tmp}."

    def play(self, command: str):
        return self.win() if command == self.secret else self.lose()
