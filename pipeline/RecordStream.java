package org.mqfs.spark;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceReadInfo;
import org.apache.spark.sql.execution.datasources.v2.python.PythonStreamingInputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.PythonStreamingPartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.Option;

/**
 * A stream's micro-batches. Offsets, read limits, Trigger.AvailableNow and partitions are the
 * Python stream reader's (pipeline/stream.py), through Spark's own Python stream, so offsets
 * and checkpoints are exactly what they were. What differs is the read of each partition:
 * with `jvm`, the planner hands every partition over as the CommitLog positions of its
 * queue range's units (pipeline/jvmplan.py, JvmStreamPlan) and the JVM reader reads them
 * (RecordReader, no Python worker); and only `columns` are built: Spark builds a stream's scan
 * with every column, and StreamPruning gives the plan a view of this stream (`pruned`) reading
 * the columns the query needs (the Python reader's too: a read function made for that schema).
 *
 * <p>A view is equal to the stream it was made from, so Spark, which knows a source by the
 * stream its plan was built with, counts the view's rows as that source's.
 */
final class RecordStream implements MicroBatchStream, SupportsTriggerAvailableNow {
    private final MicroBatchStream python;
    private final ScopedScans own;
    private final CaseInsensitiveStringMap options;
    private final StructType columns;
    private final boolean jvm;

    RecordStream(MicroBatchStream python, ScopedScans own, CaseInsensitiveStringMap options, StructType columns,
                 boolean jvm) {
        this.python = python;
        this.own = own;
        this.options = options;
        this.columns = columns;
        this.jvm = jvm;
    }

    /** This stream, its reads building only `columns`. */
    RecordStream pruned(StructType columns) {
        return new RecordStream(python, own, options, columns, jvm);
    }

    StructType columns() {
        return columns;
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        InputPartition[] parts = python.planInputPartitions(start, end);
        if (!jvm) {
            return Locality.hosted(parts);
        }
        InputPartition[] out = new InputPartition[parts.length];
        for (int i = 0; i < parts.length; i++) {
            out[i] = RecordScan.plan(((PythonStreamingInputPartition) parts[i]).pickedPartition());
        }
        return out;
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        if (jvm) {
            return new RecordScan.Readers(columns);
        }
        ScopedScans fresh = own.fresh();  // its read info is this schema's alone
        PythonDataSourceReadInfo info = fresh.getOrCreateReadInfo(ScopedScans.NAME, options, columns, true);
        return new PythonStreamingPartitionReaderFactory(fresh.source(), info.func(), columns, Option.empty(),
                Option.empty());
    }

    @Override
    public Offset initialOffset() {
        return python.initialOffset();
    }

    @Override
    public Offset latestOffset() {
        return python.latestOffset();
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
        return python instanceof SupportsAdmissionControl a ? a.latestOffset(start, limit) : python.latestOffset();
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        return python instanceof SupportsAdmissionControl a ? a.getDefaultReadLimit() : ReadLimit.allAvailable();
    }

    @Override
    public Offset reportLatestOffset() {
        return python instanceof SupportsAdmissionControl a ? a.reportLatestOffset() : null;
    }

    /** A refused stream (pipeline/stream.py RefusedStream) has no such call: its first offset
     * call raises why it was refused. */
    @Override
    public void prepareForTriggerAvailableNow() {
        if (python instanceof SupportsTriggerAvailableNow t) {
            t.prepareForTriggerAvailableNow();
        }
    }

    @Override
    public Offset deserializeOffset(String json) {
        return python.deserializeOffset(json);
    }

    @Override
    public void commit(Offset end) {
        python.commit(end);
    }

    @Override
    public void stop() {
        python.stop();
    }

    @Override
    public boolean equals(Object other) {
        return other instanceof RecordStream s && s.python == python;
    }

    @Override
    public int hashCode() {
        return System.identityHashCode(python);
    }

    @Override
    public String toString() {
        return python.toString();
    }
}
