"""Whatever a client sends, in whatever order, the authenticator of a connection only
answers, refuses or closes, and never lets a request through without credentials.

Random sequences of requests (any API key, handshakes naming any mechanism, tokens from
the mechanisms' own fuzz strategies) at advancing times, against a session with the real
PLAIN and SCRAM mechanisms and a session limit: no exception escapes, no principal
appears, and nothing but ApiVersions, SaslHandshake and SaslAuthenticate is admitted.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.protocol.apis import ApiKey
from kgroups.security.mechanisms import server_mechanisms
from kgroups.security.session import AuthState, SaslConfig, Session
from tests.unit.security.test_sasl_fuzz import CREDENTIALS, TOKENS

MECHANISMS = server_mechanisms(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), lambda: CREDENTIALS)
AUTH_APIS = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)

STEP = st.one_of(
    st.tuples(st.just("request"), st.integers(-1, 70)),
    st.tuples(
        st.just("handshake"),
        st.sampled_from([*MECHANISMS, "GSSAPI", "", "plain"]),
        st.integers(0, 1),
    ),
    st.tuples(st.just("authenticate"), TOKENS),
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(STEP, max_size=12), st.integers(0, 5_000))
def test_no_sequence_authenticates_without_credentials(steps: list[tuple], gap: int) -> None:  # type: ignore[type-arg]
    session = Session(SaslConfig(MECHANISMS, max_reauth_ms=1_000))
    now = 1_700_000_000_000
    for step in steps:
        now += gap
        if step[0] == "request":
            if session.admit(step[1], now) is None:
                assert step[1] in AUTH_APIS, f"api {step[1]} admitted unauthenticated"
        elif step[0] == "handshake":
            session.handshake(step[1], step[2])
        else:
            answer = session.authenticate(step[1], now)
            assert answer.authenticated is None
        assert session.principal is None
        assert session.state is not AuthState.AUTHENTICATED
