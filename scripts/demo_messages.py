"""Fill a new store with sample messages for scripts/demo: a few topics, queues, keys, tags."""

import json
import sys

from mqfs.store import Message, MessageStore, StoreConfig

ITEMS = ["book", "lamp", "chair", "pen", "mug", "desk"]


def main(root: str) -> int:
    cfg = StoreConfig(commitlog_file_size=16 << 20, consume_queue_units=10_000,
                      index_slots=10_000, index_entries=40_000)
    with MessageStore(root, cfg) as store:
        for i in range(12):
            body = json.dumps({"order": i, "item": ITEMS[i % len(ITEMS)]}).encode()
            store.put(Message.create("Orders", body, queue_id=i % 2, keys=[f"order-{i}"],
                                     tags="created"))
            if i % 3 == 0:
                pay = json.dumps({"order": i, "amount": 10 + i}).encode()
                store.put(Message.create("Payments", pay, keys=[f"order-{i}", f"pay-{i}"],
                                         tags="paid"))
        store.commit_offset("billing", "Orders", 0, 0)
    print(f"demo store {root}: topics Orders (2 queues) and Payments, keys order-N and pay-N")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
