"""An `info` whose well-known keys have the wrong shapes (tool schemas that are strings and lists, a dict for
`kind`, lists for `task`), then one nested deeper than any host code expects."""


class PoisonedInfo:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        tools = [{"function": "read_file"}, {"function": ["name", "x"]}, {"type": "function", "function": 7}]
        info = {"kind": {"tool": 1}, "tools": tools, "task": ["not", "text"], "instructions": {"a": 1}, "won": "yes"}
        return 'Call a tool: <tool_call>{"name": "read_file", "arguments": {}}</tool_call>', info

    def step(self, action):
        self.turn += 1
        info = {"won": True}
        if "deep" in action:
            for _ in range(60):
                info = {"won": [info]}
        return "Nothing here.", 0.0, self.turn >= 3, False, info
