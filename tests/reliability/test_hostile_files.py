"""Hostile local input: the web config file, the kubelet's config file, Pulled event
messages, the objects the balloon collector reads and the pods imagepull reads.

Each parser either accepts the input or reports it in its own way (WebConfigError, the
kubelet series absent with the error kept, a message skipped); none lets another
exception out, and a bad input never leaves stale state that outlives it.
"""

import base64
import math
import os
import time

import bcrypt
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kube_scale_exporter.collectors.balloon.state import BalloonState
from kube_scale_exporter.collectors.balloon.state import families as balloon_families
from kube_scale_exporter.collectors.balloon.summary import summarize
from kube_scale_exporter.collectors.imagepull.kubelet import KubeletConfigFile
from kube_scale_exporter.collectors.imagepull.pods import images_wanted, pod_summary
from kube_scale_exporter.collectors.imagepull_events import PulledEvents, families, parse_pulled
from kube_scale_exporter.collectors.neighbor import read_unresolved_discards
from kube_scale_exporter.files import FileRefused
from kube_scale_exporter.web.config import WebConfig, WebConfigError, load
from testbed.hostile_grpc import HostileGrpc
from testbed.metrics import wait_until
from testbed.procs import rss_mib
import yaml

FILES = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
NESTED_TOO_DEEP = "[" * 3000
NOT_UTF8 = b"basic_auth_users:\n  admin: \xff\xfe\n"


# ---- web config ------------------------------------------------------------------------

yaml_like = st.text(
    alphabet=st.sampled_from(list("abc:-[]{}&*!|>'\"#\n ?,.\t0123456789_")), max_size=80
)
web_keys = st.sampled_from(
    [
        "tls_server_config",
        "http_server_config",
        "basic_auth_users",
        "headers",
        "cert_file",
        "key_file",
        "client_auth_type",
        "min_version",
        "cipher_suites",
        "admin",
        "X-Frame-Options",
    ]
)
structured = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20) | web_keys,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(web_keys | st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


def _write(tmp_path, data: bytes) -> str:
    path = tmp_path / "web.yml"
    path.write_bytes(data)
    return str(path)


@pytest.mark.unit
@FILES
@given(text=yaml_like)
def test_web_config_text_loads_or_names_the_problem(tmp_path, text):
    try:
        assert isinstance(load(_write(tmp_path, text.encode())), WebConfig)
    except WebConfigError as exc:
        assert str(exc).startswith(str(tmp_path))


@pytest.mark.unit
@FILES
@given(doc=structured)
def test_web_config_documents_load_or_name_the_problem(tmp_path, doc):

    try:
        load(_write(tmp_path, yaml.safe_dump(doc).encode()))
    except WebConfigError:
        pass


@pytest.mark.unit
@pytest.mark.parametrize("data", [NOT_UTF8, NESTED_TOO_DEEP.encode()], ids=["not-utf8", "deep"])
def test_web_config_bytes_that_are_not_yaml_are_a_web_config_error(tmp_path, data):
    with pytest.raises(WebConfigError):
        load(_write(tmp_path, data))


@pytest.mark.integration
def test_a_web_config_broken_by_bytes_refuses_until_fixed(tmp_path, run_exporter):
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  admin: {hashed}\n")
    exporter = run_exporter(
        ["--mode", "node", "--collector.disable-defaults", "--web.config.file", str(path)]
    )
    auth = {"Authorization": "Basic " + base64.b64encode(b"admin:secret").decode()}
    assert requests.get(exporter.url + "/metrics", headers=auth, timeout=5).status_code == 200
    path.write_bytes(NOT_UTF8)  # the password replaced by junk: admin must stop working

    def status():
        try:
            return requests.get(exporter.url + "/metrics", headers=auth, timeout=5).status_code
        except requests.RequestException:
            return None  # refused: what a broken file must cause

    # The change is seen at the next reload check (a second apart), on a loaded machine
    # later: waited for, then it must hold.
    assert wait_until(lambda: status() != 200, 20)
    assert [status() for _ in range(3)].count(200) == 0
    assert exporter.alive()


# ---- the kubelet's config file ----------------------------------------------------------

kubelet_docs = (
    st.fixed_dictionaries(
        {},
        optional={
            "serializeImagePulls": structured,
            "maxParallelImagePulls": structured | st.integers(),
            "kind": st.just("KubeletConfiguration"),
        },
    )
    | structured
)


@pytest.mark.unit
@FILES
@given(doc=kubelet_docs)
def test_kubelet_config_documents_give_settings_or_an_error(tmp_path, doc):

    path = tmp_path / "kubelet.yaml"
    path.write_text(yaml.safe_dump(doc))
    got = KubeletConfigFile(str(path)).read()
    if got is None:
        return
    assert isinstance(got.serialize, bool)
    assert isinstance(got.max_parallel, int) and got.max_parallel >= 0


@pytest.mark.unit
@FILES
@given(data=st.binary(max_size=200) | yaml_like.map(str.encode))
def test_kubelet_config_bytes_give_settings_or_an_error(tmp_path, data):
    path = tmp_path / "kubelet.yaml"
    path.write_bytes(data)
    reader = KubeletConfigFile(str(path))
    assert reader.read() is not None or reader.error


@pytest.mark.unit
def test_kubelet_config_nested_too_deep_is_an_error_not_stale_settings(tmp_path):
    path = tmp_path / "kubelet.yaml"
    path.write_text("serializeImagePulls: false\nmaxParallelImagePulls: 5\n")
    reader = KubeletConfigFile(str(path))
    assert reader.read().max_parallel == 5
    path.write_text("serializeImagePulls: " + NESTED_TOO_DEEP + "\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1))
    for _ in range(2):  # neither the first read nor the next one may serve the old file
        try:
            got = reader.read()
        except RecursionError:
            got = "raised"
        assert got is None and reader.error


# ---- Pulled event messages --------------------------------------------------------------

durations = st.from_regex(r"\A(\d{1,400}(\.\d{0,5})?(ns|us|µs|ms|s|m|h)){1,3}\Z") | st.just("0")


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(
    message=st.text(max_size=300)
    | st.builds(
        lambda image, a, b: (
            f'Successfully pulled image "{image}" in {a}'
            + (f" ({b} including waiting)" if b else "")
        ),
        st.text(max_size=60),
        durations,
        st.none() | durations,
    )
)
def test_pulled_messages_parse_to_finite_seconds_or_are_skipped(message):
    got = parse_pulled(message)
    if got is None:
        return
    pulled, waited = got
    assert math.isfinite(pulled) and pulled >= 0
    assert waited is None or (math.isfinite(waited) and waited >= 0)


@pytest.mark.unit
def test_one_absurd_pulled_event_cannot_poison_the_histograms():
    events = PulledEvents(since=0)
    absurd = {
        "metadata": {"creationTimestamp": "2030-01-01T00:00:00Z"},
        "message": 'Successfully pulled image "x" in ' + "9" * 400 + "h",
        "count": 1,
    }
    fine = dict(absurd, message='Successfully pulled image "x" in 2.5s (4s including waiting)')
    events.on_add(absurd)
    events.on_add(fine)
    for family in families(events.snapshot()):
        for s in family.samples:
            assert math.isfinite(s.value), s


# ---- objects the balloon collector reads ----------------------------------------------


def balloon(name, requests_):
    return {
        "metadata": {"name": name, "namespace": "b", "creationTimestamp": "2030-01-01T00:00:00Z"},
        "spec": {
            "nodeName": "n1",
            "priority": -5,
            "containers": [{"name": "c", "resources": {"requests": requests_}}],
        },
        "status": {"phase": "Running"},
    }


extended = st.from_regex(r"\A[a-z]{1,12}\.example\.com/[a-z0-9-]{1,20}\Z")
quantities = st.sampled_from(["1", "100m", "1Gi", "0", "2e3", "123456789012345678901234567890"])


@pytest.mark.unit
@settings(max_examples=100, deadline=None)
@given(
    pods=st.lists(
        st.dictionaries(extended | st.sampled_from(["cpu", "memory"]), quantities, max_size=4),
        max_size=30,
    )
)
def test_balloon_summaries_of_valid_pods_never_raise(pods):
    s = summarize([balloon(f"p{i}", r) for i, r in enumerate(pods)], [], [], time.time(), -10)
    for family in balloon_families(BalloonState(s, 0, "run=balloon", -10)):
        for sample in family.samples:
            assert math.isfinite(sample.value)


@pytest.mark.unit
def test_a_flood_of_extended_resources_stays_within_the_series_budget():
    pods = [balloon(f"p{i}", {f"vendor{i}.example.com/dev": "1", "cpu": "1"}) for i in range(500)]
    s = summarize(pods, [], [], time.time(), -10)
    families = balloon_families(BalloonState(s, 0, "run=balloon", -10))
    assert sum(len(f.samples) for f in families) <= 40


# ---- pods on this node (imagepull's pod watch) -----------------------------------------


def node_pod(i, images, reason, phase):
    containers = [{"name": f"c{j}", "image": image} for j, image in enumerate(images)]
    return {
        "metadata": {
            "name": f"p{i}",
            "namespace": "n",
            "uid": str(i),
            "creationTimestamp": "2030-01-01T00:00:00Z",
            "unknown": {"x": [1]},
        },
        "spec": {"containers": containers, "nodeName": "n1", "future": True},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"name": c["name"], "state": {"waiting": {"reason": reason}}}
                for c in containers[::2]
            ],
        },
    }


@pytest.mark.unit
@settings(max_examples=200, deadline=None)
@given(
    pods=st.lists(
        st.tuples(
            st.lists(st.text(max_size=300), min_size=1, max_size=3),
            st.text(max_size=20),
            st.sampled_from(["Pending", "Running", ""]),
        ),
        max_size=20,
    )
)
def test_any_image_strings_on_the_node_never_fail_the_scrape(pods):
    summaries = [pod_summary(node_pod(i, *p)) for i, p in enumerate(pods)]
    wanted = images_wanted(summaries)
    assert len(wanted) <= sum(len(p[0]) for p in pods)
    for name, (ref, since) in wanted.items():
        assert name == ref.name and (since is None or math.isfinite(since))


# ---- files that are not what they should be: a FIFO, a device, a huge file --------------


def replace_with_fifo(path):
    os.unlink(path)
    os.mkfifo(path)


@pytest.mark.unit
@pytest.mark.parametrize("make", ["fifo", "directory", "device", "huge"])
def test_kubelet_config_that_is_not_a_small_file_is_refused_at_once(tmp_path, make):
    path = tmp_path / "kubelet.yaml"
    path.write_text("serializeImagePulls: false\nmaxParallelImagePulls: 5\n")
    reader = KubeletConfigFile(str(path))
    assert reader.read().max_parallel == 5
    path.unlink()
    if make == "fifo":
        os.mkfifo(path)
    elif make == "directory":
        path.mkdir()
    elif make == "device":
        path.symlink_to("/dev/zero")
    else:
        with open(path, "wb") as f:  # sparse: 200 MiB without writing them
            f.truncate(200 << 20)
    start = time.monotonic()
    assert reader.read() is None
    assert time.monotonic() - start < 0.5
    expected = "KUBELET_CONFIG_BYTES" if make == "huge" else "not a regular file"
    assert expected in reader.error, reader.error


@pytest.mark.integration
def test_kubelet_config_fifo_and_200_mib_under_a_real_exporter(tmp_path, workdir, run_exporter):
    server = HostileGrpc(f"{workdir}/cd.sock").start()
    path = tmp_path / "kubelet.yaml"
    sane = "serializeImagePulls: false\nmaxParallelImagePulls: 5\n"
    path.write_text(sane)
    setting = "kubescale_kubelet_max_parallel_image_pulls"
    try:
        exporter = run_exporter(
            [
                "--mode",
                "node",
                "--collector.disable-defaults",
                "--collector.imagepull",
                "--containerd.address",
                server.path,
                "--containerd.timeout",
                "1s",
                "--kubelet.config-file",
                str(path),
            ]
        )
        exporter.wait_for(lambda s: s.value(setting) == 5, within=10)
        before = rss_mib(exporter.proc.pid)[1]
        replace_with_fifo(path)  # open() of it blocked the scrape for good
        exporter.wait_for(lambda s: s.value(setting) is None and s.seconds < 1, within=5)
        assert "is a FIFO" in exporter.proc.log_tail(50)
        path.unlink()
        with open(path, "w") as f:  # 200 MiB of real YAML: 8.4 s of GIL to parse
            line = "a: " + "b" * 1020 + "\n"
            f.write(line * (200 << 10))
        exporter.wait_for(lambda s: s.value(setting) is None and s.seconds < 1, within=5)
        exporter.wait_for(lambda s: "KUBELET_CONFIG_BYTES" in exporter.proc.log_tail(50), within=5)
        grew = rss_mib(exporter.proc.pid)[1] - before
        print(f"kubelet config FIFO then 200 MiB: peak +{grew:.1f} MiB")
        assert grew < 6
        path.write_text(sane)
        exporter.wait_for(lambda s: s.value(setting) == 5, within=5)
    finally:
        server.stop()


@pytest.mark.unit
def test_proc_stat_that_is_not_a_small_file_is_refused(tmp_path):
    stat_dir = tmp_path / "net" / "stat"
    stat_dir.mkdir(parents=True)
    os.mkfifo(stat_dir / "arp_cache")  # open() of it blocked the scrape for good
    with pytest.raises(FileRefused, match="is a FIFO"):
        read_unresolved_discards(str(tmp_path))
    os.unlink(stat_dir / "arp_cache")
    (stat_dir / "arp_cache").symlink_to("/dev/zero")
    with pytest.raises(FileRefused, match="is a device"):
        read_unresolved_discards(str(tmp_path))
