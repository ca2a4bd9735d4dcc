"""The on-disk format, coded once: record, property and header layouts, the codec, the two
flavors (checksum and key hash) and the JSON-lines message form. Built on store.errors and
store.config only."""
