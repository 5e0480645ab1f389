"""What each MSCCL runtime accepts: its profile (``exec`` = msccl-executor-nccl, ``rccl`` =
ROCm/rccl, ``legacy`` = microsoft/msccl) and the hard limits of ``docs/reference/msccl-xml-spec.md``
§2 and §6.

One table for every layer that needs it: the reader (:mod:`.xml_parse`, :mod:`.xml_lint`), the
writer (:mod:`.xml_write`), the interpreter and the program model, so a file synth writes is
checked against the same limits it is read back with.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SynthError

EXEC_COLLS = ("allreduce", "allgather", "reduce", "broadcast", "alltoall", "reducescatter", "send",
              "recv", "gather", "scatter", "alltoallv")
LEGACY_COLLS = ("allreduce", "allgather", "reduce", "broadcast", "alltoall", "reduce_scatter",
                "custom")
BUFFERS = ("i", "o", "s")

MAX_ATTR_COUNT = 16
MAX_STR_LEN = 255
MAX_NODES = 4096
MAX_SUBS = 1024
MSCCL_MAX_COUNT = 72
MSCCL_MAX_REDUCE_FUSION = 16
MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL = 32
MAX_OFFSET = 32767          # srcoff/dstoff are int16
MAX_DEPID = 127             # depid is int8
LEGACY_DEFAULT_MAX_BYTES = 1 << 27
SM_COUNT_HINT = 108         # A100; co-residency advisory (§5.1, C4)

SEND_TYPES = frozenset(("s", "rcs", "rrs", "rrcs"))
RECV_TYPES = frozenset(("r", "rcs", "rrs", "rrc", "rrcs"))
USES_SRC = frozenset(("s", "rrs", "rrc", "rrcs", "cpy", "re"))
USES_DST = frozenset(("r", "rcs", "rrc", "rrcs", "cpy", "re"))


@dataclass(frozen=True)
class Profile:
    """What one runtime accepts: vocabulary, required ``<algo>`` attributes and hard limits."""

    name: str
    colls: tuple[str, ...]
    required_algo: tuple[str, ...]
    max_steps: int          # MSCCL_MAX_NUM_STEPS (steps per block, nops included)
    max_tbs: int            # MSCCL_MAX_NUM_THREAD_BLOCKS
    max_channels: int       # MAXCHANNELS
    outofplace_attr: bool   # <algo> has an outofplace attribute (not legacy)


_EXEC_REQUIRED = ("proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                  "minBytes", "maxBytes")
PROFILES: dict[str, Profile] = {
    "exec": Profile("exec", EXEC_COLLS, _EXEC_REQUIRED, 64, 1024, 32, True),
    "rccl": Profile("rccl", EXEC_COLLS, _EXEC_REQUIRED, 64, 64, 128, True),
    "legacy": Profile("legacy", LEGACY_COLLS,
                      ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace"),
                      256, 216, 32, False),
}


def get_profile(profile: str) -> Profile:
    try:
        return PROFILES[profile]
    except KeyError:
        raise SynthError(f"unknown MSCCL runtime profile '{profile}' "
                         f"(known: {', '.join(PROFILES)})") from None


def normalize_coll(coll: str) -> str:
    """The collective's semantic name: both reduce-scatter spellings map to ``reducescatter``."""
    return "reducescatter" if coll == "reduce_scatter" else coll


def physical_chunks(coll: str, ngpus: int, nchunks: int) -> tuple[int, int]:
    """(input, output) extent in chunks of one rank's user buffers (§3.3)."""
    coll = normalize_coll(coll)
    k = nchunks // ngpus if ngpus else 0
    if coll == "allgather":
        return k, nchunks
    if coll == "reducescatter":
        return nchunks, k
    return nchunks, nchunks
