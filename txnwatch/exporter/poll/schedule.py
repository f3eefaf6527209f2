"""When the next poll starts: back to back, bounded by a minimum interval and by cost.

A poll's duration is what it costs the brokers (its requests are answered serially by
them), so capping the share of wall time spent polling caps that cost: a cluster that
takes 2 s to poll at a duty cycle of 0.5 is polled every 4 s, not every 2 s, and a
small one every `min_interval`.
"""

from __future__ import annotations


def poll_period(min_interval: float, duty_cycle: float, duration: float) -> float:
    """Seconds from one poll's start to the next's, after a poll that took `duration`."""
    return max(min_interval, duration / duty_cycle)


def wait_before_next_poll(min_interval: float, duty_cycle: float, duration: float) -> float:
    """Seconds to wait after a poll that took `duration` before starting the next."""
    return max(0.0, poll_period(min_interval, duty_cycle, duration) - duration)
