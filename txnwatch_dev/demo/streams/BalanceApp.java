/*
 * The demo's Kafka Streams application: per-account balances with exactly_once_v2 and a
 * transactional outbox.
 *
 * Payments (JSON {"account", "amount", "ts"}, keyed by account) are summed per account in a
 * persistent RocksDB store (rocksdbjni comes with kafka-streams from Maven Central), kept in
 * --state-dir: an instance restarted on the same directory keeps its process id (so its
 * transactional ids) and its local state. In the same transaction as the store's
 * changelog write and the offset commit, each update goes to the balances topic and, when a
 * deposit leaves a balance at or over the threshold, an alert goes to the outbox topic:
 * {"alert_id": "<account>:<update number>", ...}. The id is a function of the state, so a
 * replay after an aborted transaction produces the same id and a downstream sink can apply
 * each alert once (INSERT OR IGNORE by alert_id).
 *
 * A payment carrying "hold_ms" and "hold_in" (the run id this JVM prints when it runs) stands
 * for a slow call inside the processor: the stream thread waits that long after writing the
 * update, with its transaction open (the demo's fault injector uses it to kill the app
 * mid-transaction). Other runs ignore the hold.
 *
 * Args: --bootstrap H:P --application-id ID --input T --balances T --alerts T --state-dir DIR
 *       [--threshold 600] [--transaction-timeout-ms 10000]
 * Prints one line per event on stdout: "running thread=<name> run=<id> producers=[...]", "holding <ms>",
 * "state <NEW> from <OLD>", "restore <store> <partition> from <offset> to <offset>" and
 * "restored <store> <partition> records=<n>" (changelog restores).
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.Stores;

public final class BalanceApp {
    private static final ObjectMapper JSON = new ObjectMapper();
    /** This run of the JVM (a hold names it). */
    static final String RUN = java.util.UUID.randomUUID().toString();

    /** An account's state: balance, number of updates, whether the last update raised a
     *  high-balance alert, and the last payment's hold (not part of the balance, only of the update). */
    static final class Balance {
        final double balance;
        final long updates;
        final boolean alert;
        final long holdMs;

        Balance(double balance, long updates, boolean alert, long holdMs) {
            this.balance = balance;
            this.updates = updates;
            this.alert = alert;
            this.holdMs = holdMs;
        }

        static Balance decode(String s) {
            if (s == null || s.isEmpty()) {
                return new Balance(0, 0, false, 0);
            }
            String[] f = s.split(";");
            return new Balance(Double.parseDouble(f[0]), Long.parseLong(f[1]), "1".equals(f[2]),
                               Long.parseLong(f[3]));
        }

        String encode() {
            return balance + ";" + updates + ";" + (alert ? "1" : "0") + ";" + holdMs;
        }

        Balance apply(double amount, long holdMs, double threshold) {
            double next = Math.round((balance + amount) * 100) / 100.0;
            return new Balance(next, updates + 1, amount > 0 && next >= threshold, holdMs);
        }
    }

    static String aggregate(String payment, String state, double threshold) {
        Balance b = Balance.decode(state);
        try {
            JsonNode p = JSON.readTree(payment);
            // a hold is meant for one run of the JVM only: a restarted instance (the same process
            // id and thread names when it keeps its state directory) that reprocesses the payment
            // after the abort does not hold again
            long holdMs = RUN.equals(p.path("hold_in").asText("")) ? p.path("hold_ms").asLong(0) : 0;
            return b.apply(p.path("amount").asDouble(0), holdMs, threshold).encode();
        } catch (Exception e) {   // a malformed payment changes nothing
            return new Balance(b.balance, b.updates, false, 0).encode();
        }
    }

    static String balanceJson(String account, Balance b) {
        ObjectNode n = JSON.createObjectNode();
        n.put("account", account).put("balance", b.balance).put("updates", b.updates);
        return n.toString();
    }

    static String alertJson(String account, Balance b, double threshold) {
        ObjectNode n = JSON.createObjectNode();
        n.put("alert_id", account + ":" + b.updates).put("account", account).put("balance", b.balance)
         .put("threshold", threshold).put("kind", "high_balance");
        return n.toString();
    }

    private static void hold(long ms) {
        if (ms <= 0) {
            return;
        }
        System.out.println("holding " + ms);
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static Map<String, String> parseArgs(String[] args) {
        Map<String, String> out = new HashMap<>();
        out.put("threshold", "600");
        out.put("transaction-timeout-ms", "10000");
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value pairs, got " + args[i]);
            }
            out.put(args[i].substring(2), args[i + 1]);
        }
        String[] required = {"bootstrap", "application-id", "input", "balances", "alerts", "state-dir"};
        for (String k : required) {
            if (!out.containsKey(k)) {
                throw new IllegalArgumentException("missing --" + k);
            }
        }
        return out;
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = parseArgs(argv);
        double threshold = Double.parseDouble(a.get("threshold"));
        Serde<String> s = Serdes.String();

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.get("application-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.STATE_DIR_CONFIG, a.get("state-dir"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put("statestore.cache.max.bytes", 0);   // every update goes out at once
        // KIP-892 (Kafka Streams 4.4): the RocksDB store commits with the changelog transaction
        // and keeps its changelog offsets, so an instance killed under EOS resumes from its local
        // state instead of wiping it and restoring the whole changelog. (Older releases log
        // this setting as unknown and wipe: the restore lines say how much they restored.)
        p.put("enable.transactional.statestores", "true");
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        // Must stay at or below the broker's transaction.max.timeout.ms (the demo broker's is short).
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG),
              Integer.parseInt(a.get("transaction-timeout-ms")));
        // A restarted instance is a new member: the dead one leaves the group within seconds.
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1500);

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> updates = builder.stream(a.get("input"), Consumed.with(s, s))
            .filter((account, payment) -> account != null && payment != null)
            .groupByKey()
            .aggregate(() -> "", (account, payment, state) -> aggregate(payment, state, threshold),
                       Materialized.<String, String>as(Stores.persistentKeyValueStore("balances"))
                           .withKeySerde(s).withValueSerde(s).withCachingDisabled())
            .toStream();
        updates.mapValues((account, state) -> balanceJson(account, Balance.decode(state)))
            .to(a.get("balances"), Produced.with(s, s));
        updates.filter((account, state) -> Balance.decode(state).alert)
            .mapValues((account, state) -> alertJson(account, Balance.decode(state), threshold))
            .to(a.get("alerts"), Produced.with(s, s));
        // after the writes above, so the transaction holds them while it waits
        updates.foreach((account, state) -> hold(Balance.decode(state).holdMs));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        CountDownLatch done = new CountDownLatch(1);
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("thread error " + e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
                System.out.println("restore " + store + " " + tp + " from " + start + " to " + end);
            }

            @Override
            public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long records) {
            }

            @Override
            public void onRestoreEnd(TopicPartition tp, String store, long records) {
                System.out.println("restored " + store + " " + tp + " records=" + records);
            }
        });
        streams.setStateListener((now, old) -> {
            System.out.println("state " + now + " from " + old);
            if (now == KafkaStreams.State.RUNNING) {
                for (ThreadMetadata t : streams.metadataForLocalThreads()) {
                    // default client.id: <application.id>-<process uuid>; threads: <client.id>-StreamThread-N
                    System.out.println("running thread=" + t.threadName() + " run=" + RUN
                                       + " producers=" + t.producerClientIds());
                }
            }
            if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
                done.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(10));
            done.countDown();
        }));
        streams.start();
        done.await();
    }
}
