"""Every process's CPU from /proc, each second, into argv[1] (bench/test_cpu/README.md):
`N pid ppid cmdline` when a process is first seen, `S time pid cpu_ticks` at each sample."""

import os
import sys
import time


def main(path: str) -> None:
    seen: set[str] = set()
    with open(path, "w") as out:
        while True:
            t = time.time()
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        stat = f.read()
                except OSError:
                    continue
                fields = stat[stat.rfind(")") + 2:].split()
                if pid not in seen:
                    seen.add(pid)
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as f:
                            cmd = f.read().replace(b"\0", b" ").replace(b"\n", b" ").decode(errors="replace")[:300]
                    except OSError:
                        cmd = "?"
                    out.write(f"N {pid} {fields[1]} {cmd}\n")
                out.write(f"S {t:.2f} {pid} {int(fields[11]) + int(fields[12])}\n")
            out.flush()
            time.sleep(max(0.0, 1.0 - (time.time() - t)))


if __name__ == "__main__":
    main(sys.argv[1])
