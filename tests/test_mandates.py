"""Standing mandates over the HTTP API, on SQLite and PostgreSQL: an agent asks, only the person's approver
makes one live with its key, calls inside every bound then go through without a card (and say which
mandate let them), calls outside a bound still ask, and what a mandate never covers stays out of reach."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.adapters.store.counting import COUNTS
from tapgate.config import Settings
from tapgate.domain.approvals import action_sha256, sign_decision, signed_text
from tapgate.domain.events import Event
from tapgate.gateway import Gateway
from tapgate.services import events
from tests.conftest import asgi_client, tenant_name
from tests.world import LAMP, Key, World, bearer, device_body, new_key

ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
LAMP_TOOL = "device__desk_lamp__set_light"
HALL_TOOL = "device__hall_lamp__set_light"  # a lamp that does not ask
SMS_TOOL = "device__ana_phone__sms_send"
CONFIRMED_LAMP = LAMP | {"confirm": True}
MUM, DAD, STRANGER = "+447700900001", "+447700900002", "+447700900999"
POLICIES = (
    "version: 1\npolicies:\n"
    "  - name: texts-ask\n    action: device_use\n"
    '    condition: "capability equals sms_send"\n    decision: require_approval\n'
    '    message: "texts are checked by the person"\n'
)


class Home:
    """ana with her phone (an approver that sends SMS), a desk lamp that asks before each call, her user
    and agent tokens, and a rule that every text asks her."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.keys: dict[str, Key] = {"ana-phone": new_key(), "desk-lamp": new_key()}
        self.tokens: dict[str, str] = {}

    async def build(self) -> Home:
        w = self.world
        self.tokens["user"] = await w.person("ana")
        self.tokens["agent"] = await w.agent("ana")
        self.tokens["other-agent"] = await w.agent("ana", "other")
        self.tokens["bob"] = await w.person("bob")
        push = {"kind": "fcm", "token": "T"}
        self.tokens["ana-phone"] = await w.enrol(
            "ana",
            device_body(
                "ana-phone", [{"name": "sms_send"}], self.keys["ana-phone"], grants=["sms_send"], push=push
            ),
        )
        self.tokens["desk-lamp"] = await w.enrol(
            "ana",
            device_body(
                "desk-lamp", [CONFIRMED_LAMP], self.keys["desk-lamp"], grants=["set_light"], push=push
            ),
        )
        return self

    @property
    def gateway(self) -> Gateway:
        return self.world.client.app.state.gateway  # type: ignore[attr-defined,no-any-return]

    async def ask(self, token: str = "agent", **body: Any) -> Any:
        mandate = {
            "tools": [LAMP_TOOL],
            "constraints": {"brightness": {"max": 60}},
            "max_calls": 3,
            "per_day": 2,
            "expires_in_seconds": 86400,
            "purpose": "evening lights",
        } | body
        return await self.world.client.post("/v1/mandates", json=mandate, headers=bearer(self.tokens[token]))

    async def call(self, tool: str = LAMP_TOOL, token: str = "agent", **arguments: Any) -> dict[str, Any]:
        extra = {k: arguments.pop(k) for k in ("origin", "shadow") if k in arguments}
        r = await self.world.client.post(
            "/v1/invocations",
            json={"tool": tool, "arguments": arguments, **extra},
            headers=bearer(self.tokens[token]),
        )
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def card(self, approval_id: str) -> dict[str, Any]:
        r = await self.world.client.get("/v1/inbox", headers=bearer(self.tokens["ana-phone"]))
        assert r.status_code == 200, r.text
        return next(a for a in r.json()["approvals"] if a["id"] == approval_id)

    async def sign(
        self, approval: dict[str, Any], decision: str = "approved", device: str = "ana-phone"
    ) -> Any:
        sign = approval["sign"]
        text = signed_text(
            sign["format"],
            approval["id"],
            decision,
            approval["kind"],
            approval["subject"],
            sign["action_sha256"],
            sign["challenge"],
            sign["expires_at"],
        )
        body = {"decision": decision, "signature": sign_decision(self.keys[device].private, text)}
        return await self.world.client.post(
            f"/v1/approvals/{approval['id']}", json=body, headers=bearer(self.tokens[device])
        )

    async def live(self, **body: Any) -> str:
        r = await self.ask(**body)
        assert r.status_code == 202, r.text
        assert (await self.sign(await self.card(r.json()["approval_id"]))).status_code == 200
        return str(r.json()["mandate_id"])

    async def events(self) -> list[Event]:
        """What the agent's event stream carries."""
        caller = await self.gateway.authenticate(self.tokens["agent"])
        return await events.read(self.gateway.ctx, caller, 0)

    async def mandate(self, mandate_id: str, token: str = "user") -> Any:
        return await self.world.client.get(f"/v1/mandates/{mandate_id}", headers=bearer(self.tokens[token]))


@contextlib.asynccontextmanager
async def _home(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock | None = None, policies: str = POLICIES
) -> AsyncIterator[Home]:
    url = (
        request.getfixturevalue("sqlite_url")
        if engine == "sqlite"
        else request.getfixturevalue("postgres").app_url
    )
    path: Path = request.getfixturevalue("tmp_path") / "policies.yaml"
    await anyio.Path(path).write_text(policies)
    config = Settings(
        database_url=url, device_channel_enabled=True, device_sms_enabled=True, policies_file=str(path)
    )
    async with asgi_client(config, clock) as client:
        yield await Home(await World(client, tenant=tenant_name()).start()).build()


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_signed_mandate_lets_calls_inside_its_bounds_through_without_a_card(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        r = await home.ask()
        assert r.status_code == 202, r.text
        asked = r.json()
        assert asked["status"] == "awaiting_signature"
        # before the person signs, the lamp still asks, and says a mandate could spare the ask
        before = await home.call(on=True, brightness=40)
        assert before["status"] == "awaiting_approval" and before["mandate_id"] is None
        assert "a standing mandate could cover calls like this one" in before["reason"]
        card = await home.card(asked["approval_id"])
        assert card["kind"] == "mandate" and card["subject"] == asked["mandate_id"]
        assert (await home.sign(card)).status_code == 200
        view = (await home.mandate(asked["mandate_id"])).json()
        assert (view["status"], view["used"], view["used_today"]) == ("active", 0, 0)

        covered = await home.call(on=True, brightness=50)
        assert covered["status"] == "pending" and covered["mandate_id"] == asked["mandate_id"]
        assert covered["binding_code"] is None  # no card was opened
        again = await home.world.client.get(
            f"/v1/invocations/{covered['id']}", headers=bearer(home.tokens["agent"])
        )
        assert again.json()["mandate_id"] == asked["mandate_id"]
        # outside a bound, it asks: too bright, another agent
        assert (await home.call(on=True, brightness=80))["status"] == "awaiting_approval"
        assert (await home.call(token="other-agent", on=True, brightness=10))["status"] == "awaiting_approval"
        view = (await home.mandate(asked["mandate_id"])).json()
        assert (view["status"], view["used"], view["used_today"]) == ("active", 1, 1)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_mandate_stops_covering_at_its_daily_and_total_counts_and_its_window(
    engine: str, request: pytest.FixtureRequest
) -> None:
    clock = FrozenClock()
    async with _home(engine, request, clock) as home:
        mandate_id = await home.live(expires_in_seconds=3 * 86400)
        assert (await home.call(on=True, brightness=30))["mandate_id"] == mandate_id
        assert (await home.call(on=False, brightness=30))["mandate_id"] == mandate_id
        third = await home.call(on=True, brightness=30)
        assert third["status"] == "awaiting_approval" and third["mandate_id"] is None  # 2 a day
        clock.advance(86400)
        assert (await home.call(on=True, brightness=30))["mandate_id"] == mandate_id
        assert (await home.mandate(mandate_id)).json()["status"] == "exhausted"  # 3 in all
        assert (await home.call(on=True, brightness=30))["mandate_id"] is None
        short = await home.live(max_calls=10, per_day=None, expires_in_seconds=60)
        clock.advance(60)
        assert (await home.call(on=True, brightness=30))["mandate_id"] is None
        assert (await home.mandate(short)).json()["status"] == "expired"


@pytest.mark.parametrize("engine", ENGINES)
async def test_each_use_is_journalled_with_its_call_and_announced_with_its_count(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        mandate_id = await home.live(max_calls=1, per_day=None)
        covered = await home.call(on=True, brightness=30)
        types = [(e.type, e.data.get("mandate_id")) for e in await home.events()]
        for kind in ("mandate.requested", "mandate.active", "mandate.used", "mandate.exhausted"):
            assert (kind, mandate_id) in types
        used = next(e for e in await home.events() if e.type == "mandate.used")
        assert used.data["invocation_id"] == covered["id"] and used.data["used"] == 1
        journal = await home.world.client.get("/v1/audit?limit=1000", headers=bearer(home.world.operator))
        entries = journal.json()["entries"]
        # the call's own entry names the mandate and the count: a use needs no entry of its own
        assert "mandate.used" not in [e["action"] for e in entries]
        entry = next(e for e in entries if e["subject"] == covered["id"])
        assert entry["action"] == "invocation.created"
        assert entry["data"]["mandate_id"] == mandate_id and entry["data"]["mandate_used"] == 1
        r = await home.world.client.delete(f"/v1/mandates/{mandate_id}", headers=bearer(home.tokens["user"]))
        assert r.status_code == 204
        assert ("mandate.revoked", mandate_id) in [
            (e.type, e.data.get("mandate_id")) for e in await home.events()
        ]


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_revoked_mandate_covers_no_call_after(engine: str, request: pytest.FixtureRequest) -> None:
    async with _home(engine, request) as home:
        mandate_id = await home.live()
        assert (await home.call(on=True, brightness=30))["mandate_id"] == mandate_id
        r = await home.world.client.delete(f"/v1/mandates/{mandate_id}", headers=bearer(home.tokens["user"]))
        assert r.status_code == 204
        assert (await home.call(on=True, brightness=30))["status"] == "awaiting_approval"
        assert (await home.mandate(mandate_id)).json()["status"] == "revoked"


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_mandate_signed_or_spent_since_the_gateway_last_read_them_is_seen_at_the_next_call(
    engine: str, request: pytest.FixtureRequest
) -> None:
    """The gateway checks a call's bounds against the mandates it last read for the person; a call none
    of them covers, or whose use the store refuses, reads them again."""
    async with _home(engine, request) as home:
        once = await home.live(max_calls=1, per_day=None, constraints={"brightness": {"max": 60}})
        assert (await home.call(on=True, brightness=30))["mandate_id"] == once
        # spent since it was read: the store refuses its use, and the person is asked
        assert (await home.call(on=True, brightness=30))["status"] == "awaiting_approval"
        brighter = await home.live(max_calls=5, per_day=None, constraints={"brightness": {"max": 100}})
        # signed since the last read, and the only one that covers the call
        assert (await home.call(on=True, brightness=90))["mandate_id"] == brighter
        assert (await home.mandate(once)).json()["used"] == 1
        assert (await home.mandate(brighter)).json()["used"] == 1


@pytest.mark.parametrize("engine", ENGINES)
async def test_no_token_makes_a_mandate_live_only_an_approvers_signature(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        asked = (await home.ask()).json()
        approval = f"/v1/approvals/{asked['approval_id']}"
        for token in (home.world.operator, home.tokens["user"]):
            r = await home.world.client.post(approval, json={"decision": "approved"}, headers=bearer(token))
            assert r.status_code == 403, r.text
            assert r.json()["error"]["code"] == "forbidden"
        # the lamp answers only calls to itself: it cannot sign the person's mandate
        lamp = await home.world.client.get("/v1/inbox", headers=bearer(home.tokens["desk-lamp"]))
        assert [a["id"] for a in lamp.json()["approvals"]] == []
        card = await home.card(asked["approval_id"])
        assert (await home.sign(card, device="desk-lamp")).status_code == 403
        assert (await home.mandate(asked["mandate_id"])).json()["status"] == "awaiting_signature"
        assert (await home.call(on=True))["status"] == "awaiting_approval"
        assert (await home.sign(card, "denied")).status_code == 200
        assert (await home.mandate(asked["mandate_id"])).json()["status"] == "denied"


@pytest.mark.parametrize("engine", ENGINES)
async def test_the_mandate_card_states_every_bound_and_names_the_agent_as_its_other_cards_do(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        home.tokens["named"] = await home.world.token("ana", "agent", agent_id="claude", agent_name="Claude")
        asked = (
            await home.ask(
                "named", tools=[SMS_TOOL], constraints={"to": {"one_of": [MUM, DAD]}}, purpose="family"
            )
        ).json()
        card = await home.card(asked["approval_id"])
        assert {"label": "Agent", "value": "Claude"} in card["preview"]["fields"]
        assert card["arguments"]["agent_id"] == "claude"  # the id is signed, the name is shown
        shown = " ".join(f["value"] for f in card["preview"]["fields"])
        for words in (
            "Claude may send SMS on Ana phone",
            f"to one of '{MUM}', '{DAD}'",
            "at most 2 a day and 3 in all",
            "purpose: family",
        ):
            assert words in shown
        recomputed = action_sha256(
            card["tool"], card["subject"], card["kind"], card["arguments"], card["preview"]
        )
        assert recomputed == card["sign"]["action_sha256"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"tools": ["device__desk_lamp__set_lightx"]}, "unknown tool"),
        ({"tools": ["phone_action"]}, "unknown tool"),
        ({"constraints": {"colour": {"equals": "red"}}}, "'colour' is not a parameter of set_light"),
        ({"constraints": {"on": {"matches": "yes"}}}, "matches does not fit the boolean parameter 'on'"),
        ({"constraints": {"scene": {"matches": "(warm+)+"}}}, "a repeated group may not itself repeat"),
        ({"constraints": {"scene": {"matches": "[warm"}}}, "does not compile"),
        ({"expires_in_seconds": 31 * 86400}, "expires_in_seconds must be a whole number from 60 to 2592000"),
        ({"max_calls": 0}, "max_calls must be a whole number from 1 to 1000"),
    ],
)
async def test_a_mandate_out_of_bounds_is_a_400_with_its_reason_and_nothing_is_stored(
    body: dict[str, Any], reason: str, request: pytest.FixtureRequest
) -> None:
    async with _home("sqlite", request) as home:
        r = await home.ask(**body)
        assert r.status_code == 400, r.text
        assert reason in r.json()["error"]["message"]
        listed = await home.world.client.get("/v1/mandates", headers=bearer(home.tokens["user"]))
        assert listed.json()["mandates"] == []
        inbox = await home.world.client.get("/v1/inbox", headers=bearer(home.tokens["ana-phone"]))
        assert inbox.json()["approvals"] == []


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_mandate_never_covers_an_untrusted_origin_a_shadow_run_or_a_block_rule(
    engine: str, request: pytest.FixtureRequest
) -> None:
    block = POLICIES + (
        "  - name: no-bright-nights\n    action: device_use\n"
        '    condition: "deviceId equals desk-lamp"\n    decision: block\n    message: "Not the lamp"\n'
    )
    async with _home(engine, request) as home:
        await home.live(max_calls=100, per_day=None)
        assert (await home.call(on=True, brightness=30))["mandate_id"] is not None  # covered from the owner
        untrusted = await home.call(on=True, brightness=30, origin="untrusted")
        assert untrusted["status"] == "awaiting_approval" and untrusted["mandate_id"] is None
        assert "mandate" not in untrusted["reason"]  # containment is never delegated
        shadow = await home.call(on=True, brightness=30, shadow=True)
        assert shadow["status"] == "refused" and shadow["mandate_id"] is None
    async with _home(engine, request, policies=block) as home:
        await home.live(max_calls=100, per_day=None)
        blocked = await home.call(on=True, brightness=30)
        assert blocked["status"] == "refused" and blocked["reason"].startswith("[policy] Not the lamp")


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_mandate_never_covers_an_ungranted_capability_or_the_phones_own_send(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        lamp = await home.live(max_calls=100, per_day=None)
        sms = await home.live(tools=[SMS_TOOL], constraints={"to": {"one_of": [MUM, DAD]}})
        text = await home.call(SMS_TOOL, to=MUM, body="home at 6")
        # no card, but the text waits on the phone's compose sheet for the person's Send
        assert text["status"] == "pending" and text["mandate_id"] == sms
        assert (await home.call(SMS_TOOL, to=STRANGER, body="hi"))["status"] == "awaiting_approval"
        r = await home.world.client.put(
            "/v1/users/ana/devices/desk-lamp/grants",
            json={"grants": {"set_light": False}},
            headers=bearer(home.world.operator),
        )
        assert r.status_code == 200, r.text
        ungranted = await home.call(on=True, brightness=30)
        assert ungranted["status"] == "refused" and "not granted" in ungranted["reason"]
        assert (await home.mandate(lamp)).json()["used"] == 0


@pytest.mark.parametrize("engine", ENGINES)
async def test_mandates_are_read_by_their_person_and_agent_and_revoked_by_the_person_or_operator(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        mine = await home.live()
        any_agent = await home.live(agent_id=None)
        others = (await home.ask(token="other-agent")).json()["mandate_id"]
        client = home.world.client

        async def ids(token: str, query: str = "") -> set[str]:
            r = await client.get(f"/v1/mandates{query}", headers=bearer(token))
            assert r.status_code == 200, r.text
            return {m["mandate_id"] for m in r.json()["mandates"]}

        assert await ids(home.tokens["user"]) == {mine, any_agent, others}
        assert await ids(home.tokens["agent"]) == {mine, any_agent}
        assert await ids(home.world.operator, "?user_id=ana") == {mine, any_agent, others}
        assert await ids(home.tokens["bob"]) == set()
        assert (await home.mandate(others, "agent")).status_code == 404
        assert (await home.mandate(mine, "bob")).status_code == 404
        assert (
            await client.delete(f"/v1/mandates/{mine}", headers=bearer(home.tokens["bob"]))
        ).status_code == 404
        assert (
            await client.delete(f"/v1/mandates/{mine}", headers=bearer(home.tokens["agent"]))
        ).status_code == 403
        assert (
            await client.delete(f"/v1/mandates/{mine}", headers=bearer(home.world.operator))
        ).status_code == 204
        assert (
            await client.delete(f"/v1/mandates/{others}", headers=bearer(home.tokens["user"]))
        ).status_code == 204
        assert (await home.mandate(others)).json()["status"] == "revoked"
        # an unsigned mandate revoked takes its card off the phone
        inbox = await client.get("/v1/inbox", headers=bearer(home.tokens["ana-phone"]))
        assert [a["subject"] for a in inbox.json()["approvals"]] == []


@pytest.mark.parametrize("engine", ENGINES)
async def test_an_agent_the_person_said_wasnt_them_gets_nothing_under_its_mandate(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        mandate_id = await home.live(max_calls=100, per_day=None)
        asked = await home.call(on=True, brightness=90)  # past the mandate's bound: it asks
        r = await home.world.client.get("/v1/inbox", headers=bearer(home.tokens["ana-phone"]))
        card = next(a for a in r.json()["approvals"] if a["binding_code"] == asked["binding_code"])
        sign = card["sign"]
        text = signed_text(
            sign["format"], card["id"], "denied", card["kind"], card["subject"],
            sign["action_sha256"], sign["challenge"], sign["expires_at"],
        )  # fmt: skip
        body = {
            "decision": "denied",
            "not_me": True,
            "signature": sign_decision(home.keys["ana-phone"].private, text),
        }
        r = await home.world.client.post(
            f"/v1/approvals/{card['id']}", json=body, headers=bearer(home.tokens["ana-phone"])
        )
        assert r.status_code == 200, r.text
        paused = await home.call(on=True, brightness=10)
        assert paused["status"] == "refused" and "wasn't them" in paused["reason"]
        assert (await home.mandate(mandate_id)).json()["used"] == 0


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_mandate_whose_window_closed_is_marked_expired_and_announced_once(
    engine: str, request: pytest.FixtureRequest
) -> None:
    clock = FrozenClock()
    async with _home(engine, request, clock) as home:
        mandate_id = await home.live(expires_in_seconds=600)
        clock.advance(600)
        await home.gateway.sweep()
        await home.gateway.sweep()
        expired = [e for e in await home.events() if e.type == "mandate.expired"]
        assert [e.data["mandate_id"] for e in expired] == [mandate_id]
        assert (await home.mandate(mandate_id)).json()["status"] == "expired"
        assert (await home.call(on=True, brightness=30))["mandate_id"] is None


async def test_a_covered_call_commits_once_and_reads_and_spends_its_mandate_in_few_more_statements(
    request: pytest.FixtureRequest,
) -> None:
    """On SQLite, where every writer seals its own journal entries, so nothing else commits meanwhile."""
    async with _home("sqlite", request) as home:
        push = {"kind": "fcm", "token": "T"}  # as the desk lamp's: the same push queued for each call
        await home.world.enrol("ana", device_body("hall-lamp", [LAMP], grants=["set_light"], push=push))
        mandate_id = await home.live(max_calls=10, per_day=None)

        async def counted(tool: str) -> tuple[dict[str, Any], dict[str, int]]:
            before = COUNTS.as_dict()
            view = await home.call(tool, on=True, brightness=30)
            return view, {k: v - before[k] for k, v in COUNTS.as_dict().items()}

        for tool in (LAMP_TOOL, HALL_TOOL):  # the tokens and the policies read once
            await counted(tool)
        covered, spent = await counted(LAMP_TOOL)
        allowed, plain = await counted(HALL_TOOL)
        assert (covered["status"], covered["mandate_id"]) == ("pending", mandate_id)
        assert (allowed["status"], allowed["mandate_id"]) == ("pending", None)
        assert (
            (spent["transactions"], spent["writing"]) == (plain["transactions"], plain["writing"]) == (1, 1)
        )
        # the use spent and its count read back (SQLite has no cheap RETURNING), and its event (the journal
        # entry is the call's own): the bounds are checked against the live mandates this process read
        # for the person on an earlier call
        assert spent["statements"] - plain["statements"] == 3
