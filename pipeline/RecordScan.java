package org.mqfs.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import net.razorvine.pickle.Unpickler;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceReadInfo;
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
 * unit positions here, with no Python worker. Streams keep PythonScan's micro-batches.
 */
final class RecordScan extends ScopedScans.CarryingScan {
    static final String JVM = "mqfs.jvm";  // = pipeline/jvmplan.py JVM
    private static final String PLAN_MODULE = "mqfs.pipeline.jvmplan";

    static {  // a JvmPartition pickles as (index, JSON text): the text is the plan
        Unpickler.registerConstructor(PLAN_MODULE, "JvmPartition", args -> args[1]);
    }

    private final ScopedScans own;
    private final StructType asked;
    private final CaseInsensitiveStringMap options;

    RecordScan(ScopedScans own, StructType read, CaseInsensitiveStringMap options, Filter[] taken) {
        super(own, read, options, taken);
        this.own = own;
        this.asked = mark(ScopedScans.Carried.attach(read, taken));
        this.options = options;
    }

    /** `schema` with the JVM key in its first column's metadata. */
    private static StructType mark(StructType schema) {
        StructField[] fields = schema.fields().clone();
        Metadata meta = new MetadataBuilder().withMetadata(fields[0].metadata()).putString(JVM, "1").build();
        fields[0] = new StructField(fields[0].name(), fields[0].dataType(), fields[0].nullable(), meta);
        return new StructType(fields);
    }

    @Override
    public String description() {  // a plan names the reader
        return super.description().replace("(Python)", "(JVM)");
    }

    @Override
    public ColumnarSupportMode columnarSupportMode() {  // batches columnar, streams Python's rows
        return ColumnarSupportMode.PARTITION_DEFINED;
    }

    @Override
    public Batch toBatch() {
        return new Batch() {
            @Override
            public InputPartition[] planInputPartitions() {
                PythonDataSourceReadInfo info = own.getOrCreateReadInfo(ScopedScans.NAME, options, asked, false);
                List<InputPartition> parts = new ArrayList<>();
                for (byte[] pickled : scala.jdk.javaapi.CollectionConverters.asJava(info.partitions())) {
                    parts.add(new Planned(plan(pickled)));
                }
                return parts.toArray(new InputPartition[0]);
            }

            @Override
            public PartitionReaderFactory createReaderFactory() {
                return new Readers(readSchema());
            }
        };
    }

    private static String plan(byte[] pickled) {
        try {
            Object text = new Unpickler().loads(pickled);
            if (text instanceof String s) {
                return s;
            }
            throw new IllegalStateException("mqfs: the Python planner sent " + text + ", not a JVM plan");
        } catch (IOException e) {
            throw new IllegalStateException("mqfs: unreadable plan from the Python planner", e);
        }
    }

    /** A partition the Python planner described (JSON, parsed by the task). */
    record Planned(String text) implements InputPartition {
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
