package io.openmessaging.storage.dledger.entry;

/** Stub: the one constant DefaultMessageStore reads in its DLedger branch, which never runs here. */
public class DLedgerEntry {
    public static final int BODY_OFFSET = 0;
}
