"""The smaller trust items of DESIGN §15, each tried as an attacker would: notice data is secret-scanned,
the scan sees keys split, joined or hex-encoded, ingested text shows its hidden characters."""

from __future__ import annotations

import pytest

from tapgate.domain.errors import InvalidInput
from tapgate.domain.notices import check_notice

GITHUB = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"


def test_notice_data_that_holds_a_key_is_refused_like_ui() -> None:
    assert check_notice("goal.done", {"goal_id": "g-1"}, None, False).data == {"goal_id": "g-1"}
    with pytest.raises(InvalidInput) as refused:
        check_notice("goal.done", {"goal_id": GITHUB}, None, False)
    assert refused.value.field == "data.goal_id" and GITHUB not in refused.value.message
