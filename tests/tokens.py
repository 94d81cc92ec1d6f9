"""Test token issuers: a signing key, its JWKS document, and JWTs it signs (what an OIDC
issuer, or a Kubernetes API server's service-account signer, does), with `cryptography`.

`Issuer.from_pem` signs with an existing key: the test control plane's own
service-account key, for tokens only the real API server could otherwise make (expired
ones: TokenRequest will not issue a token shorter than 10 minutes)."""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(n: int, size: int | None = None) -> str:
    return b64(n.to_bytes(size or (n.bit_length() + 7) // 8, "big"))


def segment(obj: Any) -> str:
    return b64(json.dumps(obj, separators=(",", ":")).encode())


@dataclass
class Issuer:
    key: PrivateKey = field(default_factory=lambda: rsa.generate_private_key(65537, 2048))
    kid: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    iss: str = "https://issuer.test"

    @classmethod
    def from_pem(cls, path: Path, kid: str, iss: str) -> Issuer:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        assert isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey)
        return cls(key, kid, iss)

    @property
    def alg(self) -> str:
        return "RS256" if isinstance(self.key, rsa.RSAPrivateKey) else "ES256"

    def jwk(self) -> dict[str, str]:
        public = self.key.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            n = public.public_numbers()
            return {"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256",
                    "n": _uint(n.n), "e": _uint(n.e)}  # fmt: skip
        p = public.public_numbers()
        return {"kty": "EC", "kid": self.kid, "use": "sig", "alg": "ES256", "crv": "P-256",
                "x": _uint(p.x, 32), "y": _uint(p.y, 32)}  # fmt: skip

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self.jwk()]}

    def sign(self, header: dict[str, Any], claims: dict[str, Any]) -> str:
        return self.sign_text(json.dumps(header, separators=(",", ":")),
                              json.dumps(claims, separators=(",", ":")))  # fmt: skip

    def sign_text(self, header: str, claims: str) -> str:
        """A token whose header and claims are exactly these texts (JSON or not)."""
        signed = f"{b64(header.encode())}.{b64(claims.encode())}".encode()
        if isinstance(self.key, rsa.RSAPrivateKey):
            signature = self.key.sign(signed, padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = decode_dss_signature(self.key.sign(signed, ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signed.decode()}.{b64(signature)}"

    def token(
        self,
        sub: str = "system:serviceaccount:default:app",
        aud: str | list[str] = "kgroups",
        *,
        lifetime_s: float = 600,
        now: float | None = None,
        **claims: Any,
    ) -> str:
        now = time.time() if now is None else now
        body = {"iss": self.iss, "sub": sub, "aud": aud, "iat": int(now), "nbf": int(now),
                "exp": int(now + lifetime_s), **claims}  # fmt: skip
        return self.sign({"alg": self.alg, "kid": self.kid, "typ": "JWT"}, body)
