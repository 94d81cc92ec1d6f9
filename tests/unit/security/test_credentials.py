"""The credentials file (kgroups.security.credentials) and the mechanism registry
(kgroups.security.mechanisms) that reads it at every new exchange."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
import yaml
from kafka.net.sasl.scram import ScramClient as KafkaPythonScram

from kgroups.security.credentials import (
    Credentials,
    CredentialsError,
    ScramCredential,
    UserCredentials,
    load_credentials,
    render_user,
    scram_credential,
)
from kgroups.security.mechanisms import SUPPORTED, server_mechanisms
from kgroups.security.sasl import (
    Authenticated,
    AuthenticationFailed,
    Challenge,
    Principal,
    step_now,
)

NOW = 1_700_000_000_000
SECRET_WORDS = ("hunter2", "c2VjcmV0")  # a password and a base64 value in the bad files


def bob_entry(mechanism: str = "SCRAM-SHA-512", **changes: object) -> dict[str, object]:
    credential = scram_credential("bob-pw", mechanism, iterations=8192, salt=b"salt")
    entry: dict[str, object] = {
        "salt": base64.b64encode(credential.salt).decode(),
        "iterations": credential.iterations,
        "storedKey": base64.b64encode(credential.stored_key).decode(),
        "serverKey": base64.b64encode(credential.server_key).decode(),
    }
    entry.update(changes)
    return entry


def users_file(users: object) -> str:
    return yaml.safe_dump({"users": users})


def test_the_file_format() -> None:
    credentials = load_credentials(
        users_file({
            "alice": {"password": "alice-pw"},
            "bob": {"scram-sha-512": bob_entry(), "scram-sha-256": bob_entry("SCRAM-SHA-256")},
            "carol": {"scram-sha-256": bob_entry("SCRAM-SHA-256")},
        })
    )  # fmt: skip
    assert set(credentials) == {"alice", "bob", "carol"}
    alice, bob, carol = credentials["alice"], credentials["bob"], credentials["carol"]
    assert set(alice.scram) == set(bob.scram) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert set(carol.scram) == {"SCRAM-SHA-256"}
    assert (
        bob.scram["SCRAM-SHA-512"].iterations == 8192 and bob.scram["SCRAM-SHA-512"].salt == b"salt"
    )
    for user, password in [("alice", "alice-pw"), ("bob", "bob-pw"), ("carol", "bob-pw")]:
        assert credentials[user].verify_password(password)
        assert not credentials[user].verify_password(password + "x")


def test_a_password_derives_scram_credentials_with_a_random_salt() -> None:
    text = users_file({"alice": {"password": "alice-pw"}})
    first, second = load_credentials(text)["alice"], load_credentials(text)["alice"]
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        a, b = first.scram[mechanism], second.scram[mechanism]
        assert a.iterations == 4096 and len(a.salt) == 16 and a.salt != b.salt
        assert a.matches("alice-pw", mechanism) and not a.matches("alice-px", mechanism)


def test_scram_credential_is_rfc_5802() -> None:
    """Checked against an independent derivation, and against kafka-python's client."""
    credential = scram_credential("pencil", "SCRAM-SHA-256", salt=b"NaCl", iterations=4096)
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", b"NaCl", 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    assert credential.stored_key == hashlib.sha256(client_key).digest()
    assert credential.server_key == hmac.new(salted, b"Server Key", "sha256").digest()
    kp = KafkaPythonScram("user", "pencil", "SCRAM-SHA-256")
    kp.create_salted_password(b"NaCl", 4096)
    assert kp.salted_password == salted


def test_scram_credential_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="not a SCRAM mechanism"):
        scram_credential("pw", "SCRAM-SHA-1")
    with pytest.raises(ValueError, match="iterations must be 4096 to 16384"):
        scram_credential("pw", "SCRAM-SHA-512", iterations=1000)


def test_an_empty_user_list_is_no_one() -> None:
    assert dict(load_credentials("users: {}")) == {}
    assert dict(load_credentials("users:\n")) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (users_file({"bob": {"scram-sha-512": bob_entry(iterations=4095)}}),
         "user 'bob': scram-sha-512: iterations: 4095 is below the minimum of 4096"),
        (users_file({"bob": {"scram-sha-512": bob_entry(iterations=16385)}}),
         "user 'bob': scram-sha-512: iterations: 16385 is above the maximum of 16384"),
        (users_file({"bob": {"scram-sha-512": bob_entry(iterations="8192")}}),
         "user 'bob': scram-sha-512: iterations: must be an integer"),
        (users_file({"bob": {"scram-sha-512": bob_entry(storedKey="c2VjcmV0*")}}),
         "user 'bob': scram-sha-512: storedKey: must be base64 text"),
        (users_file({"bob": {"scram-sha-512": bob_entry(serverKey="c2VjcmV0")}}),
         "user 'bob': scram-sha-512: serverKey: must decode to 64 bytes"),
        (users_file({"bob": {"scram-sha-256": bob_entry("SCRAM-SHA-256", salt="")}}),
         "user 'bob': scram-sha-256: salt: must decode to at least one byte"),
        (users_file({"bob": {"scram-sha-512": {"salt": "c2VjcmV0", "iterations": 4096}}}),
         "user 'bob': scram-sha-512: expected a mapping with exactly salt, iterations, storedKey, serverKey"),
        (users_file({"bob": {"scram-sha-512": "c2VjcmV0"}}),
         "user 'bob': scram-sha-512: expected a mapping"),
        (users_file({"alice": {"pasword": "hunter2"}}),
         "user 'alice': unknown field 'pasword' (expected password, scram-sha-256, scram-sha-512)"),
        (users_file({"alice": {"password": 1234}}),
         "user 'alice': password: must be a non-empty string (quote it)"),
        (users_file({"alice": {"password": ""}}),
         "user 'alice': password: must be a non-empty string"),
        (users_file({"alice": {"password": "hunter2", "scram-sha-512": bob_entry()}}),
         "user 'alice': give a password or SCRAM hashes, not both"),
        (users_file({"alice": None}), "user 'alice': expected a mapping with one of"),
        (users_file({"alice": "hunter2"}), "user 'alice': expected a mapping with one of"),
        (users_file({123: {"password": "hunter2"}}), "user name 123: must be a non-empty string"),
        (users_file(["alice", "hunter2"]), "`users` must map user names to their entries"),
        (yaml.safe_dump({"user": {"alice": {"password": "hunter2"}}}), "one key, `users`"),
        ("", "expected a mapping with one key, `users`"),
        ("users: {alice: {password: hunter2", "not valid YAML at line 1"),
        ("users:\n  alice:\n    password: 'hunter2\n", "not valid YAML at line"),
    ],
)  # fmt: skip
def test_a_bad_file_is_refused_naming_where_never_a_secret(text: str, message: str) -> None:
    with pytest.raises(CredentialsError) as refused:
        load_credentials(text)
    assert message in str(refused.value)
    assert str(refused.value).startswith("credentials: ")
    assert not any(word in str(refused.value) for word in SECRET_WORDS)
    # A traceback would print a chained YAML error, which quotes the line (and its secret).
    error = refused.value
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
    assert isinstance(refused.value, ValueError)  # what files.Reloading keeps the last for


def test_secrets_stay_out_of_reprs() -> None:
    text = repr(load_credentials(users_file({"alice": {"password": "hunter2"}})))
    credential = load_credentials(users_file({"alice": {"password": "hunter2"}}))["alice"]
    assert "hunter2" not in text
    for value in (key for c in credential.scram.values() for key in (c.stored_key, c.server_key)):
        assert repr(value) not in text


def test_a_rendered_entry_loads_back() -> None:
    scram = {
        m: scram_credential("pw", m, iterations=8192) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
    }
    text = render_user("a: b,c", scram)
    assert text.startswith("users:\n  'a: b,c':\n    scram-sha-256:\n      salt: ")
    assert "storedKey: " in text and "serverKey: " in text and "iterations: 8192" in text
    loaded = load_credentials(text)["a: b,c"]
    assert loaded == UserCredentials(scram)
    assert loaded.verify_password("pw") and not loaded.verify_password("pv")
    with pytest.raises(ValueError, match="not SCRAM mechanisms: PLAIN"):
        render_user("x", {"PLAIN": scram["SCRAM-SHA-256"]})


def login(factory_result: object, user: str, password: str, mechanism: str) -> Principal:
    """kafka-python's client through a mechanism the registry made."""
    exchange = factory_result
    assert callable(getattr(exchange, "step", None))
    if mechanism == "PLAIN":
        result = step_now(exchange, f"\0{user}\0{password}".encode(), NOW)  # type: ignore[arg-type]
        assert isinstance(result, Authenticated)
        return result.principal
    client = KafkaPythonScram(user, password, mechanism)
    first = exchange.step(client.first_message(), NOW)  # type: ignore[attr-defined]
    assert isinstance(first, Challenge)
    client.process_server_first_message(first.data)
    result = exchange.step(client.final_message(), NOW)  # type: ignore[attr-defined]
    assert isinstance(result, Authenticated)
    client.process_server_final_message(result.data)
    return result.principal


def test_the_registry_makes_the_named_mechanisms() -> None:
    credentials = load_credentials(users_file({"alice": {"password": "alice-pw"}}))
    assert list(SUPPORTED) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    passwords = SUPPORTED[:3]
    factories = server_mechanisms(passwords, lambda: credentials)
    assert list(factories) == list(passwords)
    for name, factory in factories.items():
        exchange = factory()
        assert exchange.name == name
        assert login(exchange, "alice", "alice-pw", name) == Principal("alice")
        assert factory() is not exchange


def test_an_unknown_mechanism_is_refused_listing_the_supported() -> None:
    with pytest.raises(ValueError, match="unknown SASL mechanism 'GSSAPI', 'plain': supported "
                       "are PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"):  # fmt: skip
        server_mechanisms(["PLAIN", "GSSAPI", "plain"], dict)
    with pytest.raises(ValueError, match="OAUTHBEARER needs a token verifier"):
        server_mechanisms(["OAUTHBEARER"], dict)


def test_reloaded_credentials_apply_to_the_next_exchange_only() -> None:
    current: list[Credentials] = [load_credentials(users_file({"alice": {"password": "old"}}))]
    factories = server_mechanisms(["PLAIN", "SCRAM-SHA-512"], lambda: current[0])
    started = factories["SCRAM-SHA-512"]()
    client = KafkaPythonScram("alice", "old", "SCRAM-SHA-512")
    first = started.step(client.first_message(), NOW)
    assert isinstance(first, Challenge)
    current[0] = load_credentials(users_file({"alice": {"password": "new"}}))
    client.process_server_first_message(first.data)
    assert isinstance(started.step(client.final_message(), NOW), Authenticated)
    for name in factories:
        assert login(factories[name](), "alice", "new", name) == Principal("alice")
        with pytest.raises(AuthenticationFailed):
            login(factories[name](), "alice", "old", name)


def test_an_unknown_users_salt_is_stable_across_one_registrys_exchanges() -> None:
    factories = server_mechanisms(["SCRAM-SHA-512"], dict)

    def salt() -> bytes:
        first = factories["SCRAM-SHA-512"]().step(b"n,,n=nobody,r=abc", NOW)
        assert isinstance(first, Challenge)
        return first.data.split(b",")[1]

    assert salt() == salt()
    again = server_mechanisms(["SCRAM-SHA-512"], dict, secret=b"fixed")["SCRAM-SHA-512"]
    assert isinstance(again().step(b"n,,n=nobody,r=abc", NOW), Challenge)


def test_a_scram_credential_is_plain_data() -> None:
    credential = ScramCredential(b"s", 4096, b"k" * 32, b"v" * 32)
    assert "k" * 32 not in repr(credential) and "4096" in repr(credential)
