package io.txnwatch.spark.sink;

import java.util.function.BiConsumer;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The sink as a streaming query's own sink (`df.writeStream.format("txnwatch-kafka-eos")`):
 * each micro-batch is written in the batch's own job, as Spark's Kafka sink writes, with no
 * foreachBatch call and no second job. Batch ids are Spark's epoch ids, so the tasks, markers
 * and skips are the foreachBatch writers' (a query can move between the two forms).
 *
 * Layout: with partitioning "key" the write asks Spark for the batch hashed on its key into
 * num_tasks partitions (SinkWrite: the same hash as the Python sink's repartition); with
 * "input" the batch's own partitions are the tasks, which must be at most num_tasks.
 * The tasks' results reach Python through the query's progress (the table's sink metrics).
 */
final class SinkStreamingWrite implements StreamingWrite {
    private static final Logger LOG = LoggerFactory.getLogger(SinkStreamingWrite.class);

    private final SinkOptions options;
    private final StructType input;
    private final BiConsumer<Long, String> results;

    SinkStreamingWrite(SinkOptions options, StructType input, BiConsumer<Long, String> results) {
        this.options = options;
        this.input = input;
        this.results = results;
    }

    @Override
    public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
        if (info.numPartitions() > options.numTasks) {
            throw new IllegalStateException("txnwatch sink " + options.name + ": the batch has " + info.numPartitions()
                + " partitions, more than num_tasks=" + options.numTasks + " (partitioning='" + options.partitioning
                + "'): use partitioning='key', or a query with at most num_tasks partitions");
        }
        return new TaskWriters(options, Columns.of(input));
    }

    @Override
    public boolean useCommitCoordinator() {
        return false;      // each task's commit is its own Kafka transaction (SinkBatchWrite)
    }

    @Override
    public void commit(long epochId, WriterCommitMessage[] messages) {
        try {
            results.accept(epochId, TaskResult.payload(epochId, messages));
        } catch (Exception e) {   // the batch is committed; only its metrics are lost
            LOG.warn("txnwatch sink {}: could not report batch {}'s results", options.name, epochId, e);
        }
    }

    @Override
    public void abort(long epochId, WriterCommitMessage[] messages) {
        // As SinkBatchWrite: failed tasks aborted their own transactions; a replay skips the rest.
    }
}
