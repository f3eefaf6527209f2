package io.txnwatch.spark.sink;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;

/** Makes each task's TaskWriter, on the executors: for one foreachBatch batch (its id in the
 *  options) or for every batch of a streaming write (Spark's epoch id). */
final class TaskWriters implements DataWriterFactory, StreamingDataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final SinkOptions options;
    private final Columns columns;

    TaskWriters(SinkOptions options, Columns columns) {
        this.options = options;
        this.columns = columns;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
        if (partitionId >= options.numTasks) {
            throw new IllegalStateException("task index " + partitionId + " >= num_tasks " + options.numTasks
                + ": the batch was not partitioned into exactly num_tasks partitions");
        }
        return columns.writer(options, partitionId);
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
        return columns.writer(options.forBatch(epochId), partitionId);
    }
}
