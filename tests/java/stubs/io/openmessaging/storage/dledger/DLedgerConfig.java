package io.openmessaging.storage.dledger;

/** Stub: only the type, for DefaultMessageStore's DLedger branch, which never runs here. */
public class DLedgerConfig {
    public String getDataStorePath() {
        throw new UnsupportedOperationException("DLedger is not built in this stub");
    }
}
