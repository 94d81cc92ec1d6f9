"""`build` fills what a version lacks and drops what it does not have, but a name that no
version of the message has is a typo, and is refused instead of silently dropped."""

from __future__ import annotations

import pytest
from kio.schema.describe_groups.v0 import response as dg0
from kio.schema.heartbeat.v0 import request as hb0
from kio.schema.heartbeat.v4 import request as hb4

from kgroups.protocol.build import UnknownField, build
from kgroups.protocol.extensions import DescribedGroupV5


def test_a_field_of_a_later_version_is_dropped_from_an_earlier_one() -> None:
    values = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": "i"}
    assert not hasattr(build(hb0.HeartbeatRequest, values), "group_instance_id")
    assert build(hb4.HeartbeatRequest, values).group_instance_id == "i"


def test_a_name_no_version_has_is_refused() -> None:
    with pytest.raises(UnknownField, match="generation"):
        build(hb4.HeartbeatRequest, {"group_id": "g", "generation": 1})
    with pytest.raises(UnknownField, match="memberid"):  # nested entities too
        build(dg0.DescribeGroupsResponse, {"groups": [{"group_id": "g", "memberid": "x"}]})


def test_an_extension_knows_its_own_fields_and_its_bases() -> None:
    group = build(DescribedGroupV5, {"group_id": "g", "generation_id": 3, "leader_id": "m"})
    assert (group.generation_id, group.leader_id) == (3, "m")
    with pytest.raises(UnknownField):
        build(DescribedGroupV5, {"group_id": "g", "leader": "m"})
