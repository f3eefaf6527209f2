"""Transaction-log tap: reads __transaction_state and derives transaction metrics."""
