"""The detectors' array helpers (analysis/detect/_arrays.py) give numpy's own answers on the
shapes they meet: correlation ids sorted or not, with repeats, negatives and misses; stream ids
small or not. They exist for speed on exports of millions of rows (docs/detectors.md); only
their answers are checked here."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.detect.view import distinct, few_unique, member, search, union

RNG = np.random.default_rng(7)


@pytest.mark.parametrize(
    "keys",
    [
        np.arange(0, 2_000, 3),  # sorted, distinct
        RNG.integers(-50, 1_000, 700),  # unsorted, repeats, negatives
        np.array([5]),
        np.array([1_000, -3, 1_000, 42]),  # a few keys: one comparison each
        np.array([], np.int64),
    ],
    ids=["sorted", "unsorted", "one", "few", "empty"],
)
def test_member_is_isin(keys):
    x = RNG.integers(-100, 2_100, 5_000)
    got = member(x, keys)
    assert got.dtype == bool and got.shape == x.shape
    assert np.array_equal(got, np.isin(x, keys))


def test_member_finds_the_largest_and_smallest_key():
    keys = np.array([9, 3, 7])
    assert member(np.array([2, 3, 9, 10]), keys).tolist() == [False, True, True, False]


@pytest.mark.parametrize(
    "x",
    [
        RNG.integers(0, 40, 10_000),  # stream ids
        np.array([13, 7, 7, 13, 0]),
        np.array([-1, 3, 3]),  # a negative: np.unique's way
        np.array([1 << 40, 2, 2]),  # too large to count
        np.array([], np.int64),
    ],
    ids=["streams", "few", "negative", "large", "empty"],
)
def test_few_unique_is_unique(x):
    got = few_unique(x)
    assert got.dtype == x.dtype
    assert np.array_equal(got, np.unique(x))


@pytest.mark.parametrize(
    "x",
    [
        RNG.integers(0, 500, 20_000),  # API name ids
        RNG.integers(-1, 3, 1_000),  # -1 for NULL
        np.array([1 << 40, 2, 2, 1 << 40]),  # too wide a range to count
        np.array([7]),
        np.array([], np.int64),
    ],
    ids=["names", "null", "wide", "one", "empty"],
)
def test_distinct_is_unique_with_inverse(x):
    uniq, inv = distinct(x)
    want, want_inv = np.unique(x, return_inverse=True)
    assert np.array_equal(uniq, want) and uniq.dtype == x.dtype
    assert np.array_equal(inv, want_inv.reshape(-1)) and inv.dtype == np.int64
    assert np.array_equal(uniq[inv], x)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize(
    "x",
    [
        np.sort(RNG.integers(-10, 3_000_000, 200_000)),  # sorted: searched block by block
        np.sort(np.repeat(np.arange(0, 3_000_000, 97), 3))[:150_000],  # repeats, keys hit
        RNG.integers(-10, 3_000_000, 100_000),  # unsorted: numpy's own search
        np.full(100_000, 5),
    ],
    ids=["sorted", "repeats", "unsorted", "constant"],
)
def test_search_is_searchsorted(x, side):
    keys = np.sort(RNG.integers(0, 3_000_000, 400_000))
    got = search(keys, x, side)
    assert np.array_equal(got, np.searchsorted(keys, x, side=side))
    assert np.array_equal(search(keys[:3], x, side), np.searchsorted(keys[:3], x, side=side))


def test_union_of_disjoint_intervals_is_a_copy():
    s = np.arange(0, 10_000, 10)
    e = s + 4
    us, ue = union(s, e)
    assert np.array_equal(us, s) and np.array_equal(ue, e)
    us[0] = -1  # the caller's arrays are not the union's
    assert s[0] == 0
