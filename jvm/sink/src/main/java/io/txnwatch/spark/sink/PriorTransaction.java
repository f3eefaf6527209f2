package io.txnwatch.spark.sink;

import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TransactionalIdNotFoundException;
import org.apache.kafka.common.errors.UnsupportedVersionException;

/**
 * The last transaction of a task's id as the coordinator describes it (KIP-664
 * DescribeTransactions, and DescribeProducers of the task's progress partition) just before
 * a new producer's initTransactions: still open (the init fences it) or aborted before. The
 * Python writer's PriorTransaction and fenced_by_init (progress.py), so that a zombie whose
 * marker never reached the broker is reported by either writer.
 */
final class PriorTransaction {
    private static final Set<TransactionState> ABORTED = EnumSet.of(TransactionState.PREPARE_ABORT,
        TransactionState.COMPLETE_ABORT, TransactionState.PREPARE_EPOCH_FENCE);
    private static final Set<String> WITHOUT_KIP664 = ConcurrentHashMap.newKeySet();

    final boolean open;
    final long producerId;
    final int producerEpoch;
    final long startMs;
    final long timeoutMs;
    final Long markerOffset;     // an open one's first offset in the progress partition
    final boolean hasMarker;     // whether it wrote to the progress partition at all

    private PriorTransaction(boolean open, long producerId, int producerEpoch, long startMs, long timeoutMs,
                             Long markerOffset, boolean hasMarker) {
        this.open = open;
        this.producerId = producerId;
        this.producerEpoch = producerEpoch;
        this.startMs = startMs;
        this.timeoutMs = timeoutMs;
        this.markerOffset = markerOffset;
        this.hasMarker = hasMarker;
    }

    /** A stable name for a transaction without a marker (none carries its attempt id). */
    String attempt() {
        return "txn-" + producerId + "." + producerEpoch + "@" + startMs;
    }

    /** The id's last transaction when it needs reporting, else null (committed, none, or the
     *  broker cannot say: then dead attempts come from markers alone). */
    static PriorTransaction describe(SinkOptions o, int task) {
        if (WITHOUT_KIP664.contains(o.clientsKey())) {
            return null;
        }
        String tid = o.transactionalId(task);
        TopicPartition progress = new TopicPartition(o.progressTopic, task);
        Admin admin = null;
        try {
            admin = TaskClients.borrowAdmin(o);
            TransactionDescription d = admin.describeTransactions(Collections.singleton(tid)).description(tid)
                .get(10, TimeUnit.SECONDS);
            boolean open = d.state() == TransactionState.ONGOING;
            if (!open && !ABORTED.contains(d.state())) {
                return null;
            }
            List<ProducerState> mine = new ArrayList<>();
            for (ProducerState p : admin.describeProducers(Collections.singleton(progress)).partitionResult(progress)
                    .get(10, TimeUnit.SECONDS).activeProducers()) {
                if (p.producerId() == d.producerId()) {
                    mine.add(p);
                }
            }
            long start = d.transactionStartTimeMs().orElse(0L);
            if (open) {
                Long offset = null;
                for (ProducerState p : mine) {
                    if (p.currentTransactionStartOffset().isPresent() && p.currentTransactionStartOffset().getAsLong() >= 0) {
                        offset = p.currentTransactionStartOffset().getAsLong();
                        break;
                    }
                }
                return new PriorTransaction(true, d.producerId(), d.producerEpoch(), start, d.transactionTimeoutMs(),
                    offset, offset != null);
            }
            // Aborted: while its markers are written the coordinator lists the partitions still
            // waiting; after, the abort's control record in the progress partition carries the
            // transaction's final epoch, so an entry at that epoch means it wrote there.
            boolean wrote = d.topicPartitions().contains(progress);
            for (ProducerState p : mine) {
                wrote |= p.producerEpoch() == d.producerEpoch();
            }
            return new PriorTransaction(false, d.producerId(), d.producerEpoch(), start, d.transactionTimeoutMs(),
                null, wrote);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof UnsupportedVersionException) {
                WITHOUT_KIP664.add(o.clientsKey());
            } else if (!(e.getCause() instanceof TransactionalIdNotFoundException)) {
                org.slf4j.LoggerFactory.getLogger(PriorTransaction.class).debug("describing {}", tid, e);
            }
            return null;
        } catch (Exception e) {       // no answer: markers only, this time
            org.slf4j.LoggerFactory.getLogger(PriorTransaction.class).debug("describing {}", tid, e);
            return null;
        } finally {
            if (admin != null) {
                TaskClients.returnAdmin(o, admin);
            }
        }
    }

    /** What this attempt's init fenced, as fence entries for its marker and records. */
    static List<Map<String, Object>> fencedByInit(Progress prog, PriorTransaction prior, double fencedAt) {
        if (prior == null) {
            return Collections.emptyList();
        }
        if (!prior.open) {
            if (prior.hasMarker) {
                return Collections.emptyList();
            }
            double end = Math.min(fencedAt, (prior.startMs + prior.timeoutMs) / 1000.0);
            return Collections.singletonList(entry(prior.attempt(), null, prior.startMs / 1000.0, end,
                (double) prior.timeoutMs));
        }
        if (prior.markerOffset != null) {
            for (Progress.Marker m : prog.dead) {
                if (m.offset == prior.markerOffset) {
                    return Collections.singletonList(entry(m.attempt, m.batch, m.started, fencedAt, m.timeoutMs));
                }
            }
            if (prior.markerOffset < prog.committedOffset) {
                return Collections.emptyList();
            }
        }
        return Collections.singletonList(entry(prior.attempt(), null, prior.startMs / 1000.0, fencedAt,
            (double) prior.timeoutMs));
    }

    private static Map<String, Object> entry(String attempt, Long batch, double started, double fencedAt,
                                             Double timeoutMs) {
        Map<String, Object> e = new java.util.LinkedHashMap<>();
        e.put("attempt", attempt);
        e.put("batch", batch);
        e.put("started", started);
        e.put("fenced_at", fencedAt);
        e.put("timeout_ms", timeoutMs);
        return e;
    }
}
