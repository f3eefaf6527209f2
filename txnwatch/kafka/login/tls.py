"""TLS for both clients as librdkafka's properties describe it. The client identity: a PKCS#12
keystore (as Java shops keep client certificates, modern or legacy encryption), inline PEM or
PEM files. librdkafka gets a keystore as PEM strings (`ssl.certificate.pem`, `ssl.key.pem`: its
own PKCS#12 reader cannot open the legacy kind); kafka-python gets one SSLContext, the key loaded
through a memory file closed at once, so it never lands on a disk another user could read."""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .settings import Keystore, LoginSettingsError


@dataclass(frozen=True)
class ClientIdentity:
    certificate_pem: str                   # the client certificate, then its chain
    key_pem: str = field(repr=False)       # unencrypted: kept in memory only
    subject: str = ""                      # the certificate's subject, for the page


def open_keystore(keystore: Keystore) -> ClientIdentity:
    """The key and certificates of a PKCS#12 file; LoginSettingsError names what is wrong."""
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12

    try:
        data = Path(keystore.location).read_bytes()
    except OSError as exc:
        raise LoginSettingsError("ssl.keystore.location", f"cannot read {keystore.location}: {exc.strerror}") from None
    try:
        key, cert, chain = pkcs12.load_key_and_certificates(data, keystore.password.encode() or None)
    except (ValueError, TypeError):
        raise LoginSettingsError("ssl.keystore.password", f"cannot open {keystore.location}: the password is "
                                 "wrong, or it is not a PKCS#12 keystore (a JKS one converts with keytool "
                                 "-importkeystore -deststoretype pkcs12)") from None
    if key is None or cert is None:
        raise LoginSettingsError("ssl.keystore.location", f"{keystore.location} holds no private key with its "
                                 "certificate: it is a truststore, not a keystore")
    pem = b"".join(c.public_bytes(Encoding.PEM) for c in (cert, *(chain or ())))
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    return ClientIdentity(pem.decode(), key_pem.decode(), cert.subject.rfc4514_string())


def file_identity(props: Mapping[str, object]) -> ClientIdentity | None:
    """librdkafka's `ssl.certificate.location` and `ssl.key.location` (PEM files)."""
    cert, key = props.get("ssl.certificate.location"), props.get("ssl.key.location")
    if not cert:
        return None
    try:
        cert_pem = Path(str(cert)).read_text()
        key_pem = Path(str(key)).read_text() if key else cert_pem
    except OSError as exc:
        raise LoginSettingsError("ssl.certificate.location" if not key else "ssl.key.location",
                                 f"cannot read {exc.filename}: {exc.strerror}") from None
    password = props.get("ssl.key.password")
    return ClientIdentity(cert_pem, _decrypt(key_pem, str(password)) if password else key_pem)


def inline_identity(props: Mapping[str, object]) -> ClientIdentity | None:
    """librdkafka's inline `ssl.certificate.pem` and `ssl.key.pem`, when both are given."""
    cert, key = props.get("ssl.certificate.pem"), props.get("ssl.key.pem")
    if not cert or not key:
        return None
    password = props.get("ssl.key.password")
    if password:
        key = _decrypt(str(key), str(password))
    return ClientIdentity(str(cert), str(key))


def _decrypt(key_pem: str, password: str) -> str:
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        load_pem_private_key,
    )

    try:
        key = load_pem_private_key(key_pem.encode(), password.encode())
    except (ValueError, TypeError):
        raise LoginSettingsError("ssl.key.password", "cannot decrypt the client key with it") from None
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


def ssl_context(props: Mapping[str, object], identity: ClientIdentity | None) -> ssl.SSLContext:
    """kafka-python's TLS settings as librdkafka's properties mean them: the CA (a file, inline
    PEM, or the system's), hostname checks (`ssl.endpoint.identification.algorithm`, https by
    default), certificate checks (`enable.ssl.certificate.verification`), the client identity."""
    ca_file = props.get("ssl.ca.location")
    ca_file = None if ca_file in (None, "", "probe") else str(ca_file)
    try:
        ctx = ssl.create_default_context(cafile=ca_file, cadata=str(props["ssl.ca.pem"])
                                         if props.get("ssl.ca.pem") else None)
    except (OSError, ssl.SSLError) as exc:
        key = "ssl.ca.location" if ca_file else "ssl.ca.pem"
        raise LoginSettingsError(key, f"cannot load the CA certificates: {getattr(exc, 'strerror', None) or exc}") \
            from None
    crl = props.get("ssl.crl.location")
    if crl:
        try:
            ctx.load_verify_locations(str(crl))
        except (OSError, ssl.SSLError) as exc:
            raise LoginSettingsError("ssl.crl.location", f"cannot load {crl}: {exc}") from None
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if str(props.get("enable.ssl.certificate.verification", "true")).lower() == "false":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.check_hostname = str(props.get("ssl.endpoint.identification.algorithm", "https")).lower() == "https"
    if identity is not None:
        _load_identity(ctx, identity)
    return ctx


def _load_identity(ctx: ssl.SSLContext, identity: ClientIdentity) -> None:
    """ssl loads a key only from a path: a memory file's, read once and closed."""
    fd = os.memfd_create("txnwatch-client-identity", os.MFD_CLOEXEC)
    try:
        os.write(fd, (identity.certificate_pem + "\n" + identity.key_pem).encode())
        ctx.load_cert_chain(f"/proc/self/fd/{fd}")
    except ssl.SSLError as exc:
        raise LoginSettingsError("ssl.certificate.location", f"the client certificate and key do not load "
                                 f"together: {exc.reason or exc}") from None
    finally:
        os.close(fd)
