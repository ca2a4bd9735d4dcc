package org.mqfs.spark;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads one partition's plan (pipeline/jvmplan.py's JSON, the first argument) with the JVM
 * reader, outside Spark, and prints each row's commitlog_offset, one a line: a test hands it
 * a byte range no planner cut would make (tests/pipeline/test_pipeline_resync.py).
 */
public final class ReadPlan {
    private ReadPlan() {
    }

    public static void main(String[] args) throws Exception {
        StructType schema = new StructType().add("commitlog_offset", DataTypes.LongType);
        try (RecordReader reader = new RecordReader(args[0], schema)) {
            while (reader.next()) {
                ColumnarBatch batch = reader.get();
                for (int i = 0; i < batch.numRows(); i++) {
                    System.out.println(batch.column(0).getLong(i));
                }
            }
        }
    }
}
