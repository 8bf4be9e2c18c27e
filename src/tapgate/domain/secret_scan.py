"""The hardline scan: outbound text that looks like a secret is refused before anything is written.

Every text tapgate would send for an agent (an SMS body, a draft, a URL, any string argument) passes
``check_outbound`` before the invocation row exists. ``scan`` returns the first
finding: a ``kind`` and a span, never the matched text, so no repr, message or log line can carry it.

Why hand-written patterns and not a library. detect-secrets (Yelp) 1.5.0 was measured on
tests/data/secret_corpus.json. Used as designed, as a file scanner, it found 62% of the secrets (none of
the Anthropic, Shopify, Hugging Face, Google OAuth, tapgate, Azure SAS or client-secret shapes, nor new
OpenAI keys), flagged 2.4% of the ordinary texts and cost about 0.7 ms a text; its in-memory line scan
found 48% at 0.7 to 1 ms for a 1,000-character SMS; its ad-hoc string mode found 99% but flagged 96% of
the ordinary texts (every word is a candidate) at 3 to 6 ms an SMS. Its maintained fork
bc-detect-secrets 1.5.52 found 53% and flagged 3.4%. ggshield needs GitGuardian's service, trufflehog's
Python package is the abandoned v2, and llm-guard wraps detect-secrets under a machine-learning stack.
So the rules here are compiled regular expressions informed by gitleaks' published rule set (which
prefixes, which lengths, which keywords), each run only when its literal prefix is in one of the text's
long token runs, so most texts run none of them.

Decisions, each kept by the corpus:
- Provider prefixes are matched case-sensitively, as the providers issue them.
- A bare hexadecimal run (a git commit, a checksum, an Ethereum address, a UUID) is an identifier, not a
  secret; hex is refused only when a keyword names it (``token=…``, ``api_key: …``) or a provider's shape
  fits it. IBANs, tracking numbers, order numbers and one-time codes are not credentials here either;
  payment card numbers are personal data, a question for policy rather than for this scan.
- A value named by a keyword (password, secret, token, api key, auth, credentials, and "password" in a
  few languages) is refused when it is at least 8 characters and mixes letters and digits, or is long and
  random-looking; "password: see the fridge", placeholders such as ``<your key>`` or ``${TOKEN}`` and
  names such as ``settings.API_KEY`` pass. A memorable password written out after the word does not.
- An unnamed run of 32 or more base64 characters is refused when it mixes upper case, lower case and
  digits, changes between them often, and has a Shannon entropy of at least 4.0 bits a character, unless
  it is part of a URL (document, video and share ids), is a path or an identifier made of words, decodes
  to plain text that holds no secret (base64 of a file name), or is an OpenSSH public key or a legacy
  Bitcoin address (both are meant to be shared).
- A URL is refused when it embeds a password (``https://user:pass@host``), not for a user name alone.
- The text is scanned in its NFKC form, so full-width look-alikes do not hide a key; spans index that form,
  which is the text itself unless it held compatibility characters.
- A key written so the plain scan misses it is looked for too. The text with its
  separators removed (whitespace, and each of dashes, dots, underscores, slashes and commas in turn, the
  providers' prefixes that hold one kept whole), and all of a call's strings joined, are searched for the
  providers' shapes; a key may start or end where the text was joined though a word touches it there (a
  key in short lines after a word), and a match counts only when it is as jumpy as a random token or cut
  into even pieces with a digit in it (so words run together, ``+442079460958:Annasays…`` or
  ``VISITASIATHIS…``, are not a token). A run of 32 or more hex digits, and a base64 run of 20 to 4,096
  characters, that decodes to text is scanned as that text. The text as it reads is scanned as well:
  without its invisible and format characters (zero-width, soft hyphens, variation selectors), and with
  its percent-encoding undone, once and at most twice. A provider's token whose alphabet has one case
  (AWS access key ids, age, New Relic, Postman, Twilio) is matched in either case, as lower-casing it
  loses nothing. Such a finding's span is the whole text (or the encoded run). Every one of these is
  bounded by the text's length: no decoded text is decoded again.
- An integrity hash (``sha512-…``: base64 of exactly a digest's length) and base64 that starts like a
  file (an image in a ``data:`` URI) are not secrets; base64 of text in a ``data:`` URI is scanned.
"""

from __future__ import annotations

import base64
import binascii
import functools
import itertools
import json
import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote

from tapgate.domain.errors import SecretRefused
from tapgate.domain.text import INVISIBLE

__all__ = ["SecretFinding", "SecretRefused", "check_outbound", "scan"]


@dataclass(frozen=True, slots=True)
class SecretFinding:
    """Where a secret-like value is: its kind and its span, never its text."""

    kind: str
    start: int
    end: int


def check_outbound(texts: Iterable[tuple[str, str]]) -> None:
    """Scan each (field name, text) pair; raise SecretRefused for the first text that holds a secret,
    then for a key split across the texts (all of them joined, in order)."""
    pairs = list(texts)
    for field, text in pairs:
        finding = scan(text)
        if finding is not None:
            raise SecretRefused(field, finding)
    if len(pairs) > 1:
        parts = [_nfkc(text) for _, text in pairs]
        joined = "".join(parts)
        joints = frozenset(itertools.accumulate(len(part) for part in parts[:-1]))
        finding = _shapes(joined, _lower(joined), cuts=functools.partial(frozenset, joints))
        finding = finding or _split_token(joined)
        if finding is not None:
            raise SecretRefused(" + ".join(field for field, _ in pairs), finding)


def scan(text: str) -> SecretFinding | None:
    """The first secret in ``text``, by rule order (provider shapes first, entropy last), or None; then a
    key hidden: split by separators, hex- or base64-encoded, broken by invisible characters or
    percent-encoded.

    Never raises, whatever the text.
    """
    text = _nfkc(text)
    return _scan(text, decode_base64=True) or _hidden(text)


def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)  # returns ``text`` itself when it is already normal


# --- rules ------------------------------------------------------------------------------------------

_Check = Callable[[re.Match[str]], bool]

_TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "_-")
_RIGHT_EDGE = r"(?![A-Za-z0-9_\-])"
# Every provider token is at least 20 characters of these; their prefixes are looked up only in such runs,
# which most texts do not have, so a text pays for the few rules whose prefix it holds.
_LONG_RUN = re.compile(r"[a-z0-9_\-+/=.~:%]{20,}")


@dataclass(frozen=True, slots=True)
class _Rule:
    """One shape. It runs only when one of its lower-case ``keywords`` is in the text: in a long token run
    for a provider's prefix (``in_run``), anywhere for a word that gives context."""

    kind: str
    keywords: tuple[str, ...]
    pattern: re.Pattern[str]
    open_pattern: re.Pattern[str]  # ``pattern`` without its right edge, for text joined from pieces
    check: _Check | None
    in_run: bool = False
    group: int = 0  # the part of the match that is the secret, for the span


# The look-behind right after the literal keeps "eyJeyJeyJ…" linear; in joined text, where a word may
# touch a key, it is left out.
_EYJ_ALONE = r"(?<![A-Za-z0-9_\-]eyJ)"


def _token(
    kind: str, keywords: str, pattern: str, check: _Check | None = None, any_case: bool = False
) -> _Rule:
    """A token that starts with a provider's prefix; no token character may touch it on either side.
    ``any_case`` for a token whose alphabet has one case, so that lower-casing it loses nothing."""
    flags = re.IGNORECASE if any_case else 0
    return _Rule(
        kind,
        tuple(keywords.split("|")),
        re.compile(pattern + _RIGHT_EDGE, flags),
        re.compile(pattern.replace(_EYJ_ALONE, ""), flags),
        check,
        in_run=True,
    )


def _context(kind: str, keywords: str, pattern: str, check: _Check | None = None, group: int = 1) -> _Rule:
    """A secret found by the words around it; ``group`` is the secret itself."""
    compiled = re.compile(pattern)
    return _Rule(kind, tuple(keywords.split("|")), compiled, compiled, check, group=group)


def _entropy(value: str) -> float:
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _class_of(ch: str) -> int:
    if ch.isdigit():
        return 0
    if ch.isupper():
        return 1
    if ch.islower():
        return 2
    return 3


def _switch_ratio(value: str) -> float:
    """How often adjacent characters change class (digit, upper, lower, other): high for random tokens."""
    changes = sum(_class_of(a) != _class_of(b) for a, b in itertools.pairwise(value))
    return changes / max(len(value) - 1, 1)


def _mixed_case(value: str) -> bool:
    return any(c.isupper() for c in value) and any(c.islower() for c in value)


def _b64decode(value: str) -> bytes | None:
    stripped = value.rstrip("=")
    padded = stripped + "=" * (-len(stripped) % 4)
    try:
        if "-" in value or "_" in value:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None


_LINE_BREAKS = str.maketrans("\n\r\t", "   ")


def _as_text(raw: bytes | None) -> str | None:
    """``raw`` as text when it is UTF-8 that prints (line breaks allowed), else None."""
    if raw is None:
        return None
    try:
        decoded = raw.decode()
    except UnicodeDecodeError:
        return None
    return decoded if decoded.translate(_LINE_BREAKS).isprintable() else None


def _b64text(value: str) -> str | None:
    """``value`` decoded from base64 when that gives printable text, else None."""
    return _as_text(_b64decode(value))


def _jwt_header(match: re.Match[str]) -> bool:
    raw = _b64decode(match.group(1))
    if raw is None:
        return False
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(header, dict) and "alg" in header


def _discord_user_id(match: re.Match[str]) -> bool:
    # Its pattern bounds the part to 18 to 21 bytes: a snowflake's length.
    raw = _b64decode(match.group(1))
    return raw is not None and raw.isdigit()


_USER_AND_PASSWORD = re.compile(r"[^\s:]{1,128}:\S{4,}")


def _basic_credentials(match: re.Match[str]) -> bool:
    decoded = _b64text(match.group(1))
    return decoded is not None and _USER_AND_PASSWORD.fullmatch(decoded) is not None


def _random_looking(match: re.Match[str]) -> bool:
    value = match.group(1)
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value) and _entropy(value) >= 3.0


def _aws_secret(match: re.Match[str]) -> bool:
    value = match.group(1)
    return _mixed_case(value) and any(c.isdigit() for c in value) and _entropy(value) >= 4.0


_MASKED = frozenset("*xX.•")
_PLACEHOLDER_PASSWORDS = frozenset({"password", "pass", "passwd", "secret", "changeme", "pwd", "token"})


def _real_password(match: re.Match[str]) -> bool:
    password = match.group(2)
    if set(password) <= _MASKED or password[0] in "<$%{[":
        return False
    return password.lower() not in _PLACEHOLDER_PASSWORDS


def _sas_signature(match: re.Match[str]) -> bool:
    return "sv=" in match.string


_RULES: tuple[_Rule, ...] = (
    _token(
        "tapgate_token", "tgo_|tgu_|tga_|tgd_", r"tg[ouad]_[a-z0-9]+(?:-[a-z0-9]+)*_[0-9a-f]{16}_[0-9a-f]{64}"
    ),
    _context(
        "gcp_service_account",
        "private_key",
        r'"private_key_id"\s*:\s*"[0-9a-f]{40}"|"private_key"\s*:\s*"-----BEGIN',
        group=0,
    ),
    _context(
        "private_key",
        "-----begin",
        r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]{0,8192}?-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----)?",
        group=0,
    ),
    _context("private_key", "putty-user-key-file", r"PuTTY-User-Key-File-\d+:", group=0),
    _token(
        "age_secret_key",
        "age-secret-key-1",
        r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
        any_case=True,
    ),
    _token(
        "aws_access_key",
        "akia|asia|abia|acca|a3t",
        r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}",
        any_case=True,
    ),
    _context(
        "aws_secret_key",
        "aws|access",
        r"(?i:aws|secret[ _\-]?access[ _\-]?key)[\s\S]{0,40}?(?<![A-Za-z0-9/+])([A-Za-z0-9/+]{40})"
        r"(?![A-Za-z0-9/+=])",
        _aws_secret,
    ),
    _token("aws_bedrock_key", "absk", r"ABSK[A-Za-z0-9+/]{109,269}={0,2}"),
    _token("gcp_api_key", "aiza", r"AIza[0-9A-Za-z_\-]{35}"),
    _token("google_oauth", "gocspx-|ya29.", r"(?:GOCSPX-[0-9A-Za-z_\-]{28}|ya29\.[0-9A-Za-z_\-]{30,})"),
    _token(
        "azure_storage_key",
        "accountkey=|sharedaccesskey=",
        r"(?:AccountKey|SharedAccessKey)=[A-Za-z0-9+/]{40,}={0,2}",
    ),
    _token("azure_sas_token", "sig=", r"sig=[A-Za-z0-9%+/]{30,}", _sas_signature),
    _token("azure_client_secret", "q~", r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}"),
    _token(
        "github_token",
        "ghp_|gho_|ghu_|ghs_|ghr_|github_pat_",
        r"(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{40,})",
    ),
    _token(
        "gitlab_token",
        "glpat-|gldt-|glrt-|glptt-|gloas-|glsoat-|glcbt-|glffct-|glimt-|glagent-|glft-",
        r"gl(?:pat|dt|rt|ptt|oas|soat|cbt|ffct|imt|agent|ft)-[A-Za-z0-9_\-.]{20,}",
    ),
    _token("gitlab_token", "gr1348941", r"GR1348941[A-Za-z0-9_\-]{20,}"),
    _token(
        "slack_webhook",
        "hooks.slack.com",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+\-]{20,}",
    ),
    _token(
        "slack_token",
        "xoxa-|xoxb-|xoxp-|xoxr-|xoxs-|xoxo-|xoxe",
        r"xox(?:[abposr]|e(?:\.xox[bp])?)-\d+-[A-Za-z0-9\-]{8,}",
    ),
    _token("slack_token", "xapp-", r"xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+"),
    _token(
        "discord_webhook", "/api/webhooks/", r"discord(?:app)?\.com/api/webhooks/\d{5,30}/[A-Za-z0-9_\-]{30,}"
    ),
    _token(
        "stripe_key",
        "sk_live_|rk_live_|sk_test_|rk_test_|sk_prod_|rk_prod_|whsec_",
        r"(?:[sr]k_(?:live|test|prod)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9+/=]{24,})",
    ),
    _token("anthropic_key", "sk-ant-", r"sk-ant-[a-z0-9]{2,12}-[A-Za-z0-9_\-]{32,}"),
    _token("openai_key", "sk-", r"sk-(?:(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{20,}|[A-Za-z0-9]{32,})"),
    _token("twilio_key", "sk", r"SK[0-9a-fA-F]{32}", any_case=True),
    _context(
        "twilio_key", "twilio", r"(?i:twilio)[\s\S]{0,40}?(?<![A-Za-z0-9])([0-9a-f]{32})(?![A-Za-z0-9])"
    ),
    _token("sendgrid_key", "sg.", r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{16,64}"),
    _token("npm_token", "npm_", r"npm_[A-Za-z0-9]{36}"),
    _token("pypi_token", "pypi-age", r"pypi-AgE[A-Za-z0-9_\-]{50,}"),
    _token(
        "discord_token",
        ".",
        r"([MNO][A-Za-z0-9_\-]{23,27})\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,38}",
        _discord_user_id,
    ),
    _token("telegram_bot_token", ":a", r"(?:bot)?\d{6,12}:A[A-Za-z0-9_\-]{34}"),
    _token("shopify_token", "shpat_|shpca_|shppa_|shpss_", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    _token("mailgun_key", "key-", r"key-[0-9a-f]{32}"),
    _token("mailgun_key", "-", r"[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}"),
    _token("mailchimp_key", "-us", r"[0-9a-f]{32}-us\d{1,2}"),
    _token("huggingface_token", "hf_", r"hf_[A-Za-z]{34}"),
    _token("digitalocean_token", "dop_v1_|dor_v1_|doo_v1_", r"do[opr]_v1_[a-f0-9]{64}"),
    _token(
        "hashicorp_token",
        "hvs.|hvb.|atlasv1",
        r"(?:hv[sb]\.[A-Za-z0-9_\-]{90,}|[a-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,70})",
    ),
    _token("doppler_token", "dp.", r"dp\.(?:pt|st|ct|sa|scim|audit)\.[A-Za-z0-9]{40,44}"),
    _token("linear_key", "lin_api_|lin_oauth_", r"lin_(?:api|oauth)_[A-Za-z0-9]{40}"),
    _token("notion_token", "ntn_|secret_", r"(?:ntn_\d{11}[A-Za-z0-9]{35}|secret_[A-Za-z0-9]{43})"),
    _token("perplexity_key", "pplx-", r"pplx-[A-Za-z0-9]{48}"),
    _token("databricks_token", "dapi", r"dapi[a-f0-9]{32}"),
    _token("postman_key", "pmak-", r"PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}", any_case=True),
    _token(
        "square_token",
        "sq0atp-|sq0csp-|eaaa",
        r"(?:sq0(?:atp|csp)-[A-Za-z0-9_\-]{22,60}|EAAA[A-Za-z0-9_\-]{60})",
    ),
    _token("sentry_token", "sntrys_|sntryu_", r"sntry[su]_[A-Za-z0-9+/=_]{40,}"),
    _token(
        "grafana_token", "glsa_|glc_", r"(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2})"
    ),
    _token("atlassian_token", "atatt3", r"ATATT3[A-Za-z0-9_\-=]{150,}"),
    _token("dockerhub_token", "dckr_pat_", r"dckr_pat_[A-Za-z0-9_\-]{27}"),
    _token("groq_key", "gsk_", r"gsk_[A-Za-z0-9]{52}"),
    _token("xai_key", "xai-", r"xai-[A-Za-z0-9]{80}"),
    _token("replicate_token", "r8_", r"r8_[A-Za-z0-9]{37}"),
    _token("supabase_token", "sbp_", r"sbp_[a-f0-9]{40}"),
    _token("heroku_key", "hrku-", r"HRKU-AA[0-9A-Za-z_\-]{58}"),
    _token("newrelic_key", "nrak-", r"NRAK-[A-Z0-9]{27}", any_case=True),
    _token("onepassword_token", "ops_eyj", r"ops_eyJ[A-Za-z0-9+/]{200,}"),
    _token(
        "jwt",
        "eyj",
        rf"(eyJ{_EYJ_ALONE}[A-Za-z0-9_\-]{{8,}}+)\.[A-Za-z0-9_\-]{{2,}}+\.[A-Za-z0-9_\-]*+",
        _jwt_header,
    ),
    _context(
        "url_credentials",
        "://",
        r"://([^\s/?#@:]{0,128}):([^\s/?#@]{1,256})@[^\s/?#@]",
        _real_password,
        group=2,
    ),
    _context(
        "basic_auth",
        "basic",
        r"(?i:\bbasic)\s+([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])",
        _basic_credentials,
    ),
    _context("bearer_token", "bearer", r"(?i:\bbearer)\s+([A-Za-z0-9\-._~+/]{20,}=*)", _random_looking),
)

# A value named by a keyword (``password: …``, ``api_key="…"``, ``the token is …``), matched on the
# lower-cased text; whether the keyword stands alone or starts a camelCase hump is checked on the original.
_KEYWORD_STEMS = ("pass", "secret", "token", "key", "auth", "cred", "contrase", "clave", "senha",
                  "wachtwoord", "hasło", "haslo", "пароль", "kennwort")  # fmt: skip
_NAMED_VALUE = re.compile(
    r"(passwort|kennwort|pass(?:words?|wd|phrase|code)?|contrase[ñn]a|clave|mot de passe|senha|wachtwoord"
    r"|has[łl]o|пароль|secrets?|tokens?|api[_\- ]?keys?|keys?|auth(?:orization|entication|[_\- ]?token)?"
    r"|credentials?|creds)"
    r"[\w.\- ]{0,20}?[\s'\"]{0,3}(?:=>|:=|[:=]|\s(?:is|was|ist|es|est|é)\s)\s{0,3}"
    r"(?:(['\"`])([^\s'\"`]{8,200})\2|([^\s'\"`,;&<>()\[\]{}]{8,200}))"
)
_DOTTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")  # os.environ, a.b64decode
_CAMEL_NAME = re.compile(r"_*(?:[A-Z]?[a-z]+_?)+")
_PLACEHOLDER = re.compile(r"(?i)your|here|\*\*\*|\.\.\.|xxxx|example|redacted|changeme|^[$%<{\[]")

# An unnamed base64-ish run, and the parts of a text where such runs are ordinary (URLs).
_RUN = re.compile(r"(?<![A-Za-z0-9+/=_\-])[A-Za-z0-9+/_\-]{32,}={0,2}(?![A-Za-z0-9+/=_\-])")
_URL = re.compile(r"(?i)(?:\b[a-z][a-z0-9+.\-]{1,20}://|\bwww\.)\S+")
_HEX = re.compile(r"(?:0x)?[0-9a-fA-F\-]+")
_BITCOIN = re.compile(r"[13][1-9A-HJ-NP-Za-km-z]{24,33}")
_SEPARATORS = re.compile(r"[/_\-+]")
_WORDISH = re.compile(r"[A-Z]*[a-z]*\d*")
_SSH_KEY_BLOB = re.compile(rb"\x00\x00\x00[\x07-\x20](?:ssh-|ecdsa-|sk-)")


def _scan(text: str, decode_base64: bool) -> SecretFinding | None:
    lowered = _lower(text)
    return _shapes(text, lowered) or _named_value(text, lowered) or _high_entropy_run(text, decode_base64)


def _lower(text: str) -> str:
    lowered = text.lower()
    if len(lowered) != len(text):  # a few letters lower-case to two characters; keep offsets aligned
        lowered = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    return lowered


_Cuts = Callable[[], Collection[int]]


def _shapes(
    text: str, lowered: str, cuts: _Cuts | None = None, rules: Iterable[_Rule] = _RULES
) -> SecretFinding | None:
    """The first provider shape in ``text``. With ``cuts`` (``text`` was joined from pieces, and these are
    the places it was joined), only providers' tokens are looked for; one may start or end at a cut though a
    word touches it there, and counts only when it looks split on purpose (``_looks_split``)."""
    runs = " ".join(_LONG_RUN.findall(lowered))
    for rule in rules:
        if cuts is not None and not rule.in_run:
            continue
        haystack = runs if rule.in_run else lowered
        if not haystack or not any(k in haystack for k in rule.keywords):
            continue
        for found in (rule.pattern if cuts is None else rule.open_pattern).finditer(text):
            if cuts is not None:
                match = _split_on_purpose(rule, found, cuts())
            elif rule.in_run and _touched(text, found.start()):
                match = None
            else:
                match = found
            if match is None:
                continue
            if rule.check is None or rule.check(match):
                return SecretFinding(rule.kind, *match.span(rule.group))
    return None


def _touched(text: str, start: int) -> bool:
    """Whether a token character comes right before ``start``: a prefix glued to a word is no token."""
    return start > 0 and text[start - 1] in _TOKEN_CHARS


def _split_on_purpose(rule: _Rule, match: re.Match[str], cuts: Collection[int]) -> re.Match[str] | None:
    """A token in text joined from pieces: ``match``, or the longest part of it that ends at a cut, when
    no token character touches it but at a cut and it looks split on purpose; else None."""
    text = match.string
    start = match.start()
    if _touched(text, start) and start not in cuts:
        return None
    inside = sorted(c for c in cuts if start < c < match.end())
    # A body that takes any length may have run on into the words after the key: then the key ends at one
    # of the last few cuts inside the match.
    for end in [match.end(), *reversed(inside[-16:])]:
        if end < len(text) and text[end] in _TOKEN_CHARS and end not in cuts:
            continue
        candidate = match if end == match.end() else rule.open_pattern.fullmatch(text, start, end)
        if candidate is not None and _looks_split(candidate.group(), [c - start for c in inside if c < end]):
            return candidate
    return None


def _looks_split(value: str, inside: list[int]) -> bool:
    """Whether a token found in joined text was split on purpose (``inside``: where, from its start): it
    changes character class as often as random tokens do, or the cuts are evenly spaced and it holds a
    digit (``AKIA 7OH5 7HRD …``). Words run together (``+442079460958:Annasays…``, ``VISITASIATHIS…``) do
    neither."""
    if _switch_ratio(value) >= 0.3:
        return True
    if not inside or not any(c.isdigit() for c in value):
        return False
    widths = {b - a for a, b in itertools.pairwise([0, *inside])}
    return len(widths) == 1 and len(value) - inside[-1] <= widths.pop()


# Separators a key is split by: whitespace, then each of these with it (one at a time, as a key may hold
# the others). The providers' prefixes that hold one are kept whole (``ghp_`` split by underscores).
_SPLITTERS = "-._/,"
_NO_SPLITTERS = str.maketrans("", "", _SPLITTERS)
_SQUEEZES = {sep: re.compile(rf"[\s{re.escape(sep)}]+") for sep in ["", *_SPLITTERS]}
_PREFIXES = {
    sep: {
        rule: tuple(k for k in rule.keywords if sep and sep in k and len(k.strip(_SPLITTERS)) >= 2)
        for rule in _RULES
        if rule.in_run
    }
    for sep in _SQUEEZES
}
# Each token rule with its keywords bare of separators: a keyword that is in a text with some separators
# taken out is bare in the text with all of them taken out, so one look there picks the rules to try.
_BARE_KEYWORDS = tuple(
    (rule, tuple(keyword.translate(_NO_SPLITTERS) for keyword in rule.keywords))
    for rule in _RULES
    if rule.in_run
)


def _split_token(text: str) -> SecretFinding | None:
    """A provider's token with separators put into it, perhaps glued to the words around it once they
    are gone (a key in short lines after a word)."""
    spaced = "".join(text.split())
    bare = _lower(spaced.translate(_NO_SPLITTERS))
    rules = [rule for rule, keywords in _BARE_KEYWORDS if any(k in bare for k in keywords)]
    if not rules:
        return None
    lowered = _lower(text)
    seen = {text}
    for sep, removed in _SQUEEZES.items():
        if sep and sep not in text:
            continue
        keep = [prefix for rule in rules for prefix in _PREFIXES[sep][rule] if prefix in lowered]
        cuts: _Cuts
        if keep:
            squeezed, joints = _squeeze(text, removed, _places(lowered, keep))
            cuts = functools.partial(frozenset, joints)
        else:  # the common case: where the text was joined is worked out only if a token is found there
            squeezed = spaced.replace(sep, "")
            cuts = _once(functools.partial(_joints, text, removed))
        if squeezed in seen:
            continue
        seen.add(squeezed)
        finding = _shapes(squeezed, _lower(squeezed), cuts=cuts, rules=rules)
        if finding is not None:
            return SecretFinding(finding.kind, 0, len(text))
    return None


def _once(compute: Callable[[], frozenset[int]]) -> _Cuts:
    kept: list[frozenset[int]] = []

    def cuts() -> frozenset[int]:
        if not kept:
            kept.append(compute())
        return kept[0]

    return cuts


def _joints(text: str, removed: re.Pattern[str]) -> frozenset[int]:
    return _squeeze(text, removed, frozenset())[1]


def _places(lowered: str, words: Iterable[str]) -> frozenset[int]:
    """The places of every character of every occurrence of the ``words`` in ``lowered``."""
    return frozenset(
        i
        for word in words
        for found in re.finditer(f"(?={re.escape(word)})", lowered)
        for i in range(found.start(), found.start() + len(word))
    )


def _squeeze(text: str, removed: re.Pattern[str], kept: Collection[int]) -> tuple[str, frozenset[int]]:
    """``text`` without the runs ``removed`` matches, but for the characters at the places ``kept``; and
    where the result was joined."""
    pieces: list[str] = []
    cuts: set[int] = set()
    size = last = 0
    for run in removed.finditer(text):
        pieces.append(text[last : run.start()])
        size += run.start() - last
        for i in range(*run.span()):
            if i in kept:
                pieces.append(text[i])
                size += 1
            else:
                cuts.add(size)
        last = run.end()
    pieces.append(text[last:])
    return "".join(pieces), frozenset(cuts)


_HEX_RUN = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}){16,}(?![0-9A-Fa-f])")
# Long enough for the shortest key's base64, bounded so that one run is decoded once, never a text's worth.
_BASE64_RUN = re.compile(r"(?<![A-Za-z0-9+/_\-])[A-Za-z0-9+/_\-]{20,4096}={0,2}(?![A-Za-z0-9+/=_\-])")


def _hex_encoded(text: str) -> SecretFinding | None:
    """A secret written as the hex of its text."""
    for match in _HEX_RUN.finditer(text):
        decoded = _as_text(bytes.fromhex(match.group()))  # pairs of hex digits: always bytes
        if decoded is None:
            continue
        finding = _scan(decoded, decode_base64=False) or _split_token(decoded)
        if finding is not None:
            return SecretFinding(finding.kind, *match.span())
    return None


def _base64_encoded(text: str) -> SecretFinding | None:
    """A secret written as the base64 of its text, however short (an unnamed run needs 32 characters)."""
    for match in _BASE64_RUN.finditer(text):
        value = match.group()
        # Base64 of text mixes cases all but always; a run of one case is a word or a name.
        decoded = _b64text(value) if _mixed_case(value) else None
        if decoded is None:
            continue
        decoded = _nfkc(decoded)
        finding = _scan(decoded, decode_base64=False) or _split_token(decoded)
        if finding is not None:
            return SecretFinding(finding.kind, *match.span())
    return None


def _hidden(text: str) -> SecretFinding | None:
    """A secret written so that the plain scan misses it: split, hex- or base64-encoded, in ``text`` or
    in how it reads (``_readings``). The span is the encoded run, or the whole text."""
    finding = _split_token(text) or _hex_encoded(text) or _base64_encoded(text)
    if finding is not None:
        return finding
    for reading in _readings(text):
        finding = (
            _scan(reading, decode_base64=True)
            or _split_token(reading)
            or _hex_encoded(reading)
            or _base64_encoded(reading)
        )
        if finding is not None:
            return SecretFinding(finding.kind, 0, len(text))
    return None


# Printable, yet they show nothing: variation selectors, the combining grapheme joiner, Mongolian and
# Khmer marks that are default-ignorable, and the blank fillers.
_IGNORABLE = re.compile(
    "[\u034f\u17b4\u17b5\u180b-\u180f\ufe00-\ufe0f\U000e0100-\U000e01ef" + "".join(sorted(INVISIBLE)) + "]"
)
_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def _readings(text: str) -> Iterator[str]:
    """How ``text`` reads to a person or a program when it differs from ``text``: without its invisible
    and format characters, then with percent-encoding undone, once and twice (never more)."""
    reading = _visible(text)
    if reading != text:
        yield reading
    for _ in range(2):
        if not _PERCENT_ESCAPE.search(reading):
            return
        reading = _visible(_nfkc(unquote(reading)))
        yield reading


def _visible(text: str) -> str:
    """``text`` without the characters that show nothing: format characters (zero-width, soft hyphen,
    bidirectional controls, tags), controls but whitespace, and the ``_IGNORABLE`` ones."""
    if not text.isascii():
        text = _IGNORABLE.sub("", text)
    if text.isprintable() or "".join(text.split()).isprintable():
        return text
    return "".join(ch for ch in text if ch.isprintable() or ch.isspace())


def _named_value(text: str, lowered: str) -> SecretFinding | None:
    if not any(stem in lowered for stem in _KEYWORD_STEMS):
        return None
    for match in _NAMED_VALUE.finditer(lowered):
        start, end = match.span(1)
        alone_left = start == 0 or not text[start - 1].isalpha()
        alone_right = end == len(text) or not text[end].isalpha()
        hump_left = not alone_left and text[start - 1].islower() and text[start].isupper()
        hump_right = not alone_right and text[end].isupper()
        if not (alone_left or hump_left) or not (alone_right or hump_right):
            continue
        group = 3 if match.group(3) is not None else 4
        value_start, value_end = match.span(group)
        if _named_value_is_secret(text[value_start:value_end]):
            return SecretFinding("credential", value_start, value_end)
    return None


def _named_value_is_secret(value: str) -> bool:
    value = value.rstrip(".:")
    if len(value) < 8 or _PLACEHOLDER.search(value) or "://" in value or _DOTTED_NAME.fullmatch(value):
        return False
    if any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
        return _entropy(value) >= 2.5
    # No digits, or no letters: only a long, mixed-case, jumpy value; ``GenericTypesCacheKey`` is a name.
    if _CAMEL_NAME.fullmatch(value):
        return False
    return len(value) >= 20 and _mixed_case(value) and _switch_ratio(value) >= 0.3


def _high_entropy_run(text: str, decode_base64: bool) -> SecretFinding | None:
    urls: list[tuple[int, int]] | None = None
    for match in _RUN.finditer(text):
        value = match.group()
        if not (_mixed_case(value) and any(c.isdigit() for c in value)):
            continue
        if urls is None:
            urls = [m.span() for m in _URL.finditer(text)]
        if any(start <= match.start() < end for start, end in urls):
            continue
        if _HEX.fullmatch(value) or _BITCOIN.fullmatch(value) or _is_words(value) or _is_digest(value):
            continue
        if _switch_ratio(value) < 0.3 or _entropy(value.rstrip("=")) < 4.0:
            continue
        if _harmless_encoding(value, decode_base64):
            continue
        return SecretFinding("high_entropy", match.start(), match.end())
    return None


def _is_words(value: str) -> bool:
    """True for a path or an identifier made of words: ``/storage/emulated/0/Documents``, ``HAS_TLSv1_3``."""
    return all(_WORDISH.fullmatch(part) for part in _SEPARATORS.split(value))


_DIGEST = re.compile(r"sha(1|256|384|512)-([A-Za-z0-9+/]+={0,2})")
_DIGEST_BYTES = {"1": 20, "256": 32, "384": 48, "512": 64}


def _is_digest(value: str) -> bool:
    """True for an integrity hash (``sha512-…`` in a lock file, ``integrity="sha384-…"`` in HTML): base64
    of exactly as many bytes as its digest has."""
    match = _DIGEST.fullmatch(value)
    if match is None:
        return False
    raw = _b64decode(match.group(2))
    return raw is not None and len(raw) == _DIGEST_BYTES[match.group(1)]


# A file's first bytes: base64 that starts so is an image, a font or a document (a ``data:`` URI).
_FILE_SIGNATURES = (
    b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"RIFF", b"\x00\x00\x01\x00",
    b"%PDF-", b"wOFF", b"wOF2",
)  # fmt: skip


def _harmless_encoding(value: str, decode_base64: bool) -> bool:
    """True for base64 of an SSH public key or of a file (an image), or of plain text with no secret in
    it (a file name)."""
    raw = _b64decode(value)
    if raw is not None and (_SSH_KEY_BLOB.match(raw) or raw.startswith(_FILE_SIGNATURES)):
        return True
    decoded = _b64text(value)
    if decoded is None or not decode_base64 or _USER_AND_PASSWORD.fullmatch(decoded):
        return False
    return _scan(decoded, decode_base64=False) is None
