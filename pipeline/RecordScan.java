package org.mqfs.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import net.razorvine.pickle.Unpickler;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.execution.datasources.v2.python.PythonBatch;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceReadInfo;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScan;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.MetadataBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A batch scan whose records are decoded in the JVM. Planning stays the Python reader's
 * (one planner: offsets, splits, units, pushdown and pruning are written once, in
 * pipeline/source.py and its modules): the scan asks the Python source for its partitions
 * with the JVM key in the read schema's metadata, and the Python reader hands each one back
 * as JSON (pipeline/jvmplan.py) instead of reading it. Tasks then read those byte ranges or
 * unit positions here, with no Python worker. A stream's micro-batches are read here too
 * (RecordStream).
 *
 * <p>Where a store has a feature the JVM reader does not read (jvmplan.JVM_UNREAD), the
 * planner's first partition is a PythonRead naming it: the scan says so once and reads the
 * other partitions through Spark's Python batch, as a read with reader=python would.
 */
final class RecordScan extends ScopedScans.CarryingScan {
    static final String JVM = "mqfs.jvm";  // = pipeline/jvmplan.py JVM
    static final String SLOTS = "mqfs.slots";  // = pipeline/jvmplan.py SLOTS
    private static final String PLAN_MODULE = "mqfs.pipeline.jvmplan";

    private static final Set<String> SAID = ConcurrentHashMap.newKeySet();

    static {  // a JvmPartition pickles as (index, JSON text, host or None)
        Unpickler.registerConstructor(PLAN_MODULE, "JvmPartition",
                args -> new Planned((String) args[1], args.length > 2 && args[2] instanceof String host
                        ? new String[] {host} : new String[0]));
        Unpickler.registerConstructor(PLAN_MODULE, "PythonRead", args -> new PythonRead((String) args[0]));
    }

    /** The planner's word that this read goes through Python workers, and why. */
    record PythonRead(String why) {
    }

    private final StructType asked;

    RecordScan(ScopedScans own, StructType read, CaseInsensitiveStringMap options, Filter[] taken) {
        super(own, read, options, taken);
        this.asked = mark(ScopedScans.Carried.attach(read, taken));
    }

    @Override
    RecordScan pruned(StructType columns) {
        return new RecordScan(own, columns, options, taken);
    }

    /** A stream whose micro-batches the JVM reads: the Python reader keeps the offsets,
     * limits and planning (so checkpoints are as before) and hands each partition over as
     * the units' CommitLog positions (jvmplan.JvmStreamPlan), asked for by the JVM key in
     * the schema its stream reader is made with. */
    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        MicroBatchStream python = new PythonScan(own, ScopedScans.NAME, asked, options, taken)
                .toMicroBatchStream(checkpointLocation);
        return new RecordStream(python, own, options, readSchema(), true);
    }

    /** `schema` with the JVM key in its first column's metadata, and the session's cores
     * (SLOTS: the planner makes batch tasks of one size, as many as keep every core busy). */
    static StructType mark(StructType schema) {
        StructField[] fields = schema.fields().clone();
        int slots = org.apache.spark.sql.SparkSession.active().sparkContext().defaultParallelism();
        Metadata meta = new MetadataBuilder().withMetadata(fields[0].metadata()).putString(JVM, "1")
                .putLong(SLOTS, slots).build();
        fields[0] = new StructField(fields[0].name(), fields[0].dataType(), fields[0].nullable(), meta);
        return new StructType(fields);
    }

    @Override
    public String description() {  // a plan names the reader
        return super.description().replace("(Python)", "(JVM)");
    }

    @Override
    public ColumnarSupportMode columnarSupportMode() {  // the JVM's columnar, Python's rows
        return ColumnarSupportMode.PARTITION_DEFINED;
    }

    @Override
    public Batch toBatch() {
        return new Planning();
    }

    /** The planner's partitions, read here or (PythonRead first) through Spark's Python batch. */
    private final class Planning implements Batch {
        private InputPartition[] parts;
        private PythonBatch python;

        @Override
        public InputPartition[] planInputPartitions() {
            if (parts == null) {
                PythonDataSourceReadInfo info = own.getOrCreateReadInfo(ScopedScans.NAME, options, asked, false);
                List<byte[]> pickles = scala.jdk.javaapi.CollectionConverters.asJava(info.partitions());
                Object first = pickles.isEmpty() ? null : unpickle(pickles.get(0));
                List<InputPartition> out = new ArrayList<>();
                if (first instanceof PythonRead read) {
                    if (SAID.add(read.why())) {
                        System.err.println("mqfs: " + read.why() + "; reading it through Python workers (slower)");
                    }
                    // the read info `own` holds now is the Python reader's: PythonBatch takes it
                    python = new PythonBatch(own, ScopedScans.NAME, ScopedScans.Carried.attach(readSchema(), taken),
                            options);
                    for (int i = 1; i < pickles.size(); i++) {
                        out.add(Locality.hosted(new PythonInputPartition(i - 1, pickles.get(i))));
                    }
                } else {
                    for (byte[] pickled : pickles) {
                        out.add(plan(pickled));
                    }
                }
                parts = out.toArray(new InputPartition[0]);
            }
            return parts;
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            planInputPartitions();
            return python != null ? python.createReaderFactory() : new Readers(readSchema());
        }
    }

    private static Object unpickle(byte[] pickled) {
        try {
            return new Unpickler().loads(pickled);
        } catch (IOException e) {
            throw new IllegalStateException("mqfs: unreadable plan from the Python planner", e);
        }
    }

    static Planned plan(byte[] pickled) {
        Object planned = unpickle(pickled);
        if (planned instanceof Planned p) {
            return p;
        }
        throw new IllegalStateException("mqfs: the Python planner sent " + planned + ", not a JVM plan");
    }

    /** A partition the Python planner described (JSON, parsed by the task), and the host
     * that holds its store (the `hosts` option: pipeline/locality.py), where Spark runs it. */
    record Planned(String text, String[] hosts) implements InputPartition {
        @Override
        public String[] preferredLocations() {
            return hosts;
        }
    }

    /** Columnar readers of planned partitions. */
    record Readers(StructType schema) implements PartitionReaderFactory {
        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("mqfs: the JVM reader reads columnar batches");
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new RecordReader(((Planned) partition).text(), schema);
        }
    }
}
