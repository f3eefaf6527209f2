package io.txnwatch.spark.sink;

import java.lang.reflect.Method;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One batch's write, on the driver. Each task commits its own Kafka transaction in
 * DataWriter.commit (exactly once per task, whatever happens to the others, as the Python
 * writer does); commit() here only passes the tasks' results to the Python sink.
 *
 * The way to the Python sink is the write's session configuration, key
 * {@code txnwatch.sink.results.<name>}: the Python sink reads it right after save() returns,
 * from the session the batch belongs to. That works from a classic driver and from a Spark
 * Connect foreachBatch worker alike (a configuration read is one call, no Spark job).
 */
final class SinkBatchWrite implements BatchWrite {
    private static final Logger LOG = LoggerFactory.getLogger(SinkBatchWrite.class);
    static final String RESULTS_KEY_PREFIX = "txnwatch.sink.results.";

    private final SinkOptions options;
    private final StructType input;

    SinkBatchWrite(SinkOptions options, StructType input) {
        this.options = options;
        this.input = input;
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
        if (options.batchId < 0) {
            throw new IllegalArgumentException("the txnwatch exactly-once writer needs the option 'batch.id' for a "
                + "batch write: write through txnwatch's ExactlyOnceKafkaSink, which sets it");
        }
        return new TaskWriters(options, Columns.of(input));
    }

    @Override
    public boolean useCommitCoordinator() {
        // Each task's commit is its own Kafka transaction, fenced by its transactional id:
        // a second attempt's commit is safe (it skips a batch already committed).
        return false;
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {
        try {
            setSessionConf(RESULTS_KEY_PREFIX + options.name, TaskResult.payload(options.batchId, messages));
        } catch (Exception e) {   // the batch is committed; only its metrics are lost
            LOG.warn("txnwatch sink {}: could not hand batch {}'s results to the Python sink", options.name,
                options.batchId, e);
        }
    }

    @Override
    public void abort(WriterCommitMessage[] messages) {
        // Nothing to undo here: a task that failed aborted its own transaction, and the
        // tasks that committed stay committed (a replay of the batch skips them).
    }

    /** SparkSession.active().conf().set(key, value), by reflection: the session classes moved
     *  between Spark 3 (spark-sql) and Spark 4 (sql-api's abstract SparkSession, the classic one). */
    private static void setSessionConf(String key, String value) throws ReflectiveOperationException {
        Class<?> sessionClass = Class.forName("org.apache.spark.sql.SparkSession");
        Object session = sessionClass.getMethod("active").invoke(null);
        Object conf = session.getClass().getMethod("conf").invoke(session);
        Method set = conf.getClass().getMethod("set", String.class, String.class);
        set.invoke(conf, key, value);
    }
}
