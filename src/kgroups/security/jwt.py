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

Pure: the caller passes the keys and the time (a key set is fetched and refreshed by the
coordinator's I/O layer). An unknown key id raises `UnknownKey`, so the caller can fetch
the set again and retry once (signing keys rotate).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

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


class InvalidToken(Exception):
    """The token is not acceptable; str(exc) says why (never the token itself)."""


class UnknownKey(InvalidToken):
    """The token names a key id the key set does not hold (the set may be out of date)."""

    def __init__(self, kid: str | None) -> None:
        super().__init__(f"signed with an unknown key (kid {kid!r})")
        self.kid = kid


def _b64(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise InvalidToken("not a JWT: a part is not base64url") from None


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
    try:
        header = json.loads(_b64(part))
    except ValueError:
        raise InvalidToken("not a JWT: the header is not JSON") from None
    if not isinstance(header, dict):
        raise InvalidToken("not a JWT: the header is not an object")
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in ALGORITHMS:
        raise InvalidToken(f"algorithm {alg!r} is not accepted (one of {', '.join(ALGORITHMS)})")
    return str(alg), kid if isinstance(kid, str) else None


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToken(f"claim {name!r} is not a number")
    return float(value)


def _check_claims(claims: Mapping[str, Any], policy: TokenPolicy, now_ms: int) -> VerifiedToken:
    now = now_ms / 1000
    if policy.issuer is not None and claims.get("iss") != policy.issuer:
        raise InvalidToken(f"issuer {claims.get('iss')!r} is not {policy.issuer!r}")
    aud = claims.get("aud")
    audiences = {aud} if isinstance(aud, str) else set(aud) if isinstance(aud, list) else set()
    if not audiences & policy.audiences:
        raise InvalidToken(
            f"audience {sorted(map(str, audiences))} is not one of {sorted(policy.audiences)}"
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
    try:
        claims = json.loads(_b64(parts[1]))
    except ValueError:
        raise InvalidToken("the payload is not JSON") from None
    if not isinstance(claims, dict):
        raise InvalidToken("the payload is not an object")
    return _check_claims(claims, policy, now_ms)
