"""Security settings as users write them: listeners (Kafka's PROTOCOL://HOST:PORT), what a
coordinator refuses to start with, and a client's KGROUPS_* environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgroups.coordinator.listeners import (
    ListenerSettings,
    SecurityProtocol,
    SecuritySettings,
    parse_listener,
)
from kgroups.coordinator.tls import TlsSettings, certificate_principal
from kgroups.security.client import ClientSecurity
from tests.pki import Pki


def test_listeners_are_written_the_kafka_way() -> None:
    assert parse_listener("SASL_SSL://0.0.0.0:9094") == ListenerSettings(
        SecurityProtocol.SASL_SSL, "0.0.0.0", 9094
    )
    assert parse_listener("127.0.0.1:9092").protocol is SecurityProtocol.PLAINTEXT
    assert parse_listener("ssl://[::1]:9093") == ListenerSettings(SecurityProtocol.SSL, "::1", 9093)
    with pytest.raises(ValueError, match="unknown security protocol"):
        parse_listener("SASL_TLS://0.0.0.0:1")
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        parse_listener("SSL://host:port")


TLS = TlsSettings(Path("tls.crt"), Path("tls.key"))


@pytest.mark.parametrize(
    ("protocols", "settings", "complaint"),
    [
        (["SSL"], SecuritySettings(), "needs a certificate and key"),
        (["SASL_PLAINTEXT"], SecuritySettings(), "at least one SASL mechanism"),
        (["SASL_SSL"], SecuritySettings(tls=TLS, sasl_mechanisms=("PLAIN",)), "credentials file"),
        (["SSL", "SSL"], SecuritySettings(tls=TLS), "one listener per security protocol"),
        (
            ["SSL"],
            SecuritySettings(tls=TlsSettings(Path("c"), Path("k"), client_auth="required")),
            "needs a client CA",
        ),
    ],
)
def test_a_coordinator_refuses_settings_that_cannot_serve_its_listeners(
    protocols: list[str], settings: SecuritySettings, complaint: str
) -> None:
    listeners = tuple(ListenerSettings(SecurityProtocol(p), "127.0.0.1", 0) for p in protocols)
    with pytest.raises(ValueError, match=complaint):
        settings.check(listeners)


def test_a_client_certificate_names_its_principal_as_kafka_does() -> None:
    subject = ((("organizationName", "acme"),), (("organizationalUnitName", "pay,ments"),),
               (("commonName", "billing"),))  # fmt: skip
    principal = certificate_principal({"subject": subject})
    assert str(principal) == "User:CN=billing,OU=pay\\,ments,O=acme"
    assert certificate_principal(None) is None
    assert certificate_principal({}) is None


def test_clients_take_their_settings_from_kgroups_environment_variables(tmp_path: Path) -> None:
    ca = Pki(tmp_path).ca
    env = {"KGROUPS_SECURITY_PROTOCOL": "sasl_ssl", "KGROUPS_SSL_CA_FILE": str(ca),
           "KGROUPS_SASL_MECHANISM": "scram-sha-512", "KGROUPS_SASL_USERNAME": "alice",
           "KGROUPS_SASL_PASSWORD_FILE": "/secret/password"}  # fmt: skip
    s = ClientSecurity.from_env(env)
    assert (s.protocol, s.mechanism, s.username) == ("SASL_SSL", "SCRAM-SHA-512", "alice")
    assert s.ca_file == ca and s.password_file == Path("/secret/password")
    assert s.tls and s.authenticator() is not None and s.connector() is not None
    plain = ClientSecurity.from_env({})
    assert plain.protocol == "PLAINTEXT" and plain.authenticator() is None
    assert plain.connector() is None


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"KGROUPS_SECURITY_PROTOCOL": "TLS"}, "security protocol"),
        ({"KGROUPS_SECURITY_PROTOCOL": "SASL_SSL"}, "SASL mechanism"),
        (
            {
                "KGROUPS_SECURITY_PROTOCOL": "SASL_SSL",
                "KGROUPS_SASL_MECHANISM": "PLAIN",
                "KGROUPS_SASL_USERNAME": "alice",
            },
            "needs a username and a password",
        ),
        (
            {"KGROUPS_SECURITY_PROTOCOL": "SASL_SSL", "KGROUPS_SASL_MECHANISM": "OAUTHBEARER"},
            "token file",
        ),
        ({"KGROUPS_SASL_MECHANISM": "PLAIN"}, "needs SASL_PLAINTEXT or SASL_SSL"),
        ({"KGROUPS_SECURITY_PROTOCOL": "SSL", "KGROUPS_SSL_CERT_FILE": "c"}, "needs its key"),
    ],
)
def test_incomplete_client_settings_are_refused_naming_what_is_missing(
    env: dict[str, str], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        ClientSecurity.from_env(env)


def test_oauthbearer_settings_refuse_what_cannot_work() -> None:
    from kgroups.coordinator.tokens import OAuthBearerSettings

    OAuthBearerSettings().check()
    for bad, why in ((OAuthBearerSettings(audiences=()), "audience"),
                     (OAuthBearerSettings(audiences=("",)), "audience"),
                     (OAuthBearerSettings(review_cache_s=0), "review cache"),
                     (OAuthBearerSettings(skew_s=-1), "skew")):  # fmt: skip
        with pytest.raises(ValueError, match=why):
            bad.check()
