package io.txnwatch.spark.sink;

import java.util.Collections;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.function.BiConsumer;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.distributions.Distribution;
import org.apache.spark.sql.connector.distributions.Distributions;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.SortOrder;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.streaming.ReportsSinkMetrics;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.RequiresDistributionAndOrdering;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * `df.write.format("txnwatch-kafka-eos").mode("append").options(...).save()`: one batch of
 * txnwatch's ExactlyOnceKafkaSink written from Spark's JVM, partition i by the transactional
 * producer `txnwatch.<name>.<i>` (TaskWriter); or, as `df.writeStream.format(...)`, every
 * batch of a streaming query (SinkStreamingWrite). A DataSource V2 write rather than a JVM
 * object driven over py4j, so that it runs the same from a classic session and from Spark
 * Connect (whose clients and foreachBatch workers have no py4j).
 */
public final class ExactlyOnceKafkaProvider implements TableProvider, DataSourceRegister {
    public static final String SHORT_NAME = "txnwatch-kafka-eos";

    @Override
    public String shortName() {
        return SHORT_NAME;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return StructType.fromDDL("key BINARY, value BINARY");
    }

    /** The batch's own columns are the table's: `value`, and `key` when it has one. */
    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        try {
            Class.forName("org.apache.kafka.clients.producer.KafkaProducer", false,
                ExactlyOnceKafkaProvider.class.getClassLoader());
        } catch (ClassNotFoundException e) {
            throw new IllegalStateException(SHORT_NAME + " needs kafka-clients on the class path: add Spark's Kafka "
                + "connector (spark-sql-kafka-0-10), as txnwatch.spark_connector.connector_conf() does");
        }
        return new SinkTable(schema);
    }

    /** The sink, to Spark: batch writes (one foreachBatch batch, laid out by the Python sink)
     *  and streaming writes (every batch of a query, SinkStreamingWrite). As a streaming sink it
     *  reports its last batch's task results as the query's sink metrics, where the Python sink
     *  reads them from the progress events. */
    private static final class SinkTable implements Table, SupportsWrite, ReportsSinkMetrics {
        static final String METRIC_SINK = "txnwatch.sink";
        static final String METRIC_BATCH = "txnwatch.batch";
        static final String METRIC_RESULTS = "txnwatch.results";

        private final StructType schema;
        private volatile Map<String, String> lastBatch = Collections.emptyMap();

        SinkTable(StructType schema) {
            this.schema = schema;
        }

        @Override
        public String name() {
            return SHORT_NAME;
        }

        @Override
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return Collections.unmodifiableSet(EnumSet.of(TableCapability.BATCH_WRITE, TableCapability.STREAMING_WRITE));
        }

        @Override
        public Map<String, String> metrics() {
            return lastBatch;
        }

        private void report(String sink, long batch, String results) {
            Map<String, String> m = new HashMap<>();
            m.put(METRIC_SINK, sink);
            m.put(METRIC_BATCH, Long.toString(batch));
            m.put(METRIC_RESULTS, results);
            lastBatch = Collections.unmodifiableMap(m);
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            SinkOptions options = new SinkOptions(info.options());
            StructType input = info.schema();
            return new Builder(options, input, (batch, results) -> report(options.name, batch, results));
        }
    }

    /** Update mode writes the updated rows as they are (Spark's Kafka sink does the same). */
    private static final class Builder implements SupportsStreamingUpdateAsAppend {
        private final SinkOptions options;
        private final StructType input;
        private final BiConsumer<Long, String> results;

        Builder(SinkOptions options, StructType input, BiConsumer<Long, String> results) {
            this.options = options;
            this.input = input;
            this.results = results;
        }

        @Override
        public Write build() {
            // A foreachBatch batch (batch.id set) comes laid out by the Python sink already.
            if (options.batchId < 0 && options.partitioning.equals("key")) {
                return new KeyedWrite(options, input, results);
            }
            return new PlainWrite(options, input, results);
        }
    }

    private static class PlainWrite implements Write {
        final SinkOptions options;
        final StructType input;
        final BiConsumer<Long, String> results;

        PlainWrite(SinkOptions options, StructType input, BiConsumer<Long, String> results) {
            this.options = options;
            this.input = input;
            this.results = results;
        }

        @Override
        public BatchWrite toBatch() {
            return new SinkBatchWrite(options, input);
        }

        @Override
        public StreamingWrite toStreaming() {
            return new SinkStreamingWrite(options, input, results);
        }
    }

    /** Each batch hashed on its key into num_tasks partitions by Spark (a clustered
     *  distribution: Spark's hash partitioning, as the Python sink's `repartition(n, key)`), so
     *  a row goes to the same task whichever form of the sink writes it. */
    private static final class KeyedWrite extends PlainWrite implements RequiresDistributionAndOrdering {
        KeyedWrite(SinkOptions options, StructType input, BiConsumer<Long, String> results) {
            super(options, input, results);
        }

        @Override
        public Distribution requiredDistribution() {
            return Distributions.clustered(new Expression[] {Expressions.column(Columns.layoutColumn(input))});
        }

        @Override
        public int requiredNumPartitions() {
            return options.numTasks;
        }

        @Override
        public SortOrder[] requiredOrdering() {
            return new SortOrder[0];
        }
    }
}
