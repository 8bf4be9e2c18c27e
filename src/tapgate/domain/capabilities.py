"""What sets each built-in capability apart, as one table: a capability any device may declare behaves
as its traits say, and no other module asks a capability's name what it does.

    name            tool of its own   agent-facing  message  confirmed on screen  session tool
    sms_send        yes               yes           yes      yes (Send)           -
    phone_actions   no                yes           yes      yes                  phone_action
    approvals       no                no            no       no                   -
    any other       yes               yes           no       when it says confirm -

A *message* reaches another person: a call to it is consequential to the policy whatever its kind,
and what it said is erased after ``retention_days``. A capability *confirmed on screen* is drafted by
the agent and finished by the person on the device (they read it and tap Send), so a call to it waits
the person's time, not the device's, and needs no approval by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

SMS_SEND: Final = "sms_send"
PHONE_ACTIONS: Final = "phone_actions"
APPROVALS: Final = "approvals"
PHONE_ACTION_TOOL: Final = "phone_action"  # the session tool phone_actions is offered as


@dataclass(frozen=True, slots=True)
class Traits:
    device_tool: bool = True  # granted, an agent sees and calls it as device__<id>__<name>
    agent_facing: bool = True  # its grant changes what an agent may see or call
    message: bool = False  # it says something to another person
    confirmed_on_screen: bool = False  # the person finishes each call on the device's own screen
    session_tool: str = ""  # offered to agents as this session tool, not as a tool of the device
    card_words: str = ""  # what a call asks to do, on the person's card ("" : use <its label>)
    mandate_words: str = ""  # what a mandate lets an agent do with it ("" : use <its name>)


PLAIN = Traits()
TRAITS: MappingProxyType[str, Traits] = MappingProxyType(
    {
        SMS_SEND: Traits(
            message=True,
            confirmed_on_screen=True,
            card_words="send a text message",
            mandate_words="send SMS",
        ),
        PHONE_ACTIONS: Traits(
            device_tool=False, message=True, confirmed_on_screen=True, session_tool=PHONE_ACTION_TOOL
        ),
        APPROVALS: Traits(device_tool=False, agent_facing=False),
    }
)


def traits(name: str) -> Traits:
    """The traits of the capability ``name``: a built-in's own, or those of any other capability."""
    return TRAITS.get(name, PLAIN)


# The names under which a call sends a message: each messaging capability, and its session tool.
MESSAGES: frozenset[str] = frozenset(
    name for capability, t in TRAITS.items() if t.message for name in (capability, t.session_tool) if name
)
MESSAGE_CAPABILITIES: tuple[str, ...] = tuple(name for name, t in TRAITS.items() if t.message)
CONFIRMED_ON_SCREEN: tuple[str, ...] = tuple(name for name, t in TRAITS.items() if t.confirmed_on_screen)
