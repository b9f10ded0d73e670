"""Tool use (travel booking): book the cheapest nonstop afternoon flight for a passenger."""

from spade_jax.envs.base import ToolEnv, ToolError, tool

CITIES = ("Lisbon", "Oslo", "Rome", "Dublin", "Vienna", "Prague")
PASSENGERS = ("Ana Silva", "Tom Berg", "Ines Rossi", "Kai Novak")


class FlightBooking(ToolEnv):
    KIND = "tool"
    SKILL = "travel booking"
    NAME = "flight_booking"
    FLIGHTS = 30
    ON_ROUTE = 9

    def setup(self) -> str:
        self.origin, self.dest = self.rng.sample(CITIES, 2)
        self.passenger = self.rng.choice(PASSENGERS)
        self.flights: dict[str, dict] = {}
        for k in range(self.FLIGHTS):
            o, d = (self.origin, self.dest) if k < self.ON_ROUTE else self.rng.sample(CITIES, 2)
            self.flights[f"FL{200 + k}"] = {
                "origin": o,
                "destination": d,
                "departs": f"{self.rng.randint(6, 21):02d}:00",
                "stops": self.rng.choice([0, 0, 1, 2]),
                "price": self.rng.randint(60, 400),
            }
        self.flights["FL200"].update(departs="14:00", stops=0)
        ok = [f for f, x in self.flights.items() if self.matches(x)]
        self.target = min(ok, key=lambda f: (self.flights[f]["price"], f))
        self.bookings: dict[str, dict] = {}
        return (
            f"Book the CHEAPEST nonstop flight from {self.origin} to {self.dest} departing at or after 12:00 "
            f"for passenger {self.passenger}. Make exactly one booking, then answer with the booking reference."
        )

    def matches(self, x: dict) -> bool:
        return (
            (x["origin"], x["destination"]) == (self.origin, self.dest) and x["stops"] == 0 and x["departs"] >= "12:00"
        )

    @tool("Search flights between two cities.", origin="departure city", destination="arrival city")
    def search_flights(self, origin: str, destination: str) -> list:
        found = [
            {"flight_id": f, "departs": x["departs"], "stops": x["stops"], "price": x["price"]}
            for f, x in self.flights.items()
            if x["origin"].lower() == origin.lower() and x["destination"].lower() == destination.lower()
        ]
        return found or "no flights found"

    @tool("Book a seat on a flight.", flight_id="flight id such as FL204", passenger="full passenger name")
    def book_flight(self, flight_id: str, passenger: str) -> dict:
        if flight_id not in self.flights:
            raise ToolError(f"no flight {flight_id}")
        ref = f"BK{1000 + 37 * (len(self.bookings) + 1) + int(flight_id[2:])}"
        self.bookings[ref] = {"flight_id": flight_id, "passenger": passenger.strip()}
        return {"booking_reference": ref, **self.bookings[ref]}

    @tool("Cancel a booking.", booking_reference="reference such as BK1234")
    def cancel_booking(self, booking_reference: str) -> str:
        if self.bookings.pop(booking_reference, None) is None:
            raise ToolError(f"no booking {booking_reference}")
        return "cancelled"

    def check_answer(self, answer: str) -> bool:
        want = {"flight_id": self.target, "passenger": self.passenger}
        return list(self.bookings.values()) == [want] and answer.strip() in self.bookings

    def hint(self) -> str:
        return (
            f"Search {self.origin} to {self.dest}, drop flights with stops or departing before 12:00, then "
            "pick the lowest price. Use the passenger's full name exactly."
        )

    def reference_action(self) -> str:
        if not self.bookings:
            return self.call("book_flight", flight_id=self.target, passenger=self.passenger)
        return self.answer(next(iter(self.bookings)))
