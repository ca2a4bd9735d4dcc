package org.mqfs.spark;

import java.nio.ByteBuffer;
import java.util.zip.CRC32;

import net.jpountz.xxhash.XXHash32;
import net.jpountz.xxhash.XXHashFactory;

/**
 * A store flavor's checksum (docs/format.md, "Flavors"): CRC32 (rocketmq) or xxh32 with seed
 * 0 (xxhash), masked to 31 bits; xxh32 is lz4-java's, a jar every Spark ships. `recordCrc`:
 * every record must carry a `__CRC32#` trailer (stores whose manifest says so).
 */
final class Checksum {
    final boolean recordCrc;
    private final XXHash32 xxh;
    private final CRC32 crc = new CRC32();
    private ByteBuffer of;
    private ByteBuffer view;

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
        if (xxh != null) {
            return xxh.hash(b, from, to - from, 0) & 0x7FFFFFFF;
        }
        if (b != of) {  // a view of the buffer whose position and limit CRC32 may move
            of = b;
            view = b.duplicate();
        }
        view.limit(to).position(from);
        crc.reset();
        crc.update(view);
        return (int) crc.getValue() & 0x7FFFFFFF;
    }
}
