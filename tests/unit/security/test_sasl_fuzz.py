"""No bytes make PLAIN or SCRAM raise anything but AuthenticationFailed, or authenticate.

Any client may send anything before it has authenticated: another exception would be a
bug reachable by anyone, and a success a hole. Arbitrary bytes rarely get past a parser's
first check, so tokens are also built from the messages' own pieces, and real messages
are mutated a byte at a time. Our SCRAM client gets the same treatment from a server.
"""

from __future__ import annotations

import base64

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient as KafkaPythonScram

from kgroups.security.credentials import UserCredentials, scram_credential
from kgroups.security.plain import PlainServer
from kgroups.security.sasl import Authenticated, AuthenticationFailed, Challenge, step_now
from kgroups.security.sasl_client import ScramClient
from kgroups.security.scram import ScramServer

NOW = 1_700_000_000_000
CREDENTIALS = {
    "alice": UserCredentials.from_password("alice-pw"),
    "bob": UserCredentials({"SCRAM-SHA-512": scram_credential("bob-pw", "SCRAM-SHA-512")}),
}
BUDGET = settings(max_examples=300, deadline=None, derandomize=True)
PIECES = st.sampled_from([
    "n", "y", "p=tls-unique", "a=", "n=", "r=", "s=", "i=", "c=", "p=", "v=", "e=", "m=",
    ",", "=", "=2C", "=3D", "\0", "alice", "bob", "nobody", "abc", "biws", "eSws",
    "tokenauth=true", "4096", "QUJD", "AAAA==", "\xff", "wrong-pw",
])  # fmt: skip


def part(*likely: str) -> st.SearchStrategy[str]:
    """One field of a message: mostly a plausible value, else a piece of another, or
    anything (so that whole messages get past the first checks often enough)."""
    return st.integers(0, 9).flatmap(
        lambda n: st.sampled_from(likely) if n < 7 else PIECES if n < 9 else st.text(max_size=6)
    )


def joined(separator: str, *parts: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    return st.tuples(*parts).map(lambda p: separator.join(p).encode("utf-8", "surrogatepass"))


PROOF = st.binary(min_size=64, max_size=64).map(lambda b: "p=" + base64.b64encode(b).decode())
EXTENSIONS = st.lists(part("tokenauth=true", "tokenauth=false", "x=y", "m=1", "k"), max_size=2)
SHAPED = st.one_of(
    joined(
        ",", part("n", "y", "p=x"), part("", "a=alice", "a=bob", "a=al=ice"),
        part("n=alice", "n=bob", "n=nobody", "n=a=2Cb", "n=", "n=a=4"),
        part("r=abc", "r=", "r=a b"), EXTENSIONS.map(",".join),
    ),  # a client-first
    joined(",", part("c=biws", "c=eSws", "c=bi*s"), part("r=abcsrv", "r=abc"),
           st.one_of(PROOF, part("p=AAAA", "p="))),  # a client-final
    joined("\0", part("", "alice", "bob"), part("alice", "bob", "nobody", ""),
           part("wrong-pw", "", "bob-pw ")),  # a PLAIN message
)  # fmt: skip
TOKENS = st.one_of(
    st.binary(max_size=200),
    SHAPED,
    st.lists(st.one_of(PIECES, st.text(max_size=8)), max_size=12).map(
        lambda parts: "".join(parts).encode("utf-8", "surrogatepass")
    ),
)
SERVER_TOKENS = st.one_of(
    TOKENS,
    joined(",", part("r=abcsrv", "r=abc", "r=x"), part("s=QUJD", "s=", "s=*"),
           part("i=4096", "i=1", "i=99999999999", "i=4O96"), EXTENSIONS.map(",".join)),
    joined(",", part("v=AAAA", "v=", "e=invalid-proof"), EXTENSIONS.map(",".join)),
)  # fmt: skip


def scram_server(mechanism: str = "SCRAM-SHA-512") -> ScramServer:
    return ScramServer(mechanism, CREDENTIALS, secret=b"fuzz", nonce=lambda: "srv")


@BUDGET
@given(st.lists(TOKENS, min_size=1, max_size=3))
def test_plain_refuses_anything_but_credentials(tokens: list[bytes]) -> None:
    server = PlainServer(CREDENTIALS)
    for token in tokens:
        try:
            step_now(server, token, NOW)
        except AuthenticationFailed:
            continue
        raise AssertionError(f"authenticated by {token!r}")


@BUDGET
@given(
    st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]), st.lists(TOKENS, min_size=1, max_size=4)
)
def test_scram_refuses_arbitrary_exchanges(mechanism: str, tokens: list[bytes]) -> None:
    server = scram_server(mechanism)
    failed = False
    for token in tokens:
        try:
            result = server.step(token, NOW)
        except AuthenticationFailed:
            failed = True
            continue
        assert not failed, "a step was answered after the exchange failed"
        assert not isinstance(result, Authenticated), f"authenticated by {tokens!r}"
        assert isinstance(result, Challenge)


@BUDGET
@given(TOKENS, st.sampled_from(["alice", "bob", "nobody"]))
def test_scram_refuses_an_arbitrary_client_final(token: bytes, user: str) -> None:
    server = scram_server()
    assert isinstance(server.step(f"n,,n={user},r=abc".encode(), NOW), Challenge)
    try:
        server.step(token, NOW)
    except AuthenticationFailed:
        return
    raise AssertionError(f"authenticated by {token!r}")


def real_exchange() -> tuple[bytes, bytes]:
    """A client-first and the client-final that would succeed (server nonce fixed)."""
    client = KafkaPythonScram("alice", "alice-pw", "SCRAM-SHA-512")
    client.nonce = b"fixed-client-nonce"
    first = client.first_message()
    server = scram_server()
    answer = server.step(first, NOW)
    assert isinstance(answer, Challenge)
    client.process_server_first_message(answer.data)
    final = client.final_message()
    assert isinstance(server.step(final, NOW), Authenticated)
    return first, final


FIRST, FINAL = real_exchange()


@BUDGET
@given(st.integers(0, len(FINAL) - 1), st.integers(0, 255))
def test_scram_refuses_a_real_client_final_with_one_byte_changed(at: int, byte: int) -> None:
    assume(FINAL[at] != byte)
    server = scram_server()
    server.step(FIRST, NOW)
    forged = FINAL[:at] + bytes([byte]) + FINAL[at + 1 :]
    try:
        server.step(forged, NOW)
    except AuthenticationFailed:
        return
    raise AssertionError(f"authenticated by {forged!r}")


@BUDGET
@given(st.lists(SERVER_TOKENS, min_size=1, max_size=3), st.booleans())
def test_our_scram_client_takes_arbitrary_server_messages(
    tokens: list[bytes], real_first: bool
) -> None:
    """With `real_first`, a genuine server-first comes before the arbitrary messages."""
    client = ScramClient("alice", "alice-pw", "SCRAM-SHA-512", nonce="abc")
    if real_first:
        answer = scram_server().step(client.first(), NOW)
        assert isinstance(answer, Challenge)
        assert client.step(answer.data) is not None
    for token in tokens:
        try:
            done = client.step(token) is None
        except AuthenticationFailed:
            continue
        assert not done, f"accepted {token!r} as the server's signature"
