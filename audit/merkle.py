"""The audit log's Merkle tree, as Certificate Transparency defines it (RFC 6962, RFC 9162
section 2.1), with no Django import so the offline verifier uses the very same code.

Leaf ``i`` is event ``#i+1``; its data is the event's 32-byte chain hash, which commits to
the event's canonical content and to its predecessor. Hashes:

    leaf hash  = SHA-256(0x00 ‖ data)
    node hash  = SHA-256(0x01 ‖ left ‖ right)
    MTH(D[n])  = node(MTH(D[0:k]), MTH(D[k:n])), k the largest power of two below n

Inclusion proofs (``PATH``) show that one leaf is in a tree of a given size and root;
consistency proofs (``PROOF``) show that a later tree extends an earlier one unchanged.
Both are checked with the RFC 9162 algorithms, which need nothing but the proof.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def event_leaf(chain_hash_hex: str) -> bytes:
    """The leaf hash of an event, from its hex chain hash."""
    return leaf_hash(bytes.fromhex(chain_hash_hex))


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def split(n: int) -> int:
    """The largest power of two strictly below ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


# --- compact ranges: the right edge of a growing tree ---------------------------------


def frontier_sizes(size: int) -> list[int]:
    """Sizes of the perfect subtrees that tile [0, size), left to right."""
    return [1 << b for b in range(size.bit_length() - 1, -1, -1) if size >> b & 1]


def extend(frontier: list[bytes], size: int, leaves: Iterable[bytes]) -> tuple[list[bytes], int]:
    """Append leaf hashes to a compact range (one hash per perfect subtree of [0, size))."""
    pieces = list(zip(frontier_sizes(size), frontier, strict=True))
    for leaf in leaves:
        pieces.append((1, leaf))
        size += 1
        while len(pieces) >= 2 and pieces[-1][0] == pieces[-2][0]:
            (width, right), (_, left) = pieces.pop(), pieces.pop()
            pieces.append((2 * width, node_hash(left, right)))
    return [h for _, h in pieces], size


class CompactRange:
    """A growing tree's right edge, one leaf at a time (for a walk over the whole log)."""

    def __init__(self, frontier: Sequence[bytes] = (), size: int = 0):
        self.pieces = list(zip(frontier_sizes(size), frontier, strict=True))
        self.size = size

    def push(self, leaf: bytes) -> None:
        pieces = self.pieces
        pieces.append((1, leaf))
        self.size += 1
        while len(pieces) >= 2 and pieces[-1][0] == pieces[-2][0]:
            (width, right), (_, left) = pieces.pop(), pieces.pop()
            pieces.append((2 * width, node_hash(left, right)))

    def push_subtree(self, width: int, digest: bytes) -> None:
        """Append a whole perfect subtree of ``width`` leaves (a power of two dividing the
        current size) by its root."""
        pieces = self.pieces
        pieces.append((width, digest))
        self.size += width
        while len(pieces) >= 2 and pieces[-1][0] == pieces[-2][0]:
            (width, right), (_, left) = pieces.pop(), pieces.pop()
            pieces.append((2 * width, node_hash(left, right)))

    def root(self) -> bytes:
        return frontier_root([h for _, h in self.pieces])


def perfect_root(leaves: Sequence[bytes]) -> bytes:
    """The root of a perfect subtree (a power-of-two number of leaf hashes), hashed a
    level at a time."""
    level = b"".join(leaves)
    sha, prefix = hashlib.sha256, b"\x01"
    while len(level) > 32:
        view = memoryview(level)
        level = b"".join([sha(prefix + view[i : i + 64]).digest() for i in range(0, len(level), 64)])
    return level


def frontier_root(frontier: Sequence[bytes]) -> bytes:
    if not frontier:
        return EMPTY_ROOT
    root = frontier[-1]
    for piece in reversed(frontier[:-1]):
        root = node_hash(piece, root)
    return root


def root_of(leaves: Iterable[bytes]) -> bytes:
    frontier, _ = extend([], 0, leaves)
    return frontier_root(frontier)


# --- a tree held in memory, for producing proofs ------------------------------------


class Tree:
    """Leaf hashes ``[base, size)`` and, for ``[0, base)``, the compact range at ``base``
    (what retention leaves behind). Perfect subtrees are kept level by level, each level
    one ``bytearray`` of 32-byte hashes, so any node's hash is a slice or a short walk
    down the tree's right edge, and appending leaves only hashes what they complete."""

    def __init__(
        self, leaves: Sequence[bytes] | bytes = (), *, base: int = 0, frontier: Sequence[bytes] = ()
    ):
        self.base = self.size = base
        self.pieces: dict[tuple[int, int], bytes] = {}
        lo = 0
        for width, digest in zip(frontier_sizes(base), frontier, strict=True):
            self.pieces[(lo, lo + width)] = digest
            lo += width
        # levels[h] = (index of its first node, their hashes back to back)
        self.levels: list[tuple[int, bytearray]] = [(base, bytearray())]
        self._edge: dict[tuple[int, int], bytes] = {}
        self.extend(leaves)

    def extend(self, leaves: Sequence[bytes] | bytes) -> None:
        """Append leaf hashes (a sequence of 32-byte hashes, or them back to back)."""
        blob = leaves if isinstance(leaves, bytes | bytearray) else b"".join(leaves)
        if not blob:
            return
        self.levels[0][1].extend(blob)
        self.size += len(blob) // 32
        self._edge.clear()
        sha, prefix = hashlib.sha256, b"\x01"
        height = 0
        while True:
            first, nodes = self.levels[height]
            start = first + (first & 1)  # the first node whose pair lies inside this level
            offset = (start - first) * 32
            pairs = (len(nodes) - offset) // 64
            if pairs <= 0:
                break
            if height + 1 == len(self.levels):
                self.levels.append((start // 2, bytearray()))
            upper = self.levels[height + 1][1]
            done = len(upper) // 32
            view = memoryview(nodes)
            upper.extend(
                b"".join(
                    sha(prefix + view[offset + 64 * i : offset + 64 * i + 64]).digest()
                    for i in range(done, pairs)
                )
            )
            height += 1

    def hash(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi]) for a node of this tree (or a whole tree's range [0, n))."""
        if hi - lo == 0:
            return EMPTY_ROOT
        if (lo, hi) in self.pieces:
            return self.pieces[(lo, hi)]
        width = hi - lo
        if width & (width - 1) == 0 and lo % width == 0:
            level = width.bit_length() - 1
            if level < len(self.levels):
                first, nodes = self.levels[level]
                index = lo // width - first
                if 0 <= index and 32 * index < len(nodes):
                    return bytes(nodes[32 * index : 32 * index + 32])
        if width == 1:
            raise KeyError(f"leaf {lo} is not held (retired before {self.base})")
        key = (lo, hi)
        if key not in self._edge:
            k = split(width)
            self._edge[key] = node_hash(self.hash(lo, lo + k), self.hash(lo + k, hi))
        return self._edge[key]

    def root(self, size: int | None = None) -> bytes:
        return self.hash(0, self.size if size is None else size)

    def inclusion(self, index: int, size: int) -> list[bytes]:
        return inclusion_path(index, 0, size, self.hash)

    def consistency(self, first: int, second: int) -> list[bytes]:
        return consistency_proof(first, second, self.hash)


Hasher = Callable[[int, int], bytes]


def inclusion_path(index: int, lo: int, hi: int, mth: Hasher) -> list[bytes]:
    """RFC 6962 PATH(m, D[lo:hi]), leaf-side first."""
    path: list[bytes] = []
    while hi - lo > 1:
        k = split(hi - lo)
        if index < lo + k:
            path.append(mth(lo + k, hi))
            hi = lo + k
        else:
            path.append(mth(lo, lo + k))
            lo += k
    return path[::-1]


def consistency_proof(first: int, second: int, mth: Hasher) -> list[bytes]:
    """RFC 6962 PROOF(m, D[n]) for 0 < first <= second."""
    if not 0 < first <= second:
        raise ValueError("a consistency proof needs 0 < first <= second")
    proof: list[bytes] = []
    lo, hi, m, complete = 0, second, first, True
    while m != hi - lo:
        k = split(hi - lo)
        if m <= k:
            proof.append(mth(lo + k, hi))
            hi = lo + k
        else:
            proof.append(mth(lo, lo + k))
            lo, m, complete = lo + k, m - k, False
    if not complete:
        proof.append(mth(lo, hi))
    return proof[::-1]


# --- verification (RFC 9162 2.1.3.2 and 2.1.4.2) --------------------------------------


def root_from_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes]) -> bytes | None:
    """The root that ``path`` leads to from ``leaf``, or None if the path has the wrong
    shape for that index and size."""
    if not 0 <= index < size:
        return None
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def verify_inclusion(
    index: int, size: int, leaf: bytes, path: Sequence[bytes], root: bytes
) -> bool:
    return root_from_inclusion(index, size, leaf, path) == root


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: Sequence[bytes]
) -> bool:
    if not 0 < first <= second:
        return False
    if first == second:
        return not proof and first_root == second_root
    proof = list(proof)
    if first & (first - 1) == 0:
        proof.insert(0, first_root)
    if not proof:
        return False
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first_root and sr == second_root


# --- proofs for many leaves at once (a filtered export) ----------------------------------


def covering_nodes(indexes: Sequence[int], size: int, mth: Hasher) -> list[tuple[int, int, bytes]]:
    """The maximal subtrees of the tree of ``size`` that hold none of the sorted leaf
    ``indexes``: with the leaves themselves, every leaf's inclusion path can be rebuilt.
    Shared between leaves, so k leaves need about k·log(n/k) nodes, not k·log(n)."""
    out: list[tuple[int, int, bytes]] = []

    def walk(lo: int, hi: int, first: int, last: int) -> None:  # indexes[first:last] in [lo, hi)
        if first == last:
            out.append((lo, hi, mth(lo, hi)))
        elif hi - lo > 1:
            k = lo + split(hi - lo)
            middle = bisect_left(indexes, k, first, last)
            walk(lo, k, first, middle)
            walk(k, hi, middle, last)

    if size:
        walk(0, size, 0, len(indexes))
    return out


class PartialTree:
    """A tree known only through some leaves and the covering nodes: enough to give any of
    those leaves' inclusion paths (the offline verifier's side of ``covering_nodes``)."""

    def __init__(
        self, size: int, leaves: dict[int, bytes], nodes: Iterable[tuple[int, int, bytes]]
    ):
        self.size, self.leaves = size, leaves
        self.nodes = {(lo, hi): digest for lo, hi, digest in nodes}
        self._memo: dict[tuple[int, int], bytes] = {}

    def hash(self, lo: int, hi: int) -> bytes:
        key = (lo, hi)
        if key in self.nodes:
            return self.nodes[key]
        if hi - lo == 1:
            if lo not in self.leaves:
                raise KeyError(f"no hash for leaf {lo}")
            return self.leaves[lo]
        if key not in self._memo:
            k = lo + split(hi - lo)
            self._memo[key] = node_hash(self.hash(lo, k), self.hash(k, hi))
        return self._memo[key]

    def inclusion(self, index: int) -> list[bytes]:
        return inclusion_path(index, 0, self.size, self.hash)

    def root_over(self, indexes: Sequence[int]) -> bytes:
        """The root rebuilt from the leaves at the sorted ``indexes`` and, for the maximal
        subtrees holding none of them, the given nodes (a node over a listed leaf is never
        used, so each listed leaf is hashed into the root at its place). KeyError when a
        needed node is missing."""

        def walk(lo: int, hi: int, first: int, last: int) -> bytes:
            if first == last:
                return self.nodes[(lo, hi)]
            if hi - lo == 1:
                return self.leaves[lo]
            k = lo + split(hi - lo)
            middle = bisect_left(indexes, k, first, last)
            return node_hash(walk(lo, k, first, middle), walk(k, hi, middle, last))

        return walk(0, self.size, 0, len(indexes)) if self.size else EMPTY_ROOT
