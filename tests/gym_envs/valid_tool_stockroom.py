# expect: valid
# reason: valid tool environment StockroomEnv
"""Tool use in the paper's Gym-style format: count a product's units across a stockroom's bins.

The class speaks the protocol itself: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` runs a tool,
`<answer>...</answer>` ends the episode. Reset's info carries the task and OpenAI-style tool schemas.
"""

import json
import random
import re

PRODUCTS = ["hex bolt", "wing nut", "brass hinge", "cable tie", "wall plug", "spring washer", "door handle",
            "pipe clamp"]
AISLES = ["A", "B", "C", "D"]
TOOLS = [
    {"type": "function", "function": {
        "name": "find_product", "description": "Look up a product's SKU by its name.",
        "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}},
    {"type": "function", "function": {
        "name": "list_bins", "description": "List the bin ids in an aisle.",
        "parameters": {"type": "object", "properties": {"aisle": {"type": "string"}}, "required": ["aisle"]}}},
    {"type": "function", "function": {
        "name": "bin_contents", "description": "Units of each SKU stored in a bin.",
        "parameters": {"type": "object", "properties": {"bin_id": {"type": "string"}}, "required": ["bin_id"]}}},
]
INSTRUCTIONS = ('Call a tool with <tool_call>{"name": "...", "arguments": {...}}</tool_call>, one call per reply; '
                "give the final answer as <answer>...</answer> (one attempt).")


class StockroomEnv:
    def __init__(self, max_turns=20):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.skus = {name: f"SKU-{rng.randint(1000, 9999)}-{i}" for i, name in enumerate(PRODUCTS)}
        self.bins = {}
        for aisle in AISLES:
            for k in range(rng.randint(2, 4)):
                stocked = rng.sample(PRODUCTS, rng.randint(1, 3))
                self.bins[f"{aisle}{k + 1}"] = {self.skus[p]: rng.randint(3, 60) for p in stocked}
        holding = {}
        for contents in self.bins.values():
            for sku in contents:
                holding[sku] = holding.get(sku, 0) + 1
        candidates = [p for p in PRODUCTS if holding.get(self.skus[p], 0) >= 2]
        self.product = rng.choice(candidates or PRODUCTS)
        sku = self.skus[self.product]
        self.total = sum(c.get(sku, 0) for c in self.bins.values())
        self.turn, self.done = 0, False
        self.task = (f"How many units of '{self.product}' are stored in the stockroom in total, over every bin "
                     f"of aisles {', '.join(AISLES)}?")
        listing = "\n".join(json.dumps(t["function"]) for t in TOOLS)
        obs = f"{self.task}\n\nTools:\n{listing}\n\n{INSTRUCTIONS}"
        return obs, {"task": self.task, "tools": TOOLS, "instructions": INSTRUCTIONS}

    def solution(self):
        return f"<answer>{self.total}</answer>"

    def run_tool(self, name, args):
        if name == "find_product":
            wanted = str(args.get("name", "")).strip().lower()
            if wanted in self.skus:
                return json.dumps({"name": wanted, "sku": self.skus[wanted]})
            return f"Error: no product named {wanted!r}."
        if name == "list_bins":
            aisle = str(args.get("aisle", "")).strip().upper()
            ids = [b for b in self.bins if b[:-1] == aisle]
            return json.dumps(ids) if ids else f"Error: no aisle {aisle!r} (aisles: {', '.join(AISLES)})."
        if name == "bin_contents":
            bin_id = str(args.get("bin_id", "")).strip().upper()
            if bin_id in self.bins:
                return json.dumps(self.bins[bin_id])
            return f"Error: no bin {bin_id!r}."
        return f"Error: unknown tool {name!r}."

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turn += 1
        text = action if isinstance(action, str) else ""
        call = re.search(r"<tool_call>(.*?)</tool_call>", text, re.S)
        answer = re.search(r"<answer>(.*?)</answer>", text, re.S)
        info = {"turn": self.turn}
        if call:
            try:
                payload = json.loads(call.group(1))
            except ValueError:
                payload = None
            if not isinstance(payload, dict) or not isinstance(payload.get("name"), str) \
                    or not isinstance(payload.get("arguments", {}), dict):
                obs = 'Error: a tool call is a JSON object {"name": str, "arguments": object}.'
            else:
                obs = self.run_tool(payload["name"], payload.get("arguments", {}))
                info["tool"] = payload["name"]
            reward = 0.0
        elif answer:
            self.done = True
            given = answer.group(1).strip().replace(",", "")
            if given == str(self.total):
                return "Correct. Task complete.", 1.0, True, False, info
            return "Incorrect. Task failed.", 0.0, True, False, info
        else:
            obs, reward = "Invalid format. " + INSTRUCTIONS, -0.1
        if self.turn >= self.max_turns:
            self.done = True
            return obs + "\nOut of turns.", 0.0, False, True, info
        return obs, reward, False, False, info
