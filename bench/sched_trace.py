"""The kernel's own account of a slow scrape: who ran on each CPU while the exporter's threads
were runnable and waiting for one (the sched_wakeup and sched_switch tracepoints).

A tracefs instance of its own (/sys/kernel/tracing/instances/<name>) keeps the last seconds
of scheduler events in a ring buffer, stamped with CLOCK_MONOTONIC (time.monotonic()'s
clock). After a slow scrape, window() stops the buffer, reads the scrape's interval out of
it and starts it again; analyse() is a pure function of those lines. Needs root and tracefs
(mounted here with `mount -t tracefs nodev /sys/kernel/tracing`); a lab tool, run by hand.
Reading the buffer costs the reader (the scraper's process) CPU, after the scrape it reads.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = ("sched/sched_switch", "sched/sched_wakeup")
LINE = re.compile(r"^\s*(.+)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): (sched_\w+): (.*)$")
FIELD = re.compile(r"(\w+)=(\S+)")


class SchedTrace:
    def __init__(self, name: str, buffer_kb: int = 65536) -> None:
        if not (TRACEFS / "instances").is_dir():
            raise SystemExit(f"--trace-slow needs tracefs at {TRACEFS}: mount -t tracefs nodev {TRACEFS} (as root)")
        self.dir = TRACEFS / "instances" / name
        self.dir.mkdir(exist_ok=True)
        (self.dir / "buffer_size_kb").write_text(str(buffer_kb))
        (self.dir / "trace_clock").write_text("mono")
        for e in EVENTS:
            (self.dir / "events" / e / "enable").write_text("1")
        (self.dir / "tracing_on").write_text("1")

    @classmethod
    def attach(cls, name: str) -> SchedTrace:
        """The instance another process made (a scraper's, from the bench's)."""
        self = cls.__new__(cls)
        self.dir = TRACEFS / "instances" / name
        return self

    def clear(self) -> None:
        """Starts the buffer afresh (so that window() reads seconds of events, not minutes)."""
        (self.dir / "trace").write_text("")

    def window(self, t0: float, t1: float) -> list[str]:
        """The events stamped in [t0, t1] (monotonic seconds); the buffer then starts afresh."""
        (self.dir / "tracing_on").write_text("0")
        out = []
        with open(self.dir / "trace") as f:
            for line in f:
                m = LINE.match(line)
                if m and t0 <= float(m.group(4)) <= t1:
                    out.append(line.rstrip("\n"))
        (self.dir / "trace").write_text("")    # truncates the buffer
        (self.dir / "tracing_on").write_text("1")
        return out

    def close(self) -> None:
        (self.dir / "tracing_on").write_text("0")
        for e in EVENTS:
            (self.dir / "events" / e / "enable").write_text("0")
        self.dir.rmdir()


def parse(lines: list[str]) -> list[tuple[float, int, str, dict[str, str]]]:
    """(timestamp, cpu, event, fields) for each line."""
    out = []
    for line in lines:
        m = LINE.match(line)
        if m:
            out.append((float(m.group(4)), int(m.group(3)), m.group(5), dict(FIELD.findall(m.group(6)))))
    return sorted(out, key=lambda e: e[0])


def analyse(lines: list[str], names: dict[int, str], watch: set[int], t0: float, t1: float) -> dict:
    """Over [t0, t1]: each CPU's running time by service (names: tid -> service; anything else
    is "other", tid 0 "idle"), and each wait of a `watch`ed thread for a CPU (from its wakeup,
    or from being preempted, to its switch-in) that ends after t0, with who ran on each CPU
    during that wait. Lines from before t0 (a lead-in) tell what was running or waiting when
    the window began: a thread preempted before it and still waiting is seen. Times in
    milliseconds."""
    events = parse(lines)
    on_cpu: dict[int, tuple[int, float]] = {}     # cpu -> (tid, since)
    runs: list[tuple[int, int, float, float]] = []  # (cpu, tid, start, end)
    waiting: dict[int, tuple[float, str]] = {}      # watched tid -> (since, why)
    waits: list[tuple[int, float, float, str]] = []
    seen: set[int] = set()
    for ts, cpu, event, f in events:
        if event == "sched_wakeup":    # enqueued: a sched_waking without one found it still queued
            tid = int(f["pid"])
            seen.add(tid)
            if tid in watch and tid not in waiting:
                waiting[tid] = (ts, "woken")
        elif event == "sched_switch":
            prev, nxt = int(f["prev_pid"]), int(f["next_pid"])
            since = on_cpu.get(cpu, (prev, events[0][0] if events else t0))[1]
            runs.append((cpu, prev, since, ts))
            on_cpu[cpu] = (nxt, ts)
            if prev in watch and f["prev_state"].startswith("R"):
                waiting[prev] = (ts, "preempted")
            if nxt in watch and nxt not in seen and nxt not in waiting and ts > t0:
                # switched in with no wakeup or preemption in the lines: runnable since before
                # they began (the lead-in is too short to say how long)
                waits.append((nxt, events[0][0], ts, "runnable since before the lead-in"))
            seen.update((prev, nxt))
            if nxt in watch and nxt in waiting:
                since_w, why = waiting.pop(nxt)
                if ts > t0:
                    waits.append((nxt, since_w, ts, why if since_w >= t0 else why + " before the scrape"))
    for cpu, (tid, since) in on_cpu.items():
        runs.append((cpu, tid, since, t1))
    for tid, (since, why) in waiting.items():
        waits.append((tid, since, t1, why + ", not run by the window's end"))

    def service(tid: int) -> str:
        return "idle" if tid == 0 else names.get(tid, "other")

    def ran(a: float, b: float) -> dict[int, dict[str, float]]:
        by: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for cpu, tid, s, e in runs:
            overlap = min(e, b) - max(s, a)
            if overlap > 0:
                by[cpu][service(tid)] += overlap * 1000
        return {cpu: dict(v) for cpu, v in sorted(by.items())}

    return {"ran": ran(t0, t1),
            "waits": [{"thread": f"{service(tid)} {tid}", "why": why, "at": s, "ms": (e - s) * 1000, "ran": ran(s, e)}
                      for tid, s, e, why in sorted(waits, key=lambda w: w[1] - w[2])]}


def describe(result: dict, top: int = 3) -> str:
    """One line: each CPU's time by service over the scrape, and its longest waits."""
    def fmt(by: dict[int, dict[str, float]]) -> str:
        return " | ".join(f"cpu{cpu}: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(d.items(), key=lambda x: -x[1]))
                          for cpu, d in by.items())
    waits = "; ".join(f"{w['thread']} {w['why']} waited {w['ms']:.1f} ms ({fmt(w['ran'])})"
                      for w in result["waits"][:top] if w["ms"] >= 1)
    return f"ran (ms) {fmt(result['ran'])}; waits over 1 ms: {waits or 'none'}"
