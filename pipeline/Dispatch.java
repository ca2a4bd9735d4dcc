package org.mqfs.spark;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * LMQ / multi-dispatch (store/format/multi_dispatch.py `dispatched`, the reference; docs/format.md
 * "LMQ and multi-dispatch"): the queues besides its own that a record's consumers read it in.
 * A record whose properties hold INNER_MULTI_DISPATCH=q1,q2 and INNER_MULTI_QUEUE_OFFSET=o1,o2
 * is a message of queue `qi` (id 0 for an LMQ name, else the record's own) at offset `oi`;
 * names holding "/" or empty, offsets Python's int() refuses, records of retry, system and
 * delayed topics and lists of different lengths give none.
 */
final class Dispatch {
    private static final byte[] NAMES = "INNER_MULTI_DISPATCH".getBytes(StandardCharsets.US_ASCII);
    private static final long NAME_HEAD = 0x494E4E45525F4D55L;  // "INNER_MU", NAMES' first eight bytes
    private static final byte[] OFFSETS = "INNER_MULTI_QUEUE_OFFSET".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] LMQ = "%LMQ%".getBytes(StandardCharsets.US_ASCII);
    private static final byte[][] NOT_DISPATCHED = {"%RETRY%".getBytes(StandardCharsets.US_ASCII),
        "rmq_sys_".getBytes(StandardCharsets.US_ASCII)};
    private static final byte[] SCHEDULE = "SCHEDULE_TOPIC_XXXX".getBytes(StandardCharsets.US_ASCII);

    /** One queue a record is served in: its name as bytes [at, at + len) of `raw`. */
    record Served(byte[] raw, int at, int len, int queueId, long queueOffset) {
    }

    private Dispatch() {
    }

    /** Whether a pair of PROPERTIES bytes [from, to) may be named INNER_MULTI_DISPATCH: a
     * pair starting (at `from` or after a 0x02) with its first eight bytes. A cheap first look,
     * eight bytes at a time: most records have no multi-dispatch and are never parsed. */
    static boolean named(ByteBuffer b, int from, int to) {
        int last = to - NAMES.length;  // where a pair so named starts at the latest
        if (last < from) {
            return false;
        }
        if (b.getLong(from) == NAME_HEAD) {
            return true;
        }
        int i = from;
        for (int end = to - 8; i <= end; i += 8) {
            long x = b.getLong(i) ^ 0x0202020202020202L;
            // each 0x02 byte flagged (and maybe a byte before one: checked like the others)
            long twos = (x - 0x0101010101010101L) & ~x & 0x8080808080808080L;
            while (twos != 0) {
                int next = i + (Long.numberOfLeadingZeros(twos) >>> 3) + 1;
                if (next <= last && b.getLong(next) == NAME_HEAD) {
                    return true;
                }
                twos &= ~Long.highestOneBit(twos);
            }
        }
        for (; i < to; i++) {
            if (b.get(i) == 2 && i + 1 <= last && b.getLong(i + 1) == NAME_HEAD) {
                return true;
            }
        }
        return false;
    }

    /** The queues record r (well formed, queued, not a filler) is dispatched to; none when
     * its properties (without the record's trailer) are not UTF-8, as decode_properties. */
    static List<Served> of(Record r, ByteBuffer b) {
        int len = r.ownPropsLen();
        if (!named(b, r.propsPos, r.propsPos + len) || !Text.utf8(b, r.propsPos, len) || notDispatched(r, b)) {
            return List.of();
        }
        List<Served> out = new ArrayList<>();
        byte[] raw = new byte[len];
        b.get(r.propsPos, raw, 0, len);
        List<int[]> pairs = Text.pairs(raw, len);
        int[] names = Text.last(raw, pairs, NAMES);
        int[] offsets = Text.last(raw, pairs, OFFSETS);
        if (names == null || offsets == null || blank(raw, names) || blank(raw, offsets)) {
            return out;
        }
        List<int[]> queues = split(names, raw);
        List<int[]> at = split(offsets, raw);
        if (queues.size() != at.size()) {
            return out;
        }
        for (int i = 0; i < queues.size(); i++) {
            int[] q = queues.get(i);
            if (q[1] == 0 || contains(raw, q, (byte) '/')) {
                continue;
            }
            Long offset = pythonInt(Text.string(raw, at.get(i)[0], at.get(i)[1]));
            if (offset != null) {
                boolean lmq = q[1] >= LMQ.length && Text.same(raw, q[0], LMQ.length, LMQ);
                out.add(new Served(raw, q[0], q[1], lmq ? 0 : r.queueId, offset));
            }
        }
        return out;
    }

    private static boolean notDispatched(Record r, ByteBuffer b) {
        for (byte[] prefix : NOT_DISPATCHED) {
            boolean starts = r.topicLen >= prefix.length;
            for (int i = 0; starts && i < prefix.length; i++) {
                starts = b.get(r.topicPos + i) == prefix[i];
            }
            if (starts) {
                return true;
            }
        }
        return r.topicIs(b, SCHEDULE);
    }

    /** The value's comma-separated items as {offset, length} (str.split(",")). */
    private static List<int[]> split(int[] value, byte[] raw) {
        List<int[]> out = new ArrayList<>();
        int from = value[0];
        int end = value[0] + value[1];
        for (int i = from; i <= end; i++) {
            if (i == end || raw[i] == ',') {
                out.add(new int[] {from, i - from});
                from = i + 1;
            }
        }
        return out;
    }

    private static boolean contains(byte[] raw, int[] slice, byte c) {
        for (int i = slice[0]; i < slice[0] + slice[1]; i++) {
            if (raw[i] == c) {
                return true;
            }
        }
        return false;
    }

    /** str.strip() leaves nothing. */
    private static boolean blank(byte[] raw, int[] value) {
        return Text.string(raw, value[0], value[1]).codePoints().allMatch(Dispatch::space);
    }

    /** str.isspace of one character. */
    private static boolean space(int c) {
        return Character.isWhitespace(c) || c == 0x85 || c == 0xA0 || c == 0x2007 || c == 0x202F;
    }

    /** Python's int(text) of a str: blanks around, a sign, decimal digits (any script's)
     * with single underscores between them; null where int() raises (or past a long). */
    static Long pythonInt(String text) {
        int[] cs = text.codePoints().toArray();
        int a = 0;
        int z = cs.length;
        while (a < z && space(cs[a])) {
            a++;
        }
        while (z > a && space(cs[z - 1])) {
            z--;
        }
        boolean negative = a < z && cs[a] == '-';
        if (a < z && (cs[a] == '-' || cs[a] == '+')) {
            a++;
        }
        if (a >= z || cs[a] == '_' || cs[z - 1] == '_') {
            return null;
        }
        long value = 0;
        for (int i = a; i < z; i++) {
            if (cs[i] == '_') {
                if (cs[i - 1] == '_') {
                    return null;
                }
                continue;
            }
            int d = Character.digit(cs[i], 10);
            if (d < 0 || Character.getType(cs[i]) != Character.DECIMAL_DIGIT_NUMBER) {
                return null;
            }
            try {
                value = Math.addExact(Math.multiplyExact(value, 10), negative ? -d : d);
            } catch (ArithmeticException e) {
                return null;
            }
        }
        return value;
    }
}
