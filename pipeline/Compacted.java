package org.mqfs.spark;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * A compaction topic's queue as the broker serves it (docs/format.md, "Compaction topics";
 * pipeline/compacted.py): the copies in compaction/compactionLog/ its planned compactionCq
 * units point at, each checked against its unit as store/files/compaction_log.py's
 * CompactedQueue.read checks it (the copy whole in its file, well formed, its body checksum
 * and UTF-8 properties, then store/format/compaction.mismatch) before it becomes rows. A copy
 * that is not is a damaged one: it fails the read, or is counted and skipped.
 */
final class Compacted {
    private final byte[] topic;
    private final int queue;
    private final String name;
    final JsonNode lost;  // why each planned unit that points past the compactionLog's files is damaged

    Compacted(JsonNode plan) {
        name = plan.get("topic").asText() + "/" + plan.get("queue").asInt();
        topic = plan.get("topic").asText().getBytes(StandardCharsets.US_ASCII);
        lost = plan.get("lost");
        queue = plan.get("queue").asInt();
    }

    /** Why unit `i` of the compactionLog file `w` (mapped in b, starting at CommitLog
     * position `from`) does not describe its copy at `p`, or null when it does (r then holds
     * the copy). */
    String check(Record r, ByteBuffer b, Checksum sum, JsonNode w, int i, int p, long from) {
        long position = from + p;
        int size = w.get("size").get(i).asInt();
        long base = w.get("base").get(i).asLong();
        long time = w.get("time").get(i).asLong();
        String where = "compactionCq " + name + " unit for offset " + base;
        String damaged = where + ": damaged copy at " + position + ": ";
        if ((long) p + size > b.capacity()) {
            return damaged + "the file ends " + (p + size - b.capacity()) + " bytes short of it";
        }
        if (!r.read(b, p, p + size)) {
            return damaged + "malformed record";
        }
        if (sum.of(b, r.bodyPos, r.bodyPos + r.bodyLen) != r.bodyCrc) {
            return damaged + "body checksum mismatch";
        }
        if (!Text.utf8(b, r.propsPos, r.propsLen)) {
            return damaged + "properties of the record at " + r.physical + " are not UTF-8";
        }
        String wrong = null;
        if (r.physical != position) {
            wrong = "its record says it is at " + r.physical;
        } else if (r.total != size) {
            wrong = "its record is " + r.total + " bytes, the unit says " + size;
        } else if (!r.topicIs(b, topic) || r.queueId != queue) {
            wrong = "its record is of " + Text.string(bytes(b, r.topicPos, r.topicLen), 0, r.topicLen) + "/" + r.queueId;
        } else if (r.queueOffset != base) {
            wrong = "its record is at queue offset " + r.queueOffset + ", the unit says " + base;
        } else if (r.storeTs != time) {
            wrong = "its record was stored at " + r.storeTs + ", the unit says " + time;
        }
        return wrong == null ? null : where + " does not describe its record: " + wrong;
    }

    private static byte[] bytes(ByteBuffer b, int at, int len) {
        byte[] out = new byte[len];
        b.get(at, out);
        return out;
    }
}
