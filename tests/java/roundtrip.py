"""By hand (scripts/java-broker-store --roundtrip): Java's answers for a broker store mqfs
wrote to, against what mqfs reads from the same files. Usage: roundtrip.py STORE ANSWERS.json"""

import json
import sys

from mqfs.store import MessageStore, StoreConfig
from tests.store.java_stores import DELAY_LEVELS
from tests.store.test_java_stores import expected, seen_by_mqfs


def main(root: str, path: str) -> int:
    with open(path, encoding="utf-8") as f:
        java = json.load(f)
    differ = 0
    with MessageStore(root, StoreConfig(read_only=True, message_delay_level=DELAY_LEVELS), create=False) as s:
        for q in java["queues"]:
            if (s.min_offset(q["topic"], q["queue"]), s.max_offset(q["topic"], q["queue"])) != (q["min"], q["max"]):
                differ += 1
                print("queue range differs:", q["topic"], q["queue"])
            for a in q["messages"]:
                m = s.get(q["topic"], q["queue"], a["at"])
                if seen_by_mqfs(m) != expected(q, a, m):
                    differ += 1
                    print("message differs:", q["topic"], q["queue"], a["at"])
        for k in java["keys"]:
            found = {m.commitlog_offset for m in s.query_key(k["key"], topic=k["topic"])}
            if sorted(found) != sorted(set(k["commitlog"])):  # the broker may list a record twice
                differ += 1
                print("key differs:", k["topic"], k["key"])
    total = sum(len(q["messages"]) for q in java["queues"])
    print(f"roundtrip: {total} messages, {len(java['keys'])} keys: {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
