package io.txnwatch.spark.sink;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;

/**
 * What every task of one batch's write needs, from the write's options (set by the Python
 * ExactlyOnceKafkaSink): small and serializable, as it travels to the executors. The names
 * it derives (transactional ids, the progress group) are the Python writer's, so both
 * writers fence each other's zombies and read each other's progress.
 */
final class SinkOptions implements Serializable {
    private static final long serialVersionUID = 1L;

    /** Option prefixes of extra Kafka client settings: the producer's, and both clients'. */
    static final String PRODUCER_PREFIX = "producer.";
    static final String CLIENT_PREFIX = "client.";

    final String name;
    final String bootstrapServers;
    final String topic;
    final String progressTopic;
    final int numTasks;
    final long batchId;            // -1 in a streaming write: each batch's is its epoch id
    final String partitioning;     // a streaming write's layout: "key" or "input"
    final int transactionTimeoutMs;
    final long commitTimeoutMs;
    final long idleCloseMs;        // an executor's clients idle this long are closed (TaskClients)
    final Map<String, String> producerConfig = new HashMap<>();
    final Map<String, String> clientConfig = new HashMap<>();

    SinkOptions(Map<String, String> options) {
        name = required(options, "name");
        bootstrapServers = required(options, "bootstrap.servers");
        topic = required(options, "topic");
        progressTopic = required(options, "progress.topic");
        numTasks = Integer.parseInt(required(options, "num.tasks"));
        batchId = Long.parseLong(options.getOrDefault("batch.id", "-1"));
        partitioning = options.getOrDefault("partitioning", "key");
        if (!partitioning.equals("key") && !partitioning.equals("input")) {
            throw new IllegalArgumentException("the txnwatch exactly-once writer's option 'partitioning' is 'key' or "
                + "'input', got '" + partitioning + "'");
        }
        transactionTimeoutMs = Integer.parseInt(required(options, "transaction.timeout.ms"));
        commitTimeoutMs = (long) (Double.parseDouble(options.getOrDefault("commit.timeout.seconds", "60")) * 1000);
        idleCloseMs = (long) (Double.parseDouble(options.getOrDefault("idle.close.seconds", "600")) * 1000);
        for (Map.Entry<String, String> e : options.entrySet()) {
            // Spark lower-cases option keys; Kafka's client settings are lower case.
            if (e.getKey().startsWith(PRODUCER_PREFIX)) {
                producerConfig.put(e.getKey().substring(PRODUCER_PREFIX.length()), e.getValue());
            } else if (e.getKey().startsWith(CLIENT_PREFIX)) {
                clientConfig.put(e.getKey().substring(CLIENT_PREFIX.length()), e.getValue());
            }
        }
    }

    /** The same options for one batch of a streaming write. */
    private SinkOptions(SinkOptions o, long batchId) {
        name = o.name;
        bootstrapServers = o.bootstrapServers;
        topic = o.topic;
        progressTopic = o.progressTopic;
        numTasks = o.numTasks;
        this.batchId = batchId;
        partitioning = o.partitioning;
        transactionTimeoutMs = o.transactionTimeoutMs;
        commitTimeoutMs = o.commitTimeoutMs;
        idleCloseMs = o.idleCloseMs;
        producerConfig.putAll(o.producerConfig);
        clientConfig.putAll(o.clientConfig);
    }

    SinkOptions forBatch(long id) {
        return new SinkOptions(this, id);
    }

    private static String required(Map<String, String> options, String key) {
        String v = options.get(key);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException("the txnwatch exactly-once writer needs the option '" + key
                + "': write through txnwatch's ExactlyOnceKafkaSink, which sets it");
        }
        return v;
    }

    String transactionalId(int task) {
        return "txnwatch." + name + "." + task;
    }

    String progressGroup() {
        return "txnwatch." + name;
    }

    /** The key that tells one sink's producers and consumers of a JVM from another's. */
    String clientsKey() {
        return bootstrapServers + "|" + name + "|" + progressTopic + "|" + topic + "|" + transactionTimeoutMs
            + "|" + new java.util.TreeMap<>(clientConfig) + "|" + new java.util.TreeMap<>(producerConfig);
    }
}
