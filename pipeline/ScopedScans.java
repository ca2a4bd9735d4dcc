package org.mqfs.spark;

import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceCreationResult;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScan;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.MetadataBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.Option;

/**
 * Format "mqfs" with every scan's planned read kept to that scan, and only the columns the
 * query needs asked of Python.
 *
 * <p>Spark 4.3's PythonScanBuilder stores the read it planned with pushed filters on the
 * relation's PythonDataSourceV2, and every later scan of that relation takes its read from
 * there: a query that pushes no filter, or the other side of a self-join, reads the rows of
 * another query's filters. This provider hands each scan a PythonDataSourceV2 of its own that
 * takes the relation's Python DataSource (so its pinned snapshot), so a planned read serves
 * the scan it was planned for and no other. It marks the options it passes to Python
 * (MARKER), and the Python source takes filters by default only when it sees it.
 *
 * <p>PythonScanBuilder prunes no columns: Python builds every declared column of every row
 * and the JVM converts them all. Python's reader(schema) builds what the schema it is given
 * names, so the builder here gives it only the columns the query needs.
 *
 * <p>Filters reach Python with the read itself, not through Spark's filter pushdown call:
 * that call runs in a Python worker of its own kind, whose first start in a session (a
 * daemon, pyspark and the source imported: about a second) cost a pushed one-queue read five
 * times the same read given by options. The builder takes the filters the Python reader
 * applies exactly (the same rules as its pushFilters) and hands them to it in the metadata of
 * the read schema's first column (Carried): the read is planned in the worker every read uses,
 * and, as with Spark's own pushdown, the plan keeps no Filter for them (a Filter would also be
 * compiled anew for every new literal).
 */
public class ScopedScans extends PythonDataSourceV2 implements DataSourceRegister {
    public static final String NAME = "mqfs";
    public static final String MARKER = "__mqfsScopedScans";

    private final ScopedScans relation;  // null for the relation's own provider

    public ScopedScans() {
        this(null);
    }

    private ScopedScans(ScopedScans relation) {
        this.relation = relation;
    }

    @Override
    public String shortName() {
        return NAME;
    }

    @Override
    public PythonDataSourceCreationResult getOrCreateDataSourceInPython(
            String name, CaseInsensitiveStringMap options, Option<StructType> schema) {
        if (relation != null) {
            return relation.getOrCreateDataSourceInPython(name, options, schema);
        }
        Map<String, String> marked = new HashMap<>(options.asCaseSensitiveMap());
        marked.put(MARKER, "true");
        return super.getOrCreateDataSourceInPython(name, new CaseInsensitiveStringMap(marked), schema);
    }

    /** A provider of this relation's own (its Python source, pinned snapshot), holding no
     * planned read yet. */
    ScopedScans fresh() {
        ScopedScans own = new ScopedScans(relation != null ? relation : this);
        own.setShortName(NAME);
        return own;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new Relation(this, schema);
    }

    /** The relation's table; each scan builder gets PythonDataSourceV2s of its own. */
    static final class Relation extends PythonTable {
        private final ScopedScans shared;
        private final StructType schema;

        Relation(ScopedScans shared, StructType schema) {
            super(shared, NAME, schema);
            this.shared = shared;
            this.schema = schema;
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new Builder(shared, schema, options);
        }
    }

    /** Takes filters (Carried) and prunes columns; its read through a provider of its own. */
    static final class Builder implements SupportsPushDownFilters, SupportsPushDownRequiredColumns {
        private final ScopedScans shared;
        private final StructType schema;
        private final CaseInsensitiveStringMap options;
        private Filter[] taken = new Filter[0];
        private Set<String> needed;  // null: every column (streams, and scans Spark does not prune)

        Builder(ScopedScans shared, StructType schema, CaseInsensitiveStringMap options) {
            this.shared = shared;
            this.schema = schema;
            this.options = options;
        }

        /** The schema's columns named (whole, in schema order: Python builds no part of a
         * nested column), or one int column when none is (a count() needs no column). */
        private StructType columns(Set<String> names) {
            List<StructField> kept = new ArrayList<>();
            for (StructField f : schema.fields()) {
                if (names.stream().anyMatch(n -> n.equals(f.name()) || n.startsWith(f.name() + "."))) {
                    kept.add(f);
                }
            }
            if (kept.isEmpty()) {
                StructField pick = schema.fields()[0];
                for (StructField f : schema.fields()) {
                    if (f.dataType() instanceof IntegerType) {
                        pick = f;
                        break;
                    }
                }
                kept.add(pick);
            }
            return new StructType(kept.toArray(new StructField[0]));
        }

        @Override
        public Filter[] pushFilters(Filter[] filters) {
            List<Filter> left = new ArrayList<>();
            taken = Carried.take(filters, schema, options, left);
            return left.toArray(new Filter[0]);
        }

        @Override
        public Filter[] pushedFilters() {
            return taken;
        }

        @Override
        public void pruneColumns(StructType required) {
            needed = new HashSet<>(Arrays.asList(required.fieldNames()));
        }

        /** The read of the needed columns, with the filters taken (the reader applies them to
         * records, whatever columns it builds). */
        @Override
        public Scan build() {
            ScopedScans own = shared.fresh();
            StructType read = needed == null ? schema : columns(needed);
            return "python".equalsIgnoreCase(options.getOrDefault("reader", "").strip())
                    ? new CarryingScan(own, read, options, taken) : new RecordScan(own, read, options, taken);
        }
    }

    /** A scan whose read is planned with the filters in its schema's metadata (PythonBatch
     * hands Python the schema it was built with) but whose rows' schema has none: the
     * metadata would otherwise reach the query's output (a Parquet file written from it). */
    static class CarryingScan extends PythonScan {
        final ScopedScans own;
        final StructType read;
        final CaseInsensitiveStringMap options;
        final Filter[] taken;

        CarryingScan(ScopedScans own, StructType read, CaseInsensitiveStringMap options, Filter[] taken) {
            super(own, NAME, Carried.attach(read, taken), options, taken);
            this.own = own;
            this.read = read;
            this.options = options;
            this.taken = taken;
        }

        @Override
        public StructType readSchema() {
            return read;
        }

        /** Spark's Python batch, its partitions naming their store's host (Locality.hosted). */
        @Override
        public Batch toBatch() {
            Batch python = super.toBatch();
            return new Batch() {
                @Override
                public InputPartition[] planInputPartitions() {
                    return Locality.hosted(python.planInputPartitions());
                }

                @Override
                public PartitionReaderFactory createReaderFactory() {
                    return python.createReaderFactory();
                }
            };
        }

        /** This scan reading only `columns` (StreamPruning). */
        CarryingScan pruned(StructType columns) {
            return new CarryingScan(own, columns, options, taken);
        }

        /** A stream's micro-batches: offsets and planning the Python reader's, reads pruned by
         * StreamPruning (RecordStream). */
        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
            return new RecordStream(super.toMicroBatchStream(checkpointLocation), own, options, read, false);
        }
    }

    /**
     * The filters a scan takes from Spark, and how they reach the Python reader: as JSON in
     * the metadata of the read schema's first column (FILTERS; pipeline/carried.py reads it).
     * A filter is taken when the Python reader applies it exactly: the rules of its
     * pushFilters (pipeline/source.py, PushdownReader._push); the reader refuses a read whose
     * carried filter it does not take, so a difference fails loudly, never with extra rows.
     */
    static final class Carried {
        public static final String FILTERS = "mqfs.filters";
        private static final Set<String> EQUAL = Set.of("topic", "queue_id");
        private static final Set<String> RANGE = Set.of("queue_offset", "commitlog_offset", "store_timestamp");
        private static final Map<String, String> KAFKA = Map.of(
                "topic", "topic", "partition", "queue_id", "offset", "queue_offset", "timestamp", "store_timestamp");

        private Carried() {
        }

        /** The filters taken (pushFilters=false: none; Spark's python filterPushdown conf
         * guards its own Python pushdown, which this builder replaces, so it is not asked);
         * the others are added to `left`, for Spark to evaluate. */
        static Filter[] take(Filter[] filters, StructType schema, CaseInsensitiveStringMap options, List<Filter> left) {
            List<Filter> taken = new ArrayList<>();
            boolean on = !"false".equalsIgnoreCase(options.getOrDefault("pushFilters", "").strip());
            boolean kafka = "kafka".equalsIgnoreCase(options.getOrDefault("shape", "").strip());
            for (Filter f : filters) {
                (on && takes(f, schema, kafka) ? taken : left).add(f);
            }
            return taken.toArray(new Filter[0]);
        }

        /** `schema` with the filters in its first column's metadata (unchanged without any). */
        static StructType attach(StructType schema, Filter[] filters) {
            if (filters.length == 0 || schema.fields().length == 0) {
                return schema;
            }
            StringBuilder list = new StringBuilder("[");
            for (Filter f : filters) {
                list.append(list.length() > 1 ? "," : "").append(json(f));
            }
            StructField[] fields = schema.fields().clone();
            Metadata meta = new MetadataBuilder().withMetadata(fields[0].metadata())
                    .putString(FILTERS, list.append("]").toString()).build();
            fields[0] = new StructField(fields[0].name(), fields[0].dataType(), fields[0].nullable(), meta);
            return new StructType(fields);
        }

        private static boolean takes(Filter f, StructType schema, boolean kafka) {
            String[] refs = f.references();
            if (refs.length != 1 || !Arrays.asList(schema.fieldNames()).contains(refs[0])) {
                return false;  // a nested field, or a name Spark quoted
            }
            String column = kafka ? KAFKA.getOrDefault(refs[0], "") : refs[0];  // "": Kafka's others
            if (f instanceof IsNotNull) {
                return EQUAL.contains(column) || RANGE.contains(column);
            }
            boolean one = f instanceof EqualTo || f instanceof GreaterThan || f instanceof GreaterThanOrEqual
                    || f instanceof LessThan || f instanceof LessThanOrEqual;
            Object[] values = f instanceof In in ? in.values() : one ? new Object[] {value(f)} : null;
            if (values == null || !(EQUAL.contains(column) ? f instanceof EqualTo || f instanceof In
                                    : RANGE.contains(column) && one)) {
                return false;
            }
            for (Object v : values) {
                boolean fits = "topic".equals(column) ? v instanceof String
                        : "store_timestamp".equals(column) ? v instanceof Timestamp || v instanceof Instant
                        : v instanceof Integer || v instanceof Long;
                if (!fits) {
                    return false;
                }
            }
            return true;
        }

        private static Object value(Filter f) {
            if (f instanceof EqualTo e) {
                return e.value();
            }
            if (f instanceof GreaterThan e) {
                return e.value();
            }
            if (f instanceof GreaterThanOrEqual e) {
                return e.value();
            }
            if (f instanceof LessThan e) {
                return e.value();
            }
            return ((LessThanOrEqual) f).value();
        }

        /** {"op": class, "column": name, "values": [...]} of a filter `takes` took: strings
         * and integers as JSON, a timestamp as {"us": microseconds since the epoch}. */
        private static String json(Filter f) {
            Object[] values = f instanceof In in ? in.values() : f instanceof IsNotNull ? new Object[0]
                    : new Object[] {value(f)};
            StringBuilder out = new StringBuilder("{\"op\":\"").append(f.getClass().getSimpleName())
                    .append("\",\"column\":").append(quote(f.references()[0])).append(",\"values\":[");
            for (int i = 0; i < values.length; i++) {
                Object v = values[i];
                String text = v instanceof String str ? quote(str)
                        : v instanceof Timestamp t ? "{\"us\":" + Math.addExact(Math.multiplyExact(
                                Math.floorDiv(t.getTime(), 1000L), 1_000_000L), t.getNanos() / 1000) + "}"
                        : v instanceof Instant t ? "{\"us\":" + Math.addExact(Math.multiplyExact(
                                t.getEpochSecond(), 1_000_000L), t.getNano() / 1000) + "}"
                        : v.toString();  // Integer or Long (takes)
                out.append(i > 0 ? "," : "").append(text);
            }
            return out.append("]}").toString();
        }

        private static String quote(String s) {
            StringBuilder out = new StringBuilder("\"");
            for (char c : s.toCharArray()) {
                if (c == '"' || c == '\\' || c < 0x20) {
                    out.append(String.format("\\u%04x", (int) c));
                } else {
                    out.append(c);
                }
            }
            return out.append('"').toString();
        }
    }
}
