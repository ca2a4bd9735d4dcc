package org.mqfs.spark;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * The JVM reader's own cost per record, without Spark: RecordReader walks a store's
 * CommitLog files as a scan's partition does (checksums on, the given columns), several
 * passes, timed in thread CPU time (far less sensitive to a loaded machine than wall time),
 * beside a baseline in the same run: the flavor's checksum over each record's bytes, walked
 * by TOTALSIZE. Each binary value is then read as Spark reads it (getBinary, a copy), so what
 * a batch defers to its reading is counted. Run by scripts/reader-cost, which compiles it with
 * pipeline/*.java.
 */
public final class ReaderCost {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        Path store = Path.of(args[0]);
        int files = Integer.parseInt(args[1]);
        int passes = Integer.parseInt(args[2]);
        StructType schema = new StructType();
        for (String c : args[3].split(",")) {
            schema = schema.add(c, c.equals("body") ? DataTypes.BinaryType : c.endsWith("offset")
                    ? DataTypes.LongType : DataTypes.StringType);
        }
        JsonNode manifest = JSON.readTree(store.resolve("mqfs.json").toFile());
        List<Path> logs = new ArrayList<>();
        try (var listing = Files.list(store.resolve("commitlog"))) {
            listing.sorted().limit(files).forEach(logs::add);
        }
        String plan = plan(store, manifest, logs);
        Checksum sum = new Checksum(manifest.get("flavor").asText(), manifest.get("record_crc").asBoolean());
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        double[] base = new double[passes];
        double[] read = new double[passes];
        long records = 0;
        for (int p = 0; p < passes; p++) {  // interleaved: both see the same machine
            long t0 = mx.getCurrentThreadCpuTime();
            records = baseline(logs, sum);
            long t1 = mx.getCurrentThreadCpuTime();
            long rows = reader(plan, schema);
            long t2 = mx.getCurrentThreadCpuTime();
            if (rows != records) {
                throw new IllegalStateException("rows " + rows + " != records " + records);
            }
            base[p] = (double) (t1 - t0) / records;
            read[p] = (double) (t2 - t1) / records;
        }
        Arrays.sort(base);
        Arrays.sort(read);
        int skip = passes / 4;  // the first passes warm the JIT: medians of the rest
        double b = median(base, skip);
        double r = median(read, skip);
        System.out.printf("%d records, columns %s: checksum walk %.1f ns/record, reader %.1f ns/record (x%.2f the walk; min %.1f / %.1f)%n",
                records, args[3], b, r, r / b, base[0], read[0]);
    }

    private static double median(double[] sorted, int skip) {
        double[] rest = Arrays.copyOfRange(sorted, 0, sorted.length - skip);  // drop the slowest
        return rest[rest.length / 2];
    }

    private static String plan(Path store, JsonNode manifest, List<Path> logs) throws Exception {
        ObjectNode plan = JSON.createObjectNode();
        plan.putNull("store");
        plan.put("flavor", manifest.get("flavor").asText());
        plan.put("recordCrc", manifest.get("record_crc").asBoolean());
        plan.put("skip", false);
        plan.put("kafka", false);
        plan.put("root", store.toString());
        plan.put("indexSlots", manifest.get("index_slots").asInt());
        plan.put("checksums", true);
        ObjectNode f = plan.putObject("filter");
        f.putNull("topics");
        f.putNull("queues");
        f.putNull("startMs");
        f.putNull("endMs");
        f.putArray("queueOffsets").addNull().addNull();
        f.putArray("commitlogOffsets").addNull().addNull();
        f.putNull("queueRanges");
        f.put("allRecords", false);
        f.putArray("excludedTopics");
        ArrayNode pieces = plan.putArray("pieces");
        for (Path log : logs) {
            ObjectNode piece = pieces.addObject();
            piece.put("path", log.toString());
            piece.put("from", Long.parseLong(log.getFileName().toString()));
            piece.put("start", 0);
            piece.put("end", Files.size(log));
        }
        return JSON.writeValueAsString(plan);
    }

    private static long reader(String plan, StructType schema) {
        RecordReader reader = new RecordReader(plan, schema);
        long rows = 0;
        long bytes = 0;
        while (reader.next()) {
            var batch = reader.get();
            for (int c = 0; c < batch.numCols(); c++) {
                if (schema.fields()[c].dataType() == DataTypes.BinaryType) {
                    for (int i = 0; i < batch.numRows(); i++) {
                        bytes += batch.column(c).getBinary(i).length;
                    }
                }
            }
            rows += batch.numRows();
        }
        reader.close();
        if (bytes == 42) {
            System.out.print("");  // keeps the copies live
        }
        return rows;
    }

    private static long baseline(List<Path> logs, Checksum sum) throws Exception {
        long records = 0;
        long fold = 0;
        for (Path log : logs) {
            ByteBuffer b;
            try (FileChannel ch = FileChannel.open(log, StandardOpenOption.READ)) {
                b = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
            }
            for (int pos = 0; pos + 8 <= b.capacity(); ) {
                int size = b.getInt(pos);
                if (b.getInt(pos + 4) == Record.MAGIC_BLANK || size < Record.MIN_SIZE) {
                    break;
                }
                fold += sum.of(b, pos, pos + size - Record.TRAILER);
                records++;
                pos += size;
            }
        }
        if (fold == 42) {
            System.out.print("");  // keeps the hashes live
        }
        return records;
    }
}
