"""Batch jobs over a store: export, stats, audit, rebuild (run through pipeline.cli)."""
