"""Tool use (inventory): reorder exactly the items that fell below their reorder level."""

from spade_jax.envs.base import ToolEnv, ToolError, tool

PRODUCTS = ("bolts", "nuts", "washers", "hinges", "screws", "brackets", "springs", "rivets", "clamps")


class InventoryRestock(ToolEnv):
    KIND = "tool"
    SKILL = "inventory"
    NAME = "inventory_restock"
    ITEMS = 7
    LOW_ITEMS = 2

    def setup(self) -> str:
        self.items: dict[str, dict] = {}
        for k, name in enumerate(self.rng.sample(PRODUCTS, self.ITEMS)):
            level = self.rng.randint(10, 40)
            target = level + self.rng.randint(20, 60)
            stock = self.rng.randint(0, level - 1) if k < self.LOW_ITEMS else self.rng.randint(0, target)
            self.items[f"SKU{10 + k}"] = {"name": name, "stock": stock, "reorder_level": level, "target": target}
        self.low = sorted(s for s, x in self.items.items() if x["stock"] < x["reorder_level"])
        self.orders: list[tuple[str, int]] = []
        return (
            "Restock the warehouse: for every item whose stock is BELOW its reorder level, place one purchase "
            "order that brings its stock exactly up to its target. Order nothing else. Then answer with the "
            "number of orders you placed."
        )

    @tool("List all SKUs with their product names.")
    def list_items(self) -> dict:
        return {sku: x["name"] for sku, x in self.items.items()}

    @tool("Stock, reorder level and target of one SKU.", sku="SKU such as SKU12")
    def get_item(self, sku: str) -> dict:
        if sku not in self.items:
            raise ToolError(f"unknown SKU {sku}")
        return self.items[sku]

    @tool("Place a purchase order.", sku="SKU to order", quantity="units to order")
    def place_order(self, sku: str, quantity: int) -> str:
        if sku not in self.items:
            raise ToolError(f"unknown SKU {sku}")
        if quantity <= 0:
            raise ToolError("quantity must be positive")
        self.orders.append((sku, quantity))
        return f"order #{len(self.orders)} placed: {quantity} x {sku}"

    def expected_orders(self) -> list[tuple[str, int]]:
        return [(s, self.items[s]["target"] - self.items[s]["stock"]) for s in self.low]

    def check_answer(self, answer: str) -> bool:
        return sorted(self.orders) == self.expected_orders() and answer.strip() == str(len(self.low))

    def hint(self) -> str:
        return (
            f"Check every SKU with get_item; {len(self.low)} of them are below their reorder level. "
            "Order target minus stock for each of those."
        )

    def reference_action(self) -> str:
        for sku, qty in self.expected_orders():
            if (sku, qty) not in self.orders:
                return self.call("place_order", sku=sku, quantity=qty)
        return self.answer(len(self.low))
