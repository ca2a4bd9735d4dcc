package org.mqfs.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.SparkSessionExtensionsProvider;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.StreamingDataSourceV2ScanRelation;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.BoxedUnit;

/**
 * Column pruning for streams. Spark builds a stream's scan with every column (its
 * MicroBatchExecution asks the scan builder for the relation's whole output) and never prunes
 * it, so a stream of mqfs would decode and send every column of every row. This optimizer
 * rule, which every session loads from the jar (META-INF/services: Spark's
 * SparkSessionExtensionsProvider, no setting), finds an mqfs stream under a Project (through
 * Filters: the shape Spark's ColumnPruning leaves above a leaf whose columns are not all
 * used) and narrows the stream's relation to the columns referenced there, with a view of
 * its stream that reads only those (RecordStream.pruned). A query needing no column (a
 * count) reads one int column, as a batch scan does. Any other shape is left as it is.
 */
public final class StreamPruning extends Rule<LogicalPlan> {

    /** Loaded by Spark's ServiceLoader when a session starts. */
    public static final class Provider implements SparkSessionExtensionsProvider {
        @Override
        public BoxedUnit apply(SparkSessionExtensions extensions) {
            extensions.injectOptimizerRule(session -> new StreamPruning());
            return BoxedUnit.UNIT;
        }
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        return rewrite(plan);
    }

    private static LogicalPlan rewrite(LogicalPlan node) {
        if (node instanceof Project p) {
            LogicalPlan child = chain(p.child(), p.references());
            if (child != null) {
                return p.withNewChildren(CollectionConverters.asScala(List.of(child)).toSeq());
            }
        }
        List<LogicalPlan> children = CollectionConverters.asJava(node.children());
        List<LogicalPlan> rewritten = new ArrayList<>();
        boolean changed = false;
        for (LogicalPlan c : children) {
            LogicalPlan r = rewrite(c);
            changed |= r != c;
            rewritten.add(r);
        }
        return changed ? node.withNewChildren(CollectionConverters.asScala(rewritten).toSeq()) : node;
    }

    /** `node` (Filters over an mqfs stream) reading only the columns in `refs` and those the
     * Filters reference; null when it is not that shape or reads no fewer columns. */
    private static LogicalPlan chain(LogicalPlan node, AttributeSet refs) {
        if (node instanceof Filter f) {
            LogicalPlan inner = chain(f.child(), refs.$plus$plus(f.references()));
            return inner == null ? null : f.withNewChildren(CollectionConverters.asScala(List.of(inner)).toSeq());
        }
        if (node instanceof StreamingDataSourceV2ScanRelation r && r.stream() instanceof RecordStream s
                && r.scan() instanceof ScopedScans.CarryingScan scan) {
            return pruned(r, s, scan, refs);
        }
        return null;
    }

    private static LogicalPlan pruned(StreamingDataSourceV2ScanRelation r, RecordStream stream,
                                      ScopedScans.CarryingScan scan, AttributeSet refs) {
        List<AttributeReference> output = CollectionConverters.asJava(r.output());
        List<AttributeReference> kept = new ArrayList<>();
        for (AttributeReference a : output) {
            if (refs.contains(a)) {
                kept.add(a);
            }
        }
        if (kept.isEmpty()) {  // a count: one int column (rows need a column)
            AttributeReference pick = output.get(0);
            for (AttributeReference a : output) {
                if (a.dataType() instanceof IntegerType) {
                    pick = a;
                    break;
                }
            }
            kept.add(pick);
        }
        if (kept.size() == output.size()) {
            return null;
        }
        StructType schema = stream.columns();
        List<StructField> fields = new ArrayList<>();
        for (AttributeReference a : kept) {
            fields.add(schema.apply(a.name()));
        }
        StructType columns = new StructType(fields.toArray(new StructField[0]));
        return r.copy(r.relation(), scan.pruned(columns), CollectionConverters.asScala(kept).toSeq(),
                stream.pruned(columns), r.startOffset(), r.endOffset());
    }
}
