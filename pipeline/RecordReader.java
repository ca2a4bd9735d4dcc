package org.mqfs.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads one planned partition (pipeline/jvmplan.py) from the mapped CommitLog files: byte
 * ranges walked record by record as pipeline/scan.py's checked_runs walks them (the store's
 * walker, checksums unless the read is header-only, resync after damage as verify does), or
 * the records a few-queue read's units point at, checked as stream.read_queue_range checks
 * them. A damaged record fails the read, or with damagedRecords=skip is counted and skipped.
 */
final class RecordReader implements PartitionReader<ColumnarBatch> {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final Rows rows;
    private final List<JsonNode> work = new ArrayList<>();
    private final boolean places;  // rows from queue offsets alone (pipeline/unit_rows.py)
    private final boolean units;
    private final Compacted compacted;  // units of a compaction topic's queue (Compacted), or null
    private final boolean checksums;
    private final boolean skip;
    private final Checksum sum;
    private final Selection selection;
    private final IndexPoints points;  // the resync's witness after a lost header (read only then)
    private final Record r = new Record();
    private final Record probe = new Record();
    private int next;
    // the piece or unit file being read
    private ByteBuffer buf;
    private String path;
    private long fileFrom;
    private int pos;
    private int limit;
    private JsonNode at;
    private JsonNode unitFile;
    private int atIndex;
    private long placed;  // rows of the place range work[next] made so far
    private int skipped;
    private String firstSkipped;

    RecordReader(String text, StructType schema) {
        JsonNode plan;
        try {
            plan = JSON.readTree(text);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        boolean empty = plan.isNull();
        rows = new Rows(schema, empty || plan.get("store").isNull() ? null : plan.get("store").asText());
        places = !empty && plan.has("rows");
        compacted = empty || !plan.has("compacted") ? null : new Compacted(plan.get("compacted"));
        units = !empty && (plan.has("units") || compacted != null);
        checksums = empty || plan.get("checksums").asBoolean();
        skip = !empty && plan.get("skip").asBoolean();
        sum = empty ? null : new Checksum(plan.get("flavor").asText(), plan.get("recordCrc").asBoolean());
        selection = empty ? null : new Selection(plan.get("filter"));
        points = empty || !plan.has("root") ? null : new IndexPoints(plan.get("root").asText(), plan.get("indexSlots").asInt());
        if (!empty) {
            (compacted != null ? plan.get("compacted").get("files")
                    : plan.get(places ? "rows" : units ? "units" : "pieces")).forEach(work::add);
        }
        if (compacted != null) {
            compacted.lost.forEach(why -> rejectCopy(why.asText()));
        }
    }

    @Override
    public boolean next() {
        rows.clear();
        if (places) {
            return placeRows();
        }
        while (!rows.full()) {
            if (buf == null && !open()) {
                break;
            }
            if (!(units ? unitStep() : walkStep())) {
                done();
            }
        }
        return rows.rows > 0;
    }

    /** The next batch of rows made from [topic, queue id, lo, hi) ranges: no file is read. */
    private boolean placeRows() {
        while (next < work.size() && !rows.full()) {
            JsonNode range = work.get(next);
            long lo = range.get(2).asLong() + placed;
            int n = (int) Math.min(range.get(3).asLong() - lo, Rows.MAX_ROWS - rows.rows);
            rows.places(range.get(0).asText().getBytes(java.nio.charset.StandardCharsets.UTF_8),
                    range.get(1).asInt(), lo, n);
            placed += n;
            if (lo + n >= range.get(3).asLong()) {
                next++;
                placed = 0;
            }
        }
        return rows.rows > 0;
    }

    @Override
    public ColumnarBatch get() {
        return rows.batch();
    }

    @Override
    public void close() {
        buf = null;
    }

    private boolean open() {
        if (next >= work.size()) {
            return false;
        }
        JsonNode w = work.get(next++);
        path = w.get("path").asText();
        fileFrom = w.get("from").asLong();
        try (FileChannel ch = FileChannel.open(Path.of(path), StandardOpenOption.READ)) {
            buf = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
        } catch (IOException e) {
            throw new UncheckedIOException("mqfs: cannot read CommitLog file " + path + " on " + Locality.here()
                    + " (a task runs where its store is with the hosts option)", e);
        }
        if (w.has("print")) {  // planned with the file's fingerprint: the same store's file
            Locality.check(buf, path, w.get("print").asText());
        }
        if (units) {
            unitFile = w;
            at = w.get("at");
            atIndex = 0;
        } else {
            pos = w.get("start").asInt();
            limit = (int) Math.min(w.get("end").asLong(), buf.capacity());
        }
        return true;
    }

    private void done() {
        if (skipped > 0) {
            System.err.println("mqfs: warning: skipped " + skipped + " damaged records in " + path
                    + (compacted != null ? " (first: " + firstSkipped + ")"
                       : units ? "" : " (first at CommitLog offset " + firstSkipped + ")"));
        }
        skipped = 0;
        buf = null;
    }

    /** One record of a byte range, or one damaged range and the resync after it. */
    private boolean walkStep() {
        if (pos >= limit) {
            return false;
        }
        String reason = "broken record header";
        if (limit - pos >= 8) {
            int size = buf.getInt(pos);
            int magic = buf.getInt(pos + 4);
            if (magic == Record.MAGIC_BLANK) {
                return false;
            }
            if ((magic == Record.MAGIC_V1 || magic == Record.MAGIC_V2)
                    && size >= Record.MIN_SIZE && size <= limit - pos) {
                // where every record must carry the trailer, the record is hashed first, in
                // address order, so its fields are then read from the cache: reading its
                // header and then its end first stalls on memory twice per record
                long hashed = checksums && sum.recordCrc ? sum.of(buf, pos, pos + size - Record.TRAILER) : -1;
                if (!r.read(buf, pos, limit)) {
                    reason = "malformed record";
                } else if (checksums && (!(hashed >= 0 ? r.stored == hashed : r.checksumsHold(buf, sum))
                                         || !Text.utf8(buf, r.propsPos, r.propsLen))) {
                    reason = "checksum mismatch";
                } else {
                    rowsOf(true);
                    pos += size;
                    return true;
                }
            }
        }
        reject(pos, reason);
        pos = resync(pos, limit);
        return pos >= 0;
    }

    /** One unit's record: well formed, kept, then checked (whatever the columns). */
    private boolean unitStep() {
        if (atIndex >= at.size()) {
            return false;
        }
        int p = at.get(atIndex++).asInt();
        if (compacted != null) {
            String why = compacted.check(r, buf, sum, unitFile, atIndex - 1, p, fileFrom);
            if (why != null) {
                rejectCopy(why);
            } else {
                rowsOf(true);
            }
        } else if (!r.read(buf, p, buf.capacity())) {
            reject(p, "malformed record");
        } else {
            rowsOf(false);
        }
        return true;
    }

    /** The rows of record r (well formed; `checked`: its checksums already held): its own
     * queue's (an inner batch's messages: Inner), and one per queue it is dispatched to (LMQ:
     * Dispatch), those the read keeps. Checked here when not yet; a compressed body that does
     * not inflate, or a batch that does not unwrap, makes it a damaged record. */
    private void rowsOf(boolean checked) {
        long offset = fileFrom + r.start;
        boolean inner = Inner.is(r);
        boolean own = selection.keeps(r, buf, offset, r.queueOffset, inner);
        List<Dispatch.Served> served = r.inQueue() && !r.filler(buf) ? Dispatch.of(r, buf) : List.of();
        if (!served.isEmpty()) {
            served = new ArrayList<>(served);
            served.removeIf(q -> !selection.keeps(q, r.storeTs, offset));
        }
        if (!own && served.isEmpty()) {
            return;
        }
        if (!checked && !r.checksumsHold(buf, sum)) {
            reject(r.start, "checksum mismatch");
            return;
        }
        byte[] inflated = null;
        if (rows.body && (r.sysFlag & 0x1) != 0 && (own && !inner || !served.isEmpty())) {
            byte[] stored = new byte[r.bodyLen];
            buf.get(r.bodyPos, stored);
            try {
                inflated = Inflate.body(stored, r.sysFlag, offset);
            } catch (Inflate.Damaged e) {
                reject(r.start, e.getMessage());
                return;
            }
        }
        if (own && !inner) {
            rows.add(r, buf, fileFrom, inflated, null, null);
        }
        for (Dispatch.Served q : served) {
            rows.add(r, buf, fileFrom, inflated, q, null);
        }
        if (own && inner) {  // a consumer inflates a compressed batch, then unwraps it (docs/format.md)
            try {
                byte[] body = inflated;
                if (body == null) {
                    body = new byte[r.bodyLen];
                    buf.get(r.bodyPos, body);
                    if ((r.sysFlag & 0x1) != 0) {
                        body = Inflate.body(body, r.sysFlag, offset);
                    }
                }
                for (Inner.Message m : Inner.of(r, buf, body, offset)) {
                    if (selection.keeps(r, buf, offset, r.queueOffset + m.index(), false)) {
                        rows.add(r, buf, fileFrom, null, null, m);
                    }
                }
            } catch (Inflate.Damaged | Inner.Damaged e) {
                reject(r.start, e.getMessage());
            }
        }
    }

    /** A compaction copy that does not check out against its unit (Compacted), as
     * pipeline/compacted.py's read fails or counts it. */
    private void rejectCopy(String why) {
        if (!skip) {
            throw new DamagedRecord("mqfs: " + why + " (damagedRecords=skip leaves it out)");
        }
        if (skipped++ == 0) {
            firstSkipped = why;
        }
    }

    private void reject(int p, String reason) {
        long offset = fileFrom + p;
        if (!skip) {
            throw new DamagedRecord("damaged record at CommitLog offset " + offset + " (" + path
                    + " at byte " + p + "): " + reason + "; read with option damagedRecords=skip to skip it, "
                    + "`mqfs verify` for details");
        }
        if (skipped++ == 0) {
            firstSkipped = offset + ": " + reason;
        }
    }

    /** salvage.resync_in: where the walk goes on after the record at pos did not check out,
     * in [pos + 1, hi), or -1. First where the chain puts the next record (the damaged
     * record's TOTALSIZE, or the end its parts' lengths give): a record that checks out
     * there, or a BLANK that fills the file. When both agree, nothing inside that span is
     * taken (a record planted in a body stays a body); else, past it, the first record that
     * checks out and names its position (next_record_in) and that one of the store's indexes
     * points at (IndexPoints: a record planted in a body whose header the damage took is
     * none of the store's). The chain ends are the file's: where the one that checks out is
     * at or past hi (this range's end), the range's walk stops (-1), as the whole file's walk
     * would jump over the rest of the range. */
    private int resync(int pos, int hi) {
        long[] ends = chainEnds(pos, buf.capacity());
        for (int i = 0; i < 2; i++) {
            long at = ends[i];
            if (at >= 0 && (i == 0 || at != ends[0]) && (checksOut((int) at) || blankToEnd((int) at))) {
                return at < hi ? (int) at : -1;
            }
        }
        long lo = ends[0] >= 0 && ends[0] == ends[1] ? ends[0] : pos + 1;
        return lo >= hi ? -1 : nextRecord((int) lo, hi);
    }

    /** salvage.chain_ends: {by TOTALSIZE, by the parts' lengths}, each -1 when it does not
     * fall in (pos, hi] or the record magic is gone. */
    private long[] chainEnds(int pos, int hi) {
        long[] ends = {-1, -1};
        if (hi - pos < 8) {
            return ends;
        }
        int total = buf.getInt(pos);
        int magic = buf.getInt(pos + 4);
        if (magic != Record.MAGIC_V1 && magic != Record.MAGIC_V2) {
            return ends;
        }
        if (total >= Record.MIN_SIZE && total <= hi - pos) {
            ends[0] = (long) pos + total;
        }
        if (hi - pos >= Record.MIN_SIZE) {
            int sysFlag = buf.getInt(pos + 36);
            long at = pos + 68 + ((sysFlag & 0x10) != 0 ? 20 : 8) + ((sysFlag & 0x20) != 0 ? 20 : 8);
            int bodyLen = at + 4 <= hi ? buf.getInt((int) at) : -1;
            int width = magic == Record.MAGIC_V2 ? 2 : 1;
            at += 4 + (long) bodyLen;
            if (bodyLen >= 0 && at + width <= hi) {
                int topicLen = width == 2 ? buf.getShort((int) at) & 0xFFFF : buf.get((int) at) & 0xFF;
                at += width + topicLen;
                if (topicLen > 0 && at + 2 <= hi) {
                    long end = at + 2 + buf.getShort((int) at);
                    ends[1] = at + 2 <= end && end <= hi ? end : -1;
                }
            }
        }
        return ends;
    }

    /** A record at `at` that decodes with the flavor's checks and names its own position. */
    private boolean checksOut(int at) {
        return probe.read(buf, at, buf.capacity()) && probe.physical == fileFrom + at
                && probe.checksumsHold(buf, sum) && Text.utf8(buf, probe.propsPos, probe.propsLen);
    }

    private boolean blankToEnd(int at) {
        int left = buf.capacity() - at;
        return left >= 8 && buf.getInt(at) == left && buf.getInt(at + 4) == Record.MAGIC_BLANK;
    }

    /** salvage.next_record_in: the first position in [lo, hi) where a record checks out and
     * the indexes point at (or reach no further). */
    private int nextRecord(int lo, int hi) {
        int last = Math.min(hi - 4, buf.capacity() - 9);
        for (int s = lo; s <= last; s++) {
            int magic = buf.getInt(s + 4);
            if ((magic == Record.MAGIC_V1 || magic == Record.MAGIC_V2) && checksOut(s)
                    && (points == null || points.accepts(fileFrom + s, fileFrom, buf.capacity()))) {
                return s;
            }
        }
        return -1;
    }
}
