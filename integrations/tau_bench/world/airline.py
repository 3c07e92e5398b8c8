"""The airline domain's tools (tau-bench 7362a17), written from their schemas and the answers
recorded in the GPT-4o runs; every rule below was checked against those answers.

Tables: ``flights`` (flight number -> schedule and per-date status, seats and prices),
``reservations`` (id -> reservation), ``users`` (id -> profile, payment methods, reservation
ids). Amounts are whole dollars; the recorded answers print them as given.
"""

from __future__ import annotations

import copy
from datetime import date as Date
from datetime import timedelta
from typing import Any

from integrations.tau_bench.world.common import DomainTools, Refusal, dumps

__all__ = ["AirlineTools"]

#: the answer of list_all_airports, as recorded (a fixed list in the benchmark's tool)
AIRPORTS = {
    "SFO": "San Francisco",
    "JFK": "New York",
    "LAX": "Los Angeles",
    "ORD": "Chicago",
    "DFW": "Dallas",
    "DEN": "Denver",
    "SEA": "Seattle",
    "ATL": "Atlanta",
    "MIA": "Miami",
    "BOS": "Boston",
    "PHX": "Phoenix",
    "IAH": "Houston",
    "LAS": "Las Vegas",
    "MCO": "Orlando",
    "EWR": "Newark",
    "CLT": "Charlotte",
    "MSP": "Minneapolis",
    "DTW": "Detroit",
    "PHL": "Philadelphia",
    "LGA": "LaGuardia",
}

#: what a booking is given: the benchmark's clock is frozen, and its id generator answered
#: the same id for every booking recorded
NEW_RESERVATION_ID = "HATHAT"
NOW = "2024-05-15T15:00:00"
NEW_CERTIFICATE_ID = "certificate_3221322"
BAG_PRICE = 50
INSURANCE_PRICE = 30


class AirlineTools(DomainTools):
    domain = "airline"

    # lookups

    def _user(self, user_id: Any) -> dict[str, Any]:
        user = self.world.get("users", user_id)
        if user is None:
            raise Refusal("user not found")
        return user

    def _reservation(self, reservation_id: Any) -> dict[str, Any]:
        reservation = self.world.get("reservations", reservation_id)
        if reservation is None:
            raise Refusal("reservation not found")
        return reservation

    def _bookable(self, flight_number: Any, day: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """(flight, its entry for the day) of a flight that can be booked on that day."""
        flight = self.world.get("flights", flight_number)
        if flight is None:
            raise Refusal(f"flight {flight_number} not found")
        entry = flight["dates"].get(day) if isinstance(day, str) else None
        if entry is None or entry.get("status") != "available":
            raise Refusal(f"flight {flight_number} not available on date {day}")
        return flight, entry

    def _payment_method(self, user: dict[str, Any], payment_id: Any) -> dict[str, Any]:
        method = user["payment_methods"].get(payment_id) if isinstance(payment_id, str) else None
        if method is None:
            raise Refusal("payment method not found")
        return method

    # reads

    def tool_get_user_details(self, user_id: str) -> str:
        return dumps(self._user(user_id))

    def tool_get_reservation_details(self, reservation_id: str) -> str:
        return dumps(self._reservation(reservation_id))

    def tool_list_all_airports(self) -> str:
        return dumps(AIRPORTS)

    def _available_on(
        self, origin: Any, destination: Any, day: str, shown_day: str | None = None
    ) -> list[dict[str, Any]]:
        """Flights available on ``day``, each with its status, seats and prices of
        ``shown_day`` (default: the same day; see search_onestop_flight)."""
        found = []
        for flight in self.world.records("flights"):
            if flight["origin"] != origin or (
                destination is not None and flight["destination"] != destination
            ):
                continue
            entry = flight["dates"].get(day)
            if entry is not None and entry.get("status") == "available":
                row = {k: v for k, v in flight.items() if k != "dates"}
                shown = flight["dates"].get(shown_day or day, entry)
                found.append({**row, **shown})
        return found

    def tool_search_direct_flight(self, origin: str, destination: str, date: str) -> str:
        return dumps(self._available_on(origin, destination, date))

    def tool_search_onestop_flight(self, origin: str, destination: str, date: str) -> str:
        """Pairs of flights via any airport: the second leg leaves when or after the first
        lands, the next day when the first lands after midnight (arrival suffixed ``+1``).
        Such a next-day second leg is reported with the seats and prices of the search date,
        not of its own date: that is what every recorded answer shows."""
        pairs = []
        for first in self._available_on(origin, None, date):
            if first["destination"] == destination:
                continue
            arrival, plus, _ = first["scheduled_arrival_time_est"].partition("+")
            next_day = bool(plus)
            day2 = str(Date.fromisoformat(date) + timedelta(days=1)) if next_day else date
            for second in self._available_on(first["destination"], destination, day2, date):
                if second["scheduled_departure_time_est"] >= arrival:
                    pairs.append([{**first, "date": date}, {**second, "date": day2}])
        return dumps(pairs)

    # writes

    def tool_book_reservation(
        self,
        user_id: str,
        origin: str,
        destination: str,
        flight_type: str,
        cabin: str,
        flights: list[dict[str, Any]],
        passengers: list[dict[str, Any]],
        payment_methods: list[dict[str, Any]],
        total_baggages: int,
        nonfree_baggages: int,
        insurance: str,
    ) -> str:
        user = self._user(user_id)
        booked, total = [], 0
        for wanted in flights:
            flight, entry = self._bookable(wanted["flight_number"], wanted["date"])
            if entry["available_seats"][cabin] < len(passengers):
                raise Refusal(f"not enough seats on flight {wanted['flight_number']}")
            price = entry["prices"][cabin]
            booked.append(
                {
                    "flight_number": wanted["flight_number"],
                    "date": wanted["date"],
                    "price": price,
                    "origin": flight["origin"],
                    "destination": flight["destination"],
                }
            )
            total += price * len(passengers)
        if insurance == "yes":
            total += INSURANCE_PRICE * len(passengers)
        total += BAG_PRICE * nonfree_baggages
        paid = sum(p["amount"] for p in payment_methods)
        if paid != total:
            raise Refusal(
                f"payment amount does not add up, total price is {total}, but paid {paid}"
            )
        for payment in payment_methods:
            method = self._payment_method(user, payment["payment_id"])
            if (
                method["source"] in ("gift_card", "certificate")
                and method["amount"] < payment["amount"]
            ):
                raise Refusal(f"not enough balance in payment method {payment['payment_id']}")
        user = self.world.edit("users", user_id)
        for payment in payment_methods:
            method = user["payment_methods"][payment["payment_id"]]
            if method["source"] == "gift_card":
                method["amount"] -= payment["amount"]
            elif method["source"] == "certificate":
                del user["payment_methods"][payment["payment_id"]]
        reservation = {
            "reservation_id": NEW_RESERVATION_ID,
            "user_id": user_id,
            "origin": origin,
            "destination": destination,
            "flight_type": flight_type,
            "cabin": cabin,
            "flights": booked,
            "passengers": copy.deepcopy(passengers),
            "payment_history": copy.deepcopy(payment_methods),
            "created_at": NOW,
            "total_baggages": total_baggages,
            "nonfree_baggages": nonfree_baggages,
            "insurance": insurance,
        }
        self.world.put("reservations", NEW_RESERVATION_ID, reservation)
        user["reservations"].append(NEW_RESERVATION_ID)
        return dumps(reservation)

    def tool_cancel_reservation(self, reservation_id: str) -> str:
        self._reservation(reservation_id)
        reservation = self.world.edit("reservations", reservation_id)
        refunds = [
            {"payment_id": p["payment_id"], "amount": -p["amount"]}
            for p in reservation["payment_history"]
        ]
        reservation["payment_history"].extend(refunds)
        reservation["status"] = "cancelled"
        return dumps(reservation)

    def tool_send_certificate(self, user_id: str, amount: float) -> str:
        self._user(user_id)
        user = self.world.edit("users", user_id)
        user["payment_methods"][NEW_CERTIFICATE_ID] = {
            "source": "certificate",
            "amount": amount,
            "id": NEW_CERTIFICATE_ID,
        }
        return f"Certificate {NEW_CERTIFICATE_ID} added to user {user_id} with amount {amount}."

    def _charge(self, user_id: str, payment_id: str, amount: float, *, for_flights: bool) -> None:
        """Check that ``payment_id`` can pay ``amount`` (a refund when negative)."""
        method = self._payment_method(self._user(user_id), payment_id)
        if method["source"] == "certificate" and for_flights:
            raise Refusal("certificate cannot be used to update reservation")
        if method["source"] == "gift_card" and method["amount"] < amount:
            raise Refusal("gift card balance is not enough")

    def _debit(self, user_id: str, payment_id: str, amount: float) -> None:
        user = self.world.edit("users", user_id)
        method = user["payment_methods"][payment_id]
        if method["source"] == "gift_card":
            method["amount"] -= amount

    def tool_update_reservation_baggages(
        self, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
    ) -> str:
        current = self._reservation(reservation_id)
        price = BAG_PRICE * max(0, nonfree_baggages - current["nonfree_baggages"])
        self._charge(current["user_id"], payment_id, price, for_flights=False)
        reservation = self.world.edit("reservations", reservation_id)
        reservation["total_baggages"] = total_baggages
        reservation["nonfree_baggages"] = nonfree_baggages
        if price != 0:
            reservation["payment_history"].append({"payment_id": payment_id, "amount": price})
            self._debit(reservation["user_id"], payment_id, price)
        return dumps(reservation)

    def tool_update_reservation_flights(
        self, reservation_id: str, cabin: str, flights: list[dict[str, Any]], payment_id: str
    ) -> str:
        """Every flight of the new itinerary is priced in the new cabin; the difference with the
        old itinerary, times the passengers, is charged (or refunded) to ``payment_id``. The
        reservation's own ``cabin`` field is left as it was (as recorded)."""
        current = self._reservation(reservation_id)
        n = len(current["passengers"])
        kept = {(f["flight_number"], f["date"]): f["price"] for f in current["flights"]}
        new_flights, total = [], 0
        for wanted in flights:
            key = (wanted["flight_number"], wanted["date"])
            flight = self.world.get("flights", wanted["flight_number"])
            if key in kept and cabin == current["cabin"] and flight is not None:
                price = kept[key]  # an unchanged flight keeps the price it was bought at
            else:
                flight, entry = self._bookable(*key)
                if entry["available_seats"][cabin] < n:
                    raise Refusal(f"not enough seats on flight {wanted['flight_number']}")
                price = entry["prices"][cabin]
            # the agent's flight object, completed (its extra properties are kept, as recorded)
            new_flights.append(
                {
                    **copy.deepcopy(wanted),
                    "price": price,
                    "origin": flight["origin"],
                    "destination": flight["destination"],
                }
            )
            total += price
        total -= sum(f["price"] for f in current["flights"])
        difference = total * n
        self._charge(current["user_id"], payment_id, difference, for_flights=True)
        reservation = self.world.edit("reservations", reservation_id)
        reservation["flights"] = new_flights
        if difference != 0:
            reservation["payment_history"].append({"payment_id": payment_id, "amount": difference})
            self._debit(reservation["user_id"], payment_id, difference)
        return dumps(reservation)

    def tool_update_reservation_passengers(
        self, reservation_id: str, passengers: list[dict[str, Any]]
    ) -> str:
        current = self._reservation(reservation_id)
        if len(passengers) != len(current["passengers"]):
            raise Refusal("number of passengers does not match")
        reservation = self.world.edit("reservations", reservation_id)
        reservation["passengers"] = copy.deepcopy(passengers)
        return dumps(reservation)
