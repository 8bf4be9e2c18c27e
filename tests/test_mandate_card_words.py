"""What the person reads on a mandate's card, word for word, and the server UTC day its daily count
belongs to whatever zone the server's clock is set to."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tapgate.domain.mandates import preview, utc_day
from tests.test_mandates_domain import LAMP_TOOL, NOW, SHOWN, _mandate


def _fields(**changes: Any) -> dict[str, str]:
    return {f["label"]: f["value"] for f in preview(_mandate(**changes), SHOWN, "Claude")["fields"]}


@pytest.mark.parametrize(
    ("constraints", "words"),
    [
        ({"to": {"equals": "+447700900001"}}, "to exactly '+447700900001'"),
        ({"level": {"equals": 3}}, "level exactly 3"),
        ({"level": {"equals": 2.5}}, "level exactly 2.5"),
        ({"on": {"equals": False}}, "on exactly False"),
        ({"to": {"one_of": ["Mum", "Dad"]}}, "to one of 'Mum', 'Dad'"),
        ({"level": {"one_of": [10, 2.5]}}, "level one of 10, 2.5"),
        ({"to": {"matches": "^\\+44"}}, "to matching the pattern ^\\+44"),
        ({"level": {"max": 60}}, "level at most 60"),
        ({"level": {"max": 0.5}}, "level at most 0.5"),
        ({"body": {"max_length": 160}}, "body at most 160 characters long"),
        ({"body": {"max_length": 0}}, "body at most 0 characters long"),
    ],
)
def test_each_kind_of_bound_reads_word_for_word(constraints: dict[str, Any], words: str) -> None:
    lamp = next(iter(constraints)) in ("on", "level")
    fields = (
        _fields(constraints=constraints, tools=(LAMP_TOOL,)) if lamp else _fields(constraints=constraints)
    )
    does = "use set_light on Desk lamp" if lamp else "send SMS on Ana's phone"
    assert fields["Values"] == words
    assert f"Claude may {does} with {words}, at most 5 a day and 40 in all, until " in fields["Mandate"]


def test_a_mandate_with_no_value_bound_and_no_daily_limit_reads_as_one_plain_sentence() -> None:
    fields = _fields(constraints={}, per_day=None)
    assert fields["Mandate"] == (
        "Claude may send SMS on Ana's phone, at most 40 in all, until 11 Dec 2026 23:30 UTC, without asking "
        "you each time — purpose: texts to Mum and Dad"
    )
    assert (fields["Values"], fields["Calls a day"]) == ("any values", "no daily limit")


@pytest.fixture
def server_clock_in_auckland(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local zone twelve hours ahead of UTC, as on a server set to New Zealand time."""
    monkeypatch.setenv("TZ", "<+12>-12")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("server_clock_in_auckland")
def test_the_daily_count_follows_the_utc_day_whatever_the_servers_own_zone() -> None:
    # 23:30 UTC on 4 December is already 5 December in Auckland: the count is still the 4th's
    assert datetime.fromtimestamp(NOW.timestamp()).day == 5  # the zone is in force
    assert utc_day(NOW) == "2026-12-04"
    assert utc_day(datetime(2026, 12, 5, 1, 0, tzinfo=timezone(timedelta(hours=2)))) == "2026-12-04"
    assert utc_day(NOW + timedelta(minutes=30)) == "2026-12-05"
    mandate = _mandate(used=3, used_today=2, day="2026-12-04")
    assert mandate.used_on(NOW) == 2
    assert mandate.used_on(NOW + timedelta(minutes=30)) == 0
    assert mandate.as_dict(NOW)["used_today"] == 2
    assert utc_day(datetime(2026, 12, 4, 23, 59, 59, tzinfo=UTC)) == "2026-12-04"
