"""The rebalance row's check (tests/support/groups.py ``joined``): the replicas count as joined
only when every group has a member it did not have before and every member owns a partition."""

from __future__ import annotations

import pytest

from tests.support.groups import Member, joined

A = Member("a-1", "storage", (("t.session.input", 0), ("t.session.input", 1)))
A_ALL = Member("a-1", "storage", (("t.session.input", 0), ("t.session.input", 1),
                                  ("t.session.input", 2)))
B = Member("b-1", "storage", (("t.session.input", 2),))
B_NONE = Member("b-1", "storage", ())
BEFORE = {"g": [A_ALL]}

# the group now → what is missing ("" = joined)
CASES = [
    ([A, B], ""),
    ([A_ALL], "no new member"),  # the replica never joined
    ([A_ALL, B_NONE], "members without partitions ['b-1']"),  # joined, rebalance not done
    ([B], ""),  # the first one gone, the new one owns everything: still a new owning member
    ([], "no new member"),
]


@pytest.mark.parametrize(("now", "missing"), CASES)
def test_a_replica_joined_only_with_partitions_of_its_own(now: list[Member], missing: str
                                                           ) -> None:
    got = joined(BEFORE, {"g": now})
    assert (missing in " ".join(got)) if missing else got == [], got


def test_every_group_must_have_its_new_member() -> None:
    got = joined({"g": [A_ALL], "h": [A_ALL]}, {"g": [A, B], "h": [A_ALL]})
    assert got == ["h: no new member (members 1)"]
