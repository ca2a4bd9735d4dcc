package org.mqfs.spark;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * The messages a consumer gets from an inner-batch record of a BatchCQ topic (docs/format.md,
 * "BatchCQ"), as store/format/batch.unwrap gives them: the parts of its body (inflated first
 * when compressed), which must tile it exactly and number INNER_NUM, each with its own flag,
 * body and properties (UTF-8, as pipeline/inner_batches.py decodes them) at queue offset
 * QUEUEOFFSET + i. A batch whose body does not inflate or unwrap is a damaged record, never
 * other rows.
 */
final class Inner {
    static final int FLAGS = 0x40 | 0x80;  // NEED_UNWRAP | INNER_BATCH (record_layout.py)
    private static final int HEAD = 20;  // size, magic, body crc, flag, body length
    private static final byte[] INNER_NUM = "INNER_NUM".getBytes(StandardCharsets.US_ASCII);

    /** One packed message: its index in the batch, flag, and body and properties in `raw`. */
    record Message(byte[] raw, int index, int flag, int bodyAt, int bodyLen, int propsAt, int propsLen) {}

    static final class Damaged extends Exception {
        Damaged(String why) {
            super(why);
        }
    }

    private Inner() {}

    /** A record a consumer unwraps (both flags, as PullAPIWrapper). */
    static boolean is(Record r) {
        return (r.sysFlag & FLAGS) == FLAGS;
    }

    /** The messages of the well-formed inner-batch record r in b, whose body (inflated when
     * compressed, as a consumer unwraps it) is `raw`. */
    static List<Message> of(Record r, ByteBuffer b, byte[] raw, long offset) throws Damaged {
        String where = "the inner batch at CommitLog offset " + offset;
        ByteBuffer v = ByteBuffer.wrap(raw);
        List<Message> out = new ArrayList<>();
        int pos = 0;
        while (pos < raw.length) {
            if (raw.length - pos < HEAD + 2) {
                throw new Damaged(where + ": inner message " + out.size() + " is cut short at byte " + pos);
            }
            int size = v.getInt(pos);
            int flag = v.getInt(pos + 12);
            int bodyLen = v.getInt(pos + 16);
            int at = pos + HEAD;
            if (bodyLen < 0 || (long) at + bodyLen + 2 > raw.length) {
                throw new Damaged(where + ": inner message " + out.size() + " body of " + bodyLen
                        + " bytes does not fit the batch");
            }
            int propsLen = v.getShort(at + bodyLen);
            int end = at + bodyLen + 2 + propsLen;
            if (propsLen < 0 || end > raw.length || size != end - pos) {
                throw new Damaged(where + ": inner message " + out.size() + " size " + size
                        + " does not match its parts (" + (end - pos) + " bytes)");
            }
            out.add(new Message(raw, out.size(), flag, at, bodyLen, at + bodyLen + 2, propsLen));
            pos = end;
        }
        long n = innerNum(r, b, offset, where);
        if (out.size() != n) {
            throw new Damaged(where + " holds " + out.size() + " messages, INNER_NUM says " + n);
        }
        for (Message m : out) {
            if (!Text.utf8(v, m.propsAt, m.propsLen)) {
                throw new Damaged("properties of the record at " + offset + " are not UTF-8");
            }
        }
        return out;
    }

    /** INNER_NUM of the record's own properties, as batch.inner_num reads it (Python's int). */
    private static long innerNum(Record r, ByteBuffer b, long offset, String where) throws Damaged {
        int len = r.ownPropsLen();
        if (!Text.utf8(b, r.propsPos, len)) {
            throw new Damaged("properties of the record at " + offset + " are not UTF-8");
        }
        byte[] props = new byte[len];
        b.get(r.propsPos, props);
        int[] value = Text.last(props, Text.pairs(props, len), INNER_NUM);
        Long n = value == null ? null : Dispatch.pythonInt(Text.string(props, value[0], value[1]));
        if (n == null || n < 1) {
            throw new Damaged(where + " has INNER_NUM "
                    + (value == null ? "''" : "'" + Text.string(props, value[0], value[1]) + "'"));
        }
        return n;
    }
}
