"""The kubelet's pull settings and its image credential re-verification (KEP-2535), read from
config files as kubeadm 1.37 writes them; what the collector and `check` do with files of a
version the exporter has not met, and with files the kubelet refuses."""

import io
import os

import pytest
import yaml

from kube_scale_exporter.check import run_check
from kube_scale_exporter.cli import parse
from kube_scale_exporter.collectors.imagepull.advice import REVERIFY_COST, advise
from kube_scale_exporter.collectors.imagepull.collector import ImagePullCollector
from kube_scale_exporter.collectors.imagepull.kubelet import (
    DEFAULT_VERIFICATION_POLICY,
    VERIFICATION_POLICIES,
    KubeletConfigFile,
    KubeletPullSettings,
    UnknownKubeletConfig,
    allowlist_pattern_error,
    allowlisted,
)
from kube_scale_exporter.collectors.imagepull.state import combine, families
from kube_scale_exporter.containerd.reference import parse as parse_ref
from kube_scale_exporter.scrape import Scraper

pytestmark = pytest.mark.unit

# /var/lib/kubelet/config.yaml as `kubeadm init` 1.37 writes it: its own defaults
# (cmd/kubeadm/app/componentconfigs/kubelet.go) marshalled as v1beta1, which writes every
# Duration and struct field, zero or not, and omits the empty pointers and strings: no
# serializeImagePulls, maxParallelImagePulls, imagePullCredentialsVerificationPolicy or
# preloadedImagesVerificationAllowlist. The kubelet defaults them when it loads the file.
KUBEADM_1_37 = """\
apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
resolvConf: /run/systemd/resolve/resolv.conf
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
"""
NOW = 1_800_000_000.0


def kubeadm(**fields) -> str:
    """kubeadm's file with `fields` set, as a KubeletConfiguration patch of kubeadm's would."""
    doc = yaml.safe_load(KUBEADM_1_37)
    for key, value in fields.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return yaml.safe_dump(doc)


def read(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    config = KubeletConfigFile(str(path))
    return config.read(), config


# ---- reading ------------------------------------------------------------------------------


def test_kubeadm_s_file_reads_as_the_kubelet_defaults_it(tmp_path):
    got, config = read(tmp_path, KUBEADM_1_37)
    assert config.error is None
    assert got == KubeletPullSettings(
        serialize=True,
        max_parallel=1,
        verification_policy="NeverVerifyPreloadedImages",
        allowlist=(),
        policy_set=False,
    )


@pytest.mark.parametrize(
    "fields,serialize,parallel",
    [
        # defaults.go: serializeImagePulls defaults to false when maxParallelImagePulls >= 2
        ({"maxParallelImagePulls": 5}, False, 5),
        ({"maxParallelImagePulls": 1}, True, 1),
        ({"serializeImagePulls": False}, False, 0),
        ({"serializeImagePulls": False, "maxParallelImagePulls": 3}, False, 3),
        ({"serializeImagePulls": True, "maxParallelImagePulls": 1}, True, 1),
    ],
)
def test_pull_slots_default_as_the_kubelet_does(tmp_path, fields, serialize, parallel):
    got, _ = read(tmp_path, kubeadm(**fields))
    assert (got.serialize, got.max_parallel) == (serialize, parallel)


@pytest.mark.parametrize("policy", VERIFICATION_POLICIES)
def test_each_policy_is_read(tmp_path, policy):
    allowlist = ["registry.k8s.io/pause"] if policy == "NeverVerifyAllowlistedImages" else None
    got, _ = read(
        tmp_path,
        kubeadm(
            imagePullCredentialsVerificationPolicy=policy,
            preloadedImagesVerificationAllowlist=allowlist,
        ),
    )
    assert (got.verification_policy, got.policy_set) == (policy, True)
    assert got.allowlist == tuple(allowlist or ())


def test_an_empty_policy_is_the_default(tmp_path):
    """The Go field is a string with omitempty: "" and null are unset, and defaulted."""
    for value in ('""', "null", "~"):
        got, _ = read(tmp_path, kubeadm() + f"imagePullCredentialsVerificationPolicy: {value}\n")
        assert (got.verification_policy, got.policy_set) == (DEFAULT_VERIFICATION_POLICY, False)


def test_the_allowlist_is_read_whole(tmp_path):
    patterns = ["registry.k8s.io/pause", "nvcr.io/nvidia/*", "registry.example:5000/team/app"]
    got, _ = read(
        tmp_path,
        kubeadm(
            imagePullCredentialsVerificationPolicy="NeverVerifyAllowlistedImages",
            preloadedImagesVerificationAllowlist=patterns,
        ),
    )
    assert got.allowlist == tuple(patterns)


def test_the_feature_gate_off_is_disabled(tmp_path):
    got, _ = read(tmp_path, kubeadm(featureGates={"KubeletEnsureSecretPulledImages": False}))
    assert got.verification_policy == "Disabled"
    on, _ = read(tmp_path, kubeadm(featureGates={"KubeletEnsureSecretPulledImages": True}))
    assert on.verification_policy == DEFAULT_VERIFICATION_POLICY


def test_the_e2e_kubelet_s_config_reads_the_default_policy(tmp_path):
    """testbed/node.py's KubeletConfiguration, which the real kubelet runs in the e2e."""
    from testbed.node import kubelet_config  # noqa: PLC0415

    got, _ = read(tmp_path, yaml.safe_dump(kubelet_config("/ca.crt")))
    assert got.verification_policy == DEFAULT_VERIFICATION_POLICY


# ---- files the kubelet refuses -------------------------------------------------------------

ALLOWLISTED = "NeverVerifyAllowlistedImages"


# Files the kubelet 1.37 refuses, with what the reader's error names
# (tests/imagepull/test_kubelet_real.py has the real kubelet refuse each).
REFUSED = [
    ({"imagePullCredentialsVerificationPolicy": 1}, "imagePullCredentialsVerificationPolicy"),
    ({"imagePullCredentialsVerificationPolicy": ["AlwaysVerify"]}, "not a string"),
    (
        {
            "imagePullCredentialsVerificationPolicy": ALLOWLISTED,
            "preloadedImagesVerificationAllowlist": "registry.k8s.io/pause",
        },
        "preloadedImagesVerificationAllowlist",
    ),
    (
        {
            "imagePullCredentialsVerificationPolicy": ALLOWLISTED,
            "preloadedImagesVerificationAllowlist": [1],
        },
        "not a list of image names",
    ),
    ({"featureGates": ["KubeletEnsureSecretPulledImages"]}, "featureGates"),
    ({"featureGates": {"KubeletEnsureSecretPulledImages": "no"}}, "not true/false"),
    ({"serializeImagePulls": "false"}, "serializeImagePulls"),
    ({"maxParallelImagePulls": "5"}, "maxParallelImagePulls"),
    ({"maxParallelImagePulls": 0}, "maxParallelImagePulls"),
    # validation.go's rules
    ({"serializeImagePulls": True, "maxParallelImagePulls": 5}, "refuses"),
    (
        {"preloadedImagesVerificationAllowlist": ["registry.k8s.io/pause"]},
        "NeverVerifyPreloadedImages (the default)",
    ),
    (
        {
            "imagePullCredentialsVerificationPolicy": "AlwaysVerify",
            "preloadedImagesVerificationAllowlist": ["registry.k8s.io/pause"],
        },
        "needs NeverVerifyAllowlistedImages",
    ),
    (
        {
            "featureGates": {"KubeletEnsureSecretPulledImages": False},
            "imagePullCredentialsVerificationPolicy": "NeverVerify",
        },
        "KubeletEnsureSecretPulledImages is false",
    ),
    (
        {
            "imagePullCredentialsVerificationPolicy": ALLOWLISTED,
            "preloadedImagesVerificationAllowlist": ["registry.k8s.io/pause:3.10"],
        },
        "neither a tag nor a digest",
    ),
]


@pytest.mark.parametrize("fields,named", REFUSED)
def test_a_file_the_kubelet_refuses_is_named_not_read(tmp_path, fields, named):
    got, config = read(tmp_path, kubeadm(**fields))
    assert got is None and config.refused and not config.unknown
    assert named in config.error and str(tmp_path) in config.error


def test_yaml_is_refused_and_a_fifo_or_a_missing_file_is_not(tmp_path):
    got, config = read(tmp_path, KUBEADM_1_37 + "maxPods: [unclosed\n")
    assert got is None and config.refused
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path / "missing.yaml"):
        config = KubeletConfigFile(str(path))
        assert config.read() is None and config.error and not config.refused


@pytest.mark.parametrize(
    "pattern,why",
    [
        ("registry.k8s.io/pause", None),
        ("registry.example:5000/team/app", None),
        ("nvcr.io/nvidia/*", None),
        ("nvcr.io/*", None),
        ("nginx", None),
        ("[::1]:5000/app", None),
        ("registry.k8s.io/pause:3.10", "neither a tag nor a digest"),
        ("registry.k8s.io/pause@sha256:" + "a" * 64, "neither a tag nor a digest"),
        ("nginx:latest", "neither a tag nor a digest"),
        (" registry.k8s.io/pause", "spaces"),
        ("nvcr.io/nvidia/cuda*", "wildcard"),
        ("nvcr.io/*/cuda", "wildcard"),
        ("/*", "registry host"),
        ("*", "wildcard"),
        ("", "empty"),
        ("registry.example/Team/App", "not an image name"),
        ("registry.example//app", "not an image name"),
    ],
)
def test_allowlist_patterns_as_the_kubelet_checks_them(pattern, why):
    got = allowlist_pattern_error(pattern)
    assert (got is None) if why is None else (got and why in got), got


def test_allowlist_matching_is_the_kubelet_s():
    allow = ("registry.k8s.io/pause", "nvcr.io/nvidia/*")
    assert allowlisted(allow, "registry.k8s.io/pause")
    assert allowlisted(allow, "nvcr.io/nvidia/cuda")
    assert allowlisted(allow, "nvcr.io/nvidia/k8s/dcgm-exporter")
    assert not allowlisted(allow, "registry.k8s.io/pause-amd64")  # the whole name
    assert not allowlisted(allow, "nvcr.io/nvidiax/cuda")  # a whole path segment
    assert not allowlisted(allow, "docker.io/library/nginx")
    assert not allowlisted((), "registry.k8s.io/pause")


# ---- a version the exporter has not met ----------------------------------------------------


NOT_MET = [
    ({"apiVersion": "kubelet.config.k8s.io/v2"}, "'kubelet.config.k8s.io/v2'"),
    ({"kind": "KubeletConfigurationV2"}, "'KubeletConfigurationV2'"),
    ({"imagePullCredentialsVerificationPolicy": "VerifyOncePerTenant"}, "VerifyOncePerTenant"),
]


@pytest.mark.parametrize("fields,named", NOT_MET)
def test_a_version_not_met_is_named_and_marked_unknown(tmp_path, fields, named):
    got, config = read(tmp_path, kubeadm(**fields))
    assert got is None and config.unknown and not config.refused and named in config.error


def collector(tmp_path, text):
    """The collector as deploy/ runs it (the ingest source: no containerd socket), on an
    empty ingest directory, without the API (its pods are not known)."""
    ingest = tmp_path / "ingest"
    ingest.mkdir(exist_ok=True)
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(text)
    args, classes = parse(
        [
            "--collector.disable-defaults",
            "--collector.imagepull",
            "--image-pull.source=ingest",
            f"--containerd.ingest-dir={ingest}",
            f"--kubelet.config-file={kubelet}",
        ]
    )
    assert classes == [ImagePullCollector]
    return ImagePullCollector(args)


def test_a_kubelet_config_of_another_version_fails_the_collector_naming_it(tmp_path):
    c = collector(tmp_path, kubeadm(apiVersion="kubelet.config.k8s.io/v2"))
    with pytest.raises(UnknownKubeletConfig, match=r"kubelet\.config\.k8s\.io/v2"):
        c.observe()
    result = Scraper([c]).scrape(5.0)
    (outcome,) = result.outcomes
    assert not outcome.ok and "kubelet.config.k8s.io/v2" in outcome.error
    out = io.StringIO()
    assert run_check([c], 5.0, out) == 1
    assert "FAILED   the collector failed: " in out.getvalue()
    assert "apiVersion 'kubelet.config.k8s.io/v2' is not one this exporter knows" in (
        out.getvalue()
    )


def test_an_unknown_policy_fails_the_collector_naming_it(tmp_path):
    c = collector(tmp_path, kubeadm(imagePullCredentialsVerificationPolicy="VerifyHourly"))
    out = io.StringIO()
    assert run_check([c], 5.0, out) == 1
    assert "'VerifyHourly' is not one this exporter knows (NeverVerify, " in out.getvalue()


def test_a_refused_file_costs_its_series_and_is_a_warning(tmp_path):
    c = collector(tmp_path, kubeadm(maxParallelImagePulls="5"))
    state = c.observe()
    names = {f.name for f in families(state)}
    assert not any(n.startswith("kubescale_kubelet_") for n in names)
    assert "kubescale_image_pulls_in_progress" in names
    out = io.StringIO()
    assert run_check([c], 5.0, out) == 1
    text = out.getvalue()
    assert "WARNING  the kubelet refuses its config file: kubelet config " in text
    assert "maxParallelImagePulls is '5'" in text and "0 collector(s) failed" in text


def test_a_missing_file_is_not_a_warning(tmp_path):
    c = collector(tmp_path, KUBEADM_1_37)
    (tmp_path / "kubelet.yaml").unlink()
    out = io.StringIO()
    run_check([c], 5.0, out)
    assert "pull settings unknown: kubelet config " in out.getvalue()
    assert "No such file or directory" in out.getvalue()
    assert "refuses" not in out.getvalue()


def test_the_collector_exports_the_policy_of_kubeadm_s_file(tmp_path):
    c = collector(tmp_path, KUBEADM_1_37)
    fams = {f.name: f for f in families(c.observe())}
    (sample,) = fams["kubescale_kubelet_image_pull_credentials_verification_policy"].samples
    assert (sample.labels, sample.value) == ({"policy": "NeverVerifyPreloadedImages"}, 1.0)
    assert "kubescale_kubelet_preloaded_images_verification_allowlist_patterns" not in fams


# ---- check's advice -------------------------------------------------------------------------


def settings(policy=DEFAULT_VERIFICATION_POLICY, allowlist=(), policy_set=True):
    return KubeletPullSettings(True, 1, policy, tuple(allowlist), policy_set)


def findings(kubelet, preload=()):
    state = combine(NOW, 120.0, [], set(), {}, kubelet, [parse_ref(p) for p in preload])
    words = ("VerificationPolicy", "VerificationAllowlist", "KubeletEnsureSecretPulledImages")
    return [f for f in advise(state) if any(w in f.summary for w in words)]


def test_the_default_policy_is_explained_with_its_cost():
    (f,) = findings(settings(policy_set=False), preload=["registry.k8s.io/pause:3.10"])
    assert f.severity == "info"
    assert f.summary.startswith(
        "imagePullCredentialsVerificationPolicy is NeverVerifyPreloadedImages (the default): "
        "images baked into the node image are used without asking the registry"
    )
    assert f.advice == REVERIFY_COST
    assert "ErrImagePull although the image is on the node" in f.advice
    assert "Behind one NAT address" in f.advice
    (explicit,) = findings(settings())
    assert "(the default)" not in explicit.summary


def test_never_verify_and_disabled_cost_no_registry_request():
    (never,) = findings(settings("NeverVerify"))
    assert never.severity == "info" and "no registry request" in never.summary
    assert "whatever its pull secret" in never.summary
    (off,) = findings(settings("Disabled", policy_set=False))
    assert off.severity == "info"
    assert off.summary.startswith("featureGates.KubeletEnsureSecretPulledImages is false")


def test_always_verify_warns_when_baked_in_images_are_listed():
    (info,) = findings(settings("AlwaysVerify"))
    assert info.severity == "info" and "baked-in ones included" in info.summary
    (warn,) = findings(settings("AlwaysVerify"), preload=["registry.k8s.io/pause:3.10"])
    assert warn.severity == "warning"
    assert "; the 1 image(s) of --image-pull.preload included, so a scale-up" in warn.summary
    assert (
        "  imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\n"
        "  preloadedImagesVerificationAllowlist:\n"
        "  - registry.k8s.io/pause\n"
    ) in warn.advice
    assert "  imagePullCredentialsVerificationPolicy: NeverVerifyPreloadedImages\n" in warn.advice


def test_allowlisted_policy_names_the_preloaded_images_it_does_not_cover():
    kubelet = settings(ALLOWLISTED, ["registry.k8s.io/pause", "nvcr.io/nvidia/*"])
    covered = findings(kubelet, preload=["registry.k8s.io/pause:3.10", "nvcr.io/nvidia/cuda:12"])
    assert [f.severity for f in covered] == ["info"]
    assert "with 2 preloadedImagesVerificationAllowlist pattern(s)" in covered[0].summary
    info, warn = findings(kubelet, preload=["registry.k8s.io/pause:3.10", "ghcr.io/org/app:1"])
    assert warn.severity == "warning"
    assert warn.summary.startswith(
        "1 of the 2 images of --image-pull.preload are not in preloadedImagesVerificationAllowlist"
    )
    assert "Not allowlisted:\n  ghcr.io/org/app\n" in warn.advice
    assert (
        "  preloadedImagesVerificationAllowlist:\n"
        "  - registry.k8s.io/pause\n"
        "  - nvcr.io/nvidia/*\n"
        "  - ghcr.io/org/app\n"
    ) in warn.advice


def test_the_allowlist_series_only_under_its_policy():
    def exported(kubelet):
        state = combine(NOW, 120.0, [], set(), {}, kubelet, [])
        return {
            f.name: [(s.labels, s.value) for s in f.samples]
            for f in families(state)
            if "verification" in f.name
        }

    assert exported(settings(ALLOWLISTED, ["a.example/*", "b.example/x"])) == {
        "kubescale_kubelet_image_pull_credentials_verification_policy": [
            ({"policy": ALLOWLISTED}, 1.0)
        ],
        "kubescale_kubelet_preloaded_images_verification_allowlist_patterns": [({}, 2.0)],
    }
    for policy in ("NeverVerify", DEFAULT_VERIFICATION_POLICY, "AlwaysVerify", "Disabled"):
        assert exported(settings(policy)) == {
            "kubescale_kubelet_image_pull_credentials_verification_policy": [
                ({"policy": policy}, 1.0)
            ],
        }
