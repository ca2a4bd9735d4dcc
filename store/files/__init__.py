"""The store's files: safe (no-symlink) file access, mapped files, the CommitLog,
ConsumeQueues, IndexFiles, the dispatcher that feeds them, the checkpoint, the lock,
quarantine and staging. Built on store.format."""
