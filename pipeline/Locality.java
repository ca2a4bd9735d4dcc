package org.mqfs.spark;

import java.io.IOException;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.ByteBuffer;
import java.util.zip.CRC32;

import net.razorvine.pickle.PickleException;
import net.razorvine.pickle.Unpickler;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.PythonStreamingInputPartition;
import org.apache.spark.storage.PythonStreamBlockId;

import scala.Option;

/**
 * The task's half of pipeline/locality.py: before a task reads a CommitLog file it checks the
 * fingerprint the driver planned it with (the file's first record's first bytes), so a task
 * run on a host where another store sits at the same path refuses in one line instead of
 * reading that store's records as the planned store's. A partition a Python worker reads
 * (locality.Checked: its task checks the fingerprints in Python) names its store's host here.
 */
final class Locality {
    static final int PRINT_BYTES = 256;  // = locality.PRINT_BYTES

    static {  // locality.Checked pickles as _checked(host or None, prints, inner pickle)
        Unpickler.registerConstructor("mqfs.pipeline.locality", "_checked",
                args -> args[0] instanceof String host ? new String[] {host} : new String[0]);
    }

    private Locality() {
    }

    /** Spark's partitions of a Python read, each naming the host its plan gives (if any). */
    static InputPartition[] hosted(InputPartition[] parts) {
        InputPartition[] out = new InputPartition[parts.length];
        for (int i = 0; i < parts.length; i++) {
            out[i] = hosted(parts[i]);
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    static InputPartition hosted(InputPartition part) {
        if (part instanceof PythonInputPartition p) {
            String[] hosts = hostsOf(p.pickedPartition());
            return hosts.length == 0 ? p : new HostedRead(p.index(), p.pickedPartition(), hosts);
        }
        if (part instanceof PythonStreamingInputPartition p) {
            String[] hosts = hostsOf(p.pickedPartition());
            return hosts.length == 0 ? p : new HostedStreamRead(p.index(), p.pickedPartition(),
                    (Option<PythonStreamBlockId>) p.productElement(2), hosts);
        }
        return part;
    }

    /** The host a pickled Python partition names: none unless it is a locality.Checked. */
    private static String[] hostsOf(byte[] pickled) {
        try {
            return new Unpickler().loads(pickled) instanceof String[] hosts ? hosts : new String[0];
        } catch (IOException | PickleException e) {  // another class: Spark's InputPartition(None)
            return new String[0];
        }
    }

    /** A Python batch partition run on its store's host. */
    static final class HostedRead extends PythonInputPartition {
        private final String[] hosts;

        HostedRead(int index, byte[] pickled, String[] hosts) {
            super(index, pickled);
            this.hosts = hosts;
        }

        @Override
        public String[] preferredLocations() {
            return hosts;
        }
    }

    /** A Python stream partition run on its store's host. */
    static final class HostedStreamRead extends PythonStreamingInputPartition {
        private final String[] hosts;

        HostedStreamRead(int index, byte[] pickled, Option<PythonStreamBlockId> block, String[] hosts) {
            super(index, pickled, block);
            this.hosts = hosts;
        }

        @Override
        public String[] preferredLocations() {
            return hosts;
        }
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

    /** The one line of locality.refusal. */
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
