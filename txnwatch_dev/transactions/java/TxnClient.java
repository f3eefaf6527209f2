/*
 * A transactional producer on the Java client of the release under test, driven line by
 * line: the scenario's TV2 client (kafka-clients 4.x speaks transaction version 2 where the
 * cluster has it finalized; librdkafka and kafka-python are TV0 clients).
 *
 * Args: --bootstrap H:P --transactional-id ID [--transaction-timeout-ms 60000 (0: the client's own)]
 *       [--property key=value]... (more producer settings, e.g. transaction.two.phase.commit.enable=true)
 * Reads one command per line on stdin and answers one line on stdout each:
 *   init                        -> "ok init"
 *   begin                       -> "ok begin"
 *   send <topic> <partition> <value>  -> "ok send <offset>" (waits for the write)
 *   commit | abort              -> "ok commit" | "ok abort"
 *   close                       -> "ok close" (the process then exits)
 * A failed command answers "error <command> <exception class> <message>"; a fenced producer
 * (ProducerFencedException, InvalidProducerEpochException) stays usable only for close.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TxnClient {
    private static Map<String, String> parse(String[] args, Properties extra) {
        Map<String, String> out = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            String key = args[i].replaceFirst("^--", "");
            if (key.equals("property")) {
                String[] kv = args[i + 1].split("=", 2);
                extra.put(kv[0], kv[1]);
            } else {
                out.put(key, args[i + 1]);
            }
        }
        return out;
    }

    public static void main(String[] argv) throws Exception {
        Properties extra = new Properties();
        Map<String, String> a = parse(argv, extra);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, a.get("transactional-id"));
        String timeout = a.getOrDefault("transaction-timeout-ms", "60000");
        if (!timeout.equals("0")) {
            p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, timeout);
        }
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.putAll(extra);
        KafkaProducer<String, String> producer =
            new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        System.out.println("ready");
        System.out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.trim().split(" ", 4);
            String cmd = f[0];
            if (cmd.isEmpty()) {
                continue;
            }
            try {
                switch (cmd) {
                    case "init":
                        producer.initTransactions();
                        answer("ok init");
                        break;
                    case "begin":
                        producer.beginTransaction();
                        answer("ok begin");
                        break;
                    case "send":
                        RecordMetadata md = producer.send(new ProducerRecord<>(f[1], Integer.parseInt(f[2]), null,
                                                                               f.length > 3 ? f[3] : "")).get();
                        answer("ok send " + md.offset());
                        break;
                    case "commit":
                        producer.commitTransaction();
                        answer("ok commit");
                        break;
                    case "abort":
                        producer.abortTransaction();
                        answer("ok abort");
                        break;
                    case "close":
                        producer.close(Duration.ofSeconds(5));
                        answer("ok close");
                        return;
                    default:
                        answer("error " + cmd + " IllegalArgumentException unknown command");
                }
            } catch (Exception e) {
                Throwable t = e.getCause() != null && e instanceof java.util.concurrent.ExecutionException
                    ? e.getCause() : e;
                answer("error " + cmd + " " + t.getClass().getSimpleName() + " "
                       + String.valueOf(t.getMessage()).replace('\n', ' '));
            }
        }
        producer.close(Duration.ofSeconds(5));
    }

    private static void answer(String s) {
        System.out.println(s);
        System.out.flush();
    }
}
