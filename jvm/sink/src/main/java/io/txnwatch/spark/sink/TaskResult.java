package io.txnwatch.spark.sink;

import com.fasterxml.jackson.core.JsonProcessingException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * One task's outcome, as the Python writer's tasks report it (the fields of its
 * RESULT_SCHEMA): the driver hands the batch's results to the Python sink, which turns
 * their transaction records into the `producer_transactions` event of the batch.
 */
final class TaskResult implements WriterCommitMessage {
    private static final long serialVersionUID = 1L;

    final int task;
    final String status;       // committed, replayed or empty
    final long rows;
    final String records;      // the transaction records, a JSON array
    final String attempt;
    final double seconds;

    TaskResult(int task, String status, long rows, String records, String attempt, double seconds) {
        this.task = task;
        this.status = status;
        this.rows = rows;
        this.records = records;
        this.attempt = attempt;
        this.seconds = seconds;
    }

    Map<String, Object> asMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("task", task);
        m.put("status", status);
        m.put("rows", rows);
        m.put("records", records);
        m.put("attempt", attempt);
        m.put("seconds", seconds);
        return m;
    }

    /** A batch's results as the Python sink reads them: {"batch": id, "results": [...]}. */
    static String payload(long batchId, WriterCommitMessage[] messages) throws JsonProcessingException {
        List<Map<String, Object>> results = new ArrayList<>();
        for (WriterCommitMessage m : messages) {
            if (m instanceof TaskResult) {
                results.add(((TaskResult) m).asMap());
            }
        }
        Map<String, Object> payload = new LinkedHashMap<>();
        payload.put("batch", batchId);
        payload.put("results", results);
        return Progress.JSON.writeValueAsString(payload);
    }
}
