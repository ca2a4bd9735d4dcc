"""Message bodies for the benches: each kind makes the bodies of messages first..first+n-1,
every body exactly `size` bytes and distinct.

`events` are JSON events, each drawn on its own (random ids, amounts, SKUs, timestamps, and a
free-text note of words drawn from a Zipf-weighted vocabulary), so they compress across rows
about as real event payloads do (Snappy ~2x), not as copies of each other. `windowed` are the
benches' older bodies: an 8-byte counter and a window of one random payload, distinct but
alike (Snappy ~10x across rows), kept so figures stay comparable with earlier runs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Bodies = Callable[[int, int], list[bytes]]  # (first, n) -> n bodies

KINDS = ("events", "windowed")
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "shi", "ven", "dor", "pal", "quin", "est", "ar", "bel", "cor",
              "dun", "fa", "gri", "hol", "jo", "ment", "tion", "ing", "er", "ly", "ous", "pre", "con", "pro", "ex")
_TYPES = ("order.created", "order.paid", "order.shipped", "cart.updated", "user.login", "payment.refunded",
          "stock.reserved", "invoice.issued")
_CURRENCIES = ("EUR", "USD", "GBP", "JPY", "CHF", "SEK")
_DAY_MS = 86_400_000


def bodies(kind: str, size: int, seed: int = 35) -> Bodies:
    """The body maker of `kind` (one of KINDS); the same seed makes the same bodies."""
    if kind == "events":
        return _events(size, np.random.default_rng(seed))
    if kind == "windowed":
        return _windowed(size, np.random.default_rng(seed).bytes(size + 2000))
    raise ValueError(f"unknown body kind {kind!r}: one of {', '.join(KINDS)}")


def _windowed(size: int, payload: bytes) -> Bodies:
    def make(first: int, n: int) -> list[bytes]:
        return [j.to_bytes(8, "big") + payload[j % 2000:][:size - 8] for j in range(first, first + n)]
    return make


def _vocabulary(rng: np.random.Generator, words: int = 4096) -> list[str]:
    """`words` distinct made-up words of 1-4 syllables, in random order (their Zipf rank)."""
    found: set[str] = set()
    while len(found) < words:
        found.add("".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), int(rng.integers(1, 5)))))
    return [str(w) for w in rng.permutation(sorted(found))]


def _events(size: int, rng: np.random.Generator) -> Bodies:
    vocabulary = _vocabulary(rng)
    blob = np.frombuffer("".join(w + " " for w in vocabulary).encode(), np.uint8)
    lengths = np.array([len(w) + 1 for w in vocabulary])
    starts = np.cumsum(lengths) - lengths
    zipf = np.cumsum(1.0 / np.arange(1, len(vocabulary) + 1) ** 1.1)
    ranks = np.searchsorted(zipf / zipf[-1], (np.arange(1 << 20) + 0.5) / (1 << 20)).astype(np.int16)

    def words(shape: int | tuple[int, int]) -> np.ndarray:
        """Ranks of words drawn by their Zipf weight, to 2^-20 (rng.choice with p is ten times slower)."""
        return ranks[rng.integers(0, 1 << 20, shape)]

    def text(nbytes: int) -> bytes:
        """At least `nbytes` of words drawn one by one (the rows' notes are cut from it in turn)."""
        parts: list[bytes] = []
        while nbytes > 0:
            picked = words(nbytes // 6 + 64)
            spans = lengths[picked]
            out_starts = np.cumsum(spans) - spans
            parts.append(blob[np.repeat(starts[picked] - out_starts, spans) + np.arange(int(spans.sum()))].tobytes())
            nbytes -= len(parts[-1])
        return b"".join(parts)

    def make(first: int, n: int) -> list[bytes]:
        ids = rng.integers(0, np.iinfo(np.uint64).max, (n, 2), np.uint64, endpoint=True).tolist()
        users = rng.integers(1, 10_000_000, n).tolist()
        amounts = (rng.lognormal(8, 1.5, n).astype(np.int64) / 100).tolist()
        stamps = (1_795_000_000_000 + (first + np.arange(n)) * 1000 + rng.integers(0, 1000, n)).tolist()
        types = rng.integers(0, len(_TYPES), n).tolist()
        currencies = rng.integers(0, len(_CURRENCIES), n).tolist()
        items = rng.integers(1, 4, n).tolist()
        skus = rng.integers(0, 1 << 32, (n, 3)).tolist()
        quantities = rng.integers(1, 9, (n, 3)).tolist()
        prices = (rng.integers(100, 100_000, (n, 3)) / 100).tolist()
        tags = [[vocabulary[k] for k in row] for row in words((n, 3)).tolist()]
        notes, at = text(n * size).decode(), 0
        out = []
        for i in range(n):
            lines = ",".join(f'{{"sku":"SKU-{skus[i][k]:08X}","qty":{quantities[i][k]},"price":{prices[i][k]:.2f}}}'
                             for k in range(items[i]))
            head = (f'{{"seq":{first + i},"event_id":"{ids[i][0]:016x}{ids[i][1]:016x}","type":"{_TYPES[types[i]]}",'
                    f'"user_id":{users[i]},"amount":{amounts[i]:.2f},"currency":"{_CURRENCIES[currencies[i]]}",'
                    f'"ts":{stamps[i]},"items":[{lines}],"tags":["{tags[i][0]}","{tags[i][1]}","{tags[i][2]}"],'
                    '"note":"')
            room = size - len(head) - 2
            if room < 0:
                raise ValueError(f"an event body needs more than {size} bytes")
            out.append(f'{head}{notes[at:at + room]}"}}'.encode())
            at += room
        return out
    return make
