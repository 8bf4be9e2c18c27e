"""The hardline scan: outbound text that looks like a secret is refused before anything is written.

Every text tapgate would send for an agent (an SMS body, a draft, a URL, any string argument) passes
``check_outbound`` before the invocation row exists (§3.3 step 7, gate G8). ``scan`` returns the first
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
long token runs, so most texts run none of them: a 1,000-character SMS scans in 0.03 to 0.1 ms.

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
- A key written so the plain scan misses it is looked for too (DESIGN §15): the text with its separators
  (spaces, dashes, dots, newlines) removed, and all of a call's strings joined, are searched for the
  providers' shapes; a match there counts only when it is as jumpy as a random token (so words run
  together, ``+442079460958:Annasays…``, are not a Telegram token); a run of 32 or more hex digits that
  decodes to text is scanned as that text. Such a finding's span is the whole text (or the hex run).
  These looks about double a text's scan time (measured on a loaded machine: 0.6 ms plain, 1.3 ms in
  all for the 1,000-character SMS of the tests), and keep the corpus's false positives at 0.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tapgate.domain.errors import TapgateError

__all__ = ["SecretFinding", "SecretRefused", "check_outbound", "scan"]


@dataclass(frozen=True, slots=True)
class SecretFinding:
    """Where a secret-like value is: its kind and its span, never its text."""

    kind: str
    start: int
    end: int


class SecretRefused(TapgateError):
    """An outbound text looks like a secret; the check chain turns this into a ``[deny]`` refusal."""

    code = "secret_in_text"

    def __init__(self, field: str, finding: SecretFinding) -> None:
        super().__init__(
            f"[deny] the text of '{field}' looks like a secret ({finding.kind}); tapgate never sends secrets"
        )
        self.field = field
        self.finding = finding


def check_outbound(texts: Iterable[tuple[str, str]]) -> None:
    """Scan each (field name, text) pair; raise SecretRefused for the first text that holds a secret,
    then for a key split across the texts (all of them joined, in order)."""
    pairs = list(texts)
    for field, text in pairs:
        finding = scan(text)
        if finding is not None:
            raise SecretRefused(field, finding)
    if len(pairs) > 1:
        joined = "".join(_nfkc(text) for _, text in pairs)
        finding = _shapes(joined, _lower(joined), tokens_only=True, jumpy=True) or _split_token(joined)
        if finding is not None:
            raise SecretRefused(" + ".join(field for field, _ in pairs), finding)


def scan(text: str) -> SecretFinding | None:
    """The first secret in ``text``, by rule order (provider shapes first, entropy last), or None; then a
    key split by separators or hex-encoded.

    Never raises, whatever the text.
    """
    text = _nfkc(text)
    return _scan(text, decode_base64=True) or _split_token(text) or _hex_encoded(text)


def _nfkc(text: str) -> str:
    return text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)


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
    check: _Check | None
    in_run: bool
    group: int = 0  # the part of the match that is the secret, for the span


def _token(kind: str, keywords: str, pattern: str, check: _Check | None = None) -> _Rule:
    """A token that starts with a provider's prefix; no token character may touch it on either side."""
    return _Rule(kind, tuple(keywords.split("|")), re.compile(pattern + _RIGHT_EDGE), check, in_run=True)


def _context(kind: str, keywords: str, pattern: str, check: _Check | None = None, group: int = 1) -> _Rule:
    """A secret found by the words around it; ``group`` is the secret itself."""
    return _Rule(kind, tuple(keywords.split("|")), re.compile(pattern), check, in_run=False, group=group)


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


def _b64text(value: str) -> str | None:
    """``value`` decoded from base64 when that gives printable text, else None."""
    raw = _b64decode(value)
    if raw is None:
        return None
    try:
        decoded = raw.decode()
    except UnicodeDecodeError:
        return None
    return decoded if decoded.isprintable() else None


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
    raw = _b64decode(match.group(1))
    return raw is not None and raw.isdigit() and 15 <= len(raw) <= 21


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


_PLACEHOLDER_PASSWORDS = frozenset({"password", "pass", "passwd", "secret", "changeme", "pwd", "token"})


def _real_password(match: re.Match[str]) -> bool:
    password = match.group(2)
    if set(password) <= set("*xX.•") or password[0] in "<$%{[":
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
    _token("age_secret_key", "age-secret-key-1", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    _token("aws_access_key", "akia|asia|abia|acca|a3t", r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}"),
    _context(
        "aws_secret_key",
        "aws|secret_access_key|secret access key|secretaccesskey",
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
    _token("twilio_key", "sk", r"SK[0-9a-fA-F]{32}"),
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
    _token("digitalocean_token", "_v1_", r"do[opr]_v1_[a-f0-9]{64}"),
    _token(
        "hashicorp_token",
        "hvs.|hvb.|atlasv1",
        r"(?:hv[sb]\.[A-Za-z0-9_\-]{90,}|[a-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,70})",
    ),
    _token("doppler_token", "dp.", r"dp\.(?:pt|st|ct|sa|scim|audit)\.[A-Za-z0-9]{40,44}"),
    _token("linear_key", "lin_", r"lin_(?:api|oauth)_[A-Za-z0-9]{40}"),
    _token("notion_token", "ntn_|secret_", r"(?:ntn_\d{11}[A-Za-z0-9]{35}|secret_[A-Za-z0-9]{43})"),
    _token("perplexity_key", "pplx-", r"pplx-[A-Za-z0-9]{48}"),
    _token("databricks_token", "dapi", r"dapi[a-f0-9]{32}"),
    _token("postman_key", "pmak-", r"PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}"),
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
    _token("newrelic_key", "nrak-", r"NRAK-[A-Z0-9]{27}"),
    _token("onepassword_token", "ops_eyj", r"ops_eyJ[A-Za-z0-9+/]{200,}"),
    # The look-behind right after the literal keeps "eyJeyJeyJ…" linear.
    _token(
        "jwt",
        "eyj",
        r"(eyJ(?<![A-Za-z0-9_\-]eyJ)[A-Za-z0-9_\-]{8,}+)\.[A-Za-z0-9_\-]{2,}+\.[A-Za-z0-9_\-]*+",
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


def _shapes(text: str, lowered: str, tokens_only: bool = False, jumpy: bool = False) -> SecretFinding | None:
    """The first provider shape in ``text``; ``tokens_only`` skips the rules that need words around the
    secret, ``jumpy`` keeps only matches that change character class as often as random tokens do."""
    runs = " ".join(_LONG_RUN.findall(lowered))
    for rule in _RULES:
        if tokens_only and not rule.in_run:
            continue
        haystack = runs if rule.in_run else lowered
        if not haystack or not any(k in haystack for k in rule.keywords):
            continue
        for match in rule.pattern.finditer(text):
            start = match.start()
            if rule.in_run and start > 0 and text[start - 1] in _TOKEN_CHARS:
                continue
            if jumpy and _switch_ratio(match.group()) < 0.3:
                continue
            if rule.check is None or rule.check(match):
                return SecretFinding(rule.kind, *match.span(rule.group))
    return None


_WHITESPACE = re.compile(r"\s+")
_SEPARATOR_RUNS = re.compile(r"[\s.\-]+")
_HEX_RUN = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}){16,}(?![0-9A-Fa-f])")


def _split_token(text: str) -> SecretFinding | None:
    """A provider's token with separators (spaces, dashes, dots, newlines) put into it."""
    squeezed_space = _WHITESPACE.sub("", text)
    for squeezed in dict.fromkeys((squeezed_space, _SEPARATOR_RUNS.sub("", squeezed_space))):
        if squeezed == text:
            continue  # nothing was taken out: the plain scan saw this text already
        finding = _shapes(squeezed, _lower(squeezed), tokens_only=True, jumpy=True)
        if finding is not None:
            return SecretFinding(finding.kind, 0, len(text))
    return None


def _hex_encoded(text: str) -> SecretFinding | None:
    """A secret written as the hex of its text."""
    for match in _HEX_RUN.finditer(text):
        try:
            decoded = bytes.fromhex(match.group()).decode()
        except (ValueError, UnicodeDecodeError):
            continue
        if not decoded.replace("\n", " ").isprintable():
            continue
        finding = _scan(decoded, decode_base64=False) or _split_token(decoded)
        if finding is not None:
            return SecretFinding(finding.kind, *match.span())
    return None


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
            has_url = "://" in text or "www." in text.lower()
            urls = [m.span() for m in _URL.finditer(text)] if has_url else []
        if any(start <= match.start() < end for start, end in urls):
            continue
        if _HEX.fullmatch(value) or _BITCOIN.fullmatch(value) or _is_words(value):
            continue
        if _switch_ratio(value) < 0.3 or _entropy(value.rstrip("=")) < 4.0:
            continue
        if _harmless_encoding(value, decode_base64):
            continue
        return SecretFinding("high_entropy", match.start(), match.end())
    return None


def _is_words(value: str) -> bool:
    """True for a path or an identifier made of words: ``/storage/emulated/0/Documents``, ``HAS_TLSv1_3``."""
    parts = _SEPARATORS.split(value)
    return len(parts) > 1 and all(_WORDISH.fullmatch(part) for part in parts)


def _harmless_encoding(value: str, decode_base64: bool) -> bool:
    """True for base64 of an SSH public key, or of plain text with no secret in it (a file name)."""
    raw = _b64decode(value)
    if raw is not None and _SSH_KEY_BLOB.match(raw):
        return True
    decoded = _b64text(value)
    if decoded is None or not decode_base64 or _USER_AND_PASSWORD.fullmatch(decoded):
        return False
    return _scan(decoded, decode_base64=False) is None
