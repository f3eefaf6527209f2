package io.txnwatch.spark.sink;

import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import java.util.function.Supplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Kafka clients of an executor JVM, kept across batches: per transactional id, the
 * initialised producer its last task left idle (initTransactions costs a round trip to the
 * coordinator and fences; a producer kept costs neither), and a pool of progress consumers.
 * A producer is taken out while a task uses it, so two tasks of one JVM never share one: a
 * second attempt of the same task (a retry while a zombie still runs) makes its own, whose
 * init fences the other.
 *
 * The progress consumers and the admin clients (PriorTransaction's) are pooled per sink.
 * Clients left idle longer than the sink's idle.close.seconds are closed (a daemon thread
 * looks every second): a query that stopped, or a task id this executor no longer gets,
 * would otherwise hold a producer's sender thread, buffers and connections for the JVM's
 * life. The next batch of a closed producer's id pays an init, as after a restart.
 */
final class TaskClients {
    private TaskClients() {
    }

    /** An initialised producer and what it knows of its id since its init. */
    static final class TaskProducer {
        final KafkaProducer<byte[], byte[]> producer;
        long committedOffset = -2;          // the progress group's offset after its last commit or replay
        Progress.Marker lastMarker;          // the marker that offset names
        volatile long idleSince;             // System.nanoTime() when last given back
        volatile long idleLimitNanos;

        TaskProducer(KafkaProducer<byte[], byte[]> producer) {
            this.producer = producer;
        }
    }

    /** The rows a task held until its marker's acknowledgement (an aggregation's come all at
     *  once, after its input) leave in a burst, which 16 KiB batches (the client's default) turn
     *  into many requests, five in flight at most (7,500 rows flushed in 237 ms here, in 140 ms
     *  with 256 KiB batches).
     *  The client takes a whole batch.size from its 32 MiB buffer for each partition it
     *  writes, so a task writing to more than about 100 partitions waits for buffers; such
     *  a topic needs a smaller batch.size (producer_config). */
    static final int BATCH_SIZE = 256 * 1024;
    private static final String RETRY_BACKOFF_MAX = "retry.backoff.max.ms";

    private static final Map<String, TaskProducer> IDLE = new ConcurrentHashMap<>();
    private static final Pool<KafkaConsumer<byte[], byte[]>> CONSUMERS = new Pool<>(c -> c.close(Duration.ZERO));
    private static final Pool<Admin> ADMINS = new Pool<>(a -> a.close(Duration.ZERO));
    private static final AtomicLong ADMIN_SEQUENCE = new AtomicLong();
    private static final ScheduledExecutorService REAPER = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "txnwatch-sink-idle-clients");
        t.setDaemon(true);
        return t;
    });

    static {
        REAPER.scheduleWithFixedDelay(TaskClients::closeIdle, 1, 1, TimeUnit.SECONDS);
    }

    private static String key(SinkOptions o, int task) {
        return o.clientsKey() + "|" + task;
    }

    /** The idle producer of this task's id in this JVM, or null. */
    static TaskProducer take(SinkOptions o, int task) {
        return IDLE.remove(key(o, task));
    }

    /** Keep a producer whose transaction ended for the next task of its id. */
    static void give(SinkOptions o, int task, TaskProducer p) {
        p.idleLimitNanos = o.idleCloseMs * 1_000_000L;
        p.idleSince = System.nanoTime();
        TaskProducer before = IDLE.put(key(o, task), p);
        if (before != null && before != p) {
            before.producer.close(Duration.ZERO);
        }
    }

    /** A new producer for the task's id, initialised: its init fences any earlier one of the id
     *  and aborts the transaction that one left open. */
    static TaskProducer initialised(SinkOptions o, int task) {
        Properties p = new Properties();
        // Defaults, which the sink's client and producer settings override. No linger: a task's
        // marker leaves at once (its rows wait for its acknowledgement), and the rows are batched
        // by the sender as they accumulate, as Spark's Kafka sink's are.
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, String.valueOf(BATCH_SIZE));
        if (ProducerConfig.configNames().contains(RETRY_BACKOFF_MAX)) {
            // The init's InitProducerId waits out one retry backoff (100 ms by default) for its
            // connection to the coordinator, still opening when the coordinator is found: most
            // of a start's time (initTransactions 110-140 ms here, 25-45 ms from 10 ms). Clients
            // that back off exponentially (kafka-clients 3.7 on: retry.backoff.max.ms, 1 s)
            // start from 10 ms; older ones retry at a fixed interval, and keep theirs.
            p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "10");
        }
        p.putAll(o.clientConfig);
        p.putAll(o.producerConfig);
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, o.bootstrapServers);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, o.transactionalId(task));
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(o.transactionTimeoutMs));
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(o.commitTimeoutMs));
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
        try {
            producer.initTransactions();
        } catch (RuntimeException e) {
            producer.close(Duration.ZERO);
            throw e;
        }
        return new TaskProducer(producer);
    }

    /** A progress consumer of the sink's group (read_uncommitted: dead attempts' markers too). */
    static KafkaConsumer<byte[], byte[]> borrowConsumer(SinkOptions o) {
        return CONSUMERS.borrow(o.clientsKey(), () -> consumer(o));
    }

    private static KafkaConsumer<byte[], byte[]> consumer(SinkOptions o) {
        Properties p = new Properties();
        p.putAll(o.clientConfig);
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, o.bootstrapServers);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, o.progressGroup());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // Reads end at the partition's end; a long fetch wait would hold every progress read
        // when the last offset is a commit marker.
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "10");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    static void returnConsumer(SinkOptions o, KafkaConsumer<byte[], byte[]> c) {
        CONSUMERS.give(o.clientsKey(), c, o.idleCloseMs * 1_000_000L);
    }

    /** An admin client for the sink's DescribeTransactions and DescribeProducers (named after
     *  the sink unless its client settings name it). */
    static Admin borrowAdmin(SinkOptions o) {
        return ADMINS.borrow(o.clientsKey(), () -> {
            Properties p = new Properties();
            p.put(AdminClientConfig.CLIENT_ID_CONFIG, "txnwatch-sink-" + o.name + "-" + ADMIN_SEQUENCE.incrementAndGet());
            p.putAll(o.clientConfig);
            p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, o.bootstrapServers);
            return Admin.create(p);
        });
    }

    static void returnAdmin(SinkOptions o, Admin a) {
        ADMINS.give(o.clientsKey(), a, o.idleCloseMs * 1_000_000L);
    }

    /** Close the producers, and the consumer and admin pools, idle past their limit. A producer
     *  is closed only if it is still the one kept (a task may have taken it meanwhile). */
    static void closeIdle() {
        long now = System.nanoTime();
        for (Map.Entry<String, TaskProducer> e : IDLE.entrySet()) {
            TaskProducer p = e.getValue();
            if (now - p.idleSince > p.idleLimitNanos && IDLE.remove(e.getKey(), p)) {
                p.producer.close(Duration.ZERO);
            }
        }
        CONSUMERS.closeIdle(now);
        ADMINS.closeIdle(now);
    }

    /** Clients of one kind per sink, each lent to one caller at a time (so none is closed while
     *  in use), closed together once the sink's pool has had nothing returned for its idle limit. */
    static final class Pool<C> {
        private final Map<String, ConcurrentLinkedDeque<C>> idle = new ConcurrentHashMap<>();
        private final Map<String, long[]> used = new ConcurrentHashMap<>();   // last return, idle limit (ns)
        private final Consumer<C> close;

        Pool(Consumer<C> close) {
            this.close = close;
        }

        C borrow(String key, Supplier<C> make) {
            C c = idle.computeIfAbsent(key, k -> new ConcurrentLinkedDeque<>()).pollFirst();
            return c != null ? c : make.get();
        }

        void give(String key, C c, long idleLimitNanos) {
            idle.computeIfAbsent(key, k -> new ConcurrentLinkedDeque<>()).addFirst(c);
            used.put(key, new long[] {System.nanoTime(), idleLimitNanos});
        }

        void closeIdle(long now) {
            for (Map.Entry<String, long[]> e : used.entrySet()) {
                long[] last = e.getValue();
                if (now - last[0] > last[1] && used.remove(e.getKey(), last)) {
                    ConcurrentLinkedDeque<C> pool = idle.get(e.getKey());
                    for (C c = pool == null ? null : pool.pollFirst(); c != null; c = pool.pollFirst()) {
                        close.accept(c);
                    }
                }
            }
        }
    }
}
