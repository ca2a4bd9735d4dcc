"""What offline tools (the pipeline) use: read-only views of a store that may be live, and
the rebuild of derived files into a new directory. Built on store.meta; never takes the lock."""
