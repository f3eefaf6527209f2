package io.txnwatch.spark.sink;

import java.util.Collections;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * `df.write.format("txnwatch-kafka-eos").mode("append").options(...).save()`: one batch of
 * txnwatch's ExactlyOnceKafkaSink written from Spark's JVM, partition i by the transactional
 * producer `txnwatch.<name>.<i>` (TaskWriter). A DataSource V2 write rather than a JVM object
 * driven over py4j, so that it runs the same from a classic session and from Spark Connect
 * (whose clients and foreachBatch workers have no py4j).
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

    private static final class SinkTable implements Table, SupportsWrite {
        private final StructType schema;

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
            return Collections.unmodifiableSet(EnumSet.of(TableCapability.BATCH_WRITE));
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            SinkOptions options = new SinkOptions(info.options());
            StructType input = info.schema();
            return new WriteBuilder() {
                @Override
                public Write build() {
                    return new Write() {
                        @Override
                        public BatchWrite toBatch() {
                            return new SinkBatchWrite(options, input);
                        }
                    };
                }
            };
        }
    }
}
