"""Between the assignors and the wire: what a member sends in JoinGroup, what a leader reads.

Every assignor gets a ConsumerProtocolSubscription v3 (topics, owned partitions, the
generation of that ownership, rack), as Java's `ConsumerCoordinator.metadata()` sends it.
The user data differs per assignor, again as in Java, so Java, kafka-python and aiokafka
members in the same group understand us and we understand them:

* `sticky` puts its previous assignment and generation in user data (Java's layout; the
  eager protocol revokes before joining, so the owned list is empty by then);
* `cooperative-sticky` puts its generation in user data (read only from pre-v2 members);
* the others put nothing.

On the leader's side, `member_spec` turns one member's metadata into the `MemberSpec` the
assignor needs, choosing where ownership comes from the way the Java assignor does. A
member whose metadata cannot be parsed is treated as owning nothing (Java logs and does
the same), rather than failing the whole group's assignment.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kgroups.client.assignors.spec import MemberSpec
from kgroups.protocol.consumer import (
    ConsumerProtocolError,
    Subscription,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    encode_subscription,
)
from kgroups.protocol.groups import NO_GENERATION

log = logging.getLogger(__name__)

Owned = Mapping[str, tuple[int, ...]]


def subscription_metadata(
    assignor: str,
    topics: tuple[str, ...],
    *,
    owned: Owned,
    generation: int,
    rack: str | None,
    sticky_memory: tuple[Owned, int],
) -> bytes:
    """The JoinGroup protocol metadata for `assignor`.

    `owned` is what the member holds right now (empty for eager after revocation);
    `sticky_memory` is the last assignment it received and its generation, which the eager
    sticky assignor remembers across the revocation.
    """
    user_data: bytes | None = None
    if assignor == "sticky":
        remembered, remembered_generation = sticky_memory
        user_data = encode_sticky_user_data(remembered, remembered_generation)
    elif assignor == "cooperative-sticky":
        user_data = encode_cooperative_user_data(generation)
    return encode_subscription(
        Subscription(
            topics=topics, user_data=user_data, owned=owned, generation=generation, rack=rack
        )
    )


def member_spec(
    assignor: str, member_id: str, instance_id: str | None, metadata: bytes
) -> MemberSpec:
    """What the leader's `assignor` should believe about one member."""
    try:
        sub = decode_subscription(metadata)
    except ConsumerProtocolError as exc:
        log.warning("member %s sent unreadable metadata (%s); treating it as subscribed "
                    "to nothing", member_id, exc)  # fmt: skip
        return MemberSpec(member_id, frozenset(), {}, NO_GENERATION, instance_id, None)
    owned: Owned = sub.owned
    generation = sub.generation
    if assignor == "sticky":
        # Java's StickyAssignor reads ownership only from its user data: eager members
        # have revoked everything by the time they join.
        remembered, remembered_generation = decode_sticky_user_data(sub.user_data)
        owned = remembered
        generation = NO_GENERATION if remembered_generation is None else remembered_generation
    elif assignor == "cooperative-sticky" and sub.version < 2:
        from_user_data = decode_cooperative_user_data(sub.user_data)
        generation = NO_GENERATION if from_user_data is None else from_user_data
    return MemberSpec(
        member_id=member_id,
        topics=frozenset(sub.topics),
        owned=owned,
        generation=generation,
        instance_id=instance_id,
        rack=sub.rack,
    )
