"""Certificates for tests, made with openssl: a CA, and server or client certificates it
signs (EC P-256, valid a week)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(args: list[str], cwd: Path) -> None:
    out = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {out.stderr.strip()}")


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class CA:
    directory: Path
    name: str

    @property
    def cert(self) -> Path:
        return self.directory / f"{self.name}.crt"

    @property
    def key(self) -> Path:
        return self.directory / f"{self.name}.key"

    def issue(self, name: str, cn: str, server: bool = False, directory: Path | None = None) -> Pair:
        """A certificate for `cn` (a server's: SAN 127.0.0.1 and localhost, serverAuth; a
        client's: clientAuth), written as <name>.crt/.key in `directory` (default the CA's)."""
        d = directory or self.directory
        d.mkdir(parents=True, exist_ok=True)
        ext = d / f"{name}.ext"
        usage = "serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost" if server else "clientAuth"
        ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyAgreement\n"
                       f"extendedKeyUsage={usage}\n")
        _openssl(["req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}"], d)
        _openssl(["x509", "-req", "-in", f"{name}.csr", "-CA", str(self.cert), "-CAkey", str(self.key),
                  "-CAcreateserial", "-out", f"{name}.crt", "-days", "7", "-extfile", ext.name], d)
        return Pair(d / f"{name}.crt", d / f"{name}.key")


def make_ca(directory: str | Path, name: str = "ca") -> CA:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _openssl(["req", "-x509", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "7",
              "-subj", f"/CN=txnwatch test {name}", "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign"], d)
    return CA(d, name)
