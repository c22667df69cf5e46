"""Scenario: the node's containerd pulls through a registry mirror, then a config change makes
it ignore the mirror, and KubeScaleRegistryMirrorIgnored fires for that node.

An upstream docker-registry and a pull-through cache of it (`proxy.remoteurl`) on
loopback; the node's containerd 2.3 (config version 3, its CRI pulling through the
transfer service) reads its registry host directories from WORK/certs.d, where the test
writes the upstream's hosts.toml with the cache as its mirror. The node DaemonSet reads
containerd's config from that file and that directory (a patch of this test mounts both
read-only at their paths and passes --containerd.config; deploy/ mounts /etc/containerd).
A pod's image pull goes to the cache (its access log has containerd's requests, the
upstream's none) and the exporter reports the directory `used`. Then config_path becomes
`WORK/certs.d:/etc/docker/certs.d` (what containerd 2.2+ has by default) and containerd
restarts: the next pull goes to the upstream, the exporter says `ignored`
(transfer_path_colon_list) and the alert fires naming the node. Everything is put back.
"""

import json
import time

import pytest

from testbed.registry_server import RegistryServer

from .conftest import NODE_NAME, NS, wait_exporters_ready, wait_for

NS_MIRROR = "e2e-mirror"
DAEMONSET = "kube-scale-exporter-node"
NODE = 'job="kube-scale-exporter-node"'


def pod(name, image):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": image, "imagePullPolicy": "Always"}],
            "terminationGracePeriodSeconds": 0,
        },
    }


def rollout(kube):
    kube.kubectl("-n", NS, "rollout", "status", f"daemonset/{DAEMONSET}", "--timeout=300s")
    wait_exporters_ready(kube)


@pytest.fixture
def registries(tmp_path):
    upstream = RegistryServer(tmp_path / "upstream").start()
    cache = RegistryServer(tmp_path / "cache", proxy_remote=upstream.url).start()
    yield upstream, cache
    cache.stop()
    upstream.stop()


@pytest.fixture
def reading_node_config(kube, cluster):
    """The node DaemonSet reading the node's own containerd config and host directories;
    put back afterwards."""
    config, certs = cluster.work / "containerd.toml", cluster.work / "certs.d"
    ds = json.loads(kube.kubectl("-n", NS, "get", "daemonset", DAEMONSET, "-o", "json"))
    spec = ds["spec"]["template"]["spec"]
    lengths = (
        len(spec["volumes"]),
        len(spec["containers"][0]["volumeMounts"]),
        len(spec["containers"][0]["args"]),
    )
    base = "/spec/template/spec"
    ops = (
        [
            {"op": "add", "path": f"{base}/volumes/-", "value": v}
            for v in (
                {"name": "e2e-config", "hostPath": {"path": str(config), "type": "File"}},
                {"name": "e2e-certs", "hostPath": {"path": str(certs), "type": "Directory"}},
            )
        ]
        + [
            {"op": "add", "path": f"{base}/containers/0/volumeMounts/-", "value": m}
            for m in (
                {"name": "e2e-config", "mountPath": str(config), "readOnly": True},
                {"name": "e2e-certs", "mountPath": str(certs), "readOnly": True},
            )
        ]
        + [
            {
                "op": "add",
                "path": f"{base}/containers/0/args/-",
                "value": f"--containerd.config={config}",
            }
        ]
    )
    kube.kubectl("-n", NS, "patch", "daemonset", DAEMONSET, "--type=json", "-p", json.dumps(ops))
    rollout(kube)
    yield config
    undo = [
        {"op": "remove", "path": f"{base}/containers/0/args/{lengths[2]}"},
        *(
            {"op": "remove", "path": f"{base}/containers/0/volumeMounts/{i}"}
            for i in (lengths[1] + 1, lengths[1])
        ),
        *({"op": "remove", "path": f"{base}/volumes/{i}"} for i in (lengths[0] + 1, lengths[0])),
    ]
    kube.kubectl("-n", NS, "patch", "daemonset", DAEMONSET, "--type=json", "-p", json.dumps(undo))
    rollout(kube)


def pulled_from(upstream, cache, repo, timeout=120):
    """'mirror' or 'upstream': whose access log has containerd's requests for `repo`
    (containerd asks the upstream first only when it skips the mirror)."""

    def seen():
        return cache.requests_from("containerd/", repo) or upstream.requests_from(
            "containerd/", repo
        )

    wait_for(f"containerd's requests for {repo}", seen, timeout=timeout)
    time.sleep(2)  # the pull's remaining requests, to one side or both
    at_mirror = cache.requests_from("containerd/", repo)
    at_upstream = upstream.requests_from("containerd/", repo)
    assert bool(at_mirror) != bool(at_upstream), (at_mirror, at_upstream)
    return "mirror" if at_mirror else "upstream"


def verdict(prom, certs):
    """The verdict and reason the node exporter reports for the upstream's directory."""
    found = prom.query(f'kubescale_containerd_registry_mirror_hosts{{{NODE}, root="{certs}"}} > 0')
    return {(s["metric"]["verdict"], s["metric"]["reason"]) for s in found}


def test_a_mirror_used_then_ignored_fires_for_the_node(
    cluster, kube, prom, registries, reading_node_config
):
    upstream, cache = registries
    config = reading_node_config
    certs = cluster.work / "certs.d"
    original = config.read_text()
    hosts = certs / upstream.host
    hosts.mkdir()
    (hosts / "hosts.toml").write_text(
        f'server = "{upstream.url}"\n[host."{cache.url}"]\n  capabilities = ["pull", "resolve"]\n'
    )
    for repo in ("mirror/one", "mirror/two"):
        upstream.push_image(repo, "v1", [4096])
    kube.namespace(NS_MIRROR)
    try:
        kube.post(
            f"/api/v1/namespaces/{NS_MIRROR}/pods", pod("one", f"{upstream.host}/mirror/one:v1")
        )
        assert pulled_from(upstream, cache, "mirror/one") == "mirror"
        wait_for("verdict used", lambda: verdict(prom, certs) == {("used", "config_path")})
        assert not prom.alerts("KubeScaleRegistryMirrorIgnored")

        # The config change a node image could bring: 2.2+'s default list, spelled out.
        config.write_text(
            original.replace(
                f'config_path = "{certs}"', f'config_path = "{certs}:/etc/docker/certs.d"'
            )
        )
        assert config.read_text() != original
        cluster.restart("containerd", down_seconds=1)
        cluster.wait_containerd()
        kube.post(
            f"/api/v1/namespaces/{NS_MIRROR}/pods", pod("two", f"{upstream.host}/mirror/two:v1")
        )
        assert pulled_from(upstream, cache, "mirror/two") == "upstream"
        wait_for(
            "verdict ignored",
            lambda: verdict(prom, certs) == {("ignored", "transfer_path_colon_list")},
        )
        alert = wait_for(
            "KubeScaleRegistryMirrorIgnored firing",
            lambda: prom.firing("KubeScaleRegistryMirrorIgnored"),
            timeout=180,
        )
        assert alert[0]["value"] in ("1", "1e+00")
        assert NODE_NAME in alert[0]["annotations"]["description"]
    finally:
        config.write_text(original)
        cluster.restart("containerd")
        cluster.wait_containerd()
        kube.delete(f"/api/v1/namespaces/{NS_MIRROR}")
        for f in hosts.iterdir():
            f.unlink()
        hosts.rmdir()
