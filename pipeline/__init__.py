"""mqfs data pipeline: a Spark 4 Python data source over a store directory (format "mqfs",
batch, streaming and writes) and the export/stats/audit/rebuild jobs built on it.

Imports `store` for the on-disk format, never `fusefs`."""
