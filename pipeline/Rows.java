package org.mqfs.spark;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;

import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Rows of the read schema (the columns the query needs, of the message shape in
 * pipeline/schema.py or Kafka's in pipeline/kafka.py, plus `store`), written column by column
 * into a reused batch: pipeline/scan.py's FileBatcher._columns and kafka.kafka_batch. A body
 * column holds where each body lies (Bodies), copied out when Spark reads it.
 */
final class Rows {
    static final int MAX_ROWS = 4096;
    private static final int BATCH_BYTES = 2 << 20;
    private static final int LOG_APPEND_TIME = 1;

    /** What a column holds; the schema's names (the message shape's and Kafka's) are
     * resolved to these once, so a row switches on them rather than on names. */
    private enum Column {
        TOPIC, QUEUE_ID, QUEUE_OFFSET, COMMITLOG_OFFSET, SIZE, STORE_TIMESTAMP, BORN_TIMESTAMP, BORN_HOST,
        STORE_HOST, MSG_ID, FLAG, SYS_FLAG, BODY, TIMESTAMP_TYPE, STORE, KEYS, KEY, TAGS, PROPERTIES, HEADERS;

        static Column named(String name) {
            return switch (name) {
                case "partition" -> QUEUE_ID;
                case "offset" -> QUEUE_OFFSET;
                case "timestamp" -> STORE_TIMESTAMP;
                case "value" -> BODY;
                case "timestampType" -> TIMESTAMP_TYPE;
                case "topic", "queue_id", "queue_offset", "commitlog_offset", "size", "store_timestamp",
                     "born_timestamp", "born_host", "store_host", "msg_id", "flag", "sys_flag", "body", "store",
                     "keys", "key", "tags", "properties", "headers" -> valueOf(name.toUpperCase(java.util.Locale.ROOT));
                default -> throw new IllegalStateException("mqfs: no column " + name);
            };
        }
    }

    private final String[] names;
    private final Column[] kinds;
    private final WritableColumnVector[] vectors;  // null for a body column
    private final Bodies[] bodies;  // a body column's, else null
    private final ColumnarBatch batch;
    private final byte[] store;
    private final boolean props;  // some column needs PROPERTIES
    final boolean body;  // some column needs the body (a compressed one is inflated)
    private int capacity = MAX_ROWS;
    private final Hosts bornHosts = new Hosts();
    private final Hosts storeHosts = new Hosts();
    int rows;
    long bytes;

    Rows(StructType schema, String storeName) {
        names = schema.fieldNames();
        kinds = new Column[names.length];
        for (int c = 0; c < names.length; c++) {
            kinds[c] = Column.named(names[c]);
        }
        vectors = new WritableColumnVector[names.length];
        bodies = new Bodies[names.length];
        ColumnVector[] columns = new ColumnVector[names.length];
        for (int c = 0; c < names.length; c++) {
            if (kinds[c] == Column.BODY) {
                columns[c] = bodies[c] = new Bodies(schema.fields()[c].dataType(), MAX_ROWS);
            } else {
                columns[c] = vectors[c] = new OnHeapColumnVector(MAX_ROWS, schema.fields()[c].dataType());
            }
        }
        batch = new ColumnarBatch(columns);
        store = storeName == null ? new byte[0] : storeName.getBytes(StandardCharsets.UTF_8);
        boolean any = false;
        for (StructField f : schema.fields()) {
            any |= List.of("keys", "tags", "properties", "key", "headers").contains(f.name());
        }
        props = any;
        body = schema.getFieldIndex("body").isDefined() || schema.getFieldIndex("value").isDefined();
    }

    /** A batch ends at MAX_ROWS rows or at BATCH_BYTES of bodies. Bodies are copied once, when
     * Spark reads them (Bodies), so a batch need not fit a core's L2 as when they were also
     * copied in (512 KiB then); Spark pays a cost per batch (metrics, advancing), so fewer
     * and larger batches: at 2 MiB, scripts/reader-cost measured 377-397 ns per record
     * against 393-407 at 512 KiB and 399-417 at 4 and 16 MiB (alternated JVMs). */
    boolean full() {
        return rows >= MAX_ROWS || bytes >= BATCH_BYTES;
    }

    void clear() {
        for (int c = 0; c < names.length; c++) {
            if (bodies[c] != null) {
                bodies[c].reset(rows);
            } else {
                vectors[c].reset();
            }
        }
        rows = 0;
        bytes = 0;
    }

    ColumnarBatch batch() {
        batch.setNumRows(rows);
        return batch;
    }

    /** Appends record r (well formed, checked, kept) of a file starting at CommitLog offset
     * fileFrom; `inflated`: its body when the stored one is compressed (Inflate), else null;
     * `served`: the queue it is dispatched to whose row this is (Dispatch), null for its own;
     * `inner`: the message of an inner batch whose row this is (Inner), null for the record's. */
    void add(Record r, ByteBuffer b, long fileFrom, byte[] inflated, Dispatch.Served served, Inner.Message inner) {
        int row = rows;
        if (row >= capacity) {  // a record dispatched to many queues: past MAX_ROWS
            capacity *= 2;
            for (int c = 0; c < names.length; c++) {
                if (bodies[c] != null) {
                    bodies[c].reserve(capacity);
                } else {
                    vectors[c].reserve(capacity);
                }
            }
        }
        byte[] raw = null;
        List<int[]> pairs = null;
        if (props && inner != null) {
            raw = java.util.Arrays.copyOfRange(inner.raw(), inner.propsAt(), inner.propsAt() + inner.propsLen());
            pairs = Text.pairs(raw, raw.length);
        } else if (props) {
            int len = r.ownPropsLen();
            raw = new byte[len];
            b.get(r.propsPos, raw, 0, len);
            pairs = Text.pairs(raw, len);
        }
        long offset = fileFrom + r.start;
        for (int c = 0; c < names.length; c++) {
            WritableColumnVector v = vectors[c];
            switch (kinds[c]) {
                case TOPIC -> {
                    if (served != null) {
                        v.putByteArray(row, served.raw(), served.at(), served.len());
                    } else {
                        v.putByteArray(row, b, r.topicPos, r.topicLen);
                    }
                }
                case QUEUE_ID -> v.putInt(row, served != null ? served.queueId() : r.queueId);
                case QUEUE_OFFSET -> v.putLong(row, served != null ? served.queueOffset()
                        : inner != null ? r.queueOffset + inner.index() : r.queueOffset);
                case COMMITLOG_OFFSET -> v.putLong(row, offset);
                case SIZE -> v.putInt(row, r.total);
                case STORE_TIMESTAMP -> v.putLong(row, r.storeTs * 1000);
                case BORN_TIMESTAMP -> v.putLong(row, r.bornTs * 1000);
                case BORN_HOST -> v.putByteArray(row, bornHosts.text(b, r.start + Record.BORN_HOST_POS, r.bornLen));
                case STORE_HOST -> v.putByteArray(row, storeHosts.text(b, r.storeHostPos(), r.storeLen));
                case MSG_ID -> v.putByteArray(row, Text.msgId(b, r.storeHostPos(), r.storeLen, offset));
                case FLAG -> v.putInt(row, inner != null ? inner.flag() : r.flag);
                case SYS_FLAG -> v.putInt(row, r.consumerSysFlag());
                case BODY -> {
                    if (inner != null) {
                        bodies[c].put(row, inner.raw(), inner.bodyAt(), inner.bodyLen());
                        bytes += inner.bodyLen();
                    } else if (inflated != null) {
                        bodies[c].put(row, inflated, 0, inflated.length);
                    } else {  // copied from the mapping when Spark reads it
                        bodies[c].put(row, b, r.bodyPos, r.bodyLen);
                    }
                    bytes += r.bodyLen;
                }
                case TIMESTAMP_TYPE -> v.putInt(row, LOG_APPEND_TIME);
                case STORE -> v.putByteArray(row, store);
                case KEYS -> keys(v, row, raw, pairs);
                case KEY -> key(v, row, raw, pairs);
                case TAGS -> {
                    int[] tag = Text.last(raw, pairs, Text.TAGS);
                    if (tag == null) {
                        v.putNull(row);
                    } else {
                        v.putByteArray(row, raw, tag[0], tag[1]);
                    }
                }
                case PROPERTIES -> properties(v, row, raw, pairs);
                case HEADERS -> headers(v, row, raw, pairs);
            }
        }
        rows++;
    }

    /** Appends n rows of one queue at queue offsets [from, from + n), of the columns a unit's
     * place gives (pipeline/unit_rows.py UNIT_COLUMNS, as the schema names them). */
    void places(byte[] topic, int queueId, long from, int n) {
        for (int c = 0; c < names.length; c++) {
            WritableColumnVector v = vectors[c];
            switch (names[c]) {
                case "topic" -> {
                    for (int i = 0; i < n; i++) {
                        v.putByteArray(rows + i, topic, 0, topic.length);
                    }
                }
                case "queue_id", "partition" -> v.putInts(rows, n, queueId);
                case "queue_offset", "offset" -> {
                    for (int i = 0; i < n; i++) {
                        v.putLong(rows + i, from + i);
                    }
                }
                case "timestampType" -> v.putInts(rows, n, LOG_APPEND_TIME);
                case "store" -> {
                    for (int i = 0; i < n; i++) {
                        v.putByteArray(rows + i, store, 0, store.length);
                    }
                }
                default -> throw new IllegalStateException("mqfs: column " + names[c] + " is not known from units");
            }
        }
        rows += n;
    }

    /** A host column's text (Text.host), kept for the next row: a store's records come from
     * few hosts, so most rows compare 8 bytes instead of formatting an address. */
    private static final class Hosts {
        private final byte[] raw = new byte[20];
        private int width = -1;
        private byte[] text;

        byte[] text(ByteBuffer b, int pos, int width) {
            boolean same = width == this.width;
            for (int i = 0; same && i < width; i++) {
                same = b.get(pos + i) == raw[i];
            }
            if (!same) {
                b.get(pos, raw, 0, width);
                this.width = width;
                text = Text.host(b, pos, width).getBytes(StandardCharsets.UTF_8);
            }
            return text;
        }
    }

    private static void keys(WritableColumnVector v, int row, byte[] raw, List<int[]> pairs) {
        List<int[]> tokens = Text.tokens(raw, Text.last(raw, pairs, Text.KEYS));
        WritableColumnVector items = v.arrayData();
        int first = items.getElementsAppended();
        for (int[] t : tokens) {
            items.appendByteArray(raw, t[0], t[1]);
        }
        v.putArray(row, first, tokens.size());
    }

    /** Kafka's key: the keys joined by spaces, null without keys. */
    private static void key(WritableColumnVector v, int row, byte[] raw, List<int[]> pairs) {
        List<int[]> tokens = Text.tokens(raw, Text.last(raw, pairs, Text.KEYS));
        if (tokens.isEmpty()) {
            v.putNull(row);
            return;
        }
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        for (int[] t : tokens) {
            if (out.size() > 0) {
                out.write(' ');
            }
            out.write(raw, t[0], t[1]);
        }
        v.putByteArray(row, out.toByteArray());
    }

    private static void properties(WritableColumnVector v, int row, byte[] raw, List<int[]> pairs) {
        WritableColumnVector names = (WritableColumnVector) v.getChild(0);
        WritableColumnVector values = (WritableColumnVector) v.getChild(1);
        int first = names.getElementsAppended();
        for (int[] p : pairs) {
            names.appendByteArray(raw, p[0], p[1]);
            values.appendByteArray(raw, p[2], p[3]);
        }
        v.putArray(row, first, pairs.size());
    }

    /** Kafka's headers: array<struct<key string, value binary>> of the properties. */
    private static void headers(WritableColumnVector v, int row, byte[] raw, List<int[]> pairs) {
        WritableColumnVector items = v.arrayData();
        WritableColumnVector names = (WritableColumnVector) items.getChild(0);
        WritableColumnVector values = (WritableColumnVector) items.getChild(1);
        int first = items.getElementsAppended();
        for (int[] p : pairs) {
            items.appendStruct(false);
            names.appendByteArray(raw, p[0], p[1]);
            values.appendByteArray(raw, p[2], p[3]);
        }
        v.putArray(row, first, pairs.size());
    }
}
