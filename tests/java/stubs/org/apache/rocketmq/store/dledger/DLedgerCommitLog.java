package org.apache.rocketmq.store.dledger;

import io.openmessaging.storage.dledger.DLedgerServer;
import org.apache.rocketmq.store.CommitLog;
import org.apache.rocketmq.store.DefaultMessageStore;

/** Stub: the DLedger (Raft) CommitLog is not built; enableDLegerCommitLog must stay off. */
public class DLedgerCommitLog extends CommitLog {
    public DLedgerCommitLog(DefaultMessageStore store) {
        super(store);
        throw new UnsupportedOperationException("DLedger CommitLog is not built in this stub");
    }

    public DLedgerServer getdLedgerServer() {
        throw new UnsupportedOperationException("DLedger CommitLog is not built in this stub");
    }
}
