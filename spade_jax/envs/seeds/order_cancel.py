"""Tool use (orders database): cancel a customer's most recent unshipped order and report the refund."""

from spade_jax.envs.base import ToolEnv, ToolError, tool

CUSTOMERS = ("alice", "bruno", "chen", "dana")
ITEMS = ("lamp", "kettle", "backpack", "headphones", "desk chair", "blender", "monitor")


class OrderCancel(ToolEnv):
    KIND = "tool"
    SKILL = "orders database"
    NAME = "order_cancel"
    ORDERS = 12
    CUSTOMER_ORDERS = 5

    def setup(self) -> str:
        self.customer = self.rng.choice(CUSTOMERS)
        days = self.rng.sample(range(1, 29), self.ORDERS)
        self.orders: dict[str, dict] = {}
        for k, day in enumerate(days):
            who = self.customer if k < self.CUSTOMER_ORDERS else self.rng.choice(CUSTOMERS)
            status = "processing" if k in (0, 1) else self.rng.choice(["processing", "shipped", "delivered"])
            self.orders[f"O{100 + k}"] = {
                "customer": who,
                "item": self.rng.choice(ITEMS),
                "date": f"2024-05-{day:02d}",
                "status": status,
                "total": self.rng.randint(12, 240),
            }
        mine = [oid for oid, o in self.orders.items() if o["customer"] == self.customer and o["status"] == "processing"]
        self.target = max(mine, key=lambda oid: self.orders[oid]["date"])
        return (
            f"Customer {self.customer} wants to cancel their MOST RECENT order that has not shipped yet "
            "(status 'processing'). Cancel exactly that order, then answer with the refunded total (a number)."
        )

    @tool("List the order ids of a customer.", customer="customer name")
    def find_orders(self, customer: str) -> list:
        ids = [oid for oid, o in self.orders.items() if o["customer"] == customer.strip().lower()]
        if not ids:
            raise ToolError(f"no customer named {customer}")
        return ids

    @tool("Get the details of an order.", order_id="order id such as O103")
    def get_order(self, order_id: str) -> dict:
        if order_id not in self.orders:
            raise ToolError(f"no order {order_id}")
        return dict(self.orders[order_id], order_id=order_id)

    @tool("Cancel an order that is still processing; returns the refund.", order_id="order id")
    def cancel_order(self, order_id: str) -> dict:
        order = self.orders.get(order_id)
        if order is None:
            raise ToolError(f"no order {order_id}")
        if order["status"] != "processing":
            raise ToolError(f"order {order_id} is {order['status']} and cannot be cancelled")
        order["status"] = "cancelled"
        return {"order_id": order_id, "refund": order["total"]}

    def check_answer(self, answer: str) -> bool:
        cancelled = [oid for oid, o in self.orders.items() if o["status"] == "cancelled"]
        return cancelled == [self.target] and answer.strip().lstrip("$") == str(self.orders[self.target]["total"])

    def hint(self) -> str:
        return (
            "Look up every order of the customer, keep only status 'processing', and compare dates: "
            "the latest date is the one to cancel."
        )

    def reference_action(self) -> str:
        if self.orders[self.target]["status"] != "cancelled":
            return self.call("cancel_order", order_id=self.target)
        return self.answer(self.orders[self.target]["total"])
