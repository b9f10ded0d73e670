"""The environment contract: what a generated environment is and how its replies are read.

`base.py` (the classes environment code subclasses: `GameEnv`, `ToolEnv`, `ReasoningEnv`), `contract*.md`
(what the designer is told), `formats.py` (ours and the paper's Gym-style classes), `parsing.py` and
`extract.py` (answers in replies, source in completions), `outcome.py` (a return and a win), `variants.py` and
`seeds/` (the hand-written library), `source.py` and `pools.py` (environment sources and fixed pools).
Standard library only: environment code imports `base.py` inside the sandbox.
"""
