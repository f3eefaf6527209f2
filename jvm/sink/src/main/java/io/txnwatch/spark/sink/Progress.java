package io.txnwatch.spark.sink;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * A task's progress, read from the broker exactly as the Python writer reads it
 * (txnwatch/spark_listener/sink/progress.py), so that either writer can take over from the
 * other: the progress group's committed offset in the task's progress partition names the
 * last committed marker (offset - 1); the begin markers after it are attempts that died,
 * and "abort" notes say how some of them ended. Markers are JSON objects with the Python
 * writer's fields.
 */
final class Progress {
    static final ObjectMapper JSON = new ObjectMapper();
    static final String APPLICATION_ERROR = "_APPLICATION";
    static final String FENCED = "PRODUCER_FENCED";

    /** A begin marker: the attempt that wrote it, its batch and layout. */
    static final class Marker {
        final long offset;
        final long batch;
        final int tasks;
        final String attempt;
        final double started;
        final Double timeoutMs;
        final List<Map<String, Object>> fenced;
        Map<String, Object> note;

        Marker(long offset, long batch, int tasks, String attempt, double started, Double timeoutMs,
               List<Map<String, Object>> fenced) {
            this.offset = offset;
            this.batch = batch;
            this.tasks = tasks;
            this.attempt = attempt;
            this.started = started;
            this.timeoutMs = timeoutMs;
            this.fenced = fenced;
        }
    }

    final long committedOffset;     // -1 when the task never committed
    final Marker marker;            // the last committed marker, null when none
    final List<Marker> dead;        // markers after it: attempts that died

    private Progress(long committedOffset, Marker marker, List<Marker> dead) {
        this.committedOffset = committedOffset;
        this.marker = marker;
        this.dead = dead;
    }

    /** What a kept producer knows of its id: its own last commit (or skip), with no attempt
     *  after it (see TaskWriter.start). */
    static Progress known(long committedOffset, Marker marker) {
        return new Progress(committedOffset, marker, Collections.emptyList());
    }

    /** Exact once no transaction of the task's id is open (after initTransactions). */
    static Progress read(KafkaConsumer<byte[], byte[]> consumer, SinkOptions o, int task) {
        TopicPartition tp = new TopicPartition(o.progressTopic, task);
        Set<TopicPartition> one = Collections.singleton(tp);
        Duration timeout = Duration.ofMillis(o.commitTimeoutMs);
        OffsetAndMetadata om = consumer.committed(one, timeout).get(tp);
        long c = om == null || om.offset() < 0 ? -1 : om.offset();
        long high = consumer.endOffsets(one, timeout).get(tp);
        long low = consumer.beginningOffsets(one, timeout).get(tp);
        long start = Math.max(c > 0 ? c - 1 : low, low);
        Marker marker = null;
        Map<String, Marker> dead = new LinkedHashMap<>();
        Map<String, Map<String, Object>> notes = new LinkedHashMap<>();
        if (start < high) {
            consumer.assign(one);
            try {
                consumer.seek(tp, start);
                long deadline = System.currentTimeMillis() + o.commitTimeoutMs;
                while (consumer.position(tp, timeout) < high) {
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("reading " + tp + " [" + start + ", " + high + ") took over "
                            + o.commitTimeoutMs + " ms");
                    }
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                        if (r.offset() >= high) {
                            continue;
                        }
                        Map<String, Object> v = decode(r.value());
                        if (v == null) {
                            continue;
                        }
                        if ("abort".equals(v.get("kind"))) {
                            notes.put(String.valueOf(v.get("attempt")), v);
                            continue;
                        }
                        Marker m = marker(r.offset(), v);
                        if (m == null) {
                            continue;
                        }
                        if (c > 0 && r.offset() == c - 1) {
                            marker = m;
                        } else if (r.offset() >= Math.max(c, 0)) {
                            dead.put(m.attempt, m);
                        }
                    }
                }
            } finally {
                consumer.assign(Collections.emptyList());
            }
        }
        if (c > 0 && marker == null) {
            throw new IllegalStateException("progress of " + o.transactionalId(task) + ": the committed marker at "
                + tp + "@" + (c - 1) + " is missing (retention or compaction removed it?); refusing to guess "
                + "which batch committed");
        }
        for (Marker m : dead.values()) {
            m.note = notes.get(m.attempt);
        }
        return new Progress(c, marker, new ArrayList<>(dead.values()));
    }

    Long batch() {
        return marker == null ? null : marker.batch;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> decode(byte[] value) {
        if (value == null) {
            return null;
        }
        try {
            Object v = JSON.readValue(value, Object.class);
            return v instanceof Map ? (Map<String, Object>) v : null;
        } catch (Exception e) {       // foreign records in the progress topic are ignored
            return null;
        }
    }

    @SuppressWarnings("unchecked")
    private static Marker marker(long offset, Map<String, Object> v) {
        try {
            Object timeout = v.get("timeout_ms");
            List<Map<String, Object>> fenced = new ArrayList<>();
            if (v.get("fenced") instanceof List) {
                for (Object e : (List<Object>) v.get("fenced")) {
                    if (e instanceof Map && ((Map<String, Object>) e).get("attempt") != null
                        && ((Map<String, Object>) e).get("started") instanceof Number
                        && ((Map<String, Object>) e).get("fenced_at") instanceof Number) {
                        fenced.add((Map<String, Object>) e);
                    }
                }
            }
            return new Marker(offset, ((Number) v.get("batch")).longValue(), ((Number) v.get("tasks")).intValue(),
                String.valueOf(v.get("attempt")), v.get("started") instanceof Number
                    ? ((Number) v.get("started")).doubleValue() : 0.0,
                timeout instanceof Number ? ((Number) timeout).doubleValue() : null, fenced);
        } catch (RuntimeException e) {
            return null;
        }
    }

    /** Records of the attempts after the committed marker, which ended without reporting
     *  themselves (the Python writer's dead_attempt_records, from markers alone): one with an
     *  abort note aborted itself; one another attempt's marker says it fenced ended at that
     *  fence; any other was aborted by a fence or the coordinator's timeout, at most its
     *  timeout after it began. */
    List<Map<String, Object>> deadAttemptRecords(SinkOptions o, int task, List<Map<String, Object>> own,
                                                 double now) {
        String tid = o.transactionalId(task);
        Map<String, Map<String, Object>> fences = new LinkedHashMap<>();
        for (Marker m : dead) {
            for (Map<String, Object> e : m.fenced) {
                fences.putIfAbsent(String.valueOf(e.get("attempt")), e);
            }
        }
        for (Map<String, Object> e : own) {
            fences.put(String.valueOf(e.get("attempt")), e);
        }
        List<Map<String, Object>> out = new ArrayList<>();
        Set<String> seen = new java.util.HashSet<>();
        for (Marker m : dead) {
            seen.add(m.attempt);
            double timeoutMs = m.timeoutMs != null ? m.timeoutMs : o.transactionTimeoutMs;
            if (m.note != null) {
                Object d = m.note.get("duration");
                Object err = m.note.get("error");
                out.add(record(tid, m.attempt, m.batch, d instanceof Number ? ((Number) d).doubleValue() : 0.0,
                    timeoutMs, err == null ? APPLICATION_ERROR : String.valueOf(err)));
            } else if (fences.containsKey(m.attempt)) {
                double fencedAt = ((Number) fences.get(m.attempt).get("fenced_at")).doubleValue();
                out.add(record(tid, m.attempt, m.batch, fencedAt - m.started, timeoutMs, FENCED));
            } else {
                out.add(record(tid, m.attempt, m.batch, Math.min(now - m.started, timeoutMs / 1000.0), timeoutMs,
                    FENCED));
            }
        }
        for (Map.Entry<String, Map<String, Object>> f : fences.entrySet()) {
            if (seen.contains(f.getKey())) {
                continue;
            }
            Map<String, Object> e = f.getValue();
            Object batch = e.get("batch");
            Object timeout = e.get("timeout_ms");
            out.add(record(tid, f.getKey(), batch instanceof Number ? ((Number) batch).longValue() : null,
                ((Number) e.get("fenced_at")).doubleValue() - ((Number) e.get("started")).doubleValue(),
                timeout instanceof Number ? ((Number) timeout).doubleValue() : o.transactionTimeoutMs, FENCED));
        }
        return out;
    }

    /** A transaction record in the `producer_transactions` shape (txnwatch.producer.make_record). */
    static Map<String, Object> record(String tid, String attempt, Long batch, double duration, double timeoutMs,
                                      String error) {
        Map<String, Object> r = transaction(tid, "aborted", duration, null, timeoutMs, error);
        r.put("attempt", attempt);
        r.put("batch", batch);
        return r;
    }

    static Map<String, Object> transaction(String tid, String outcome, double duration, Double commitSeconds,
                                           double timeoutMs, String error) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("transactional_id", tid);
        r.put("outcome", outcome);
        r.put("duration_seconds", Math.max(0.0, duration));
        r.put("commit_seconds", commitSeconds == null ? null : Math.max(0.0, commitSeconds));
        r.put("timeout_ms", timeoutMs);
        r.put("error", error);
        return r;
    }
}
