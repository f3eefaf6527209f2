package io.txnwatch.spark.sink;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.FutureTask;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.protocol.Errors;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Output task i of a batch: its rows, in one transaction of the producer
 * {@code txnwatch.<name>.<i>}, with the batch's progress, as the Python writer does
 * (executor.py): a begin marker in partition i of the progress topic, then the rows, each
 * with the header {@code txnwatch.txn} = the attempt id, and the progress group's offset
 * past the marker (sendOffsetsToTransaction, beside the rows once the marker is acknowledged),
 * then the commit, in DataWriter.commit.
 * A batch whose marker the group already names (a replay) is skipped: its rows are
 * dropped. A failed attempt leaves an abort note in its transaction and aborts it; one that
 * dies unannounced is aborted by the next attempt's init (or the coordinator's timeout),
 * and reported by the next attempt that reads its marker.
 *
 * A task without rows begins no transaction, as in the Python writer; the producer its id
 * got when the task started (prepare) is kept for the id's next task.
 */
final class TaskWriter implements DataWriter<InternalRow> {
    private static final Logger LOG = LoggerFactory.getLogger(TaskWriter.class);
    static final String TXN_HEADER = "txnwatch.txn";

    private final SinkOptions o;
    private final int task;
    private final int keyColumn;
    private final boolean keyIsString;
    private final int valueColumn;
    private final boolean valueIsString;

    private boolean started;
    private boolean replayed;
    private long t0;
    private TaskClients.TaskProducer producer;
    private boolean inTransaction;
    private long began;
    private double startedWall;
    private String attempt = "";
    private Future<RecordMetadata> markerSent;
    private List<Header> headers;
    private List<Map<String, Object>> records = new ArrayList<>();
    private long rows;
    private String error;
    // Rows held (not sent) until the transaction is ready for them: a kept producer's until its
    // marker is acknowledged (the marker's round trip overlaps the rows' computation, and a fence
    // it finds still finds nothing of the batch written); a new producer's until its start
    // (describe, init, progress: about 200 ms, on a thread of its own from the task's start) is
    // done and its marker acknowledged. Bounded: past MAX_HELD_BYTES the task waits.
    private List<byte[][]> held;
    private long heldBytes;
    private TaskClients.TaskProducer kept;  // the id's producer kept in this executor, until the first row
    private FutureTask<Fresh> starting;     // a new producer's start, while it runs (startAfresh)
    private boolean verifyMarker;           // the marker is a kept producer's: a fence refusing it is not an error
    static final long MAX_HELD_BYTES = 8L << 20;
    private Future<?> progressSent;         // the progress group's offset, into the transaction (sendProgress)
    /** Runs sendProgress's blocking call beside the tasks; daemon threads, reused across batches. */
    private static final ExecutorService BESIDE = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "txnwatch-sink-progress");
        t.setDaemon(true);
        return t;
    });

    TaskWriter(SinkOptions o, int task, int keyColumn, boolean keyIsString, int valueColumn, boolean valueIsString) {
        this.o = o;
        this.task = task;
        this.keyColumn = keyColumn;
        this.keyIsString = keyIsString;
        this.valueColumn = valueColumn;
        this.valueIsString = valueIsString;
    }

    @Override
    public void write(InternalRow row) {
        if (!started) {
            start();
        }
        if (held == null && replayed) {
            return;
        }
        byte[] key = keyColumn < 0 ? null : bytes(row, keyColumn, keyIsString);
        byte[] value = bytes(row, valueColumn, valueIsString);
        if (held == null) {
            send(key, value);
            return;
        }
        held.add(new byte[][] {key, value});
        heldBytes += (key == null ? 0 : key.length) + (value == null ? 0 : value.length);
        boolean full = heldBytes >= MAX_HELD_BYTES;
        if (starting != null) {
            if (starting.isDone() || full) {
                beginFresh();
            }
        } else if (markerSent.isDone() || full) {
            settle();
        }
    }

    private void send(byte[] key, byte[] value) {
        try {
            producer.producer.send(new ProducerRecord<>(o.topic, null, key, value, headers));
        } catch (RuntimeException e) {
            error = errorName(e);
            throw e;
        }
        rows++;
    }

    private static byte[] bytes(InternalRow row, int i, boolean isString) {
        if (row.isNullAt(i)) {
            return null;
        }
        return isString ? row.getUTF8String(i).getBytes() : row.getBinary(i);
    }

    /** When Spark makes the task, before its first row: the id's producer kept in this
     *  executor, or else a new one started on a thread of its own (startAfresh) while the task
     *  computes its rows. A task whose rows come late (an aggregation's, after all its input)
     *  finds its producer ready; one that gets no rows keeps it for the id's next task. */
    TaskWriter prepare() {
        kept = TaskClients.take(o, task);
        if (kept == null) {
            startBeside();
        }
        return this;
    }

    /** At the first row: with a kept producer, the skip (the batch committed already) or the
     *  transaction begun with its marker; the rows are held until the marker is acknowledged,
     *  or until the new producer's start is done and its marker acknowledged. */
    private void start() {
        started = true;
        t0 = System.nanoTime();
        held = new ArrayList<>();
        TaskClients.TaskProducer p = kept;
        kept = null;
        if (p == null) {
            return;          // started beside the task (prepare)
        }
        // A kept producer's own last commit (or skip) is the id's progress: another producer of
        // the id could only have committed since after an init, which fenced this one, and the
        // marker's send finds that out before any row is sent (the rows are held until its
        // acknowledgement: settle). Its progress is then read afresh after a new init. So a
        // kept producer reads nothing.
        if (begin(p, Progress.known(p.committedOffset, p.lastMarker), Collections.emptyList(), true)) {
            verifyMarker = true;
            if (replayed) {
                held = null;
            }
            return;
        }
        p.producer.close(Duration.ZERO);
        records.clear();
        startBeside();
    }

    /** A new producer's start (startAfresh) on a thread of its own, which the task thread joins
     *  before it reads anything the start made; a new thread inherits the task's context class
     *  loader, which the Kafka clients load their classes from. */
    private void startBeside() {
        starting = new FutureTask<>(this::startAfresh);
        Thread t = new Thread(starting, "txnwatch-sink-start-" + o.transactionalId(task));
        t.setDaemon(true);
        t.start();
    }

    /** The new producer, once started, on the task's thread: the skip, or its transaction
     *  begun and its marker sent (its rows still held, until the marker's acknowledgement). */
    private void beginFresh() {
        begin(joinStart());
    }

    /** A new producer's skip, or its transaction begun; a fence refusing its marker is an error. */
    private void begin(Fresh f) {
        verifyMarker = false;
        begin(f.producer, f.progress, f.fenced, false);
        if (replayed) {
            held = null;
            heldBytes = 0;
        }
    }

    /** Wait for the new producer's start, on the task's thread; its failure is the task's. An
     *  interrupt leaves it to settleBeside. */
    private Fresh joinStart() {
        Fresh f;
        try {
            f = starting.get();
        } catch (ExecutionException e) {
            starting = null;
            Throwable cause = e.getCause();
            throw cause instanceof RuntimeException ? (RuntimeException) cause : new IllegalStateException(cause);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while " + o.transactionalId(task) + " started", e);
        }
        starting = null;
        return f;
    }

    /** A start or a progress send still running when the task ends otherwise (Spark's abort or
     *  close, an interrupted task) is waited for, interrupts or not (each is bounded by its own
     *  timeouts), so that what it made (a producer, a transaction) is aborted and closed, not
     *  left behind, and no abort races a request of the transaction still in flight. */
    private void settleBeside() {
        Fresh unused = awaitQuietly(starting);
        starting = null;
        if (unused != null) {           // started, and the task ended before it began
            unused.producer.producer.close(Duration.ZERO);
        }
        awaitQuietly(progressSent);
        progressSent = null;
    }

    private static <T> T awaitQuietly(Future<T> f) {
        T result = null;
        boolean interrupted = false;
        while (f != null) {
            try {
                result = f.get();
                f = null;
            } catch (InterruptedException e) {
                interrupted = true;
            } catch (ExecutionException e) {
                f = null;            // the task already failed; what was left is cleaned up after
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
        return result;
    }

    /** A new producer, its progress read after its init, and the transactions its init fenced. */
    private static final class Fresh {
        final TaskClients.TaskProducer producer;
        final Progress progress;
        final List<Map<String, Object>> fenced;

        Fresh(TaskClients.TaskProducer producer, Progress progress, List<Map<String, Object>> fenced) {
            this.producer = producer;
            this.progress = progress;
            this.fenced = fenced;
        }
    }

    /** A new producer for the id (its init fences every other), the progress read after it, and
     *  the transactions the init fenced. */
    private Fresh startAfresh() {
        KafkaConsumer<byte[], byte[]> consumer = TaskClients.borrowConsumer(o);
        try {
            PriorTransaction prior = PriorTransaction.describe(o, task);
            TaskClients.TaskProducer p = TaskClients.initialised(o, task);
            double fencedAt = System.currentTimeMillis() / 1000.0;
            try {
                Progress prog = Progress.read(consumer, o, task);
                return new Fresh(p, prog, PriorTransaction.fencedByInit(prog, prior, fencedAt));
            } catch (RuntimeException e) {
                p.producer.close(Duration.ZERO);
                throw e;
            }
        } finally {
            TaskClients.returnConsumer(o, consumer);
        }
    }

    /** The held rows sent once the kept producer's marker is acknowledged; if it was refused
     *  because another producer of the id was initialised since (nothing of the batch was
     *  written), the batch starts afresh with a new init, and the held rows follow its marker,
     *  or are dropped if the progress read after the init says the batch is done. */
    private void settle() {
        List<byte[][]> rowsHeld = held;
        if (starting != null) {
            beginFresh();
        }
        held = null;
        heldBytes = 0;
        if (!replayed && !awaitMarker(verifyMarker)) {
            records.clear();
            begin(startAfresh());            // on the task's thread: its rows are held already
            if (!replayed) {
                awaitMarker(false);
            }
        }
        if (replayed) {
            return;
        }
        sendProgress();
        for (byte[][] r : rowsHeld) {
            send(r[0], r[1]);
        }
    }

    /** The progress group's offset past the acknowledged marker, into the transaction, on a
     *  thread beside the task: sendOffsetsToTransaction blocks for its round trips
     *  (AddOffsetsToTxn and TxnOffsetCommit), while which the client's sender sends no rows.
     *  Sent at the task's end, after the rows, they added to every commit; sent here, they
     *  overlap the computation of the rows, which the client buffers meanwhile. The order
     *  within the transaction does not matter: both land at its commit, or neither. */
    private void sendProgress() {
        KafkaProducer<byte[], byte[]> p = producer.producer;
        Map<TopicPartition, OffsetAndMetadata> offset = Collections.singletonMap(
            new TopicPartition(o.progressTopic, task), new OffsetAndMetadata(markerOffset() + 1));
        ConsumerGroupMetadata group = new ConsumerGroupMetadata(o.progressGroup());
        progressSent = BESIDE.submit(() -> p.sendOffsetsToTransaction(offset, group));
    }

    /** The marker's offset, once acknowledged (awaitMarker). */
    private long markerOffset() {
        try {
            return markerSent.get().offset();
        } catch (ExecutionException | InterruptedException e) {
            throw new IllegalStateException("the marker of " + o.transactionalId(task) + " was not acknowledged", e);
        }
    }

    /** Wait for the marker's acknowledgement; false when `verify` (a kept producer) and it was
     *  refused by a fence (the producer is closed then), else its error is the task's. */
    private boolean awaitMarker(boolean verify) {
        try {
            markerSent.get(o.commitTimeoutMs, java.util.concurrent.TimeUnit.MILLISECONDS);
            return true;
        } catch (Exception e) {
            Throwable cause = e instanceof java.util.concurrent.ExecutionException ? e.getCause() : e;
            error = errorName(cause);
            if (verify && fenced(error)) {
                producer.producer.close(Duration.ZERO);
                producer = null;
                inTransaction = false;
                error = null;
                return false;
            }
            throw cause instanceof RuntimeException ? (RuntimeException) cause : new IllegalStateException(cause);
        }
    }

    private static boolean fenced(String error) {
        return "PRODUCER_FENCED".equals(error) || "INVALID_PRODUCER_EPOCH".equals(error);
    }

    /** Skip the batch, or begin its transaction and send its marker (acknowledged later:
     *  awaitMarker); false when `verify` (a kept producer) and the send was refused at once by a
     *  fence (this producer is done then). */
    private boolean begin(TaskClients.TaskProducer p, Progress prog, List<Map<String, Object>> own,
                          boolean verify) {
        records.addAll(prog.deadAttemptRecords(o, task, own, System.currentTimeMillis() / 1000.0));
        Long done = prog.batch();
        if (done != null && done >= o.batchId) {
            p.committedOffset = prog.committedOffset;
            p.lastMarker = prog.marker;
            if (prog.marker.tasks != o.numTasks) {
                TaskClients.give(o, task, p);
                throw new IllegalStateException("batch " + o.batchId + " was already written by task " + task
                    + " with num_tasks=" + prog.marker.tasks + "; replaying it with num_tasks=" + o.numTasks
                    + " would write rows twice or lose them");
            }
            TaskClients.give(o, task, p);
            replayed = true;
            return true;
        }
        producer = p;
        attempt = UUID.randomUUID().toString().replace("-", "");
        Map<String, Object> marker = new LinkedHashMap<>();
        startedWall = System.currentTimeMillis() / 1000.0;
        marker.put("kind", "begin");
        marker.put("sink", o.name);
        marker.put("task", task);
        marker.put("batch", o.batchId);
        marker.put("tasks", o.numTasks);
        marker.put("attempt", attempt);
        marker.put("started", startedWall);
        marker.put("timeout_ms", o.transactionTimeoutMs);
        marker.put("prev", prog.marker != null ? prog.marker.offset : -1);
        if (!own.isEmpty()) {
            marker.put("fenced", own);    // so the fence is reported even if this attempt dies too
        }
        headers = Collections.singletonList(new RecordHeader(TXN_HEADER, attempt.getBytes(StandardCharsets.UTF_8)));
        try {
            p.producer.beginTransaction();
            began = System.nanoTime();
            inTransaction = true;
            // The marker is on the broker before any row is sent (awaitMarker): a transaction with
            // rows always has its marker (the Java client drops what it has not sent yet when a send
            // error aborts the transaction), so the attempt after it can report it; and a kept
            // producer fenced since its init is found out there, before the rows. The producers
            // linger 0 ms (TaskClients), so it leaves at once.
            markerSent = p.producer.send(new ProducerRecord<>(o.progressTopic, task,
                o.transactionalId(task).getBytes(StandardCharsets.UTF_8), Progress.JSON.writeValueAsBytes(marker)));
        } catch (Exception e) {
            error = errorName(e);
            if (verify && fenced(error)) {
                producer = null;
                inTransaction = false;
                error = null;
                return false;
            }
            throw e instanceof RuntimeException ? (RuntimeException) e : new IllegalStateException(e);
        }
        return true;
    }

    @Override
    public WriterCommitMessage commit() {
        if (!started) {
            return keepForNextTask();
        }
        if (held != null) {
            settle();
        }
        if (replayed) {
            return new TaskResult(task, "replayed", 0, json(records), "", seconds(t0));
        }
        long markerOffset;
        double commitSeconds;
        try {
            producer.producer.flush();
            markerOffset = markerOffset();
            progressSent.get();
            progressSent = null;
            long c0 = System.nanoTime();
            producer.producer.commitTransaction();
            commitSeconds = seconds(c0);
        } catch (Exception e) {
            Throwable cause = e instanceof java.util.concurrent.ExecutionException ? e.getCause() : e;
            error = errorName(cause);
            throw cause instanceof RuntimeException ? (RuntimeException) cause
                : new IllegalStateException("the progress marker of " + o.transactionalId(task)
                    + " was not delivered", cause);
        }
        inTransaction = false;
        Map<String, Object> rec = Progress.transaction(o.transactionalId(task), "committed", seconds(began),
            commitSeconds, o.transactionTimeoutMs, null);
        rec.put("attempt", attempt);
        rec.put("batch", o.batchId);
        records.add(rec);
        producer.committedOffset = markerOffset + 1;
        producer.lastMarker = new Progress.Marker(markerOffset, o.batchId, o.numTasks, attempt, startedWall,
            (double) o.transactionTimeoutMs, Collections.emptyList());
        TaskClients.give(o, task, producer);
        producer = null;
        return new TaskResult(task, "committed", rows, json(records), attempt, seconds(t0));
    }

    /** A task without rows: no transaction. A producer started for it is kept for the id's next
     *  task, knowing the progress it read after its init (as after a skip), and what that read
     *  found is reported here: the attempts that died, the transaction the init fenced. A start
     *  that failed is left to the next task of the id, which starts again. */
    private TaskResult keepForNextTask() {
        if (kept != null) {
            TaskClients.give(o, task, kept);
            kept = null;
        }
        Fresh f = null;
        try {
            f = starting == null ? null : joinStart();
        } catch (RuntimeException e) {
            LOG.warn("txnwatch sink {}: starting the producer {} for a task without rows failed; its next task "
                + "starts it again", o.name, o.transactionalId(task), e);
        }
        if (f == null) {
            return new TaskResult(task, "empty", 0, "[]", "", 0.0);
        }
        records.addAll(f.progress.deadAttemptRecords(o, task, f.fenced, System.currentTimeMillis() / 1000.0));
        f.producer.committedOffset = f.progress.committedOffset;
        f.producer.lastMarker = f.progress.marker;
        TaskClients.give(o, task, f.producer);
        return new TaskResult(task, "empty", 0, json(records), "", 0.0);
    }

    /** Called by Spark when write or commit failed: leave a note (in the aborted transaction
     *  itself) for the next attempt to report, then abort. The producer is not kept. */
    @Override
    public void abort() {
        settleBeside();
        if (producer == null) {
            return;
        }
        try {
            if (inTransaction) {
                boolean fenced = "PRODUCER_FENCED".equals(error) || "INVALID_PRODUCER_EPOCH".equals(error);
                if (fenced) {
                    producer.producer.abortTransaction();
                    return;
                }
                Map<String, Object> values = new LinkedHashMap<>();
                values.put("kind", "abort");
                values.put("attempt", attempt);
                values.put("error", error != null ? error : Progress.APPLICATION_ERROR);
                values.put("duration", seconds(began));
                ProducerRecord<byte[], byte[]> note = new ProducerRecord<>(o.progressTopic, task,
                    o.transactionalId(task).getBytes(StandardCharsets.UTF_8), Progress.JSON.writeValueAsBytes(values));
                try {
                    producer.producer.send(note).get(o.commitTimeoutMs, java.util.concurrent.TimeUnit.MILLISECONDS);
                    producer.producer.abortTransaction();
                } catch (java.util.concurrent.ExecutionException | org.apache.kafka.common.KafkaException e) {
                    // A send error left the transaction refusing records (the Java client's abortable
                    // state): abort it, and leave the note in a transaction of its own, aborted too.
                    producer.producer.abortTransaction();
                    producer.producer.beginTransaction();
                    producer.producer.send(note);
                    producer.producer.flush();
                    producer.producer.abortTransaction();
                }
            }
        } catch (Exception e) {      // the original error matters; the next init cleans up
            // nothing more to do
        } finally {
            producer.producer.close(Duration.ZERO);
            producer = null;
            inTransaction = false;
        }
    }

    @Override
    public void close() {
        settleBeside();
        if (kept != null) {          // a task that failed before its first row: the producer is untouched
            TaskClients.give(o, task, kept);
            kept = null;
        }
        if (producer != null) {      // neither committed nor aborted: never reused
            producer.producer.close(Duration.ZERO);
            producer = null;
        }
    }

    /** Kafka's error codes whose librdkafka names (those of txnwatch's error labels) differ
     *  from the Java client's. */
    private static final Map<Short, String> LIBRDKAFKA_NAMES = Map.of(
        (short) 2, "INVALID_MSG", (short) 3, "UNKNOWN_TOPIC_OR_PART", (short) 4, "INVALID_MSG_SIZE",
        (short) 6, "NOT_LEADER_FOR_PARTITION", (short) 10, "MSG_SIZE_TOO_LARGE", (short) 11, "STALE_CTRL_EPOCH",
        (short) 17, "TOPIC_EXCEPTION");

    /** The error's name as the Python writer records it: the first Kafka error in its causes
     *  (a transaction in an error state carries the send error that put it there), in librdkafka's
     *  names; _APPLICATION for anything else. */
    private static String errorName(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (t instanceof ProducerFencedException) {
                return "PRODUCER_FENCED";
            }
            if (t instanceof InvalidProducerEpochException) {
                return "INVALID_PRODUCER_EPOCH";
            }
            if (t instanceof ApiException) {
                Errors error = Errors.forException(t);
                return LIBRDKAFKA_NAMES.getOrDefault(error.code(), error.name());
            }
        }
        return Progress.APPLICATION_ERROR;
    }

    private static double seconds(long since) {
        return (System.nanoTime() - since) / 1e9;
    }

    private static String json(List<Map<String, Object>> records) {
        try {
            return Progress.JSON.writeValueAsString(records);
        } catch (Exception e) {
            return "[]";
        }
    }
}
