"""A queue's life: how an open comes to know each queue, what it owes, how its end is proven
at its first use, and the files that record it (docs/recovery.md)."""
