"""Integrity at open and offline: the parts an open store's services are given, the CommitLog
scanner, the salvage walk, recovery, the read-only open, queue checks, verify and repair's
journal. Built on store.meta; the services, the engine and repair sit above it."""
