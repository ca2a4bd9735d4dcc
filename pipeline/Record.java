package org.mqfs.spark;

import java.nio.ByteBuffer;

/**
 * The fields of one CommitLog record of a mapped file (docs/format.md, "CommitLog record"),
 * and whether it is well formed: the structural checks of store/format/layout.py `fields`
 * (what codec.decode checks before any checksum), byte for byte.
 */
final class Record {
    static final int MAGIC_V1 = 0xDAA320A7;
    static final int MAGIC_V2 = 0xDAA320AB;
    static final int MAGIC_BLANK = 0xCBD43194;
    static final int MIN_SIZE = 91;  // the IPv4 header, TOPICLEN (1), PROPERTIESLEN (2)
    static final int TRAILER = 20;   // "__CRC32#" 0x01, ten digits, 0x02
    static final int BORN_HOST_POS = 48;
    private static final long TRAILER_HEAD = 0x5F5F435243333223L;  // "__CRC32#", then 0x01
    private static final byte[] FILLER = {'%', 'D', 'A', 'M', 'A', 'G', 'E', 'D'};

    int start;
    int total;
    int magic;
    int bodyCrc;
    int queueId;
    int flag;
    long queueOffset;
    long physical;
    int sysFlag;
    long bornTs;
    long storeTs;
    int bornLen;
    int storeLen;
    int bodyPos;
    int bodyLen;
    int topicPos;
    int topicLen;
    int propsPos;
    int propsLen;
    long stored;  // the checksum the `__CRC32#` trailer holds, or -1 without one

    /** Reads the record at pos, which must end by limit; false when decode would refuse it. */
    boolean read(ByteBuffer b, int pos, int limit) {
        start = pos;
        if (pos < 0 || (long) pos + MIN_SIZE > limit) {
            return false;
        }
        total = b.getInt(pos);
        magic = b.getInt(pos + 4);
        if (magic != MAGIC_V1 && magic != MAGIC_V2 || total < MIN_SIZE || total > limit - pos) {
            return false;
        }
        int end = pos + total;
        bodyCrc = b.getInt(pos + 8);
        queueId = b.getInt(pos + 12);
        flag = b.getInt(pos + 16);
        queueOffset = b.getLong(pos + 20);
        physical = b.getLong(pos + 28);
        sysFlag = b.getInt(pos + 36);
        bornTs = b.getLong(pos + 40);
        bornLen = (sysFlag & 0x10) != 0 ? 20 : 8;
        storeLen = (sysFlag & 0x20) != 0 ? 20 : 8;
        bodyPos = pos + 72 + bornLen + storeLen;
        if (bodyPos > end) {
            return false;
        }
        storeTs = b.getLong(pos + BORN_HOST_POS + bornLen);
        bodyLen = b.getInt(bodyPos - 4);
        int wide = magic == MAGIC_V2 ? 2 : 1;
        if (bodyLen < 0 || (long) bodyPos + bodyLen + wide > end) {
            return false;
        }
        int at = bodyPos + bodyLen;
        topicLen = wide == 2 ? b.getShort(at) : b.get(at) & 0xFF;
        topicPos = at + wide;
        if (topicLen <= 0 || (long) topicPos + topicLen + 2 > end) {
            return false;
        }
        propsPos = topicPos + topicLen + 2;
        propsLen = b.getShort(propsPos - 2);
        if (propsLen < 0 || propsPos + propsLen != end) {
            return false;
        }
        for (int i = topicPos; i < topicPos + topicLen; i++) {
            if (b.get(i) < 0) {  // decode reads topics as ASCII
                return false;
            }
        }
        stored = trailer(b);
        return true;
    }

    /** PROPERTIES' length without the record's trailer (which is never a property). */
    int ownPropsLen() {
        return stored >= 0 ? propsLen - TRAILER : propsLen;
    }

    int end() {
        return start + total;
    }

    int storeHostPos() {
        return start + BORN_HOST_POS + bornLen + 8;
    }

    /** The checksum the `__CRC32#` trailer holds, or -1 without one (codec.record_crc_of);
     * read once per record (`stored`). */
    private long trailer(ByteBuffer b) {
        int end = end();
        if (total < MIN_SIZE + TRAILER || b.get(end - 1) != 2 || b.getLong(end - TRAILER) != TRAILER_HEAD
                || b.get(end - TRAILER + 8) != 1) {
            return -1;
        }
        long value = 0;
        for (int i = end - 2; i >= end - 11; i--) {  // least significant digit first
            int d = b.get(i) - '0';
            if (d < 0 || d > 9) {
                return -1;
            }
            value = value * 10 + d;
        }
        return value;
    }

    /** codec.check_record: the trailer's checksum where there is one (or must be), else BODYCRC. */
    boolean checksumsHold(ByteBuffer b, Checksum sum) {
        if (stored >= 0) {
            return sum.of(b, start, end() - TRAILER) == stored;
        }
        return !sum.recordCrc && sum.of(b, bodyPos, bodyPos + bodyLen) == bodyCrc;
    }

    /** The SYSFLAG a consumer's message shows (compression.consumer_sys_flag): COMPRESSED
     * cleared once the body is inflated (an empty one is not), the type bits kept; an inner
     * batch's messages show the record's. */
    int consumerSysFlag() {
        return bodyLen > 0 ? sysFlag & ~0x1 : sysFlag;
    }

    /** Queued: no transaction or a committed one (layout.in_queue); prepared/rolled back not. */
    boolean inQueue() {
        return (sysFlag & 0x4) == 0;
    }

    /** A filler record repair wrote (v1, rolled back, topic a prefix of %DAMAGED), or a
     * record on the topic %DAMAGED itself: never a row (scan.FileBatcher._keep). */
    boolean filler(ByteBuffer b) {
        boolean prefix = topicLen <= FILLER.length;
        for (int i = 0; prefix && i < topicLen; i++) {
            prefix = b.get(topicPos + i) == FILLER[i];
        }
        return prefix && (topicLen == FILLER.length
                || magic == MAGIC_V1 && (sysFlag & 0xC) == 0xC);
    }

    /** The topic equals `name` (ASCII bytes). */
    boolean topicIs(ByteBuffer b, byte[] name) {
        if (topicLen != name.length) {
            return false;
        }
        for (int i = 0; i < topicLen; i++) {
            if (b.get(topicPos + i) != name[i]) {
                return false;
            }
        }
        return true;
    }
}
