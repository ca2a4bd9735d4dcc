"""The store views pipeline/jobs/audit.py imports from here.

audit.py is being rewritten onto store/layout.py; until then it keeps importing these names
from this module, which takes them from the published store.views. Nothing else imports it.
"""

from store.views import (QueueReader, StoreLayout, commitlog_files, index_files, map_readonly,
                         queues, read_index_file, store_layout)

__all__ = ["QueueReader", "StoreLayout", "commitlog_files", "index_files", "map_readonly",
           "queues", "read_index_file", "store_layout"]
