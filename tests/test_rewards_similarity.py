"""`sequence_ratio` must equal difflib's SequenceMatcher(None, a, b, autojunk=False).ratio()
bit for bit; difflib itself is the independent reference here."""
import difflib

from hypothesis import given, settings
from hypothesis import strategies as st

from swe_rl_jax.rewards import longest_match, sequence_ratio


def difflib_ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def test_hand_computed():
    # "abcd" vs "abxd": longest block "ab" (2), then "cd" vs "xd" gives "d" (1): M = 3, T = 8.
    assert sequence_ratio("abcd", "abxd") == 2 * 3 / 8
    assert sequence_ratio("", "") == 1.0
    assert sequence_ratio("abc", "") == 0.0
    assert sequence_ratio("same", "same") == 1.0
    # Ties: the earliest block in a, then in b, is taken first ("ab" at a[0], b[0]).
    assert longest_match("abab", 0, 4, "xabab", 0, 5) == (0, 1, 4)
    assert longest_match("ab", 0, 2, "bab", 0, 3) == (0, 1, 2)
    assert longest_match("xy", 0, 2, "ab", 0, 2) == (0, 0, 0)


small_text = st.text(alphabet="ab \n", max_size=40)
code_text = st.text(alphabet="abcdef(): =\n+-@", max_size=120)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.tuples(small_text, small_text), st.tuples(code_text, code_text)))
def test_equals_difflib(pair):
    a, b = pair
    assert sequence_ratio(a, b) == difflib_ratio(a, b)


@settings(max_examples=200, deadline=None)
@given(code_text, st.lists(st.tuples(st.integers(0, 200), st.sampled_from(["", "x", "ab\n", "@@"]))))
def test_equals_difflib_on_near_copies(a, edits):
    b = a
    for pos, ins in edits:
        pos %= len(b) + 1
        b = b[:pos] + ins + b[pos + 1:]
    assert sequence_ratio(a, b) == difflib_ratio(a, b)
    assert sequence_ratio(b, a) == difflib_ratio(b, a)


@settings(max_examples=200, deadline=None)
@given(small_text, small_text, st.data())
def test_longest_match_on_subranges(a, b, data):
    alo = data.draw(st.integers(0, len(a)))
    ahi = data.draw(st.integers(alo, len(a)))
    blo = data.draw(st.integers(0, len(b)))
    bhi = data.draw(st.integers(blo, len(b)))
    expected = difflib.SequenceMatcher(None, a, b, autojunk=False).find_longest_match(alo, ahi, blo, bhi)
    assert longest_match(a, alo, ahi, b, blo, bhi) == tuple(expected)
