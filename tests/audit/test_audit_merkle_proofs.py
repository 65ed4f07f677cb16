"""The Merkle tree's arithmetic against RFC 6962's recursive definitions, written out
naively here, for every tree size up to 40."""

import hashlib

import pytest

from audit import merkle


def _leaves(n):
    return [merkle.leaf_hash(hashlib.sha256(str(i).encode()).digest()) for i in range(n)]


def _mth(d):
    if len(d) == 1:
        return d[0]
    k = merkle.split(len(d))
    return merkle.node_hash(_mth(d[:k]), _mth(d[k:]))


def _path(m, d):
    if len(d) == 1:
        return []
    k = merkle.split(len(d))
    if m < k:
        return _path(m, d[:k]) + [_mth(d[k:])]
    return _path(m - k, d[k:]) + [_mth(d[:k])]


def _subproof(m, d, b):
    if m == len(d):
        return [] if b else [_mth(d)]
    k = merkle.split(len(d))
    if m <= k:
        return _subproof(m, d[:k], b) + [_mth(d[k:])]
    return _subproof(m - k, d[k:], False) + [_mth(d[:k])]


SIZES = range(1, 41)


@pytest.mark.parametrize("n", SIZES)
def test_it_computes_rfc_6962_roots_and_paths(n):
    leaves = _leaves(n)
    tree = merkle.Tree(leaves)
    assert tree.root() == merkle.root_of(leaves) == _mth(leaves)
    for m in range(n):
        path = tree.inclusion(m, n)
        assert path == _path(m, leaves)
        assert merkle.verify_inclusion(m, n, leaves[m], path, _mth(leaves))


@pytest.mark.parametrize("n", SIZES)
def test_it_proves_every_smaller_tree_consistent(n):
    leaves = _leaves(n)
    tree = merkle.Tree(leaves)
    for m in range(1, n + 1):
        proof = tree.consistency(m, n)
        assert proof == _subproof(m, leaves, True)
        assert merkle.verify_consistency(m, n, _mth(leaves[:m]), _mth(leaves), proof)


def test_a_wrong_leaf_or_root_fails():
    leaves = _leaves(13)
    root = _mth(leaves)
    path = _path(5, leaves)
    assert not merkle.verify_inclusion(5, 13, leaves[6], path, root)
    assert not merkle.verify_inclusion(6, 13, leaves[5], path, root)
    assert not merkle.verify_inclusion(5, 6, leaves[5], path, root)


def test_a_rewritten_history_is_not_consistent():
    leaves = _leaves(11)
    forged = leaves[:3] + _leaves(1) + leaves[4:]
    proof = _subproof(6, leaves, True)
    assert not merkle.verify_consistency(6, 11, _mth(forged[:6]), _mth(leaves), proof)


def test_the_compact_range_extends_to_the_same_root():
    leaves = _leaves(37)
    frontier, size = merkle.extend([], 0, leaves[:20])
    frontier, size = merkle.extend(frontier, size, leaves[20:])
    assert size == 37 and merkle.frontier_root(frontier) == _mth(leaves)


def test_a_tree_cut_at_a_frontier_still_proves_later_leaves():
    leaves = _leaves(29)
    frontier, _ = merkle.extend([], 0, leaves[:11])
    tree = merkle.Tree(leaves[11:], base=11, frontier=frontier)
    assert tree.root() == _mth(leaves)
    for m in range(11, 29):
        assert tree.inclusion(m, 29) == _path(m, leaves)


@pytest.mark.parametrize("picked", [[0], [3, 4, 9], list(range(17)), [16]])
def test_covering_nodes_rebuild_each_leafs_path(picked):
    leaves = _leaves(17)
    tree = merkle.Tree(leaves)
    nodes = merkle.covering_nodes(picked, 17, tree.hash)
    partial = merkle.PartialTree(17, {i: leaves[i] for i in picked}, nodes)
    for m in picked:
        assert partial.inclusion(m) == _path(m, leaves)
    assert len(nodes) <= len(picked) * 5


def test_a_tree_extended_bit_by_bit_is_the_tree_built_at_once():
    leaves = _leaves(37)
    tree = merkle.Tree(leaves[:5])
    for lo, hi in ((5, 6), (6, 17), (17, 37)):
        tree.extend(leaves[lo:hi])
    assert tree.size == 37 and tree.root() == _mth(leaves)
    assert tree.root(20) == _mth(leaves[:20]) and tree.inclusion(3, 20) == _path(3, leaves[:20])
