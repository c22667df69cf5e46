"""The dump decoder against a model: RTM_NEWNEIGH replies built in the kernel's layout.

The counter reads runs of messages of one layout a field at a time and everything else
one message at a time; whatever the mix of layouts, families, states and flags, and
wherever the chunks are cut, its counts must be the model's.
"""

import random
import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kube_scale_exporter.netlink.neighbor import (
    NDA_FLAGS_EXT,
    NTF_EXT_LEARNED,
    NTF_EXT_MANAGED,
    NUD_PERMANENT,
    RTM_NEWNEIGH,
    EntryCounter,
)
from kube_scale_exporter.netlink.route import HEADER, NLMSG_DONE

NDA_DST, NDA_LLADDR, NDA_CACHEINFO, NDA_PROBES, NDA_PROTOCOL = 1, 2, 3, 4, 12
NLM_F_MULTI = 0x2
NUD_STATES = (0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, NUD_PERMANENT)
AF_OTHER = 7  # neither IPv4 nor IPv6: not counted

pytestmark = pytest.mark.unit


def attribute(attr_type: int, value: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(value), attr_type) + value
    return raw + bytes(-len(raw) % 4)


def message(family, state, flags, ext_flags, lladdr, protocol, rng) -> bytes:
    """One RTM_NEWNEIGH message with the attributes neigh_fill_info sends, in its order."""
    body = struct.pack("=BBHiHBB", family, 0, 0, rng.randrange(1, 99), state, flags, 1)
    body += attribute(NDA_DST, rng.randbytes(16 if family == socket.AF_INET6 else 4))
    if lladdr:
        body += attribute(NDA_LLADDR, rng.randbytes(6))
    body += attribute(NDA_PROBES, struct.pack("=I", rng.randrange(4)))
    body += attribute(NDA_CACHEINFO, rng.randbytes(16))
    if protocol:
        body += attribute(NDA_PROTOCOL, bytes([protocol]))
    if ext_flags is not None:
        body += attribute(NDA_FLAGS_EXT, struct.pack("=I", ext_flags))
    return HEADER.pack(HEADER.size + len(body), RTM_NEWNEIGH, NLM_F_MULTI, 1, 0) + body


# A group: `count` entries of one layout; what varies inside it is drawn per entry.
groups = st.lists(
    st.fixed_dictionaries(
        {
            "count": st.integers(1, 300),
            "lladdr": st.booleans(),
            # PROTOCOL and FLAGS_EXT are both 8 bytes: layouts that differ at one length.
            "protocol": st.sampled_from([0, 0, 3]),
            "ext_flags": st.sampled_from([None, None, 0, NTF_EXT_MANAGED, 0x2]),
            "families": st.sampled_from(
                [(socket.AF_INET,), (socket.AF_INET6,), (socket.AF_INET, socket.AF_INET6, AF_OTHER)]
            ),
            "exempt_share": st.sampled_from([0.0, 0.3, 1.0]),
        }
    ),
    min_size=1,
    max_size=12,
)


def build(groups, rng):
    """The messages of a dump and the counts a correct decoder reports for it."""
    messages, expected = [], {"ipv4": [0, 0], "ipv6": [0, 0]}
    for g in groups:
        for _ in range(g["count"]):
            family = rng.choice(g["families"])
            exempt = rng.random() < g["exempt_share"]
            state = NUD_PERMANENT if exempt and rng.random() < 0.7 else rng.choice(NUD_STATES[:-1])
            flags = NTF_EXT_LEARNED if exempt and state != NUD_PERMANENT else 0
            ext = g["ext_flags"]
            exempt = bool(state & NUD_PERMANENT or flags & NTF_EXT_LEARNED)
            if ext is not None and ext & NTF_EXT_MANAGED:
                exempt = True
            messages.append(message(family, state, flags, ext, g["lladdr"], g["protocol"], rng))
            name = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6"}.get(family)
            if name:
                expected[name][0] += 1
                expected[name][1] += exempt
    return messages, {f: (n, n - exempt) for f, (n, exempt) in expected.items()}


def chunks_of(messages, cuts, rng):
    """The messages cut into reply chunks at `cuts` random message boundaries, DONE last."""
    done = HEADER.pack(HEADER.size + 4, NLMSG_DONE, NLM_F_MULTI, 1, 0) + bytes(4)
    bounds = sorted(rng.sample(range(1, len(messages)), min(cuts, len(messages) - 1)))
    pieces = [messages[a:b] for a, b in zip([0, *bounds], [*bounds, len(messages)], strict=True)]
    chunks = [b"".join(p) for p in pieces]
    chunks[-1] += done
    return chunks


def decode(chunks):
    counter = EntryCounter()
    for i, chunk in enumerate(chunks):
        assert counter(memoryview(chunk)) == (i == len(chunks) - 1)
    return {f: (c.entries, c.gc_eligible) for f, c in counter.counts.items()}


@settings(max_examples=150, deadline=None)
@given(groups=groups, cuts=st.integers(0, 6), seed=st.integers(0, 2**32))
def test_counts_are_the_models_whatever_the_layouts_and_cuts(groups, cuts, seed):
    rng = random.Random(seed)
    messages, expected = build(groups, rng)
    assert decode(chunks_of(messages, cuts, rng)) == expected


def test_a_managed_entry_inside_a_run_of_its_length_is_exempt():
    """PROTOCOL and FLAGS_EXT make messages of one length: a managed entry among entries
    with a protocol must not be read as one of their run."""
    rng = random.Random(1)
    protocol = [message(socket.AF_INET, 0x04, 0, None, True, 3, rng) for _ in range(300)]
    managed = message(socket.AF_INET, 0x04, 0, NTF_EXT_MANAGED, True, 0, rng)
    assert len(managed) == len(protocol[0])
    messages = protocol[:150] + [managed] + protocol[150:]
    assert decode(chunks_of(messages, 0, rng)) == {"ipv4": (301, 300), "ipv6": (0, 0)}
