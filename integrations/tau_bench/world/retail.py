"""The retail domain's tools (tau-bench 59a200c), written from their schemas and the answers
recorded in AgentRx's runs; every rule below was checked against those answers.

Tables: ``orders`` (order id -> items, status, payment history), ``products`` (product id ->
variants by item id), ``users`` (user id -> profile, payment methods, order ids). Prices are
floats with cents; sums are done in the order the items are listed, like the recorded
answers (a recorded price difference such as 0.20999999999999375 is not rounded).
"""

from __future__ import annotations

import copy
from typing import Any

from integrations.tau_bench.world.common import DomainTools, Refusal, dumps

__all__ = ["RetailTools"]

CANCEL_REASONS = ("no longer needed", "ordered by mistake")


class RetailTools(DomainTools):
    domain = "retail"

    # lookups

    def _order(self, order_id: Any) -> dict[str, Any]:
        order = self.world.get("orders", order_id)
        if order is None:
            raise Refusal("order not found")
        return order

    def _user(self, user_id: Any) -> dict[str, Any]:
        user = self.world.get("users", user_id)
        if user is None:
            raise Refusal("user not found")
        return user

    def _method(self, order: dict[str, Any], payment_method_id: Any) -> dict[str, Any]:
        """A payment method of the order's user."""
        methods = self.world.require("users", order["user_id"])["payment_methods"]
        if payment_method_id not in methods:
            raise Refusal("payment method not found")
        return methods[payment_method_id]

    @staticmethod
    def _require_items(order: dict[str, Any], item_ids: list[str], missing: str | None) -> None:
        """Every id (with its multiplicity) is an item of the order; the refusal names the
        first missing id, or says ``missing`` when given (the benchmark's return does)."""
        have = [item["item_id"] for item in order["items"]]
        for item_id in item_ids:
            if item_ids.count(item_id) > have.count(item_id):
                raise Refusal(missing or f"{item_id} not found")

    def _price_difference(
        self, order: dict[str, Any], item_ids: list[str], new_item_ids: list[str]
    ) -> float:
        """Sum of new - old prices, in the order listed, checking each new item is an
        available variant of the same product (the checks an exchange and a modification
        share, in the benchmark's order)."""
        self._require_items(order, item_ids, None)
        if len(item_ids) != len(new_item_ids):
            raise Refusal("the number of items to be exchanged should match")
        difference = 0
        for old_id, new_id in zip(item_ids, new_item_ids, strict=True):
            item = next(i for i in order["items"] if i["item_id"] == old_id)
            variants = self.world.require("products", item["product_id"])["variants"]
            if not (new_id in variants and variants[new_id]["available"]):
                raise Refusal(f"new item {new_id} not found or available")
            difference += variants[new_id]["price"] - item["price"]
        return difference

    def _gift_card_balance(self, user_id: str, payment_method_id: str, amount: float) -> None:
        """Add ``amount`` to a gift card's balance, rounded to cents."""
        method = self.world.edit("users", user_id)["payment_methods"][payment_method_id]
        method["balance"] = round(method["balance"] + amount, 2)

    # reads

    def tool_find_user_id_by_email(self, email: str) -> str:
        for user_id, user in self.world.items("users"):
            if user["email"].lower() == email.lower():
                return user_id
        raise Refusal("user not found")

    def tool_find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        for user_id, user in self.world.items("users"):
            name = user["name"]
            if (
                name["first_name"].lower() == first_name.lower()
                and name["last_name"].lower() == last_name.lower()
                and user["address"]["zip"] == zip
            ):
                return user_id
        raise Refusal("user not found")

    def tool_get_order_details(self, order_id: str) -> str:
        return dumps(self._order(order_id))

    def tool_get_product_details(self, product_id: str) -> str:
        product = self.world.get("products", product_id)
        if product is None:
            raise Refusal("product not found")
        return dumps(product)

    def tool_get_user_details(self, user_id: str) -> str:
        return dumps(self._user(user_id))

    def tool_list_all_product_types(self) -> str:
        names = {p["name"]: p["product_id"] for p in self.world.records("products")}
        return dumps(dict(sorted(names.items())))

    # writes

    def tool_cancel_pending_order(self, order_id: str, reason: str) -> str:
        """Refunds every payment; a refund to a gift card (by its id) is credited at once."""
        order = self._order(order_id)
        if order["status"] != "pending":
            raise Refusal("non-pending order cannot be cancelled")
        if reason not in CANCEL_REASONS:
            raise Refusal("invalid reason")
        order = self.world.edit("orders", order_id)
        refunds = []
        for payment in order["payment_history"]:
            payment_id = payment["payment_method_id"]
            refunds.append(
                {
                    "transaction_type": "refund",
                    "amount": payment["amount"],
                    "payment_method_id": payment_id,
                }
            )
            if "gift_card" in payment_id:
                self._gift_card_balance(order["user_id"], payment_id, payment["amount"])
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["payment_history"].extend(refunds)
        return dumps(order)

    def tool_exchange_delivered_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> str:
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise Refusal("non-delivered order cannot be exchanged")
        difference = round(self._price_difference(order, item_ids, new_item_ids), 2)
        method = self._method(order, payment_method_id)
        if method["source"] == "gift_card" and method["balance"] < difference:
            raise Refusal("insufficient gift card balance to pay for the price difference")
        order = self.world.edit("orders", order_id)
        order["status"] = "exchange requested"
        order["exchange_items"] = sorted(item_ids)
        order["exchange_new_items"] = sorted(new_item_ids)
        order["exchange_payment_method_id"] = payment_method_id
        order["exchange_price_difference"] = difference
        return dumps(order)

    def tool_return_delivered_order_items(
        self, order_id: str, item_ids: list[str], payment_method_id: str
    ) -> str:
        """The refund goes to the original payment method or to a gift card (by its id)."""
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise Refusal("non-delivered order cannot be returned")
        self._method(order, payment_method_id)
        original = order["payment_history"][0]["payment_method_id"]
        if "gift_card" not in payment_method_id and payment_method_id != original:
            raise Refusal(
                "payment method should be either the original payment method or a gift card"
            )
        self._require_items(order, item_ids, "some item not found")
        order = self.world.edit("orders", order_id)
        order["status"] = "return requested"
        order["return_items"] = sorted(item_ids)
        order["return_payment_method_id"] = payment_method_id
        return dumps(order)

    def tool_modify_pending_order_address(
        self,
        order_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> str:
        if self._order(order_id)["status"] != "pending":
            raise Refusal("non-pending order cannot be modified")
        order = self.world.edit("orders", order_id)
        order["address"] = {
            "address1": address1,
            "address2": address2,
            "city": city,
            "state": state,
            "country": country,
            "zip": zip,
        }
        return dumps(order)

    def tool_modify_pending_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> str:
        """The difference is not rounded (a recorded 0.20999999999999375 stays); each old item
        is the first in the order that still has that id."""
        order = self._order(order_id)
        if order["status"] != "pending":
            raise Refusal("non-pending order cannot be modified")
        difference = self._price_difference(order, item_ids, new_item_ids)
        method = self._method(order, payment_method_id)
        if method["source"] == "gift_card" and method["balance"] < difference:
            raise Refusal("insufficient gift card balance to pay for the new item")
        order = self.world.edit("orders", order_id)
        order["payment_history"].append(
            {
                "transaction_type": "payment" if difference > 0 else "refund",
                "amount": abs(difference),
                "payment_method_id": payment_method_id,
            }
        )
        if method["source"] == "gift_card":
            self._gift_card_balance(order["user_id"], payment_method_id, -difference)
        for old_id, new_id in zip(item_ids, new_item_ids, strict=True):
            item = next(i for i in order["items"] if i["item_id"] == old_id)
            variant = self.world.require("products", item["product_id"])["variants"][new_id]
            item["item_id"] = new_id
            item["price"] = variant["price"]
            item["options"] = copy.deepcopy(variant["options"])
        order["status"] = "pending (item modified)"
        return dumps(order)

    def tool_modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> str:
        order = self._order(order_id)
        if order["status"] != "pending":
            raise Refusal("non-pending order cannot be modified")
        method = self._method(order, payment_method_id)
        history = order["payment_history"]
        if len(history) > 1 or history[0]["transaction_type"] != "payment":
            raise Refusal("there should be exactly one payment for a pending order")
        old_id, amount = history[0]["payment_method_id"], history[0]["amount"]
        if old_id == payment_method_id:
            raise Refusal("the new payment method should be different from the current one")
        if method["source"] == "gift_card" and method["balance"] < amount:
            raise Refusal("insufficient gift card balance to pay for the order")
        order = self.world.edit("orders", order_id)
        order["payment_history"].extend(
            [
                {
                    "transaction_type": "payment",
                    "amount": amount,
                    "payment_method_id": payment_method_id,
                },
                {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id},
            ]
        )
        if method["source"] == "gift_card":
            self._gift_card_balance(order["user_id"], payment_method_id, -amount)
        if "gift_card" in old_id:
            self._gift_card_balance(order["user_id"], old_id, amount)
        return dumps(order)

    def tool_modify_user_address(
        self,
        user_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> str:
        self._user(user_id)
        user = self.world.edit("users", user_id)
        user["address"] = {
            "address1": address1,
            "address2": address2,
            "city": city,
            "state": state,
            "country": country,
            "zip": zip,
        }
        return dumps(user)
