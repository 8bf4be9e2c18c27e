"""The pure rules of pushing: what a row's push says, how a burst coalesces, the cap, the retry times,
and what a notice may carry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tapgate.domain.devices import PushTarget
from tapgate.domain.errors import InvalidInput
from tapgate.domain.notices import check_notice
from tapgate.domain.push import GENERIC_BODIES, GENERIC_TITLE, OutboxItem, Plan, plan_pushes, retry_at

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TARGET = PushTarget("fcm", "token")


def _item(
    n: int, device: str = "dev-a", user: str = "ana", event: str = "invocation.pending", **f: Any
) -> OutboxItem:
    return OutboxItem(
        tenant_id="t",
        delivery_id=f"d-{n}",
        device_uid=device,
        user_id=user,
        event=event,
        subject_id=f"s-{n}",
        not_before=NOW + timedelta(seconds=n),
        created_at=NOW,
        **f,
    )


def _plan(
    items: list[OutboxItem], pushed: dict[str, int] | None = None, last: dict[str, Any] | None = None
) -> Plan:
    """The plan at NOW + 100 s, with a cap of 3 and a 5-second pause."""
    return plan_pushes(
        items, NOW + timedelta(seconds=100), pushed or {}, last or {}, cap=3, coalesce_seconds=5
    )


def test_a_row_becomes_a_push_naming_only_its_device_and_what_it_announces() -> None:
    call = _item(1).message("ana-phone", TARGET)
    assert (call.event, call.device_id, call.user_id, call.delivery_id) == (
        "invocation.pending",
        "ana-phone",
        "ana",
        "d-1",
    )
    assert dict(call.data) == {"invocation_id": "s-1"}
    assert (call.title, call.body) == (GENERIC_TITLE, GENERIC_BODIES["invocation.pending"])
    approval = _item(2, event="approval.requested").message("ana-phone", TARGET)
    assert dict(approval.data) == {"approval_id": "s-2"}
    notice = _item(3, event="goal.done", data={"goal_id": "g-1"}).message("ana-phone", TARGET)
    assert dict(notice.data) == {"goal_id": "g-1", "notice_id": "s-3"}
    assert notice.body == GENERIC_BODIES["goal.done"]
    worded = _item(4, event="goal.done", title="Flights", body="Three found").message("ana-phone", TARGET)
    assert (worded.title, worded.body) == ("Flights", "Three found")


def test_rows_for_one_device_and_event_become_one_push_carried_by_the_oldest() -> None:
    plan = _plan([_item(3), _item(1), _item(2), _item(4, event="goal.done"), _item(5, device="dev-b")])
    assert [i.delivery_id for i in plan.send] == ["d-1", "d-4", "d-5"]
    assert sorted(i.delivery_id for i in plan.coalesced) == ["d-2", "d-3"]
    assert plan.capped == plan.deferred == ()


def test_a_device_pushed_within_the_pause_waits_for_its_end() -> None:
    pushed_at = NOW + timedelta(seconds=98)
    plan = _plan([_item(1), _item(2), _item(3, device="dev-b")], last={"dev-a": pushed_at})
    assert [i.delivery_id for i in plan.send] == ["d-3"]
    assert [(i.delivery_id, until) for i, until in plan.deferred] == [
        ("d-1", pushed_at + timedelta(seconds=5)),
        ("d-2", pushed_at + timedelta(seconds=5)),
    ]
    later = _plan([_item(1)], last={"dev-a": NOW + timedelta(seconds=95)})
    assert [i.delivery_id for i in later.send] == ["d-1"]  # the pause is over at its very end


def test_a_user_at_the_cap_gets_nothing_more_and_the_cap_counts_this_batch_too() -> None:
    items = [_item(n, device=f"dev-{n}") for n in range(4)] + [_item(9, device="dev-9", user="bob")]
    plan = _plan(items, pushed={"ana": 1})
    assert [i.delivery_id for i in plan.send] == ["d-0", "d-1", "d-9"]
    assert [i.delivery_id for i in plan.capped] == ["d-2", "d-3"]


def test_a_failed_push_is_tried_again_after_each_wait_then_given_up() -> None:
    assert retry_at(1, (2.0, 10.0), NOW) == NOW + timedelta(seconds=2)
    assert retry_at(2, (2.0, 10.0), NOW) == NOW + timedelta(seconds=10)
    assert retry_at(3, (2.0, 10.0), NOW) is None
    assert retry_at(1, (), NOW) is None


def test_a_notice_keeps_its_ids_and_flags_and_drops_its_words_unless_they_may_be_shown() -> None:
    data = {"goal_id": "g-1", "urgent": True, "steps": 3, "score": 0.5, "ref": "run:42"}
    quiet = check_notice("goal.done", data, {"title": " Flights ", "body": "Three found"}, show_text=False)
    assert (quiet.event, dict(quiet.data), quiet.title, quiet.body) == ("goal.done", data, None, None)
    shown = check_notice("goal.done", None, {"title": " Flights ", "body": ""}, show_text=True)
    assert (dict(shown.data), shown.title, shown.body) == ({}, "Flights", None)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"note": "two words"}, "data.note"),
        ({"x": float("inf")}, "data.x"),
        ({"gcm_x": "1"}, "data"),
        ({"notice_id": "n-1"}, "data.notice_id"),
        ({"event": "x"}, "data.event"),
    ],
)
def test_a_notice_refuses_data_that_is_not_an_id_a_number_or_a_flag(data: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_notice("goal.done", data, None, show_text=False)
    assert refused.value.field == field
