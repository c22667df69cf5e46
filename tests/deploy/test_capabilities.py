"""The node pod drops ALL capabilities: the neighbor dumps it relies on must not need one.

A stdlib script (Debian's Python, readable by any user) asks the kernel for
RTM_GETNEIGHTBL and RTM_GETNEIGH dumps as uid 65534 with an empty capability bounding
set and no_new_privs, as the pod's securityContext sets up, inside a network namespace
of the test's own holding a known neighbor entry. For contrast, the same process is
refused RTM_NEWNEIGH (which needs CAP_NET_ADMIN), so the sandbox is real.
"""

import json
import os
import subprocess

import pytest

pytestmark = pytest.mark.integration

SCRIPT = r"""
import json, os, socket, struct
RTM_NEWNEIGH, RTM_GETNEIGH, RTM_GETNEIGHTBL = 28, 30, 66
NLM_F_REQUEST, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP = 1, 4, 0x400, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3

sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
sock.bind((0, 0))

def request(kind, flags, body):
    sock.send(struct.pack("=IHHII", 16 + len(body), kind, NLM_F_REQUEST | flags, 1, 0) + body)
    messages = []
    while True:
        data, off = sock.recv(1 << 16), 0
        while off < len(data):
            length, kind_, _, _, _ = struct.unpack_from("=IHHII", data, off)
            if kind_ == NLMSG_DONE:
                return messages
            if kind_ == NLMSG_ERROR:
                errno = -struct.unpack_from("=i", data, off + 16)[0]
                if errno:
                    raise OSError(errno, os.strerror(errno))
                return messages
            messages.append(data[off + 16:off + length])
            off += (length + 3) & ~3

def table_name(payload):
    off = 4  # struct ndtmsg
    while off + 4 <= len(payload):
        length, kind = struct.unpack_from("=HH", payload, off)
        if kind == 1:  # NDTA_NAME
            return payload[off + 4:off + length].rstrip(b"\0").decode()
        off += (length + 3) & ~3

def status(field):
    with open("/proc/self/status") as f:
        return next(line.split()[1] for line in f if line.startswith(field + ":"))

tables = sorted(filter(None, (table_name(m) for m in
                              request(RTM_GETNEIGHTBL, NLM_F_DUMP, struct.pack("Bxxx", 0)))))
entries = len(request(RTM_GETNEIGH, NLM_F_DUMP, struct.pack("=BxxxiHBB", socket.AF_INET, 0, 0, 0, 0)))
ifindex = socket.if_nametoindex("kse0")
add = struct.pack("=BxxxiHBB", socket.AF_INET, ifindex, 0x80, 0, 1)  # NUD_PERMANENT, NDA_DST
add += struct.pack("=HH", 8, 1) + socket.inet_aton("192.0.2.99")
try:
    request(RTM_NEWNEIGH, NLM_F_ACK | NLM_F_CREATE, add)
    refused = None
except OSError as exc:
    refused = exc.errno
print(json.dumps({"uid": os.getuid(), "cap_eff": status("CapEff"), "cap_bnd": status("CapBnd"),
                  "no_new_privs": status("NoNewPrivs"), "tables": tables, "entries": entries,
                  "add_refused_errno": refused}))
"""

SYSTEM_PYTHON = "/usr/bin/python3.11"


@pytest.fixture
def netns():
    name = f"kse-caps-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for cmd in (
            ["link", "add", "kse0", "type", "veth", "peer", "name", "kse1"],
            ["link", "set", "kse0", "up"],
            [
                "neigh",
                "add",
                "192.0.2.7",
                "lladdr",
                "02:00:00:00:00:07",
                "dev",
                "kse0",
                "nud",
                "permanent",
            ],
        ):
            subprocess.run(["ip", "-n", name, *cmd], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=True)


def test_neighbor_dumps_need_no_capability(netns):
    result = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            netns,
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            SYSTEM_PYTHON,
            "-I",
            "-c",
            SCRIPT,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["uid"] == 65534
    assert int(seen["cap_eff"], 16) == 0 and int(seen["cap_bnd"], 16) == 0
    assert seen["no_new_privs"] == "1"
    assert {"arp_cache", "ndisc_cache"} <= set(seen["tables"])
    assert seen["entries"] == 1  # the entry the fixture added
    assert seen["add_refused_errno"] == 1  # EPERM: changing the table needs CAP_NET_ADMIN
    shown = subprocess.run(
        ["ip", "-n", netns, "-4", "neigh", "show"], capture_output=True, text=True, check=True
    ).stdout
    assert "192.0.2.99" not in shown and "192.0.2.7" in shown
