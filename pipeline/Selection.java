package org.mqfs.spark;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * The rows a planned read keeps: pipeline/scan.py's RowFilter, resolved by the Python
 * planner and applied here as FileBatcher._keep applies it (fillers and unqueued records
 * out unless every record is asked for, then topics, queues, times and offset ranges, and
 * the topics served from elsewhere: compaction's).
 */
final class Selection {
    private final List<byte[]> topics;  // null: every topic
    private final Set<Integer> queues;
    private final long startMs;
    private final long endMs;
    private final long[] queueOffsets;
    private final long[] commitlogOffsets;
    private final List<Object[]> queueRanges;  // {byte[] topic, int queue, long lo, long hi}
    private final boolean allRecords;
    private final List<byte[]> excluded;  // topics served from elsewhere (pipeline/compacted.py)

    Selection(JsonNode f) {
        topics = f.get("topics").isNull() ? null : names(f.get("topics"));
        if (f.get("queues").isNull()) {
            queues = null;
        } else {
            queues = new HashSet<>();
            f.get("queues").forEach(q -> queues.add(q.asInt()));
        }
        startMs = f.get("startMs").isNull() ? Long.MIN_VALUE : f.get("startMs").asLong();
        endMs = f.get("endMs").isNull() ? Long.MAX_VALUE : f.get("endMs").asLong();
        queueOffsets = range(f.get("queueOffsets"));
        commitlogOffsets = range(f.get("commitlogOffsets"));
        if (f.get("queueRanges").isNull()) {
            queueRanges = null;
        } else {
            queueRanges = new ArrayList<>();
            for (JsonNode r : f.get("queueRanges")) {
                queueRanges.add(new Object[] {r.get(0).asText().getBytes(StandardCharsets.US_ASCII),
                    r.get(1).asInt(), r.get(2).asLong(), r.get(3).asLong()});
            }
        }
        allRecords = f.get("allRecords").asBoolean();
        excluded = names(f.get("excludedTopics"));
    }

    private static List<byte[]> names(JsonNode list) {
        List<byte[]> out = new ArrayList<>();
        list.forEach(t -> out.add(t.asText().getBytes(StandardCharsets.UTF_8)));
        return out;
    }

    private static long[] range(JsonNode pair) {
        return new long[] {pair.get(0).isNull() ? Long.MIN_VALUE : pair.get(0).asLong(),
            pair.get(1).isNull() ? Long.MAX_VALUE : pair.get(1).asLong()};
    }

    /** Whether the row of queue `q` a record is dispatched to (Dispatch) is a row of the read
     * (scan._passes): that queue's topic, id and offset, the record's time and place. */
    boolean keeps(Dispatch.Served q, long storeTs, long commitlogOffset) {
        if (queues != null && !queues.contains(q.queueId())
                || storeTs < startMs || storeTs >= endMs
                || q.queueOffset() < queueOffsets[0] || q.queueOffset() >= queueOffsets[1]
                || commitlogOffset < commitlogOffsets[0] || commitlogOffset >= commitlogOffsets[1]) {
            return false;
        }
        if (topics != null && topics.stream().noneMatch(t -> Text.same(q.raw(), q.at(), q.len(), t))) {
            return false;
        }
        if (queueRanges != null) {
            for (Object[] range : queueRanges) {
                if (q.queueId() == (int) range[1] && q.queueOffset() >= (long) range[2]
                        && q.queueOffset() < (long) range[3] && Text.same(q.raw(), q.at(), q.len(), (byte[]) range[0])) {
                    return true;
                }
            }
            return false;
        }
        return true;
    }

    private boolean excludes(Record r, ByteBuffer b) {
        for (byte[] t : excluded) {
            if (r.topicIs(b, t)) {
                return true;
            }
        }
        return false;
    }

    private boolean anyTopic(Record r, ByteBuffer b) {
        for (byte[] t : topics) {
            if (r.topicIs(b, t)) {
                return true;
            }
        }
        return false;
    }

    /** Whether the well-formed record r, at this CommitLog offset, is a row of the read. */
    boolean keeps(Record r, ByteBuffer b, long commitlogOffset) {
        return keeps(r, b, commitlogOffset, r.queueOffset, false);
    }

    /** Whether r's message at queue offset `queueOffset` (an inner batch's: Inner) is a row
     * of the read; `anyOffset`: whether some offset may be (the offsets are the messages'). */
    boolean keeps(Record r, ByteBuffer b, long commitlogOffset, long queueOffset, boolean anyOffset) {
        if (!allRecords && !r.inQueue() || r.filler(b) || excludes(r, b)) {
            return false;
        }
        if (queues != null && !queues.contains(r.queueId)
                || r.storeTs < startMs || r.storeTs >= endMs
                || !anyOffset && (queueOffset < queueOffsets[0] || queueOffset >= queueOffsets[1])
                || commitlogOffset < commitlogOffsets[0] || commitlogOffset >= commitlogOffsets[1]) {
            return false;
        }
        if (topics != null && !anyTopic(r, b)) {
            return false;
        }
        if (queueRanges != null && !anyOffset) {
            for (Object[] q : queueRanges) {
                if (r.queueId == (int) q[1] && queueOffset >= (long) q[2] && queueOffset < (long) q[3]
                        && r.topicIs(b, (byte[]) q[0])) {
                    return true;
                }
            }
            return false;
        }
        return true;
    }
}
