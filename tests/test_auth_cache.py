"""The cache of who a token is forgets a tenant the moment its auth notification comes, and never keeps
what a read under way at that moment saw: that read may predate a revocation another process announced."""

from __future__ import annotations

from tapgate.domain.principals import Principal, TokenKind
from tapgate.services.authcache import AuthCache

ANA = Principal("acme", "tok-1", TokenKind.USER, frozenset(), user_id="ana")


def _cache() -> AuthCache:
    return AuthCache(lambda: 0.0)


def test_a_read_kept_with_no_notification_since_is_remembered() -> None:
    cache = _cache()
    since = cache.epoch()
    cache.keep("secret", ANA, since=since)
    assert cache.principal("secret") == ANA


def test_a_tenants_notification_drops_what_was_kept_for_it_and_nothing_else() -> None:
    cache = _cache()
    bob = Principal("globex", "tok-2", TokenKind.USER, frozenset(), user_id="bob")
    cache.keep("ana-secret", ANA, since=cache.epoch())
    cache.keep("bob-secret", bob, since=cache.epoch())
    cache.on_notify("acme:auth")
    assert cache.principal("ana-secret") is None
    assert cache.principal("bob-secret") == bob


def test_a_read_that_a_notification_overtook_is_not_kept() -> None:
    """The race a second gateway met: the read starts, the token is revoked and announced, the read
    returns the token as it was. Keeping it would trust a revoked token for the cache's whole life."""
    cache = _cache()
    since = cache.epoch()  # the database read starts
    cache.on_notify("acme:auth")  # another process revoked the token and said so
    cache.keep("secret", ANA, since=since)  # the read returns what it saw before the revocation
    assert cache.principal("secret") is None


def test_a_notification_to_every_waiter_or_a_clear_also_overtakes_a_read() -> None:
    for overtake in (lambda c: c.on_notify(None), AuthCache.clear):
        cache = _cache()
        since = cache.epoch()
        overtake(cache)
        cache.keep("secret", ANA, since=since)
        assert cache.principal("secret") is None


def test_notifications_on_other_keys_do_not_overtake_a_read() -> None:
    cache = _cache()
    since = cache.epoch()
    cache.on_notify("acme:device:lamp")
    cache.keep("secret", ANA, since=since)
    assert cache.principal("secret") == ANA
