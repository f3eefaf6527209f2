"""How txnwatch logs in to Kafka, for every client it makes (clients.py, kafka_python.py): one
login per set of client properties in a process, its credentials in the form each client takes.

    settings.py   the login the client properties describe (librdkafka's names), checked
    tokens.py     OAUTHBEARER tokens: a cache kept fresh by a thread of its own
    oidc.py       tokens from an OIDC token endpoint (client credentials)
    msk_iam.py    tokens from AWS's MSK IAM signer
    tls.py        the TLS client identity (a PKCS#12 keystore, inline PEM, PEM files) and
                  kafka-python's SSLContext
    kerberos.py   Kerberos from a keytab for the whole process
    session.py    Login: the above for one set of properties; login_for, LoginStatus
"""

from .session import Login, LoginStatus, explain, login_for, status_of, stop_logins
from .settings import LoginSettingsError, parse

__all__ = ["Login", "LoginSettingsError", "LoginStatus", "check_settings", "explain", "login_for", "parse",
           "status_of", "stop_logins"]


def check_settings(props) -> None:
    """What can be checked of a login before any client is made (LoginSettingsError): the
    settings themselves; a keystore opens with its password; a keytab is readable and the
    GSSAPI library kafka-python needs is installed; AWS's signer is installed for MSK IAM."""
    import os

    from . import kerberos, msk_iam
    from .tls import open_keystore

    settings = parse(props)
    if settings.keystore is not None:
        open_keystore(settings.keystore)
    if settings.kerberos is not None:
        keytab = settings.kerberos.keytab
        if keytab and not os.access(keytab, os.R_OK):
            raise LoginSettingsError("sasl.kerberos.keytab", f"cannot read {keytab} (missing, or not readable "
                                     "by the exporter's user)")
        kerberos.check_kafka_python()
    if settings.msk_iam is not None:
        try:
            msk_iam.signer_module()
        except ImportError as exc:
            raise LoginSettingsError("sasl.oauthbearer.method", str(exc)) from None
