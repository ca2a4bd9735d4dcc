package org.mqfs.spark;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceCreationResult;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.Option;

/**
 * Format "mqfs" with every scan's planned read kept to that scan.
 *
 * <p>Spark 4.3's PythonScanBuilder stores the read it planned with pushed filters on the
 * relation's PythonDataSourceV2, and every later scan of that relation takes its read from
 * there: a query that pushes no filter, or the other side of a self-join, reads the rows of
 * another query's filters. This provider hands each scan builder a PythonDataSourceV2 of its
 * own that takes the relation's Python DataSource (so its pinned snapshot), so a planned
 * read serves the scan it was planned for and no other. It marks the options it passes to
 * Python (MARKER), and the Python source takes filters by default only when it sees it.
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

    /** The relation's table; each scan builder gets a PythonDataSourceV2 of its own. */
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
            ScopedScans own = new ScopedScans(shared);
            own.setShortName(NAME);
            return new PythonScanBuilder(own, NAME, schema, options);
        }
    }
}
