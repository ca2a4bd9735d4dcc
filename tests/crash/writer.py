"""The crash-test writer process (tiers T2 and T3): puts oracle messages from several producer
threads and records every acknowledgement out of band, then closes the store cleanly.

Ack log lines (O_APPEND, one write each, on a file system the tests never cut):
  P producer seq commitlog_offset queue_offset durable   after put returned (durable=1 under sync flush)
  F producer seq                             after flush() returned: seq and earlier are durable
It prints "ready" on stdout once the store is open, so a harness can time a kill from there.
`--recover-only` opens and closes the store (a harness sets MQFS_CRASH_AT to die inside).

  python -m tests.crash.writer STORE ACKLOG --mode sync|async [--transient] [--zero-ahead N] ...
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from mqfs.store import MessageStore
from mqfs.store.files import mapped_file
from tests.crash.oracle import crash_config, expected_message


def _producer(store: MessageStore, fd: int, args, p: int, errors: list) -> None:
    durable = int(args.mode == "sync")
    try:
        for s in range(args.count):
            r = store.put(expected_message(args.seed, p, s, args.max_body))
            os.write(fd, f"P {p} {s} {r.commitlog_offset} {r.queue_offset} {durable}\n".encode())
            if args.mode == "async" and (s + 1) % args.flush_every == 0:
                store.flush()
                os.write(fd, f"F {p} {s}\n".encode())
    except BaseException as exc:  # a power cut shows up here as EIO; report, do not ack
        errors.append(exc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("acks")
    ap.add_argument("--mode", choices=("sync", "async"), default="sync")
    ap.add_argument("--transient", action="store_true")
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--count", type=int, default=100, help="messages per producer")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-body", type=int, default=600)
    ap.add_argument("--flush-every", type=int, default=10, help="async: flush() every N puts")
    ap.add_argument("--recover-only", action="store_true")
    ap.add_argument("--zero-ahead", type=int, help="sync flush: bytes of zeros written past "
                    "each append instead of a MiB, so chunks end inside the small files")
    args = ap.parse_args(argv)
    if args.zero_ahead:
        mapped_file.ZERO_AHEAD = args.zero_ahead
    store = MessageStore(args.store, crash_config(flush_mode=args.mode,
                                                  transient_pool=args.transient))
    store.open()
    print("ready", flush=True)
    if args.recover_only:
        store.close()
        return 0
    fd = os.open(args.acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    errors: list[BaseException] = []
    threads = [threading.Thread(target=_producer, args=(store, fd, args, p, errors))
               for p in range(args.producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.close(fd)
    if errors:
        print(f"writer failed: {errors[0]!r}", file=sys.stderr)
        return 1
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
