"""The imagepull collector's parts: wire codec, image references, manifest index,
kubelet config file, pods, and its flags."""

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kube_scale_exporter.collectors.imagepull.kubelet import KubeletConfigFile
from kube_scale_exporter.collectors.imagepull.pods import (
    PULL_FAILED,
    images_failing,
    images_wanted,
    pod_summary,
)
from kube_scale_exporter.containerd import wire
from kube_scale_exporter.containerd.client import ContentInfo
from kube_scale_exporter.containerd.pulls import ManifestIndex
from kube_scale_exporter.containerd.reference import parse
from kube_scale_exporter.flagtypes import duration
from kube_scale_exporter.cli import parse as parse_flags
import socket

# ---- wire ----------------------------------------------------------------------------


def varint(n):
    return wire._varint(n)


@given(st.lists(st.text(max_size=300), max_size=20))
def test_repeated_strings_round_trip(values):
    assert [wire.string([v]) for v in wire.fields(wire.encode_strings(1, values))[1]] == values


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_int64_round_trip_including_negative(n):
    assert wire.int64(wire.fields(varint(4 << 3 | wire.VARINT) + varint(n))[4]) == n


def test_unknown_fields_of_every_wire_type_are_skipped():
    status = (
        varint(3 << 3 | wire.LENGTH)
        + varint(3)
        + b"ref"
        + varint(9 << 3 | wire.FIXED64)
        + b"\x01" * 8
        + varint(10 << 3 | wire.FIXED32)
        + b"\x02" * 4
        + varint(11 << 3 | wire.VARINT)
        + varint(300)
        + varint(4 << 3 | wire.VARINT)
        + varint(42)
    )
    f = wire.fields(status)
    assert wire.string(f[3]) == "ref" and wire.int64(f[4]) == 42


@pytest.mark.parametrize("bad", [b"\x1a\x05abc", b"\x20", b"\x20\xff", b"\x00\x01", b"\x1b"])
def test_malformed_messages_raise(bad):
    with pytest.raises(wire.WireError):
        wire.fields(bad)


def _other_field(kind, n):
    """A field other than 1, of each wire type: the incremental reader skips it."""
    return [
        varint(3 << 3 | wire.LENGTH) + varint(n) + b"z" * n,
        varint(9 << 3 | wire.FIXED64) + b"\x01" * 8,
        varint(10 << 3 | wire.FIXED32) + b"\x02" * 4,
        varint(11 << 3 | wire.VARINT) + varint(n << 40),
    ][kind]


@given(
    st.lists(
        st.one_of(st.binary(max_size=300), st.tuples(st.integers(0, 3), st.integers(0, 200))),
        max_size=20,
    ),
    st.integers(min_value=1, max_value=400),
)
def test_the_incremental_reader_gives_field_1_as_fields_does_in_any_pieces(parts, size):
    message = b"".join(
        varint(1 << 3 | wire.LENGTH) + varint(len(p)) + p
        if isinstance(p, bytes)
        else _other_field(*p)
        for p in parts
    )
    got = []
    reader = wire.RepeatedReader(1, got.append, 300)
    for start in range(0, len(message), size):
        reader.feed(message[start : start + size])
    reader.end()
    assert got == [bytes(v) for v in wire.fields(message)[1]]


def test_the_incremental_reader_refuses_a_long_item_when_announced_and_a_cut_message():
    reader = wire.RepeatedReader(1, list().append, 1024)
    with pytest.raises(wire.ItemTooLarge, match="an item of 8388608 bytes, over the 1 KiB cap"):
        reader.feed(varint(1 << 3 | wire.LENGTH) + varint(8 << 20) + b"x")
    for bad in [b"\x0a\x05abc", b"\x0a", b"\x20\xff"]:
        reader = wire.RepeatedReader(1, list().append, 1024)
        reader.feed(bad)
        with pytest.raises(wire.WireError):
            reader.end()
    with pytest.raises(wire.WireError):
        wire.RepeatedReader(1, list().append, 1024).feed(b"\x00\x01")  # field number 0


def test_timestamp_and_map():
    ts = varint(1 << 3) + varint(1_700_000_000) + varint(2 << 3) + varint(500_000_000)
    assert wire.timestamp([ts]) == 1_700_000_000.5
    assert wire.timestamp([]) is None
    entry = wire.encode_strings(1, ["k"]) + wire.encode_strings(2, ["v"])
    assert wire.string_map([entry]) == {"k": "v"}


def test_a_field_of_the_wrong_wire_type_is_a_wire_error():
    """Found by fuzz/protobuf.py: an Images.List item read as an ingest (field 4 holds a
    message there, an int64 in an ingest) raised TypeError, which ContainerdClient lets
    through unexplained, instead of WireError ("not a protobuf reply")."""
    image = wire.encode_strings(1, ["127.0.0.1:5000/app:v1"]) + wire.encode_strings(4, ["x"])
    ingest = varint(3 << 3 | wire.LENGTH) + varint(1) + b"r" + varint(1 << 3) + varint(5)
    for decode, values in [
        (wire.int64, wire.fields(image)[4]),
        (wire.string, wire.fields(ingest)[1]),
        (wire.timestamp, wire.fields(ingest)[1]),
        (wire.string_map, wire.fields(ingest)[1]),
    ]:
        with pytest.raises(wire.WireError):
            decode(values)


# ---- references ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "image,name,source",
    [
        ("nginx", "docker.io/library/nginx:latest", ("docker.io", "library/nginx")),
        ("team/app:v2", "docker.io/team/app:v2", ("docker.io", "team/app")),
        ("quay.io/a/b:1", "quay.io/a/b:1", ("quay.io", "a/b")),
        ("127.0.0.1:5000/big:v1", "127.0.0.1:5000/big:v1", ("127.0.0.1", "big")),
        ("localhost/x", "localhost/x:latest", ("localhost", "x")),
        ("reg:5000/a/b:v1@sha256:abc", "reg:5000/a/b@sha256:abc", ("reg", "a/b")),
        ("[::1]:5000/x:y", "[::1]:5000/x:y", ("::1", "x")),
    ],
)
def test_references_normalize_like_containerd(image, name, source):
    ref = parse(image)
    assert (ref.name, ref.source) == (name, source)


@pytest.mark.parametrize("bad", ["", "x:", "@sha256:abc", "x@nodigest"])
def test_malformed_references_raise(bad):
    with pytest.raises(ValueError):
        parse(bad)


# ---- manifest index ------------------------------------------------------------------


def test_manifest_index_lists_only_when_a_new_digest_appears():
    calls = []
    m = ContentInfo(
        "sha256:m",
        1,
        10.0,
        {
            "containerd.io/gc.ref.content.l.0": "sha256:a",
            "containerd.io/gc.ref.content.config": "sha256:c",
        },
    )

    def listing():
        calls.append(1)
        return [m]

    index = ManifestIndex(listing)
    assert index.lookup({"sha256:a"})["sha256:a"].digest == "sha256:m"
    assert index.lookup({"sha256:a", "sha256:c"})["sha256:c"].digest == "sha256:m"
    assert len(calls) == 1  # both were known from the first listing
    assert index.lookup({"sha256:a", "sha256:lone"}).keys() == {"sha256:a"}
    assert index.lookup({"sha256:a", "sha256:lone"}).keys() == {"sha256:a"}
    assert len(calls) == 2  # the unclaimed digest is remembered, not listed again
    assert index.lookup(set()) == {}
    assert index.lookup({"sha256:a"}) and len(calls) == 3  # forgotten once gone


# ---- kubelet config file -------------------------------------------------------------


@pytest.mark.parametrize(
    "text,serialize,parallel",
    [
        ("kind: KubeletConfiguration\n", True, 1),
        ("serializeImagePulls: true\n", True, 1),
        ("serializeImagePulls: false\n", False, 0),
        ("serializeImagePulls: false\nmaxParallelImagePulls: 5\n", False, 5),
    ],
)
def test_kubelet_pull_settings(tmp_path, text, serialize, parallel):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    s = KubeletConfigFile(str(path)).read()
    assert (s.serialize, s.max_parallel) == (serialize, parallel)


@pytest.mark.parametrize(
    "text",
    ["serializeImagePulls: maybe\n", "maxParallelImagePulls: 0\n", "- a list\n", "a: [unclosed\n"],
)
def test_bad_kubelet_config_is_reported_not_raised(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    config = KubeletConfigFile(str(path))
    assert config.read() is None and str(path) in config.error


def test_kubelet_config_is_read_again_when_it_changes(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("serializeImagePulls: true\n")
    config = KubeletConfigFile(str(path))
    assert config.read().serialize
    path.write_text("serializeImagePulls: false\nmaxParallelImagePulls: 3\n")
    assert config.read().max_parallel == 3
    path.unlink()
    assert config.read() is None and "No such file" in config.error


# ---- pods ----------------------------------------------------------------------------


def test_pod_summary_keeps_what_images_wanted_reads():
    full = {
        "metadata": {
            "name": "p",
            "namespace": "n",
            "uid": "u",
            "resourceVersion": "7",
            "creationTimestamp": "2027-01-01T00:00:00Z",
            "labels": {"a": "b"},
            "managedFields": [{"big": "x" * 1000}],
        },
        "spec": {
            "containers": [{"name": "c", "image": "nginx", "env": [{"name": "X"}]}],
            "volumes": [{"name": "v"}],
        },
        "status": {
            "phase": "Pending",
            "startTime": "2027-01-01T00:00:01Z",
            "conditions": [{"type": "Ready"}],
            "containerStatuses": [
                {
                    "name": "c",
                    "image": "nginx",
                    "ready": False,
                    "state": {"waiting": {"reason": "ContainerCreating", "message": "long"}},
                }
            ],
        },
    }
    small = pod_summary(full)
    assert "managedFields" not in small["metadata"] and "volumes" not in small["spec"]
    assert small["status"]["containerStatuses"][0]["state"] == {
        "waiting": {"reason": "ContainerCreating"}
    }
    assert images_wanted([small]) == images_wanted([full])
    assert list(images_wanted([small])) == ["docker.io/library/nginx:latest"]
    assert images_failing([small]) == set()


@pytest.mark.parametrize("reason", sorted(PULL_FAILED))
def test_failed_or_backed_off_pulls_are_not_queued(reason):
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "a", "image": "nginx"},
                {"name": "b", "image": "registry.example/app:1"},
            ]
        },
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "a", "state": {"waiting": {"reason": reason}}},
                {"name": "b", "state": {"waiting": {"reason": "ContainerCreating"}}},
            ],
        },
    }
    assert list(images_wanted([pod])) == ["registry.example/app:1"]
    assert images_failing([pod]) == {"docker.io/library/nginx:latest"}


# ---- flags ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,seconds", [("120", 120), ("90s", 90), ("2m", 120), ("1h30m", 5400), ("1.5s", 1.5)]
)
def test_durations(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize(
    "flags,named",
    [
        (["--image-pull.stall-after", "soon"], "--image-pull.stall-after"),
        (["--image-pull.stall-after", "0s"], "--image-pull.stall-after"),
        (["--containerd.timeout", "-1"], "--containerd.timeout"),
        (["--containerd.address", "run/containerd.sock"], "--containerd.address"),
        (["--containerd.namespace", ""], "--containerd.namespace"),
        (["--kubelet.config-file", "/nonexistent/config.yaml"], "--kubelet.config-file"),
        (["--image-pull.preload", "ok:1,bad:"], "--image-pull.preload"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(flags, named):
    run = subprocess.run(
        [sys.executable, "-m", "kube_scale_exporter", "--collector.imagepull", *flags],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and named in run.stderr, run.stderr


def test_h2_is_imported_only_when_the_collector_runs():
    code = (
        "import sys, kube_scale_exporter.cli as c; c.parse(['--collector.imagepull']); "
        "print('h2' in sys.modules)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout.strip() == "False"


def test_on_by_default_only_where_the_containerd_socket_exists(tmp_path):

    path = str(tmp_path / "containerd.sock")
    names = lambda *flags: [c.name for c in parse_flags(["--containerd.address", path, *flags])[1]]  # noqa: E731
    assert "imagepull" not in names(), "a host without containerd must not run it by default"
    assert "imagepull" in names("--collector.imagepull")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(path)
        assert "imagepull" in names()
        assert "imagepull" not in names("--collector.disable-defaults")
