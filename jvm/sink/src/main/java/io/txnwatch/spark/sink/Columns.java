package io.txnwatch.spark.sink;

import java.io.Serializable;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;

/** Where a write's `key` (optional) and `value` columns are, and whether each is a string or
 *  binary: checked on the driver, before any task runs. */
final class Columns implements Serializable {
    private static final long serialVersionUID = 1L;

    final int key;              // -1: no key column
    final boolean keyIsString;
    final int value;
    final boolean valueIsString;

    private Columns(int key, boolean keyIsString, int value, boolean valueIsString) {
        this.key = key;
        this.keyIsString = keyIsString;
        this.value = value;
        this.valueIsString = valueIsString;
    }

    static Columns of(StructType input) {
        int value = index(input, "value");
        if (value < 0) {
            throw new IllegalArgumentException("the batch needs a `value` column (and optionally `key`); got "
                + String.join(", ", input.fieldNames()));
        }
        int key = index(input, "key");
        return new Columns(key, key >= 0 && isString(input.fields()[key].dataType()), value,
            isString(input.fields()[value].dataType()));
    }

    /** The column that decides a row's output task: `key`, else `value` (as the Python sink's
     *  repartition on its first column). */
    static String layoutColumn(StructType input) {
        return index(input, "key") >= 0 ? "key" : "value";
    }

    TaskWriter writer(SinkOptions options, int task) {
        return new TaskWriter(options, task, key, keyIsString, value, valueIsString).prepare();
    }

    private static int index(StructType schema, String name) {
        String[] names = schema.fieldNames();
        for (int i = 0; i < names.length; i++) {
            if (names[i].equalsIgnoreCase(name)) {
                return i;
            }
        }
        return -1;
    }

    private static boolean isString(DataType t) {
        if (t instanceof StringType) {
            return true;
        }
        if (t instanceof BinaryType) {
            return false;
        }
        throw new IllegalArgumentException("key and value must be string or binary columns, got " + t.simpleString());
    }
}
