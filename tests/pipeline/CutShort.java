package org.mqfs.spark;

import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads one partition's plan (the first argument) with the JVM reader, outside Spark, and
 * after its first batch cuts the CommitLog file (the second argument) short under the
 * reader's mapping: at the end of the page where a later record's header starts, so the
 * header reads and the rest of the record is gone. Prints "read through", or "error: " and
 * what the reader threw (tests/pipeline/test_pipeline_cut_short.py): a JVM that faults in
 * native code prints neither and dies.
 */
public final class CutShort {
    private static final int PAGE = 4096;

    private CutShort() {
    }

    public static void main(String[] args) throws Exception {
        StructType schema = new StructType().add("commitlog_offset", DataTypes.LongType);
        Path log = Path.of(args[1]);
        try (RecordReader reader = new RecordReader(args[0], schema)) {
            if (!reader.next()) {
                throw new IllegalStateException("no first batch");
            }
            ColumnarBatch batch = reader.get();
            long read = batch.column(0).getLong(batch.numRows() - 1);
            int cut = cutAfter(log, read);
            try (FileChannel ch = FileChannel.open(log, StandardOpenOption.WRITE)) {
                ch.truncate(cut);
            }
            System.out.println("cut at " + cut);
            try {
                while (reader.next()) {
                    reader.get();
                }
                System.out.println("read through");
            } catch (Throwable e) {
                System.out.println("error: " + e);
            }
        }
    }

    /** The end of the page holding the header of the first record past `read` (by more than
     * a page) whose page ends within 100 bytes of its start. */
    private static int cutAfter(Path log, long read) throws Exception {
        ByteBuffer b;
        try (FileChannel ch = FileChannel.open(log, StandardOpenOption.READ)) {
            b = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
        }
        for (int pos = 0; pos + 8 <= b.capacity(); pos += b.getInt(pos)) {
            if (b.getInt(pos) < Record.MIN_SIZE) {
                break;
            }
            if (pos > read + PAGE && pos % PAGE >= PAGE - 100) {
                return (pos / PAGE + 1) * PAGE;
            }
        }
        throw new IllegalStateException("no record to cut in");
    }
}
