"""Jars from Maven Central through the machine's `mvn` (checksums checked): the Apache
Kafka releases of the development harness and Spark's Kafka connector.

    classpath(pom, ["-P", "server", ...])                     # a POM's runtime classpath
    releases("org.apache.kafka", "kafka_2.13", "4.0.0", "4.9999.9999")   # newest first
    newest_resolving(group, artifact, low, high, resolve)     # newest whose resolve() works

Nothing here is on the exporter's path: it runs only where a harness or a Spark job
starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class MavenUnavailable(RuntimeError):
    """Maven is missing or could not resolve; the message says what and what to do."""


def mvn() -> str:
    found = shutil.which("mvn")
    if found is None:
        raise MavenUnavailable("Maven (mvn) not found: it resolves jars from Maven Central; "
                               "install it (apt-get install maven)")
    return found


def _errors(text: str) -> str:
    """Maven's first real error line (the rest is its advice on -e and -X)."""
    lines = [ln.replace("[ERROR]", "").strip() for ln in text.splitlines() if "ERROR" in ln]
    lines = [ln for ln in lines if ln and not ln.startswith(("To see the full", "Re-run Maven", "For more information",
                                                             "[Help"))] or text.splitlines()[-3:]
    return " | ".join(lines[:2])[:1500]


@contextlib.contextmanager
def _one_maven_at_a_time():
    """Maven's local repository is not safe for concurrent writers: the parallel test workers
    (and a demo beside them) resolve one after another on this machine."""
    with open(Path(tempfile.gettempdir()) / "txnwatch-maven.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def store(path: Path, text: str) -> None:
    """Write a cache file so that a concurrent reader sees the old content or the new, never
    a part (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def classpath(pom_xml: str, args: list[str] = (), *, what: str, timeout: float = 900) -> list[Path]:
    """The runtime classpath of a POM (its text), resolved with strict checksums."""
    with _one_maven_at_a_time(), tempfile.TemporaryDirectory(prefix="txnwatch-mvn-") as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(pom_xml)
        out_file = Path(tmp) / "classpath.txt"
        try:
            out = subprocess.run([mvn(), "-B", "-q", "--strict-checksums", "-f", str(pom), *args,
                                  "dependency:build-classpath", "-Dmdep.includeScope=runtime",
                                  f"-Dmdep.outputFile={out_file}"],
                                 capture_output=True, text=True, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise MavenUnavailable(f"Maven took over {timeout:.0f}s to resolve {what}") from None
        if out.returncode != 0 or not out_file.exists():
            raise MavenUnavailable(f"Maven could not resolve {what}: {_errors(out.stdout + out.stderr)}")
        return [Path(p) for p in out_file.read_text().strip().split(os.pathsep) if p]


def dependency_pom(deps: list[tuple[str, str, str]], exclude_transitive: bool = False) -> str:
    """A throwaway POM that depends on (group, artifact, version) triples."""
    excl = ("<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
            if exclude_transitive else "")
    body = "".join(f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>{excl}"
                   "</dependency>" for g, a, v in deps)
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            "<groupId>io.txnwatch</groupId><artifactId>resolve</artifactId><version>1</version>"
            f"<dependencies>{body}</dependencies></project>")


def local_repository() -> Path:
    """Maven's local repository (settings.localRepository; asked of Maven once)."""
    global _LOCAL_REPO
    if _LOCAL_REPO is None:
        with _one_maven_at_a_time():
            out = subprocess.run([mvn(), "-B", "-q", "help:evaluate", "-Dexpression=settings.localRepository",
                                  "-DforceStdout"], capture_output=True, text=True, timeout=300,
                                 cwd=tempfile.gettempdir())
        text = out.stdout.strip().splitlines()[-1:] if out.returncode == 0 else []
        _LOCAL_REPO = Path(text[0]) if text and text[0].startswith("/") else Path.home() / ".m2" / "repository"
    return _LOCAL_REPO


_LOCAL_REPO: Path | None = None
_RELEASE = re.compile(r"^\d+\.\d+\.\d+$")


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def releases(group: str, artifact: str, low: str, high: str) -> list[str]:
    """The releases (x.y.z, no qualifiers such as -preview1) of group:artifact that Maven
    Central lists with low <= version <= high, newest first. Maven fetches its metadata
    (a range resolution of the jar alone); the list is read from that metadata."""
    try:
        classpath(dependency_pom([(group, artifact, f"[{low},{high}]")], exclude_transitive=True),
                  what=f"{group}:{artifact}:[{low},{high}]", timeout=300)
    except MavenUnavailable:
        pass   # the range may pick a pre-release whose POM does not resolve: the metadata came anyway
    folder = local_repository() / Path(*group.split(".")) / artifact
    found: set[str] = set()
    for meta in folder.glob("maven-metadata*.xml"):
        found.update(re.findall(r"<version>([^<]+)</version>", meta.read_text()))
    chosen = [v for v in found if _RELEASE.match(v) and _key(low) <= _key(v) <= _key(high)]
    if not chosen:
        raise MavenUnavailable(f"Maven Central lists no release of {group}:{artifact} from {low} to {high} "
                               f"(or Maven could not reach it: see `mvn dependency:get -Dartifact={group}:{artifact}:{low}`)")
    return sorted(chosen, key=_key, reverse=True)


def newest_resolving(group: str, artifact: str, low: str, high: str, resolve: Callable[[str], T]) -> tuple[str, T]:
    """The newest release of group:artifact in [low, high] for which `resolve(version)`
    succeeds (it raises MavenUnavailable when not), and what it returned."""
    tried = []
    for version in releases(group, artifact, low, high):
        try:
            return version, resolve(version)
        except MavenUnavailable as exc:
            tried.append(f"{version}: {exc}")
    raise MavenUnavailable(f"no release of {group}:{artifact} from {low} to {high} resolves: " + "; ".join(tried))
