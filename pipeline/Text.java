package org.mqfs.spark;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * A record's text columns as the Python codec writes them: hosts as RocketMQ prints a socket
 * address (layout.format_host, IPv6 in Python's compressed form), the offsetMsgId, and the
 * PROPERTIES pairs (message.decode_properties: pairs split on 0x02, name from value on the
 * first 0x01, empty names or values dropped, the record's `__CRC32#` never a property).
 */
final class Text {
    private static final byte[] HEX = "0123456789ABCDEF".getBytes(StandardCharsets.US_ASCII);
    static final byte[] KEYS = "KEYS".getBytes(StandardCharsets.US_ASCII);
    static final byte[] TAGS = "TAGS".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] CRC = "__CRC32#".getBytes(StandardCharsets.US_ASCII);

    private Text() {
    }

    /** '1.2.3.4:10911' or '[::1]:10911' for the `width` host bytes (address, int32 port) at pos. */
    static String host(ByteBuffer b, int pos, int width) {
        int port = b.getInt(pos + width - 4);
        StringBuilder out = new StringBuilder(48);
        if (width == 8) {
            for (int i = 0; i < 4; i++) {
                out.append(i > 0 ? "." : "").append(b.get(pos + i) & 0xFF);
            }
            return out.append(':').append(port).toString();
        }
        int[] groups = new int[8];
        for (int i = 0; i < 8; i++) {
            groups[i] = b.getShort(pos + 2 * i) & 0xFFFF;
        }
        int best = -1;
        int bestLen = 0;
        for (int i = 0; i < 8; ) {  // the first longest run of zero groups, if 2 or more
            int j = i;
            while (j < 8 && groups[j] == 0) {
                j++;
            }
            if (j - i > bestLen) {
                best = i;
                bestLen = j - i;
            }
            i = j == i ? i + 1 : j;
        }
        if (bestLen < 2) {
            best = -1;
        }
        out.append('[');
        for (int i = 0; i < 8; i++) {
            if (i == best) {
                out.append(i == 0 ? "::" : ":");
                i += bestLen - 1;
                continue;
            }
            out.append(Integer.toHexString(groups[i])).append(i < 7 ? ":" : "");
        }
        return out.append("]:").append(port).toString();
    }

    /** offsetMsgId: the STOREHOST bytes, then the CommitLog offset, in upper-case hex. */
    static byte[] msgId(ByteBuffer b, int pos, int width, long commitlogOffset) {
        byte[] out = new byte[2 * width + 16];
        for (int i = 0; i < width; i++) {
            int v = b.get(pos + i) & 0xFF;
            out[2 * i] = HEX[v >> 4];
            out[2 * i + 1] = HEX[v & 15];
        }
        for (int i = 0; i < 16; i++) {
            out[2 * width + i] = HEX[(int) (commitlogOffset >>> (60 - 4 * i)) & 15];
        }
        return out;
    }

    /** Whether bytes [from, from+len) are UTF-8 (decode checks PROPERTIES with a flavor). */
    static boolean utf8(ByteBuffer b, int from, int len) {
        long seen = 0;  // every byte or-ed in: ASCII when no high bit is set (eight at a time)
        int i = from;
        for (int end = from + len - 8; i <= end; i += 8) {
            seen |= b.getLong(i);
        }
        for (; i < from + len; i++) {
            seen |= b.get(i);
        }
        if ((seen & 0x8080808080808080L) == 0) {
            return true;
        }
        ByteBuffer part = b.duplicate();
        part.limit(from + len).position(from);
        try {
            StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT).decode(part);
            return true;
        } catch (CharacterCodingException e) {
            return false;
        }
    }

    /** The (name, value) pairs of PROPERTIES bytes [0, len) of `raw`, as {name, value} slices. */
    static List<int[]> pairs(byte[] raw, int len) {
        List<int[]> out = new ArrayList<>();
        int at = 0;
        while (at <= len) {
            int end = at;
            while (end < len && raw[end] != 2) {
                end++;
            }
            int sep = at;
            while (sep < end && raw[sep] != 1) {
                sep++;
            }
            if (sep < end && sep > at && end > sep + 1 && !same(raw, at, sep - at, CRC)) {
                out.add(new int[] {at, sep - at, sep + 1, end - sep - 1});
            }
            at = end + 1;
        }
        return out;
    }

    /** The value of the last pair named `name`, as {offset, length}, or null. */
    static int[] last(byte[] raw, List<int[]> pairs, byte[] name) {
        int[] found = null;
        for (int[] p : pairs) {
            if (same(raw, p[0], p[1], name)) {
                found = p;
            }
        }
        return found == null ? null : new int[] {found[2], found[3]};
    }

    /** KEYS split on spaces, empty tokens dropped, as {offset, length} slices. */
    static List<int[]> tokens(byte[] raw, int[] value) {
        List<int[]> out = new ArrayList<>();
        if (value == null) {
            return out;
        }
        int end = value[0] + value[1];
        for (int i = value[0]; i < end; ) {
            int j = i;
            while (j < end && raw[j] != ' ') {
                j++;
            }
            if (j > i) {
                out.add(new int[] {i, j - i});
            }
            i = j + 1;
        }
        return out;
    }

    static boolean same(byte[] raw, int at, int len, byte[] name) {
        if (len != name.length) {
            return false;
        }
        for (int i = 0; i < len; i++) {
            if (raw[at + i] != name[i]) {
                return false;
            }
        }
        return true;
    }

    static String string(byte[] raw, int at, int len) {
        return new String(raw, at, len, StandardCharsets.UTF_8);
    }
}
