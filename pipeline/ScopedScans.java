package org.mqfs.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceCreationResult;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.Filter;
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
 * names, so the builder here gives it only the columns the query needs (and those its filters
 * name: Spark hands Python only filters on the read's columns). Spark pushes filters before
 * it prunes columns, and a Python read is planned together with its filters, so the filters
 * are first offered to a probe, a read whose columns carry MARKER in their metadata (the
 * Python source plans nothing for it, it only says which filters it takes), and pushed
 * again to the pruned read at build.
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

    /** Pushes filters and prunes columns; every Python call through a provider of its own. */
    static final class Builder implements SupportsPushDownFilters, SupportsPushDownRequiredColumns {
        private final ScopedScans shared;
        private final StructType schema;
        private final CaseInsensitiveStringMap options;
        private Filter[] offered = new Filter[0];
        private Filter[] taken = new Filter[0];
        private Set<String> needed;  // null: every column (streams, and scans Spark does not prune)

        Builder(ScopedScans shared, StructType schema, CaseInsensitiveStringMap options) {
            this.shared = shared;
            this.schema = schema;
            this.options = options;
        }

        private PythonScanBuilder python(StructType columns) {
            ScopedScans own = new ScopedScans(shared);
            own.setShortName(NAME);
            return new PythonScanBuilder(own, NAME, columns, options);
        }

        /** Spark hands Python filters only on columns of the read's schema. */
        private static Set<String> references(Filter[] filters) {
            Set<String> names = new HashSet<>();
            for (Filter f : filters) {
                names.addAll(Arrays.asList(f.references()));
            }
            return names;
        }

        /** The schema's columns named (whole, in schema order: Python builds no part of a
         * nested column), or one int column when none is (a count() needs no column);
         * a probe's columns carry MARKER in their metadata. */
        private StructType columns(Set<String> names, boolean probe) {
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
            if (probe) {
                Metadata marked = new MetadataBuilder().putBoolean(MARKER, true).build();
                kept.replaceAll(f -> new StructField(f.name(), f.dataType(), f.nullable(), marked));
            }
            return new StructType(kept.toArray(new StructField[0]));
        }

        @Override
        public Filter[] pushFilters(Filter[] filters) {
            PythonScanBuilder probe = python(columns(references(filters), true));
            Filter[] left = probe.pushFilters(filters);
            offered = filters;
            taken = probe.pushedFilters();
            return left;
        }

        @Override
        public Filter[] pushedFilters() {
            return taken;
        }

        @Override
        public void pruneColumns(StructType required) {
            needed = new HashSet<>(Arrays.asList(required.fieldNames()));
        }

        /** The read of the needed columns and those the filters name (Spark drops the
         * latter above the scan), planned with the filters the probe took. */
        @Override
        public Scan build() {
            StructType read = schema;
            if (needed != null) {
                Set<String> names = new HashSet<>(needed);
                names.addAll(references(offered));
                read = columns(names, false);
            }
            PythonScanBuilder builder = python(read);
            if (offered.length > 0) {
                builder.pushFilters(offered);
                if (!Arrays.equals(builder.pushedFilters(), taken)) {  // the same reader code decides
                    throw new IllegalStateException("mqfs: the read took other filters than its probe: "
                            + Arrays.toString(builder.pushedFilters()) + " vs " + Arrays.toString(taken));
                }
            }
            return builder.build();
        }
    }
}
