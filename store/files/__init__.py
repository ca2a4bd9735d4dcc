"""Files and the three logs: safe (no-symlink) file access, mapped files, the CommitLog,
ConsumeQueues, IndexFiles, the dispatcher that feeds them, the checkpoint, the lock, flushing,
quarantine and staging. Built on store.format."""
