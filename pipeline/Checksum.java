package org.mqfs.spark;

import java.nio.ByteBuffer;
import java.util.zip.CRC32;

import net.jpountz.xxhash.XXHash32;
import net.jpountz.xxhash.XXHashFactory;

/**
 * A store flavor's checksum (docs/format.md, "Flavors"): CRC32 (rocketmq) or xxh32 with seed
 * 0 (xxhash), masked to 31 bits; xxh32 is lz4-java's, a jar every Spark ships. `recordCrc`:
 * every record must carry a `__CRC32#` trailer (stores whose manifest says so).
 *
 * The bytes are copied out of the mapping first and hashed on the heap: native code reading
 * a mapped file that was cut short under the mapping faults and ends the JVM (SIGBUS), where
 * the copy, a ByteBuffer read, fails with an InternalError the task reports. The copy costs
 * ~20 ns a KiB; a hash in Java instead measured ~60 ns a KiB slower than the native one
 * (eight multiplies per 16 bytes either way; the JIT's loop carries more around them).
 */
final class Checksum {
    final boolean recordCrc;
    private final XXHash32 xxh;
    private final CRC32 crc = new CRC32();
    private byte[] copy = new byte[4096];

    Checksum(String flavor, boolean recordCrc) {
        this.recordCrc = recordCrc;
        if ("xxhash".equals(flavor)) {
            xxh = XXHashFactory.fastestInstance().hash32();
        } else if ("rocketmq".equals(flavor)) {
            xxh = null;
        } else {
            throw new IllegalArgumentException("mqfs: unknown store flavor " + flavor);
        }
    }

    /** The masked checksum of bytes [from, to) of the buffer. */
    int of(ByteBuffer b, int from, int to) {
        int n = to - from;
        if (n > copy.length) {
            copy = new byte[Math.max(n, 2 * copy.length)];
        }
        b.get(from, copy, 0, n);
        if (xxh != null) {
            return xxh.hash(copy, 0, n, 0) & 0x7FFFFFFF;
        }
        crc.reset();
        crc.update(copy, 0, n);
        return (int) crc.getValue() & 0x7FFFFFFF;
    }
}
