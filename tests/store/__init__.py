"""Tests of mqfs.store: the engine, its files, recovery, repair and broker layouts."""
