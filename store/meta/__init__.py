"""Metadata beside the logs: topics and groups, the manifest (mqfs.json), the flavor probe
that reads which flavor wrote a store, the dispatch state, the queue ends repair kept and
where the CommitLog starts (retention's record). Built on store.files."""
