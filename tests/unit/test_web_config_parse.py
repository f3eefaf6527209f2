"""The web configuration file (exporter-toolkit's format) and basic auth against bcrypt
hashes (no server: tests/integration/test_web_config.py serves it to real clients)."""

import base64

import bcrypt
import pytest

from txnwatch.config.web import WebConfigError, load_web_config, parse_web_config
from txnwatch.exporter.serve.auth import Authorizer


@pytest.fixture
def files(tmp_path):
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / name).write_text("PEM\n")
    return tmp_path


def parse(tmp_path, data):
    return parse_web_config(data, tmp_path / "web-config.yml")


def test_a_fleets_web_config_reads_as_exporter_toolkit_reads_it(files):
    cfg = parse(files, {
        "tls_server_config": {"cert_file": "tls.crt", "key_file": str(files / "tls.key"),
                              "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "ca.crt",
                              "min_version": "TLS13"},
        "http_server_config": {"http2": True, "headers": {"X-Frame-Options": "deny"}},
        "basic_auth_users": {"prometheus": "$2y$10$" + "a" * 53, "agent": "$2b$12$" + "b" * 53}})
    assert cfg.scheme == "https"
    assert cfg.tls.cert_file == files / "tls.crt"           # relative to the web config's directory
    assert cfg.tls.client_ca_file == files / "ca.crt" and cfg.tls.client_cert_required
    assert cfg.tls.min_version == "TLS13" and cfg.tls.max_version is None
    assert dict(cfg.headers) == {"X-Frame-Options": "deny"}
    assert set(cfg.basic_auth_users) == {"prometheus", "agent"}


def test_defaults_and_empty_files():
    assert parse_web_config(None).scheme == "http"
    assert parse_web_config({}).tls is None
    assert parse_web_config({"tls_server_config": None, "basic_auth_users": {}}).basic_auth_users == {}


@pytest.mark.parametrize("data, says", [
    ({"tls": {}}, "tls: unknown key (known: tls_server_config, http_server_config, basic_auth_users)"),
    ({"tls_server_config": {"cert_file": "tls.crt"}}, "tls_server_config.key_file: is required"),
    ({"tls_server_config": {"cert_file": "nope.crt", "key_file": "tls.key"}}, "cert_file: no such file: "),
    ({"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key", "client_auth_type": "RequireAnyClientCert"}},
     "RequireAnyClientCert accepts a client certificate without verifying it"),
    ({"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key", "client_auth_type": "Always"}},
     "'Always' is none of NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"),
    ({"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key",
                            "client_auth_type": "RequireAndVerifyClientCert"}},
     "client_ca_file: is required with client_auth_type RequireAndVerifyClientCert"),
    ({"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key", "min_version": "TLS1.2"}},
     "min_version: 'TLS1.2' is none of TLS10, TLS11, TLS12, TLS13"),
    ({"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key", "max_version": "TLS11"}},
     "max_version: TLS11 is below min_version TLS12"),
    ({"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key", "cipher_suites": ["TLS_AES_128_GCM_SHA256"]}},
     "cipher_suites: not supported by txnwatch"),
    ({"tls_server_config": {"cert": "-----BEGIN", "key_file": "tls.key"}}, "inline PEM is not supported"),
    ({"http_server_config": {"headers": {"Server": "x"}}}, "headers.Server: cannot be set"),
    ({"http_server_config": {"headers": {"X-Frame-Options": "a\r\nSet-Cookie: x"}}}, "expected a one-line string"),
    ({"basic_auth_users": {"prometheus": "plaintext-secret"}}, "basic_auth_users.prometheus: expected a bcrypt hash"),
    ({"basic_auth_users": {"a:b": "$2y$10$" + "a" * 53}}, "without ':'"),
    ({"basic_auth_users": ["prometheus"]}, "basic_auth_users: expected a mapping"),
    ("tls_server_config", "expected a mapping"),
])
def test_what_cannot_be_used_is_refused_by_name(files, data, says):
    with pytest.raises(WebConfigError) as ei:
        parse(files, data)
    assert says in str(ei.value) and "web-config.yml" in str(ei.value)
    assert "plaintext-secret" not in str(ei.value)


def test_unreadable_and_not_yaml(tmp_path):
    with pytest.raises(WebConfigError, match="cannot read it"):
        load_web_config(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("tls_server_config: [\n")
    with pytest.raises(WebConfigError, match="not YAML"):
        load_web_config(bad)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture(scope="module")
def hashes():
    # cost 4: the algorithm is the same at any cost; htpasswd's $2y$ prefix for one of them
    return {"prometheus": "$2y$" + bcrypt.hashpw(b"scrape-pw", bcrypt.gensalt(4)).decode()[4:],
            "agent": bcrypt.hashpw(b"agent-pw", bcrypt.gensalt(4)).decode()}


def test_several_users_each_with_their_own_password(hashes):
    auth = Authorizer(hashes)
    assert auth(basic("prometheus", "scrape-pw")) and auth(basic("agent", "agent-pw"))
    assert not auth(basic("prometheus", "agent-pw"))            # another user's password
    assert not auth(basic("nobody", "scrape-pw"))
    assert not auth(basic("prometheus", ""))
    assert not auth("Basic !!!") and not auth("Bearer scrape-pw") and not auth("")
    assert not auth("Basic " + base64.b64encode(b"prometheus").decode())   # no colon
    assert auth.challenge == 'Basic realm="txnwatch"'


def test_a_checked_password_is_not_hashed_again(hashes, monkeypatch):
    from txnwatch.exporter.serve import auth as auth_module

    auth = Authorizer(hashes)
    calls = []
    real = auth_module._bcrypt_ok
    monkeypatch.setattr(auth_module, "_bcrypt_ok", lambda pw, h: calls.append(pw) or real(pw, h))
    for _ in range(5):
        assert auth(basic("prometheus", "scrape-pw"))
        assert not auth(basic("prometheus", "wrong"))
    assert calls == ["scrape-pw", "wrong"]
    assert all(b"scrape-pw" not in k for k in auth._cache)      # digests, never the password


def test_bearer_token_beside_users_and_nothing_configured(hashes):
    both = Authorizer(hashes, bearer_token="tok-1")
    assert both("Bearer tok-1") and both(basic("agent", "agent-pw")) and not both("Bearer tok-2")
    assert Authorizer(bearer_token="tok-1").challenge == 'Bearer realm="txnwatch"'
    assert Authorizer()("") and not Authorizer().enabled
