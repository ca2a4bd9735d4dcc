package io.openmessaging.storage.dledger;

/** Stub: only the type, for DefaultMessageStore's DLedger branch, which never runs here. */
public class DLedgerServer {
    public DLedgerConfig getdLedgerConfig() {
        throw new UnsupportedOperationException("DLedger is not built in this stub");
    }
}
