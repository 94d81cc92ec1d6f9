"""Verifying a JSON Web Token (RFC 7519) against a JSON Web Key Set (RFC 7517), the way a
Kafka broker's OAuthBearerValidatorCallbackHandler does, for Kubernetes ServiceAccount
tokens and any other OIDC issuer's.

A token passes only if all of these hold, and the first that fails is named:

* three base64url parts; the header names an asymmetric algorithm (RS*, PS*, ES*: never
  `none`, never HS*, whose "key" would be public here) and a key id the set holds, of the
  algorithm's key type;
* the signature verifies with that key;
* `iss` is the expected issuer, `aud` (a string or a list) holds an accepted audience;
* `exp` is present and in the future, `nbf` and `iat` (if present) not in the future, each
  within `skew_s` (Kafka's sasl.oauthbearer.clock.skew.seconds, 30);
* the subject claim (`sub`) is a non-empty string: it is the principal's name.

Parsing is strict, since a token's bytes are an unauthenticated client's until the
signature verifies and the header is read before that: base64url without stray
characters, JSON objects with no member twice (`{"sub":"a","sub":"admin"}` is refused,
not read as whichever a parser keeps), no NaN or Infinity, no nesting past `MAX_DEPTH`,
claims of their registered types, and a `crit` header refused (no extension is
understood here, RFC 7515 4.1.11). Every failure is an `InvalidToken`.

Pure: the caller passes the keys and the time (a key set is fetched and refreshed by the
coordinator's I/O layer). An unknown key id raises `UnknownKey`, so the caller can fetch
the set again and retry once (signing keys rotate).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from kgroups.shown import shown

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey

_HASHES: Mapping[str, type[hashes.HashAlgorithm]] = {
    "256": hashes.SHA256,
    "384": hashes.SHA384,
    "512": hashes.SHA512,
}
_CURVES: Mapping[str, ec.EllipticCurve] = {
    "P-256": ec.SECP256R1(),
    "P-384": ec.SECP384R1(),
    "P-521": ec.SECP521R1(),
}
ALGORITHMS = tuple(f"{family}{bits}" for family in ("RS", "PS", "ES") for bits in _HASHES)
DEFAULT_SKEW_S = 30
MAX_TOKEN_CHARS = 32 * 1024
"""Kubernetes ServiceAccount tokens are about 1 KB, other issuers' a few KB."""
MAX_DEPTH = 8
"""How deeply a token's header and claims may nest (the claims used are all flat)."""
MAX_NUMERIC_DATE = 2**53
"""A NumericDate past this is not a time (and would overflow milliseconds)."""


class InvalidToken(Exception):
    """The token is not acceptable; str(exc) says why (never the token itself)."""


class UnknownKey(InvalidToken):
    """The token names a key id the key set does not hold (the set may be out of date)."""

    def __init__(self, kid: str | None) -> None:
        super().__init__(f"signed with an unknown key (kid {kid!r})")
        self.kid = kid


_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


def _b64(part: str) -> bytes:
    """Strict base64url without padding (RFC 7515): any other character is refused, not
    skipped as the lenient decoder would."""
    if not _BASE64URL.fullmatch(part) or len(part) % 4 == 1:
        raise InvalidToken("not a JWT: a part is not base64url")
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise InvalidToken("not a JWT: a part is not base64url") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        names = [k for k, _ in pairs]
        twice = next(k for i, k in enumerate(names) if k in names[:i])
        raise InvalidToken(f"member {shown(twice, 40)!r} appears twice in an object")
    return found


def _no_constant(name: str) -> Any:
    raise InvalidToken(f"{name} is not a JSON number")


def _depth(value: Any) -> int:
    """How deeply `value` nests arrays and objects (iteratively: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend(
                (v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def _object(data: bytes, what: str) -> dict[str, Any]:
    """A JSON object, strictly: no member twice (which one would win is a matter of
    parser, and an attacker's choice), no NaN or Infinity, no deep nesting."""
    try:
        value = json.loads(data, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except InvalidToken:
        raise
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's limit
        raise InvalidToken(f"the {what} is not JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken(f"the {what} is not a JSON object")
    if _depth(value) > MAX_DEPTH:
        raise InvalidToken(f"the {what} nests deeper than {MAX_DEPTH}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, str):
        raise ValueError("not a base64url string")  # noqa: TRY004 - a bad document, to callers
    return int.from_bytes(_b64(value), "big")


@dataclass(frozen=True, slots=True)
class Jwk:
    kid: str | None
    kty: str
    key: PublicKey
    alg: str | None = None


def _key(jwk: Mapping[str, Any]) -> PublicKey:
    kty = jwk.get("kty")
    if kty == "RSA":
        return rsa.RSAPublicNumbers(_int(jwk.get("e")), _int(jwk.get("n"))).public_key()
    if kty == "EC":
        curve = _CURVES.get(str(jwk.get("crv")))
        if curve is None:
            raise ValueError(f"curve {jwk.get('crv')!r}")
        x, y = _int(jwk.get("x")), _int(jwk.get("y"))
        return ec.EllipticCurvePublicNumbers(x, y, curve).public_key()
    raise ValueError(f"key type {kty!r}")


@dataclass(frozen=True, slots=True)
class KeySet:
    """The verification keys of a JWKS document; keys this cannot use are left out
    (`skipped` says which and why), as an OIDC client ignores them."""

    keys: tuple[Jwk, ...]
    skipped: tuple[str, ...] = ()

    @classmethod
    def parse(cls, document: str | bytes) -> KeySet:
        """A JWKS document (`{"keys": [...]}`); ValueError if it is not one."""
        try:
            doc = json.loads(document)
        except ValueError as exc:
            raise ValueError(f"a JWKS document is JSON: {exc}") from None
        return cls.of(doc)

    @classmethod
    def of(cls, doc: Any) -> KeySet:
        """A parsed JWKS document; ValueError if it is not one."""
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
            raise ValueError('a JWKS document is an object with a "keys" list')  # noqa: TRY004
        keys: list[Jwk] = []
        skipped: list[str] = []
        for jwk in doc["keys"]:
            if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
                continue
            kid = jwk.get("kid")
            try:
                keys.append(Jwk(kid if isinstance(kid, str) else None, str(jwk.get("kty")),
                                _key(jwk), jwk.get("alg")))  # fmt: skip
            except ValueError as exc:
                skipped.append(f"kid {kid!r}: {exc}")
        return cls(tuple(keys), tuple(skipped))

    def find(self, kid: str | None, kty: str, alg: str) -> list[Jwk]:
        """The keys a token with this header may be signed with."""
        return [
            k
            for k in self.keys
            if k.kty == kty and (kid is None or k.kid == kid) and k.alg in (None, alg)
        ]


@dataclass(frozen=True, slots=True)
class TokenPolicy:
    """What a token must say to be accepted."""

    audiences: frozenset[str]
    issuer: str | None = None
    """None: any issuer (the key set already says who signed)."""
    skew_s: int = DEFAULT_SKEW_S
    subject_claim: str = "sub"


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    subject: str
    expires_ms: int
    claims: Mapping[str, Any]


def _verify_signature(key: PublicKey, alg: str, signature: bytes, signed: bytes) -> None:
    digest = _HASHES[alg[2:]]()
    if isinstance(key, rsa.RSAPublicKey):
        pad: padding.AsymmetricPadding = padding.PKCS1v15()
        if alg.startswith("PS"):
            pad = padding.PSS(padding.MGF1(_HASHES[alg[2:]]()), digest.digest_size)
        key.verify(signature, signed, pad, digest)
        return
    half = (key.curve.key_size + 7) // 8
    if len(signature) != 2 * half:
        raise InvalidSignature
    r, s = int.from_bytes(signature[:half], "big"), int.from_bytes(signature[half:], "big")
    key.verify(encode_dss_signature(r, s), signed, ec.ECDSA(digest))


def _header(part: str) -> tuple[str, str | None]:
    header = _object(_b64(part), "header")
    alg, kid = header.get("alg"), header.get("kid")
    if not isinstance(alg, str) or alg not in ALGORITHMS:
        shown = alg[:20] if isinstance(alg, str) else type(alg).__name__
        raise InvalidToken(f"algorithm {shown!r} is not accepted (one of {', '.join(ALGORITHMS)})")
    if kid is not None and not isinstance(kid, str):
        raise InvalidToken("the header's kid is not a string")
    if "crit" in header:
        # RFC 7515 4.1.11: extensions listed in crit must be understood; none are here.
        raise InvalidToken("the header's crit names extensions this server does not understand")
    return alg, kid


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    """A NumericDate claim: seconds since the epoch, finite and not absurd."""
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToken(f"claim {name!r} is not a number")
    if not (isinstance(value, int) or math.isfinite(value)) or not 0 <= value <= MAX_NUMERIC_DATE:
        raise InvalidToken(f"claim {name!r} is not a time")
    return float(value)


def _check_claims(claims: Mapping[str, Any], policy: TokenPolicy, now_ms: int) -> VerifiedToken:
    now = now_ms / 1000
    iss = claims.get("iss")
    if iss is not None and not isinstance(iss, str):
        raise InvalidToken("claim 'iss' is not a string")
    if policy.issuer is not None and iss != policy.issuer:
        raise InvalidToken(f"issuer {shown(iss, 80)!r} is not {policy.issuer!r}")
    aud = claims.get("aud")
    if isinstance(aud, list) and not all(isinstance(a, str) for a in aud):
        raise InvalidToken("claim 'aud' holds something other than strings")
    audiences = {aud} if isinstance(aud, str) else set(aud) if isinstance(aud, list) else set()
    if not audiences & policy.audiences:
        raise InvalidToken(
            f"audience {shown(sorted(audiences), 200)} is not one of {sorted(policy.audiences)}"
        )
    exp = _number(claims, "exp")
    if exp is None:
        raise InvalidToken("the token has no expiry (exp)")
    if exp + policy.skew_s <= now:
        raise InvalidToken(f"the token expired {int(now - exp)} s ago")
    for name in ("nbf", "iat"):
        at = _number(claims, name)
        if at is not None and at - policy.skew_s > now:
            raise InvalidToken(f"the token is not valid yet ({name} is {int(at - now)} s ahead)")
    subject = claims.get(policy.subject_claim)
    if not isinstance(subject, str) or not subject:
        raise InvalidToken(f"the token has no subject ({policy.subject_claim!r} claim)")
    return VerifiedToken(subject, int(exp * 1000), claims)


def verify(token: str, keys: KeySet, policy: TokenPolicy, now_ms: int) -> VerifiedToken:
    """The token's subject and expiry, or InvalidToken (UnknownKey: no key for its kid)."""
    if len(token) > MAX_TOKEN_CHARS:
        raise InvalidToken(f"a token of {len(token)} characters (at most {MAX_TOKEN_CHARS})")
    parts = token.split(".")
    if not token.isascii() or len(parts) != 3:
        raise InvalidToken("not a JWT: three base64url parts")
    alg, kid = _header(parts[0])
    candidates = keys.find(kid, "RSA" if alg[0] in "RP" else "EC", alg)
    if not candidates:
        raise UnknownKey(kid)
    signed, signature = f"{parts[0]}.{parts[1]}".encode("ascii"), _b64(parts[2])
    for jwk in candidates:
        try:
            _verify_signature(jwk.key, alg, signature, signed)
            break
        except InvalidSignature:
            continue
    else:
        raise InvalidToken("the signature does not verify")
    return _check_claims(_object(_b64(parts[1]), "payload"), policy, now_ms)
