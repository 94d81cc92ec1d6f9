"""Who may log in with a password: the credentials file (a mounted Kubernetes Secret).

One file serves PLAIN and SCRAM, so operators keep one Secret. A user is given either a
`password` (simple; SCRAM credentials are derived from it at load with a fresh random salt)
or SCRAM hashes only (the Secret then holds nothing that logs in by itself to PLAIN, though
PLAIN still works for that user: its password is checked by deriving the StoredKey again).
Passwords are used as UTF-8 without SASLprep, as Kafka and its clients do.

    users:
      alice:
        password: s3cret
      bob:
        scram-sha-512: {salt: <base64>, iterations: 8192, storedKey: <base64>, serverKey: <base64>}
        scram-sha-256: {salt: <base64>, iterations: 4096, storedKey: <base64>, serverKey: <base64>}

Errors name the user and the field, never a value: the message goes to logs and to
`kubectl describe` of a pod that will not start.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeAlias

import yaml

SCRAM_HASHES: Mapping[str, str] = MappingProxyType(
    {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
)
"""SCRAM mechanism -> hashlib name (RFC 7677 and Kafka's SCRAM-SHA-512)."""
MIN_ITERATIONS = 4096
"""Kafka's ScramMechanism minimum; fewer makes a stolen Secret cheap to brute-force."""
MAX_ITERATIONS = 16384
"""Kafka's maximum: bounds the work a PLAIN login (and every client) does per attempt."""
SALT_BYTES = 16
_SCRAM_FIELDS = ("salt", "iterations", "storedKey", "serverKey")


class CredentialsError(ValueError):
    """The credentials file cannot be used; the message names where, never a secret."""


def salted_password(password: str, mechanism: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 SaltedPassword: Hi(password, salt, i) is PBKDF2 with HMAC-H."""
    return hashlib.pbkdf2_hmac(SCRAM_HASHES[mechanism], password.encode(), salt, iterations)


def scram_hmac(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, SCRAM_HASHES[mechanism]).digest()


def scram_hash(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(SCRAM_HASHES[mechanism], data).digest()


def client_key(mechanism: str, salted: bytes) -> bytes:
    return scram_hmac(mechanism, salted, b"Client Key")


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a SCRAM server keeps of a password (RFC 5802 section 3): enough to check a
    proof and to prove itself, not enough to log in as the user."""

    salt: bytes
    iterations: int
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)

    def matches(self, password: str, mechanism: str) -> bool:
        """Whether `password` derives this credential (PLAIN against SCRAM hashes)."""
        salted = salted_password(password, mechanism, self.salt, self.iterations)
        stored = scram_hash(mechanism, client_key(mechanism, salted))
        return hmac.compare_digest(stored, self.stored_key)


def scram_credential(
    password: str, mechanism: str, *, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """Derive a SCRAM credential (a random salt unless one is given)."""
    if mechanism not in SCRAM_HASHES:
        raise ValueError(f"{mechanism!r} is not a SCRAM mechanism ({', '.join(SCRAM_HASHES)})")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    salted = salted_password(password, mechanism, salt, iterations)
    stored = scram_hash(mechanism, client_key(mechanism, salted))
    server = scram_hmac(mechanism, salted, b"Server Key")
    return ScramCredential(salt, iterations, stored, server)


PLAIN_ORDER = ("SCRAM-SHA-512", "SCRAM-SHA-256")
"""Which of a user's SCRAM credentials a PLAIN password is checked against."""


@dataclass(frozen=True, slots=True)
class UserCredentials:
    """One user's entry: SCRAM credentials by mechanism name (a user given a password
    has both, derived at load)."""

    scram: Mapping[str, ScramCredential]

    @classmethod
    def from_password(cls, password: str) -> UserCredentials:
        return cls(MappingProxyType({m: scram_credential(password, m) for m in SCRAM_HASHES}))

    def plain_credential(self) -> tuple[str, ScramCredential] | None:
        """(mechanism, credential) a PLAIN password is checked against."""
        for mechanism in PLAIN_ORDER:
            if mechanism in self.scram:
                return mechanism, self.scram[mechanism]
        return None

    def verify_password(self, password: str) -> bool:
        """PLAIN's check: derive the StoredKey from `password` (PBKDF2, the cost a SCRAM
        client pays) and compare. Every user, and every unknown user (`decoy`), costs
        the same, so the time an answer takes does not say who exists."""
        found = self.plain_credential()
        return found is not None and found[1].matches(password, found[0])


Credentials: TypeAlias = Mapping[str, UserCredentials]
"""Username -> credentials, as loaded (read-only)."""


def typical(credentials: Credentials, mechanism: str) -> tuple[int, int]:
    """(iterations, salt length) of most users' `mechanism` credentials (the larger on a
    tie; MIN_ITERATIONS and SALT_BYTES when nobody has one): what an unknown user's
    decoy shows, so that neither the iteration count nor the salt says who exists."""
    counts: dict[tuple[int, int], int] = {}
    for user in credentials.values():
        credential = user.scram.get(mechanism)
        if credential is not None:
            shape = (credential.iterations, len(credential.salt))
            counts[shape] = counts.get(shape, 0) + 1
    if not counts:
        return MIN_ITERATIONS, SALT_BYTES
    return max(counts, key=lambda shape: (counts[shape], shape))


def plain_mechanism(credentials: Credentials) -> str:
    """The mechanism most users' PLAIN passwords are checked against (`PLAIN_ORDER`)."""
    counts = dict.fromkeys(PLAIN_ORDER, 0)
    for user in credentials.values():
        found = user.plain_credential()
        if found is not None:
            counts[found[0]] += 1
    return max(PLAIN_ORDER, key=lambda m: counts[m])


def decoy(
    credentials: Credentials, mechanism: str, secret: bytes, username: str
) -> ScramCredential:
    """A stable credential for a user that does not exist (or lacks `mechanism`): keyed
    by a per-server `secret`, so the same name always gets the same salt, shaped like
    most users' (`typical`), matched by no password or proof."""

    def derive(label: bytes) -> bytes:
        return scram_hmac(mechanism, secret, label + b"\0" + username.encode())

    iterations, salt_bytes = typical(credentials, mechanism)
    salt = (derive(b"salt") + derive(b"salt2"))[:salt_bytes]
    return ScramCredential(salt, iterations, derive(b"stored"), derive(b"server"))


def load_credentials(text: str) -> Credentials:
    """Parse a credentials file; raises CredentialsError (a ValueError) saying where."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # str(exc) quotes the offending line, which may hold a password: say only where.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise CredentialsError(f"credentials: not valid YAML{where}") from None
    if not isinstance(document, dict) or set(document) != {"users"}:
        raise CredentialsError("credentials: expected a mapping with one key, `users`")
    users = document["users"] or {}
    if not isinstance(users, dict):
        raise CredentialsError("credentials: `users` must map user names to their entries")
    return MappingProxyType({_name(name): _user(name, entry) for name, entry in users.items()})


def _name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise CredentialsError(f"credentials: user name {name!r}: must be a non-empty string")
    return name


def _user(name: str, entry: Any) -> UserCredentials:
    where = f"credentials: user {name!r}"
    scram_keys = {m.lower(): m for m in SCRAM_HASHES}
    expected = ", ".join(["password", *scram_keys])
    if not isinstance(entry, dict) or not entry:
        raise CredentialsError(f"{where}: expected a mapping with one of {expected}")
    for key in entry:
        if key != "password" and key not in scram_keys:
            raise CredentialsError(f"{where}: unknown field {str(key)!r} (expected {expected})")
    if "password" in entry:
        if len(entry) > 1:
            raise CredentialsError(f"{where}: give a password or SCRAM hashes, not both")
        password = entry["password"]
        if not isinstance(password, str) or not password:
            raise CredentialsError(f"{where}: password: must be a non-empty string (quote it)")
        try:
            return UserCredentials.from_password(password)
        except UnicodeEncodeError:
            raise CredentialsError(f"{where}: password: not encodable as UTF-8") from None
    scram = {m: _scram(f"{where}: {key}", m, entry[key]) for key, m in scram_keys.items()
             if key in entry}  # fmt: skip
    return UserCredentials(MappingProxyType(scram))


def _scram(where: str, mechanism: str, value: Any) -> ScramCredential:
    if not isinstance(value, dict) or set(value) != set(_SCRAM_FIELDS):
        fields = ", ".join(_SCRAM_FIELDS)
        raise CredentialsError(f"{where}: expected a mapping with exactly {fields}")
    iterations = value["iterations"]
    if not isinstance(iterations, int) or isinstance(iterations, bool):
        raise CredentialsError(f"{where}: iterations: must be an integer")
    if iterations < MIN_ITERATIONS:
        raise CredentialsError(
            f"{where}: iterations: {iterations} is below the minimum of {MIN_ITERATIONS}"
        )
    if iterations > MAX_ITERATIONS:
        raise CredentialsError(
            f"{where}: iterations: {iterations} is above the maximum of {MAX_ITERATIONS}"
        )
    size = hashlib.new(SCRAM_HASHES[mechanism]).digest_size
    return ScramCredential(
        salt=_base64(where, "salt", value["salt"], None),
        iterations=iterations,
        stored_key=_base64(where, "storedKey", value["storedKey"], size),
        server_key=_base64(where, "serverKey", value["serverKey"], size),
    )


def _base64(where: str, name: str, value: Any, size: int | None) -> bytes:
    try:
        data = base64.b64decode(value, validate=True) if isinstance(value, str) else None
    except (ValueError, binascii.Error):  # binascii.Error: bad padding; ValueError: non-ASCII
        data = None
    if data is None:
        raise CredentialsError(f"{where}: {name}: must be base64 text")
    if not data or (size is not None and len(data) != size):
        wanted = f"{size} bytes" if size is not None else "at least one byte"
        raise CredentialsError(f"{where}: {name}: must decode to {wanted}")
    return data


def render_user(username: str, scram: Mapping[str, ScramCredential]) -> str:
    """One user's hashed entry as a credentials file (`kgroups credentials hash`): the
    `username:` block pastes under an existing file's `users:`."""
    unknown = set(scram) - set(SCRAM_HASHES)
    if unknown:
        raise ValueError(f"not SCRAM mechanisms: {', '.join(sorted(unknown))}")
    entry = {
        mechanism.lower(): {
            "salt": base64.b64encode(c.salt).decode(),
            "iterations": c.iterations,
            "storedKey": base64.b64encode(c.stored_key).decode(),
            "serverKey": base64.b64encode(c.server_key).decode(),
        }
        for mechanism, c in scram.items()
    }
    return yaml.safe_dump({"users": {username: entry}}, sort_keys=False)
