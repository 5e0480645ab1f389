"""NCCL's binary-tree shapes (ncclGetBtree / ncclGetDtree) as parent maps.

Shared by the double-binary-tree algorithm (:mod:`.algorithms`) and the hierarchical one
(:mod:`.hier`), so neither imports the other.
"""

from __future__ import annotations


def btree_parent(nranks: int, rank: int) -> int | None:
    """NCCL's binary tree (ncclGetBtree): the parent of ``rank``, None for the root 0."""
    if rank == 0:
        return None
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank ^ bit
    return up


def dtree_parents(nranks: int) -> tuple[tuple[int, dict[int, int]], tuple[int, dict[int, int]]]:
    """NCCL's double binary tree (ncclGetDtree) as ((root, parent map), (root, parent map)).

    The second tree mirrors the first (even count) or shifts it by one (odd count), so that the
    leaves of one tree are the inner nodes of the other.
    """
    first = {r: p for r in range(1, nranks) if (p := btree_parent(nranks, r)) is not None}
    second: dict[int, int] = {}
    if nranks % 2:
        root2 = 1 % nranks
        for r in range(nranks):
            up = btree_parent(nranks, (r - 1) % nranks)
            if up is not None:
                second[r] = (up + 1) % nranks
    else:
        root2 = nranks - 1
        for r in range(nranks):
            up = btree_parent(nranks, nranks - 1 - r)
            if up is not None:
                second[r] = nranks - 1 - up
    return (0, first), (root2, second)
