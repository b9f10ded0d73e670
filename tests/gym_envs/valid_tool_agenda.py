# expect: valid
# reason: valid tool environment AgendaCleanupEnv
"""Tool use with state changes in the paper's Gym-style format: cancel one organiser's meetings on a day.

The agent must change the backend (cancel exactly the right meetings, no others) and then report how many
it cancelled with <answer>N</answer>. Tool calls are parsed by the class itself; schemas go in info["tools"].
"""

import json
import random
import re

DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
STAFF = ["Noor", "Tomasz", "Wanjiru", "Yusuf", "Zofia"]
TOPICS = ["budget review", "design sync", "hiring panel", "vendor call", "retro", "roadmap", "1:1", "demo prep"]
CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.S)


def _tool(name, description, props):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {k: {"type": t} for k, t in props.items()}, "required": list(props)}}}


TOOL_SCHEMAS = [
    _tool("list_meetings", "Meetings on a weekday: id, time, topic and organiser.", {"day": "string"}),
    _tool("get_meeting", "Details of one meeting by id.", {"meeting_id": "string"}),
    _tool("cancel_meeting", "Cancel one meeting by id.", {"meeting_id": "string"}),
]


class AgendaCleanupEnv:
    def __init__(self, max_turns=20):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.meetings = {}
        for n in range(14):
            mid = f"mtg-{rng.randint(100, 999)}{chr(97 + n)}"
            self.meetings[mid] = {"id": mid, "day": rng.choice(DAYS), "time": f"{rng.randint(8, 17):02d}:00",
                                  "topic": rng.choice(TOPICS), "organiser": rng.choice(STAFF), "cancelled": False}
        self.person, self.day = rng.choice(STAFF), rng.choice(DAYS)
        extra = rng.randint(2, 3)
        for mid in rng.sample(sorted(self.meetings), extra):
            self.meetings[mid].update(organiser=self.person, day=self.day)
        self.targets = {m for m, v in self.meetings.items() if v["organiser"] == self.person and v["day"] == self.day}
        self.turn, self.done = 0, False
        task = (f"{self.person} is off on {self.day}. Cancel every meeting that {self.person} organises on "
                f"{self.day} (and no other meeting), then answer with how many you cancelled.")
        instructions = ('Use tools with <tool_call>{"name": "...", "arguments": {...}}</tool_call>; finish with '
                        "<answer>number</answer>.")
        lines = "\n".join(json.dumps(s["function"]) for s in TOOL_SCHEMAS)
        obs = f"{task}\n\nTools:\n{lines}\n\n{instructions}"
        return obs, {"task": task, "tools": TOOL_SCHEMAS, "instructions": instructions}

    def solution(self):
        calls = [f'<tool_call>{{"name": "cancel_meeting", "arguments": {{"meeting_id": "{m}"}}}}</tool_call>'
                 for m in sorted(self.targets)]
        return "".join(calls) + f"<answer>{len(self.targets)}</answer>"

    def _call(self, name, args):
        if name == "list_meetings":
            day = str(args.get("day", "")).strip().capitalize()
            if day not in DAYS:
                return f"Error: unknown day {day!r}."
            rows = [{k: v for k, v in m.items() if k != "cancelled"} for m in self.meetings.values()
                    if m["day"] == day and not m["cancelled"]]
            return json.dumps(sorted(rows, key=lambda r: r["time"]))
        mid = str(args.get("meeting_id", "")).strip()
        if name not in ("get_meeting", "cancel_meeting"):
            return f"Error: unknown tool {name!r}."
        if mid not in self.meetings:
            return f"Error: no meeting {mid!r}."
        if name == "get_meeting":
            return json.dumps(self.meetings[mid])
        if self.meetings[mid]["cancelled"]:
            return f"Meeting {mid} was already cancelled."
        self.meetings[mid]["cancelled"] = True
        return f"Cancelled {mid}."

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turn += 1
        text = action if isinstance(action, str) else ""
        results = []
        for raw in CALL_RE.findall(text)[:5]:
            try:
                call = json.loads(raw)
            except ValueError:
                results.append("Error: the tool call is not valid JSON.")
                continue
            args = call.get("arguments", {}) if isinstance(call, dict) else None
            if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not isinstance(args, dict):
                results.append('Error: a tool call is {"name": str, "arguments": object}.')
                continue
            results.append(self._call(call["name"], args))
        cancelled = {m for m, v in self.meetings.items() if v["cancelled"]}
        info = {"turn": self.turn, "cancelled": len(cancelled)}
        answer = ANSWER_RE.search(text)
        if answer:
            self.done = True
            right_state = cancelled == self.targets
            right_count = answer.group(1).strip() == str(len(self.targets))
            if right_state and right_count:
                return "\n".join(results + ["Correct. Task complete."]), 1.0, True, False, info
            return "\n".join(results + ["Incorrect. Task failed."]), 0.0, True, False, info
        if results:
            obs, reward = "\n".join(results), 0.0
        else:
            obs, reward = "Invalid format: call a tool or give an <answer>.", -0.1
        if self.turn >= self.max_turns:
            self.done = True
            return obs + "\nOut of turns.", 0.0, False, True, info
        return obs, reward, False, False, info
