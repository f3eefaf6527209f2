"""Each service of a bench in a CPU cgroup of its own, as a container runtime or systemd puts
them (a pod's container, a service unit), so the kernel shares the CPUs between services
before it shares them between their threads. Without it the grouping is whatever the
machine does by itself: with autogroup on (/proc/sys/kernel/sched_autogroup_enabled), one
group per session, and the bench starts each exporter in a session of its own; with it off,
one flat run queue for every thread.

Every group gets the same weight (cgroup v1 cpu.shares 1024, v2 cpu.weight 100: the
defaults). Needs root and the cpu controller (v1 at /sys/fs/cgroup/cpu, or v2 with cpu in
cgroup.controllers; only v1 ran here); anything else is a clear error before the bench starts.
"""

from __future__ import annotations

import os
from pathlib import Path

V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")


class CpuGroups:
    def __init__(self, name: str | None = None) -> None:
        v2_controllers = V2 / "cgroup.controllers"
        if (V1 / "cgroup.procs").exists():
            self.parent = V1
        elif v2_controllers.exists() and "cpu" in v2_controllers.read_text().split():
            self.parent = V2
        else:
            raise SystemExit("--cgroups needs the cpu cgroup controller: neither /sys/fs/cgroup/cpu (v1) nor "
                             "a cgroup v2 root listing cpu in cgroup.controllers was found")
        self.root = self.parent / (name or f"txnwatch-bench-{os.getpid()}")
        try:
            self.root.mkdir()
            if self.parent is V2:
                (self.root / "cgroup.subtree_control").write_text("+cpu")
        except OSError as e:
            raise SystemExit(f"--cgroups cannot make {self.root} ({e}): run the bench as root") from e
        self.groups: dict[str, Path] = {}

    def path(self, group: str) -> Path:
        """The group's cgroup.procs (made on first use): a process writes its pid there to join."""
        d = self.groups.get(group)
        if d is None:
            d = self.root / group
            d.mkdir(exist_ok=True)
            self.groups[group] = d
        return d / "cgroup.procs"

    def join(self, group: str, pids) -> None:
        """Move processes (every thread of each) into `group`; one that exited is skipped."""
        procs = self.path(group)
        for pid in pids:
            try:
                procs.write_text(str(pid))
            except ProcessLookupError:
                continue

    def close(self) -> None:
        """Move whatever is left back to the parent and remove the groups."""
        for d in [*self.groups.values(), self.root]:
            try:
                for pid in (d / "cgroup.procs").read_text().split():
                    try:
                        (self.parent / "cgroup.procs").write_text(pid)
                    except ProcessLookupError:
                        pass
            except OSError:
                pass
        for d in [*self.groups.values(), self.root]:
            try:
                d.rmdir()
            except OSError:
                pass
