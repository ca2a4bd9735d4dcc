"""`scripts/bench scale`'s row for queues put to again after the store put them aside: a
second put_batch of one message to each of many queues, most of them dropped from the open
queues' cache (`QueueRegistry.cache`, 4,096) at the flush after the first, against
put_batch of as many messages into one queue in the same run. A broker's producers go
round the queues over and over, so this is the steady state, not the first put."""

from __future__ import annotations

import shutil
import time

from mqfs.store import Message, MessageStore, StoreConfig


def bench_dropped(root: str, flavor: str, topics: int, per_topic: int) -> list[str]:
    n = topics * per_topic
    body = b"d" * 100
    with MessageStore(root, StoreConfig(flavor=flavor)) as s:
        for t in range(topics):
            for q in range(per_topic):
                s.add_queue(f"t{t}", q)

        def spread() -> list[Message]:
            return [Message.create(f"t{i // per_topic}", body, queue_id=i % per_topic)
                    for i in range(n)]

        s.put_batch(spread())
        s.flush()  # every queue past the cache is dropped here
        dropped = n - len(s.consume_queues.opened())
        msgs = spread()
        t0 = time.perf_counter()
        s.put_batch(msgs)
        again = time.perf_counter() - t0
        t0 = time.perf_counter()
        s.flush()
        written = time.perf_counter() - t0
        one = [Message.create("one", body) for _ in range(n)]
        s.put_batch(one[:1])
        t0 = time.perf_counter()
        s.put_batch(one)
        single = time.perf_counter() - t0
    shutil.rmtree(root, ignore_errors=True)
    rate, base = n / again, n / single
    what = f"second put_batch over {n:,} queues ({dropped:,} dropped) vs as many into one queue"
    return [f"{what:<78} {rate:8.0f}/s vs {base:8.0f}/s  ratio {rate / base:6.2f}  "
            f"({again / n * 1e6:.1f} us a queue)",
            f"{'then flush(): their units written out (dropped ones loaded, checked)':<78} "
            f"{written:8.3f} s  ({written / n * 1e6:.0f} us a queue)"]
