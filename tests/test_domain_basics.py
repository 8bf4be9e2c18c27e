"""Pure pieces of the core: tokens, slugs, and text that is safe to show."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tapgate.domain.errors import Forbidden, InvalidInput, Unauthenticated
from tapgate.domain.ids import check_slug
from tapgate.domain.principals import Principal, Scope, TokenKind
from tapgate.domain.text import HIDDEN_CATEGORIES, INVISIBLE, check_display_text, unsafe_character
from tapgate.domain.tokens import check_secret, hash_secret, issue_token, parse_token


@pytest.mark.parametrize("kind", list(TokenKind))
def test_an_issued_token_parses_back_to_its_kind_tenant_and_credential(kind: TokenKind) -> None:
    issued = issue_token(kind, "acme-corp")
    presented = parse_token(issued.token)
    assert (presented.kind, presented.tenant_id, presented.credential_id) == (
        kind,
        "acme-corp",
        issued.credential_id,
    )
    assert issued.secret_hash == hash_secret(presented.secret)
    assert presented.secret not in issued.secret_hash
    check_secret(presented, issued.secret_hash)


def test_two_issued_tokens_share_nothing_secret() -> None:
    a, b = issue_token(TokenKind.USER, "acme"), issue_token(TokenKind.USER, "acme")
    assert a.credential_id != b.credential_id and a.secret_hash != b.secret_hash


def test_a_wrong_secret_is_refused() -> None:
    issued, other = issue_token(TokenKind.AGENT, "acme"), issue_token(TokenKind.AGENT, "acme")
    with pytest.raises(Unauthenticated):
        check_secret(parse_token(issued.token), other.secret_hash)


@given(st.text(max_size=120))
def test_anything_else_is_not_a_token(text: str) -> None:
    with pytest.raises(Unauthenticated):
        parse_token(text)


@pytest.mark.parametrize("value", ["ana", "desk-lamp", "a1-b2-c3"])
def test_slugs_are_lower_case_words_joined_by_dashes(value: str) -> None:
    assert check_slug(value, "user_id") == value


@pytest.mark.parametrize("value", ["Ana", "desk_lamp", "-ana", "ana-", "a--b", "", "a b", "ä"])
def test_anything_else_is_not_a_slug(value: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_slug(value, "user_id")
    assert refused.value.field == "user_id"


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("pay \u202eevil", "U+202E"),  # right-to-left override
        ("a\u200bb", "U+200B"),  # zero-width space
        ("tag\U000e0041", "U+E0041"),  # tag character
        ("bell\x07", "U+0007"),
        ("line\nbreak", "U+000A"),
        ("soft\u00adhyphen", "U+00AD"),
        ("filler\u3164", "U+3164"),
    ],
)
def test_text_a_person_reads_refuses_hidden_and_control_characters(text: str, found: str) -> None:
    assert unsafe_character(text) == found
    with pytest.raises(InvalidInput, match=re.escape(found)):
        check_display_text(text, "name", 100)


def _first_unsafe(text: str, allow_newlines: bool) -> str | None:
    """The rule, character by character (what the printable shortcut must agree with)."""
    for ch in text:
        if allow_newlines and ch in "\n\t":
            continue
        if unicodedata.category(ch) in HIDDEN_CATEGORIES or ch in INVISIBLE:
            return f"U+{ord(ch):04X}"
    return None


@settings(max_examples=400)
@given(
    text=st.text(st.characters(codec=None), max_size=40)
    | st.lists(
        st.sampled_from(["a", " ", "\n", "\t", "\u00a0", "\u2800", "\u3164", "\u200b", "é"]), max_size=8
    ).map("".join),
    allow_newlines=st.booleans(),
)
def test_the_printable_shortcut_finds_what_the_rule_finds(text: str, allow_newlines: bool) -> None:
    assert unsafe_character(text, allow_newlines) == _first_unsafe(text, allow_newlines)


def test_newlines_and_tabs_pass_where_allowed() -> None:
    assert unsafe_character("two\nlines\tand a tab", allow_newlines=True) is None
    assert check_display_text("Ana's phone ☎ 北京", "name", 100) == "Ana's phone ☎ 北京"


def test_a_principal_needs_its_kind_and_scope() -> None:
    agent = Principal("acme", "c1", TokenKind.AGENT, frozenset({Scope.TOOLS}), user_id="ana", agent_id="bot")
    agent.require(TokenKind.AGENT, scope=Scope.TOOLS)
    with pytest.raises(Forbidden, match="events"):
        agent.require(TokenKind.AGENT, scope=Scope.EVENTS)
    with pytest.raises(Forbidden, match="operator"):
        agent.require(TokenKind.OPERATOR)
    operator = Principal("acme", "c2", TokenKind.OPERATOR, frozenset())
    operator.require(TokenKind.OPERATOR, TokenKind.AGENT, scope=Scope.NOTICES)
    assert agent.actor == "agent:ana/bot"
    assert operator.actor == "operator:c2"
