"""The check on a mandate's ``matches`` pattern: an agent wrote it, so it is hostile until read. Every
construct that could backtrack without bound is refused wherever it hides (behind a comment, an atomic or
conditional group, verbose mode), each limit holds at N and refuses N+1, and every refusal is the sentence
the agent reads (docs/mandates.md, DESIGN §23)."""

from __future__ import annotations

import re
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tapgate.domain.errors import InvalidInput
from tapgate.domain.mandates import compile_pattern

REPEATED = "matches on 'to' is refused: a repeated group may not itself repeat or alternate."
LOOKING = "matches on 'to' is refused: backreferences and look-arounds are not allowed."
VERBOSE = "matches on 'to' is refused: verbose mode (?x) is not allowed."
LARGE = (
    "matches on 'to' is refused: at most one repetition may be unbounded or over 10 "
    "(write {m,n} with n up to 10)."
)
MANY = (
    "matches on 'to' is refused: its repetitions and alternatives together allow too many ways to match: "
    "simplify it."
)


def _refusal(pattern: object, param: str = "to") -> str | None:
    """What the agent reads when ``pattern`` is refused, or None when it is taken."""
    try:
        compile_pattern(param, pattern)
    except InvalidInput as e:
        return e.message
    return None


def test_a_taken_pattern_comes_back_compiled_to_search_with() -> None:
    compiled = compile_pattern("to", r"^\+44\d{9,10}$")
    assert compiled.pattern == r"^\+44\d{9,10}$"
    assert compiled.search("+447700900001") is not None
    assert compiled.search("+337700900001") is None


@pytest.mark.parametrize("pattern", [None, "a" * 201, "(", "a{4294967296}", "(a+)+"])
def test_every_refusal_of_a_pattern_names_the_constraints_as_the_field_at_fault(pattern: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        compile_pattern("to", pattern)
    assert refused.value.field == "constraints"


@pytest.mark.parametrize(
    ("pattern", "param", "said"),
    [
        (None, "to", "matches on 'to' must be a regular expression."),
        (7, "to", "matches on 'to' must be a regular expression."),
        (["a"], "to", "matches on 'to' must be a regular expression."),
        ("", "body", "matches on 'body' must be a regular expression."),
        ("a" * 200, "to", None),
        ("a" * 201, "body", "matches on 'body' is over 200 characters."),
        ("(", "to", "matches on 'to' does not compile: missing ), unterminated subpattern."),
        ("a**", "body", "matches on 'body' does not compile: multiple repeat."),
        ("a{4294967296}", "to", "matches on 'to' repeats or nests too much."),
        ("(a+)+", "body", REPEATED.replace("'to'", "'body'")),
    ],
)
def test_a_pattern_that_is_not_text_too_long_or_broken_is_refused_with_what_is_wrong(
    pattern: object, param: str, said: str | None
) -> None:
    assert _refusal(pattern, param) == said


@pytest.mark.parametrize(
    "pattern",
    [
        r"^\+44\d{9,10}$",
        r"(?P<area>\d{3})-\d+",
        "(?:home|work) at [0-9]{1,2}",
        "((a)b)+",  # a repeated group that holds only a plain group
        "(?i:ab)+",  # a scoped flags group repeated: nothing inside it repeats
        "(?i)abc+",
        "(?#the area code)44+",  # a comment is no group of the pattern
        "(a)(?(1)b|c)d+",  # a conditional group is a group
        "(?>ab|c)d+",  # so is an atomic one
        r"\(a|b\)*",  # escaped parentheses are characters, not a group
        "[*+?]x*",  # quantifier signs in a class are characters
        "[(|]x*",  # and so are a parenthesis and a bar
        "[]*+]x*",  # a ] first in a class is one of its characters
        "[^]*+]x*",  # and so is one right after the ^
        r"[\]*+]x*",  # and an escaped one
        "a*?",  # a lazy repetition is still one repetition
    ],
)
def test_a_pattern_without_a_risky_construct_is_taken(pattern: str) -> None:
    assert _refusal(pattern) is None


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("(a+)+$", REPEATED),
        ("(a|b)*", REPEATED),
        ("(a?){2}", REPEATED),
        ("(?:a|b)+", REPEATED),
        ("(?P<n>a|b)+", REPEATED),
        ("(?i:a|b)+", REPEATED),
        ("((a|b))*", REPEATED),  # the alternation is one group down
        ("((a)*)+", REPEATED),  # and a repeated group is a repetition
        ("x(a|b)*y", REPEATED),
        ("[)](a|b)*", REPEATED),  # a ) in a class closes no group
        (r"\)(a|b)*", REPEATED),  # nor does an escaped one
        # a comment, an empty atomic group or a conditional inside the repeated group hides nothing
        ("(a|a(?#))+$", REPEATED),
        ("(a|a(?#x))+$", REPEATED),
        (r"(a|a(?#\)))+$", REPEATED),
        ("(a|a(?>))+$", REPEATED),
        ("(a)(b|b(?(1)|z))+$", REPEATED),
        ("(a)(?(1)a|b)+", REPEATED),
        ("(a)\\1", LOOKING),
        ("(?P<n>a)(?P=n)", LOOKING),
        ("a(?=b)", LOOKING),
        ("a(?!b)", LOOKING),
        ("(?<=a)b", LOOKING),
        ("(?<!a)b", LOOKING),
        # in verbose mode whitespace and # comments are not the pattern: (a|a) + is (a|a)+
        ("(?x)(a|a) +$", VERBOSE),
        ("(?x)(a|a#)\n)+$", VERBOSE),
        ("(?x:(a|a) +)$", VERBOSE),
        ("(?ix)a", VERBOSE),
        ("(?s-x:a)", None),  # turning verbose mode off is harmless
    ],
)
def test_a_pattern_that_could_backtrack_without_bound_is_refused_with_why(
    pattern: str, said: str | None
) -> None:
    assert _refusal(pattern) == said


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        # one repetition may be unbounded or over 10; every other one bounded by at most 10
        ("a{0,10}b*", None),
        ("a{0,11}b*", LARGE),
        ("a{10}b*", None),
        ("a{11}b*", LARGE),
        ("a{5}b*", None),
        ("a{2,}b*", LARGE),
        ("a{,}b*", LARGE),
        ("a{11}", None),
        ("a*b+", LARGE),
        ("a+b*", LARGE),
        ("a+b?", None),
        ("(ab)*c+", LARGE),  # a repeated group is a repetition
        ("[ab]*x*", LARGE),  # and so is a repeated class
        (r"[\\]+x*", LARGE),  # a class ending in an escaped backslash ends at its ]
        ("[a^]+x*", LARGE),  # a ^ that is not first is one of the class's characters
        # the ways to match multiply: 32 are allowed, and one more repetition or alternative is refused
        ("a?b?c?d?e?", None),
        ("a?b?c?d?e?f?", MANY),
        ("a|b|c|d|e|f", None),
        ("a|b|c|d|e|f|g", MANY),
        ("(a|b)(c|d)e?f?g?", None),
        ("(a|b)(c|d)e?f?g?h?", MANY),
        ("a{,7}b?c?", None),  # {,7} is 8 ways
        ("a{,8}b?c?", MANY),
        ("a{3,10}b?c?", None),  # {3,10} is 8 ways
        ("a{2,10}b?c?", MANY),
        ("a{2,9}b?c?", None),
        ("a{2,5}b{2,5}c{1,2}", None),  # 4 * 4 * 2
        ("a{2,5}b{2,5}c{1,3}", MANY),
        ("a{3}b?c?d?e?f?", None),  # {3} is one way
        ("a{10}b?c?d?e?f?", None),
        ("a*b?c?d?e?f?", None),  # the one large repetition is one way
        ("a{0,20}b?c?d?e?f?", None),
        ("(ab)?c?d?e?f?", None),
        ("(ab)?c?d?e?f?g?", MANY),
        ("(ab){1,3}c?d?e?", None),  # 3 * 8
        ("(ab){1,5}c?d?e?", MANY),  # 5 * 8
    ],
)
def test_repetitions_and_alternatives_are_bounded_at_their_limits(pattern: str, said: str | None) -> None:
    assert _refusal(pattern) == said


@given(st.text(alphabet="a()[]^\\|*+?{},01:#<>=!?Pix-", max_size=24))
def test_any_pattern_is_taken_or_refused_with_a_reason_never_an_error(pattern: str) -> None:
    with warnings.catch_warnings():  # Python warns of a class like [[ or [a||] that a later version reads
        warnings.simplefilter("ignore", FutureWarning)  # as a set operation: a warning, not an error
        said = _refusal(pattern)
    assert said is None or said.startswith("matches on 'to' ")


def test_a_taken_pattern_is_what_python_searches_with() -> None:
    pattern = "(?i)^(?P<who>mum|dad): [^!]{1,10}$"
    assert compile_pattern("to", pattern) == re.compile(pattern)
