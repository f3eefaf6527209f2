"""TLS for the HTTP server from the web config: an SSLContext per the file's settings, rebuilt
when the certificate, key or client CA change on disk (cert-manager rotating a Secret), so a
rotation needs no restart."""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time

from ...config.web import TLSServerConfig

log = logging.getLogger(__name__)

_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
             "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
           "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
# How often a handshake may look at the files (a stat each): a rotation shows within this.
CHECK_EVERY_SECONDS = 1.0


def build_context(cfg: TLSServerConfig) -> ssl.SSLContext:
    """The server context the web config describes; raises ssl.SSLError / OSError when the
    files do not make one (a key that does not match its certificate, say)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _VERSIONS[cfg.min_version]
    if cfg.max_version:
        ctx.maximum_version = _VERSIONS[cfg.max_version]
    ctx.load_cert_chain(str(cfg.cert_file), str(cfg.key_file))
    ctx.verify_mode = _VERIFY[cfg.client_auth_type]
    if cfg.client_ca_file is not None:
        ctx.load_verify_locations(cafile=str(cfg.client_ca_file))
    return ctx


class ReloadingContext:
    """The current SSLContext for `cfg`: rebuilt when a file's mtime, size or inode changed
    (Kubernetes swaps a Secret volume's files through a symlink: the inode changes). A
    rebuild that fails (a certificate written before its key, mid-rotation) keeps the
    context that works and tries again at the next check."""

    def __init__(self, cfg: TLSServerConfig, clock=time.monotonic) -> None:
        self.cfg, self.clock = cfg, clock
        self._lock = threading.Lock()
        self._files = [p for p in (cfg.cert_file, cfg.key_file, cfg.client_ca_file) if p is not None]
        self._stamp = self._stat()
        self._context = build_context(cfg)       # at start a broken file is fatal: fail loudly
        self._checked = clock()
        self.reloads = 0
        self.failed_reloads = 0

    def _stat(self) -> tuple:
        out = []
        for p in self._files:
            try:
                st = os.stat(p)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def current(self) -> ssl.SSLContext:
        now = self.clock()
        with self._lock:
            if now - self._checked < CHECK_EVERY_SECONDS:
                return self._context
            self._checked = now
            stamp = self._stat()
            if stamp == self._stamp:
                return self._context
            try:
                ctx = build_context(self.cfg)
            except (OSError, ssl.SSLError, ValueError) as exc:
                self.failed_reloads += 1
                log.warning("web TLS: %s changed but does not load (%s); serving the previous certificate "
                            "until it does", self.cfg.cert_file, exc)
                return self._context
            self._stamp, self._context = stamp, ctx
            self.reloads += 1
            log.info("web TLS: reloaded %s", self.cfg.cert_file)
            return ctx


def ssl_adapter(source: ReloadingContext):
    """A cheroot TLS adapter that takes each connection's context from `source`."""
    from cheroot.ssl.builtin import BuiltinSSLAdapter

    class _Adapter(BuiltinSSLAdapter):
        def __init__(self) -> None:
            # the base class loads the files itself (for its environ); it is given the same ones
            super().__init__(str(source.cfg.cert_file), str(source.cfg.key_file))
            self.context = source.current()

        def wrap(self, sock):
            self.context = source.current()
            return super().wrap(sock)

    return _Adapter()
