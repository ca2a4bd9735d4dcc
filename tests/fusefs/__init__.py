"""Tests of mqfs.fusefs: the mount driven with real shell tools, the CLI, dump."""
