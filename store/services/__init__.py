"""The services of an open store: the threads that flush, delete by retention, scrub and
follow a writer. Each is given the parts it works on (store/integrity/parts.py), its locks
and callbacks, never the engine. Built on store.integrity; only the engine sits above."""
