"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from synth.topology import Link, Port, Switch, Topology


@st.composite
def connected_topologies(draw, min_ranks: int = 2, max_ranks: int = 12, allow_switch: bool = True):
    """A random connected topology: a random spanning tree, extra random links, maybe a switch.

    Link speeds vary (two classes) so cost and capacity logic sees heterogeneity; a switch, when
    present, joins a random subset of ranks with one port each.
    """
    n = draw(st.integers(min_ranks, max_ranks))
    pairs: set[tuple[int, int]] = set()
    for r in range(1, n):
        parent = draw(st.integers(0, r - 1))
        pairs.add((parent, r))
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n))
    pairs |= {(min(a, b), max(a, b)) for a, b in extra if a != b}
    links = []
    for a, b in sorted(pairs):
        fast = draw(st.booleans())
        count = draw(st.integers(1, 2))
        beta = 10.0 if fast else 40.0
        links += [Link(a, b, 0.5, beta, count, "fast" if fast else "slow"),
                  Link(b, a, 0.5, beta, count, "fast" if fast else "slow")]
    switches: tuple[Switch, ...] = ()
    if allow_switch and n >= 3 and draw(st.booleans()):
        members = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=n, unique=True))
        ports = tuple(Port(f"p{r}", (r,), 8.0, draw(st.integers(1, 2))) for r in sorted(members))
        switches = (Switch("sw", 0.7, ports, "switch"),)
    return Topology(name=f"random{n}", num_ranks=n, links=tuple(links), switches=switches,
                    nodes=(tuple(range(n)),))
