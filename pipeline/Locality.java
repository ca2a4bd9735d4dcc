package org.mqfs.spark;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.ByteBuffer;
import java.util.zip.CRC32;

/**
 * The task's half of pipeline/locality.py: before a task reads a CommitLog file it checks the
 * fingerprint the driver planned it with (the file's first record's first bytes), so a task
 * run on a host where another store sits at the same path refuses in one line instead of
 * reading that store's records as the planned store's.
 */
final class Locality {
    static final int PRINT_BYTES = 256;  // = locality.PRINT_BYTES

    private Locality() {
    }

    /** locality.fingerprint of a mapped file: CRC32:length. */
    static String fingerprint(ByteBuffer buf) {
        int size = buf.capacity();
        if (size == 0) {
            return "00000000:0";
        }
        int total = size >= 4 ? buf.getInt(0) : 0;
        int n = Math.min(Math.min(Math.max(total, 8), PRINT_BYTES), size);
        byte[] head = new byte[n];
        buf.get(0, head);
        CRC32 crc = new CRC32();
        crc.update(head);
        return String.format("%08x:%d", crc.getValue(), n);
    }

    static void check(ByteBuffer buf, String path, String planned) {
        String found = fingerprint(buf);
        if (!found.equals(planned)) {
            throw new IllegalStateException("mqfs: " + path + " on " + here() + " is not the CommitLog file the "
                    + "read was planned with (another store at that path: fingerprint " + found + ", planned "
                    + planned + "); run the task where its store is (the hosts option) or load again");
        }
    }

    static String here() {
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (UnknownHostException e) {
            return "this host";
        }
    }
}
