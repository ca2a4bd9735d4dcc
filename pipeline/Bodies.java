package org.mqfs.spark;

import java.nio.ByteBuffer;
import java.util.Arrays;

import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A batch's body column (body, Kafka's value) as where each body lies: a mapped CommitLog
 * file's bytes, or an inflated or unwrapped copy. Spark reads a binary value of a column
 * vector by copying it into a new array (getBinary), so a body copied into an
 * OnHeapColumnVector first was copied twice; here it is copied once, from where it lies,
 * when a row is read (a query that reads no body value, as a noop sink, copies none). The
 * bytes are read through the ByteBuffer (bounds checked; a file cut short under the mapping
 * is an error, not a crash), after the record's checks held when the batch was made.
 */
final class Bodies extends ColumnVector {
    private Object[] from;  // ByteBuffer (a mapping) or byte[]
    private int[] at;
    private int[] len;

    Bodies(DataType type, int capacity) {
        super(type);
        from = new Object[capacity];
        at = new int[capacity];
        len = new int[capacity];
    }

    void reserve(int capacity) {
        if (capacity > from.length) {
            from = Arrays.copyOf(from, capacity);
            at = Arrays.copyOf(at, capacity);
            len = Arrays.copyOf(len, capacity);
        }
    }

    /** Forgets the rows before `rows` (no buffer or array is held past its batch). */
    void reset(int rows) {
        Arrays.fill(from, 0, rows, null);
    }

    void put(int row, ByteBuffer b, int pos, int n) {
        from[row] = b;
        at[row] = pos;
        len[row] = n;
    }

    void put(int row, byte[] raw, int pos, int n) {
        from[row] = raw;
        at[row] = pos;
        len[row] = n;
    }

    @Override
    public byte[] getBinary(int rowId) {
        byte[] out = new byte[len[rowId]];
        if (from[rowId] instanceof ByteBuffer b) {
            b.get(at[rowId], out);
        } else {
            System.arraycopy((byte[]) from[rowId], at[rowId], out, 0, out.length);
        }
        return out;
    }

    @Override
    public boolean hasNull() {
        return false;
    }

    @Override
    public int numNulls() {
        return 0;
    }

    @Override
    public boolean isNullAt(int rowId) {
        return false;
    }

    /** Reused for the reader's next batch: Spark's closeIfFreeable after each batch keeps it. */
    @Override
    public void closeIfFreeable() {
    }

    @Override
    public void close() {
        Arrays.fill(from, null);
    }

    private static UnsupportedOperationException binary() {
        return new UnsupportedOperationException("mqfs: a body column holds binary values only");
    }

    @Override
    public boolean getBoolean(int rowId) {
        throw binary();
    }

    @Override
    public byte getByte(int rowId) {
        throw binary();
    }

    @Override
    public short getShort(int rowId) {
        throw binary();
    }

    @Override
    public int getInt(int rowId) {
        throw binary();
    }

    @Override
    public long getLong(int rowId) {
        throw binary();
    }

    @Override
    public float getFloat(int rowId) {
        throw binary();
    }

    @Override
    public double getDouble(int rowId) {
        throw binary();
    }

    @Override
    public ColumnarArray getArray(int rowId) {
        throw binary();
    }

    @Override
    public ColumnarMap getMap(int ordinal) {
        throw binary();
    }

    @Override
    public Decimal getDecimal(int rowId, int precision, int scale) {
        throw binary();
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
        throw binary();
    }

    @Override
    public ColumnVector getChild(int ordinal) {
        throw binary();
    }
}
