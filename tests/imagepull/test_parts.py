"""The imagepull collector's parts: wire codec, image references, manifest index,
kubelet config file, pods, and its flags."""

import os
import subprocess
import sys

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kube_scale_exporter.collectors.imagepull.kubelet import KubeletConfigFile
from kube_scale_exporter.collectors.imagepull.pods import (
    PULL_FAILED,
    images_in_use,
    images_failing,
    images_wanted,
    pod_summary,
)
from kube_scale_exporter.containerd import wire
from kube_scale_exporter.containerd.client import ContentInfo
from kube_scale_exporter.collectors.imagepull.kubelet import KubeletPullSettings
from kube_scale_exporter.collectors.imagepull.state import combine, most_pulls
from kube_scale_exporter.containerd.client import Ingest
from kube_scale_exporter.containerd.ingestdir import IngestDir, IngestDirError
from kube_scale_exporter.containerd.pulls import ManifestIndex, by_download_slots
from kube_scale_exporter.containerd.reference import parse
from kube_scale_exporter.flagtypes import duration
from kube_scale_exporter.cli import parse as parse_flags
import socket

# ---- wire ----------------------------------------------------------------------------


def varint(n):
    return wire._varint(n)


@pytest.mark.unit
@given(st.lists(st.text(max_size=300), max_size=20))
def test_repeated_strings_round_trip(values):
    assert [wire.string([v]) for v in wire.fields(wire.encode_strings(1, values))[1]] == values


@pytest.mark.unit
@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_int64_round_trip_including_negative(n):
    assert wire.int64(wire.fields(varint(4 << 3 | wire.VARINT) + varint(n))[4]) == n


@pytest.mark.unit
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


@pytest.mark.unit
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


@pytest.mark.unit
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


@pytest.mark.unit
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


@pytest.mark.unit
def test_timestamp_and_map():
    ts = varint(1 << 3) + varint(1_700_000_000) + varint(2 << 3) + varint(500_000_000)
    assert wire.timestamp([ts]) == 1_700_000_000.5
    assert wire.timestamp([]) is None
    entry = wire.encode_strings(1, ["k"]) + wire.encode_strings(2, ["v"])
    assert wire.string_map([entry]) == {"k": "v"}


@pytest.mark.unit
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


@pytest.mark.unit
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


@pytest.mark.unit
@pytest.mark.parametrize("bad", ["", "x:", "@sha256:abc", "x@nodigest"])
def test_malformed_references_raise(bad):
    with pytest.raises(ValueError):
        parse(bad)


# ---- manifest index ------------------------------------------------------------------


@pytest.mark.unit
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


@pytest.mark.unit
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


@pytest.mark.unit
@pytest.mark.parametrize(
    "text",
    ["serializeImagePulls: maybe\n", "maxParallelImagePulls: 0\n", "- a list\n", "a: [unclosed\n"],
)
def test_bad_kubelet_config_is_reported_not_raised(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    config = KubeletConfigFile(str(path))
    assert config.read() is None and str(path) in config.error


@pytest.mark.unit
@pytest.mark.parametrize(
    "text,said",
    [
        # A version the exporter does not know: its fields may not mean what v1beta1's do.
        ("apiVersion: kubelet.config.k8s.io/v2\nkind: KubeletConfiguration\n", "v2"),
        ("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: CredentialProviderConfig\n", "kind"),
    ],
)
def test_unknown_kubelet_config_version_is_named(tmp_path, text, said):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    config = KubeletConfigFile(str(path))
    assert config.read() is None and said in config.error and str(path) in config.error


@pytest.mark.unit
def test_the_real_kubelets_own_config_is_read(tmp_path):
    """testbed/node.py's KubeletConfiguration, which the real kubelet 1.34 runs in the e2e."""
    from testbed.node import MAX_PARALLEL_IMAGE_PULLS, kubelet_config  # noqa: PLC0415

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(kubelet_config("/ca.crt")))
    s = KubeletConfigFile(str(path)).read()
    assert (s.serialize, s.max_parallel) == (False, MAX_PARALLEL_IMAGE_PULLS)


@pytest.mark.unit
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


@pytest.mark.unit
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


@pytest.mark.unit
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


@pytest.mark.unit
@pytest.mark.parametrize(
    "text,seconds", [("120", 120), ("90s", 90), ("2m", 120), ("1h30m", 5400), ("1.5s", 1.5)]
)
def test_durations(text, seconds):
    assert duration(text) == seconds


@pytest.mark.integration
@pytest.mark.parametrize(
    "flags,named",
    [
        (["--image-pull.stall-after", "soon"], "--image-pull.stall-after"),
        (["--image-pull.stall-after", "0s"], "--image-pull.stall-after"),
        (["--containerd.timeout", "-1"], "--containerd.timeout"),
        (["--containerd.address", "run/containerd.sock"], "--containerd.address"),
        (["--containerd.namespace", ""], "--containerd.namespace"),
        (["--kubelet.config-file", "kubelet/config.yaml"], "--kubelet.config-file"),
        (["--kubelet.config-file", "/"], "--kubelet.config-file"),
        (["--image-pull.preload", "ok:1,bad:"], "--image-pull.preload"),
        (["--image-pull.source", "kubelet"], "--image-pull.source"),
        (["--image-pull.source=ingest", "--image-pull.preload", "ok:1"], "--image-pull.preload"),
        (["--containerd.ingest-dir", "var/lib/containerd"], "--containerd.ingest-dir"),
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


@pytest.mark.integration
def test_a_kubelet_config_file_missing_at_start_is_reported_not_refused(tmp_path):
    """The chart mounts the directory of a kubelet config path set for the whole fleet: a
    node without the file runs, and `check` names the file (the kubelet's series absent)."""
    ingest = tmp_path / "ingest"
    ingest.mkdir()
    missing = tmp_path / "kubelet" / "config.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "kube_scale_exporter",
            "check",
            "--collector.disable-defaults",
            "--collector.imagepull",
            "--image-pull.source=ingest",
            f"--containerd.ingest-dir={ingest}",
            f"--kubelet.config-file={missing}",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NODE_NAME": "", "KUBECONFIG": ""},
    )
    assert run.returncode in (0, 1), run.stderr
    assert f"kubelet config {missing}: No such file or directory" in run.stdout, run.stdout


@pytest.mark.integration
def test_h2_is_imported_only_when_the_collector_runs():
    code = (
        "import sys, kube_scale_exporter.cli as c; c.parse(['--collector.imagepull']); "
        "print('h2' in sys.modules)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout.strip() == "False"


@pytest.mark.unit
def test_on_by_default_only_where_the_containerd_socket_exists(tmp_path):

    path = str(tmp_path / "containerd.sock")
    names = lambda *flags: [c.name for c in parse_flags(["--containerd.address", path, *flags])[1]]  # noqa: E731
    assert "imagepull" not in names(), "a host without containerd must not run it by default"
    assert "imagepull" in names("--collector.imagepull")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(path)
        assert "imagepull" in names()
        assert "imagepull" not in names("--collector.disable-defaults")


@pytest.mark.integration
def test_the_ingest_source_imports_no_h2_and_runs_where_its_directory_exists(tmp_path):
    code = (
        "import sys, kube_scale_exporter.cli as c\n"
        "args, cs = c.parse(['--image-pull.source=ingest', '--containerd.ingest-dir', sys.argv[1]])\n"
        "print([x.name for x in cs], 'h2' in sys.modules)"
    )

    def run(path):
        done = subprocess.run(
            [sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert "imagepull" not in run(str(tmp_path / "missing"))
    assert run(str(tmp_path)).endswith("False") and "imagepull" in run(str(tmp_path))


def _status(name, reason=None, image_id=""):
    state = {"waiting": {"reason": reason}} if reason else {"running": {}}
    return {"name": name, "imageID": image_id, "state": state}


@pytest.mark.unit
def test_the_pods_statuses_tell_which_images_are_present():
    pods = [
        {
            "metadata": {"name": "a"},
            "spec": {
                "containers": [
                    {"name": "web", "image": "nginx:1.25"},
                    {"name": "crash", "image": "registry.example/crash:1"},
                    {"name": "config", "image": "registry.example/cfg:1"},
                    {"name": "new", "image": "registry.example/new:1"},
                    {"name": "bad", "image": "Bad Name"},
                ]
            },
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    _status("web", image_id="docker.io/library/nginx@sha256:" + "a" * 64),
                    _status(
                        "crash", "CrashLoopBackOff", "registry.example/crash@sha256:" + "b" * 64
                    ),
                    # pulled, but the container could not be made: no imageID yet
                    _status("config", "CreateContainerConfigError"),
                    _status("new", "ContainerCreating"),
                    _status("bad", "InvalidImageName"),
                ],
            },
        }
    ]
    small = [pod_summary(p) for p in pods]
    assert (
        images_in_use(small)
        == images_in_use(pods)
        == {
            "docker.io/library/nginx:1.25",
            "registry.example/crash:1",
            "registry.example/cfg:1",
        }
    )


NOW = 1_800_000_000.0


def _ingest(digest_char, offset, started, updated, kind="layer"):
    return Ingest(f"{kind}-sha256:" + digest_char * 64, offset, 100, started, updated)


@pytest.mark.unit
def test_pulls_are_estimated_from_download_slots():
    moving = [_ingest(c, 10, NOW - 60 + i, NOW - 1) for i, c in enumerate("1234")]
    idle = [_ingest(c, 10, NOW - 900, NOW - 600) for c in "56"]
    other = Ingest("my-upload", 5, 10, NOW - 5, NOW - 5)
    pulls = by_download_slots([*moving, other], 3, NOW, 120.0)
    # four moving blobs are at least two pulls of three slots
    assert sorted(len(p.ingests) for p in pulls) == [2, 2]
    assert sum(p.downloaded_bytes for p in pulls) == 40
    # idle blobs beside moving ones wait for a slot: none stalled
    beside = by_download_slots([*moving, *idle], 3, NOW, 120.0)
    assert len(beside) == 2 and not any(p.stalled(NOW, 120.0) for p in beside)
    # no more pulls than blobs that move, each with one of them
    one = by_download_slots([*moving[:1], *idle], 3, NOW, 120.0)
    assert [len(p.ingests) for p in one] == [3]
    # alone they are a stalled pull
    assert [p.stalled(NOW, 120.0) for p in by_download_slots(idle, 3, NOW, 120.0)] == [True]
    assert len(by_download_slots([*moving, *idle], 0, NOW, 120.0)) == 1  # 0: no limit
    assert by_download_slots([], 3, NOW, 120.0) == []
    # at most one moving pull under a kubelet that serializes
    capped = by_download_slots([*moving, *idle], 3, NOW, 120.0, most_moving=1)
    assert [len(p.ingests) for p in capped] == [6]


@pytest.mark.unit
def test_the_kubelet_bounds_the_pulls_downloading():
    serial = KubeletPullSettings(serialize=True, max_parallel=1)
    parallel = KubeletPullSettings(serialize=False, max_parallel=5)
    unlimited = KubeletPullSettings(serialize=False, max_parallel=0)
    wanted = {"a:1": None, "b:1": None, "c:1": None}
    assert most_pulls(None, None, None) is None
    assert most_pulls(unlimited, None, None) is None
    assert most_pulls(serial, None, None) == 1
    assert most_pulls(parallel, None, None) == 5
    assert most_pulls(parallel, wanted, {"a:1"}) == 2
    assert most_pulls(unlimited, wanted, set()) == 3
    assert most_pulls(parallel, {}, set()) == 1  # something moves: at least one pull


@pytest.mark.unit
def test_pulls_of_unknown_images_take_the_longest_waiting_missing_images():
    wanted = {
        ref.name: (ref, since)
        for ref, since in (
            (parse("registry.example/big:1"), NOW - 1800),
            (parse("nginx:1.25"), NOW - 60),
            (parse("quay.io/org/proxy:2"), NOW - 30),
            (parse("busybox"), None),
        )
    }
    pulls = by_download_slots([_ingest("1", 10, NOW - 100, NOW - 1)], 3, NOW, 120.0)

    def queued(by_count):
        s = combine(NOW, 120.0, pulls, set(), wanted, None, [], by_count=by_count)
        return [ref.name for ref, _since in s.queued]

    # Without a source to match, the socket's rule queues all four...
    assert len(queued(False)) == 4
    # ...the ingest source's gives the one pull to the image waited for longest.
    assert queued(True) == [
        "docker.io/library/busybox:latest",
        "docker.io/library/nginx:1.25",
        "quay.io/org/proxy:2",
    ]
    s = combine(NOW, 120.0, pulls, set(), wanted, None, [], by_count=True)
    assert s.oldest_seconds == 1800.0


def _write_ingest(root, name, ref, started="2027-01-15T08:00:00.123456789Z", total="100"):
    d = root / name
    d.mkdir()
    (d / "ref").write_text(ref)
    (d / "startedat").write_text(started)
    (d / "updatedat").write_text(started)
    if total is not None:
        (d / "total").write_text(total)
    (d / "data").write_bytes(b"x" * 10)
    return d


@pytest.mark.unit
def test_the_ingest_directory_reader_on_odd_and_hostile_entries(tmp_path):
    layer = "layer-sha256:" + "1" * 64
    _write_ingest(tmp_path, "a" * 64, f"k8s.io/1/{layer}", total=None)
    _write_ingest(tmp_path, "b" * 64, "moby/3/layer-sha256:" + "2" * 64)
    (tmp_path / "stray").write_text("not an ingest")
    (tmp_path / "half").mkdir()  # created, its ref not written yet
    [found] = IngestDir(str(tmp_path), "k8s.io").ingests()
    assert (found.ref, found.offset, found.total) == (layer, 10, 0)
    assert found.started_at == pytest.approx(1800000000.123456789, abs=1e-6)
    fifo = _write_ingest(tmp_path, "c" * 64, f"k8s.io/2/{layer}")
    (fifo / "ref").unlink()
    os.mkfifo(fifo / "ref")
    with pytest.raises(IngestDirError, match="ref is a FIFO"):
        IngestDir(str(tmp_path), "k8s.io").ingests()
    (fifo / "ref").unlink()
    (fifo / "ref").write_text("k8s.io/2/" + "x" * (8 << 10))
    with pytest.raises(IngestDirError, match="REF_BYTES"):
        IngestDir(str(tmp_path), "k8s.io").ingests()
    (fifo / "ref").write_text(f"k8s.io/2/{layer}")
    (fifo / "startedat").write_text("yesterday")
    with pytest.raises(IngestDirError, match="not a containerd ingest"):
        IngestDir(str(tmp_path), "k8s.io").ingests()
    with pytest.raises(IngestDirError, match="does not exist .--containerd.ingest-dir"):
        IngestDir(str(tmp_path / "nope"), "k8s.io").ingests()


# Found by fuzz/ingest_dir.py (its corpus' crash-* seeds): a signed or non-ASCII total read
# as a (negative) byte count, and a data that is no file counted as bytes downloaded.
@pytest.mark.unit
@pytest.mark.parametrize("total", ["-100", "+100", "1_00", "\u0661\u0660\u0660", "0x64"])
def test_a_total_that_is_not_a_plain_byte_count_is_refused(tmp_path, total):
    _write_ingest(tmp_path, "a" * 64, "k8s.io/1/layer-sha256:" + "1" * 64, total=total)
    with pytest.raises(IngestDirError, match="total is not a byte count"):
        IngestDir(str(tmp_path), "k8s.io").ingests()


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_data_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    d = _write_ingest(tmp_path, "a" * 64, "k8s.io/1/layer-sha256:" + "1" * 64, total="100 ")
    [found] = IngestDir(str(tmp_path), "k8s.io").ingests()
    assert (found.offset, found.total) == (10, 100)  # containerd's own files pass
    (d / "data").unlink()
    if kind == "directory":
        (d / "data").mkdir()
    else:
        os.mkfifo(d / "data")
    with pytest.raises(IngestDirError, match="data is not a regular file"):
        IngestDir(str(tmp_path), "k8s.io").ingests()
