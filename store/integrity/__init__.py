"""Integrity at open and offline: the salvage walk, recovery, queue checks, verify, the
background scrub and repair's journal. Built on store.meta; only the engine and repair sit
above it."""
