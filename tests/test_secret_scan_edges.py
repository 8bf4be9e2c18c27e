"""The secret scan at its edges: each threshold at its value and one step either side, and each way of
hiding a key, found after something harmless, with the exact finding.

Fake keys are built from pieces, as in test_secret_scan.py.
"""

from __future__ import annotations

import base64
import json

import pytest

from tapgate.domain import secret_scan
from tapgate.domain.errors import SecretRefused
from tapgate.domain.secret_scan import SecretFinding, check_outbound, scan

AWS = "AKIA" + "Q3EGRXQ5LZ2YTB7M"
AWS_ENDING_IN_W = "AKIA" + "Q3EGRXQ5LZ2YTB7W"  # after one more byte, its base64 ends in X
GITHUB = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
AWS_SECRET = "Hj8sK2mQ9xL4pR7tW1vB5nC3zD6fG0aE" + "/+yUiOkP"
SIXTEEN = "aB3cD4eF5gH6iJ7X"  # 16 symbols: twice over, exactly 4.0 bits a character
FILE_NAME = "sunset_beach_holiday_photo_2024-06-22.jpeg"


def _pieces(key: str, every: int, separator: str) -> str:
    return separator.join(key[i : i + every] for i in range(0, len(key), every))


def _base64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _urlsafe(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _percent(text: str) -> str:
    return "".join(f"%{byte:02X}" for byte in text.encode())


def _refusal(fields: list[tuple[str, str]]) -> tuple[str, SecretFinding] | None:
    try:
        check_outbound(fields)
    except SecretRefused as refused:
        return refused.field, refused.finding
    return None


def _whole(kind: str, text: str) -> SecretFinding:
    return SecretFinding(kind, 0, len(text))


# -- thresholds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("abcd1234" * 3, True),  # 8 symbols evenly: exactly 3.0 bits a character
        ("abcd1234abcd1234abcd123a", False),  # just under 3.0 bits
        ("abcdefgh1234" * 2, True),  # 3.6 bits
        ("abcdefghijklmnopqrstuvwx", False),  # random-looking, but no digit
        ("123456789012345678901234", False),  # no letter
    ],
)
def test_a_bearer_token_is_refused_from_3_bits_a_character_when_it_mixes_letters_and_digits(
    value: str, found: bool
) -> None:
    text = f"Authorization: Bearer {value}"
    expected = SecretFinding("bearer_token", 22, 46) if found else None
    assert scan(text) == expected


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (AWS_SECRET, "aws_secret_key"),
        ("HjasKbmQcxLdpRetWfvBgnChzDifGjaE/+yUiOkP", None),  # mixed case, no digit
        (AWS_SECRET.lower(), None),  # digits, one case
        ("Ab1Ab1Ab1Ab1Ab1Ab1Ab1Ab1Ab1Ab1Ab1Ab1Ab1A", None),  # both, but 1.6 bits a character
    ],
)
def test_an_aws_secret_key_after_its_keyword_mixes_cases_and_digits_at_4_bits(
    value: str, kind: str | None
) -> None:
    assert scan(f"AWS {value}") == (SecretFinding(kind, 4, 44) if kind else None)


@pytest.mark.parametrize(
    "text",
    [
        f"secret-access-key: {AWS_SECRET}",
        f"Secret Access-Key = {AWS_SECRET}",
        f"aws_secret_access_key = {AWS_SECRET}",
        f"SecretAccessKey {AWS_SECRET}",
    ],
)
def test_an_aws_secret_key_is_named_so_whichever_separators_its_keyword_has(text: str) -> None:
    assert scan(text) == SecretFinding("aws_secret_key", len(text) - 40, len(text))


# 41 characters, 12 changes of class over 40 pairs: exactly 0.3; four of them between a lower-case letter
# and a symbol, which is a class of its own.
AT_THE_RATIO = "QWERTghk+mnp382ZXCVbsd/fjy457LKJHuiow9016"
# 32 characters, 9 changes over 31 pairs: 0.29.
UNDER_THE_RATIO = "QWERTYghkm382ZXCbsdf457LKJuio90P"


def test_an_unnamed_run_is_refused_from_three_class_changes_in_ten_characters() -> None:
    assert scan(f"value {AT_THE_RATIO}") == SecretFinding("high_entropy", 6, 47)
    assert scan(f"value {UNDER_THE_RATIO}") is None


def test_padding_does_not_count_toward_a_runs_entropy_and_only_padding_is_left_out() -> None:
    assert scan(f"value {SIXTEEN}{SIXTEEN[:-1]}a==") is None  # just under 4 bits without its padding
    text = f"value {SIXTEEN * 2}"  # exactly 4 bits, and it ends in X
    assert scan(text) == SecretFinding("high_entropy", 6, 38)
    assert scan(text + "=") == SecretFinding("high_entropy", 6, 39)


def test_an_unnamed_run_of_one_case_is_not_refused_even_with_digits() -> None:
    assert scan("id k3m9p2q7r4s8t1v6w5x0y3z7n2j8h4g6") is None
    assert scan("id K3M9P2Q7R4S8T1V6W5X0Y3Z7N2J8H4G6") is None
    assert scan("id K3M9P2Q7R4S8T1V6W5X0Y3Z7N2J8H4g6") == SecretFinding("high_entropy", 3, 35)


def test_a_run_in_an_address_written_with_www_is_part_of_the_address() -> None:
    assert scan(f"see www.example.com/d/{SIXTEEN * 2}/edit") is None
    assert scan(f"see WWW.example.com/d/{SIXTEEN * 2}/edit") is None
    text = f"see www.example.com then {SIXTEEN * 2}"
    assert scan(text) == SecretFinding("high_entropy", 25, 57)


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("ABCdefGHIjklMNOpqrSTU", True),  # 21 characters, 6 changes in 20: 0.3
        ("ABCDefghIJKLmnopQRSTu", False),  # 5 changes in 20
    ],
)
def test_a_named_value_without_digits_is_refused_from_three_class_changes_in_ten(
    value: str, found: bool
) -> None:
    text = f"token: {value}"
    assert scan(text) == (SecretFinding("credential", 7, 28) if found else None)


def test_a_named_value_is_refused_from_8_characters_its_trailing_dots_not_counted() -> None:
    assert scan("password: 4Kx9mQ2X") == SecretFinding("credential", 10, 18)
    assert scan("password: 4Kx9mQ2") is None
    assert scan("password: 4Kx9mQ2.:") is None


@pytest.mark.parametrize(
    "text",
    [
        "token = settings.OAUTH2_TOKEN",  # a dotted name, with a digit
        "the token: https://id.acme.org/v2/token",  # an address
        "password: your_pass_2024",  # a placeholder, with digits
        "key: GenericTypesCacheKey",  # a name in camel case
    ],
)
def test_names_addresses_and_placeholders_after_a_keyword_are_not_secrets(text: str) -> None:
    assert scan(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("dbPassword: Tr0ub4dor93x", SecretFinding("credential", 12, 24)),
        ("PasswordProd: Tr0ub4dor93x", SecretFinding("credential", 14, 26)),
        ("OAuth is RFC6749-based, see the spec", None),  # "auth" inside a word, not a hump of it
    ],
)
def test_a_keyword_that_is_a_camel_case_hump_names_a_value(text: str, expected: SecretFinding | None) -> None:
    assert scan(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("İSTANBUL PASSWORD: Tr0ub4dor93x", SecretFinding("credential", 19, 31)),
        ("İzmir, password: Tr0ub4dor93x", SecretFinding("credential", 17, 29)),
        (f"İSTANBUL {AWS}", SecretFinding("aws_access_key", 9, 29)),
    ],
)
def test_a_letter_that_lower_cases_to_two_characters_does_not_move_the_span(
    text: str, expected: SecretFinding
) -> None:
    assert scan(text) == expected


# -- the checks of a provider's shape -----------------------------------------------------------------

JWT_HEADER = _urlsafe('{"alg":"HS256"}')
DISCORD_TAIL = ".Gb7x2Q." + "k9lm3pqr7vtz8ws1yb4nc6hd5jf0ge2v"


@pytest.mark.parametrize("user_id", ["1" * 18, "2" * 19, "3" * 20, "4" * 21])
def test_a_discord_token_is_refused_when_its_first_part_is_a_user_id(user_id: str) -> None:
    text = _urlsafe(user_id) + DISCORD_TAIL
    assert scan(text) == _whole("discord_token", text)


@pytest.mark.parametrize(
    "first_part",
    [_urlsafe("12345678901234567a"), "M" + "a" * 24],  # not digits; not base64 (25 characters)
)
def test_a_discord_shape_whose_first_part_is_no_user_id_is_not_a_discord_token(first_part: str) -> None:
    assert scan(first_part + DISCORD_TAIL) is None


def test_basic_credentials_must_decode_to_a_user_and_a_password() -> None:
    text = f"Authorization: Basic {_base64('admin:S3cr3t!x')}"
    assert scan(text) == SecretFinding("basic_auth", 21, 41)
    assert scan(f"Authorization: Basic {_base64('hello world')}") is None


@pytest.mark.parametrize(
    ("header", "is_jwt"),
    [
        (JWT_HEADER, True),
        (_urlsafe('{"alg" "HS256"}'), False),  # base64, but not JSON
        (JWT_HEADER + "x", False),  # not base64: 21 characters
    ],
)
def test_a_jwt_is_refused_only_when_its_header_is_base64_json(header: str, is_jwt: bool) -> None:
    text = f"{header}.{_urlsafe(json.dumps({'sub': '1'}))}.q7Zt2Vw9Lk4Xr8Np1Bc6"
    assert scan(text) == (_whole("jwt", text) if is_jwt else None)


@pytest.mark.parametrize(
    ("password", "refused"),
    [
        ("Summer2024", True),
        ("a", True),
        ("x<yz1234", True),
        ("*xX.•", False),  # every masking character
        ("xxxx", False),
        ("XXXX", False),
        ("<password>", False),
        ("${PASS}", False),
        ("Password", False),
    ],
)
def test_a_password_in_an_address_is_refused_unless_masked_or_a_placeholder(
    password: str, refused: bool
) -> None:
    text = f"https://maria:{password}@nas.home.arpa/photos"
    assert scan(text) == (SecretFinding("url_credentials", 14, 14 + len(password)) if refused else None)


# -- keys hidden by an encoding -----------------------------------------------------------------------

KEY_IN_A_URL = "https://example.com/?q="


@pytest.mark.parametrize(
    "encoded",
    [
        _base64(":" + AWS_ENDING_IN_W),  # ends in X, no padding
        _base64(":" + AWS_ENDING_IN_W) + "=",  # one = too many
        _base64(AWS) + "=",  # one = too many, after one that is needed
        KEY_IN_A_URL + _urlsafe("key -> " + AWS),  # URL-safe: a dash, no underscore
        KEY_IN_A_URL + _urlsafe("use this? " + AWS),  # URL-safe: an underscore, no dash
    ],
)
def test_base64_of_a_key_is_decoded_whatever_its_padding_or_alphabet(encoded: str) -> None:
    text = f"see {encoded} thanks"
    run = encoded.removeprefix(KEY_IN_A_URL)
    assert scan(text) == SecretFinding("aws_access_key", text.index(run), text.index(run) + len(run))


@pytest.mark.parametrize(("times", "found"), [(1, True), (2, True), (3, False)])
def test_percent_encoding_is_undone_at_most_twice(times: int, found: bool) -> None:
    text = GITHUB
    for _ in range(times):
        text = _percent(text)
    assert scan(text) == (_whole("github_token", text) if found else None)


def test_hex_is_read_as_text_only_when_it_decodes_to_text() -> None:
    text = f"payload {('key ' + _pieces(GITHUB, 6, ' ')).encode().hex()}"
    assert scan(text) == SecretFinding("github_token", 8, len(text))
    assert scan(("\x01 " + AWS).encode().hex()) is None  # a control character: binary data, not text


def test_a_decoded_text_is_not_decoded_again() -> None:
    encoded = _base64(FILE_NAME)
    assert scan(f"photo: {encoded}") is None  # base64 of plain text
    twice = _base64(f"file {encoded}")
    assert scan(twice) == _whole("high_entropy", twice)
    as_hex = encoded.encode().hex()
    assert scan(as_hex) == _whole("high_entropy", as_hex)
    text = KEY_IN_A_URL + twice
    assert scan(text) == SecretFinding("high_entropy", len(KEY_IN_A_URL), len(text))
    longer = _base64(" ".join(["file", encoded] * 60))  # longer than any run decoded as hidden text
    assert len(longer) > 4096
    assert scan(longer) == _whole("high_entropy", longer)


# -- keys hidden by invisible characters or separators ------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "photo\u200b: " + _base64(FILE_NAME),  # base64 of plain text passes as it does without the character
        "note\u200b " + _base64(FILE_NAME),
    ],
)
def test_an_invisible_character_does_not_make_harmless_base64_a_secret(text: str) -> None:
    assert scan(text) is None


@pytest.mark.parametrize(
    "text",
    [
        AWS.encode().hex()[:10] + "\u200b" + AWS.encode().hex()[10:],  # hex of a key, broken
        "here it is: AKIA Q3\u200bEG RXQ5 LZ2Y TB7M",  # a split key, broken
    ],
)
def test_a_key_broken_by_an_invisible_character_is_found_in_the_whole_text(text: str) -> None:
    assert scan(text) == _whole("aws_access_key", text)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (f"here it is: {_pieces(AWS, 4, ' ')}", "aws_access_key"),
        (f"key {_pieces(AWS.lower(), 4, ' ')}", "aws_access_key"),  # one case: lower case loses nothing
        (
            _pieces(
                "eyJhbGciOiAiSFMyNTYiLCAidHlwIjogIkpXVCJ9.eyJzdWIiOiAiMSJ9."
                + "9wa6Ss0IfCpelDqOfvmbdCdc8T4ub-KMGx8AsE0Fks2",
                8,
                "\n",
            ),
            "jwt",
        ),
    ],
)
def test_a_split_key_is_found_in_the_whole_text(text: str, kind: str) -> None:
    assert scan(text) == _whole(kind, text)


# -- keys split across fields -------------------------------------------------------------------------


def test_a_key_split_across_fields_is_found_in_lower_case_and_before_punctuation() -> None:
    assert _refusal([("to", AWS.lower()[:8]), ("body", AWS.lower()[8:])]) == (
        "to + body",
        SecretFinding("aws_access_key", 0, 20),
    )
    assert _refusal([("title", "note"), ("to", "AKIAZ7Q2"), ("body", "M4R6T5V3W5X2!")]) == (
        "title + to + body",
        SecretFinding("aws_access_key", 4, 24),
    )


def test_a_key_that_runs_on_into_the_next_field_ends_where_that_field_starts() -> None:
    token = "ghp_" + "Xk29Lm3pQr7vTz8Ws1Yb4Nc6Hd5Jf0Ge2Va7"
    assert _refusal([("to", token[:20]), ("body", token[20:]), ("sign", "Thanks_a_lot")]) == (
        "to + body + sign",
        SecretFinding("github_token", 0, 40),
    )


# "dop_v1_" and 64 hex digits: 21 changes of class in 70 pairs, exactly 0.3; cut into uneven pieces.
DIGITALOCEAN = "dop_v1_" + "abcd1234cdef3456efab5678abcd7890cdef9012efab1234abcd3456cdef56ef"


def test_a_key_split_unevenly_is_found_from_three_class_changes_in_ten_characters() -> None:
    text = "token " + " ".join([DIGITALOCEAN[:9], DIGITALOCEAN[9:30], DIGITALOCEAN[30:52], DIGITALOCEAN[52:]])
    assert scan(text) == _whole("digitalocean_token", text)


# An npm token with few changes of class: found when split, only because its pieces are even.
EVEN_NPM = "npm_" + "AAAA1111BBBB2222CCCC3333DDDD4444EEEE"


@pytest.mark.parametrize(
    "text",
    [
        _pieces(EVEN_NPM, 4, "_"),  # npm__AAAA_1111_…: the prefix's own underscore is kept
        "key_" + _pieces(EVEN_NPM, 4, "_"),  # and the underscore before it is not
    ],
)
def test_a_key_split_evenly_after_a_prefix_that_holds_the_separator_is_found(text: str) -> None:
    assert scan(text) == _whole("npm_token", text)


def test_a_key_with_a_short_last_piece_that_runs_on_into_a_word_ends_where_the_word_starts() -> None:
    token = "glpat-" + "ABCDEFGHIJKLMNOPQRSTUVWX12"  # pieces of five, then two
    fields = [(f"part {i}", piece) for i, piece in enumerate(_pieces(token, 5, " ").split())]
    assert _refusal([*fields, ("sign", "thanks")]) == (
        " + ".join(name for name, _ in fields) + " + sign",
        SecretFinding("gitlab_token", 0, len(token)),
    )


_SENTENCE = "and then we can all go to the park for a walk after lunch if the weather holds up"


@pytest.mark.parametrize(
    ("words", "end", "found"),
    [(0, "", True), (1, "", True), (16, "", True), (16, " !", True), (17, "", False)],
)
def test_a_key_with_few_class_changes_is_cut_out_of_at_most_sixteen_words_run_on_after_it(
    words: int, end: str, found: bool
) -> None:
    # The bound on the work done for one match: the key must end at one of the last sixteen cuts inside it
    # (a cut at the very end of the match, before the "!", does not count).
    key = _pieces("glpat-" + "ABCDEFGHIJKLMNOPQRSTUVWX12", 5, " ")
    text = " ".join([key, *_SENTENCE.split()[:words]]) + end
    assert scan(text) == (_whole("gitlab_token", text) if found else None)


# -- how a rule matches text joined from pieces -------------------------------------------------------


def test_a_rule_for_a_token_of_one_case_ignores_case_in_joined_text_too() -> None:
    rule = secret_scan._token("demo_token", "dmo_", r"DMO_[A-Z0-9]{24}", any_case=True)
    text = "dmo_abcdefgh12345678abcd1234"
    joined = secret_scan._shapes(text, text, cuts=lambda: frozenset({14}), rules=[rule])
    assert joined == SecretFinding("demo_token", 0, 28)


def test_a_jwt_rule_in_joined_text_finds_a_header_that_a_word_touches() -> None:
    rule = secret_scan._token("demo_jwt", "eyj", rf"eyJ{secret_scan._EYJ_ALONE}[a-z0-9]{{20}}")
    text = "keyeyJabcdefghij1234567890"
    assert secret_scan._shapes(text, text.lower(), rules=[rule]) is None
    joined = secret_scan._shapes(text, text.lower(), cuts=lambda: frozenset({3, 15}), rules=[rule])
    assert joined == SecretFinding("demo_jwt", 3, 26)
