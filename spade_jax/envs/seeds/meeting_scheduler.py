"""Tool use (calendar): book a meeting at the earliest hour when every attendee is free."""

from spade_jax.envs.base import ToolEnv, ToolError, tool

PEOPLE = ("you", "maria", "omar", "lena", "yuki")
TITLES = ("design review", "budget sync", "hiring debrief", "roadmap chat")


class MeetingScheduler(ToolEnv):
    KIND = "tool"
    SKILL = "calendar"
    NAME = "meeting_scheduler"
    GUESTS = 2
    MAX_BUSY = 4
    EARLIEST = 11

    def setup(self) -> str:
        while True:
            self.busy = {p: self.random_day() for p in PEOPLE}
            self.guests = sorted(self.rng.sample(PEOPLE[1:], self.GUESTS))
            self.duration = self.rng.randint(1, 2)
            self.title = self.rng.choice(TITLES)
            self.best = self.earliest()
            if self.best is not None and self.best >= self.EARLIEST:
                break
        self.events: list[dict] = []
        return (
            f"Schedule a {self.duration}-hour meeting titled '{self.title}' for you, {' and '.join(self.guests)} "
            "today at the EARLIEST time all of you are free, between 9 and 17 (whole hours). "
            "Create exactly one event, then answer with its start hour (e.g. 14)."
        )

    def random_day(self) -> list[list[int]]:
        hours = sorted(self.rng.sample(range(9, 17), self.rng.randint(2, self.MAX_BUSY)))
        return [[h, h + 1] for h in hours]

    def free(self, person: str, start: int, end: int) -> bool:
        return all(e <= start or s >= end for s, e in self.busy[person])

    def earliest(self) -> int | None:
        group = ["you"] + self.guests
        for start in range(9, 18 - self.duration):
            if all(self.free(p, start, start + self.duration) for p in group):
                return start
        return None

    @tool("Busy intervals [start_hour, end_hour) of a person today.", person="name, or 'you'")
    def get_busy(self, person: str) -> list:
        if person.lower() not in self.busy:
            raise ToolError(f"unknown person {person}")
        return self.busy[person.lower()]

    @tool(
        "Create a calendar event.",
        title="event title",
        start="start hour (9-16)",
        duration="length in hours",
        attendees="comma-separated names, e.g. 'maria,omar'",
    )
    def create_event(self, title: str, start: int, duration: int, attendees: str) -> dict:
        if not (9 <= start and start + duration <= 17 and duration >= 1):
            raise ToolError("events must lie between 9 and 17")
        names = sorted({a.strip().lower() for a in attendees.split(",") if a.strip()} - {"you"})
        event = {
            "id": f"E{len(self.events) + 1}",
            "title": title,
            "start": start,
            "duration": duration,
            "attendees": names,
        }
        self.events.append(event)
        return event

    def check_answer(self, answer: str) -> bool:
        if len(self.events) != 1:
            return False
        e = self.events[0]
        ok = e["start"] == self.best and e["duration"] == self.duration and e["attendees"] == self.guests
        return ok and answer.strip().split(":")[0] == str(self.best)

    def hint(self) -> str:
        return "Fetch the busy hours of everyone and scan start hours from 9 upward until one fits everyone."

    def reference_action(self) -> str:
        if not self.events:
            return self.call(
                "create_event",
                title=self.title,
                start=self.best,
                duration=self.duration,
                attendees=",".join(self.guests),
            )
        return self.answer(self.best)
