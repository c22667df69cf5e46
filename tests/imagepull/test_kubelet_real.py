"""The kubelet config reader against the real kubelet 1.37 (.ci/setup.d/40-kubernetes.sh).

The kubelet loads its config file, defaults it, logs the whole "Effective
KubeletConfiguration", then validates it. Each file here carries a `hairpinMode` no kubelet
accepts, so the kubelet stops at validation (in about 0.1 s, writing nothing, asking for no
privilege) and says what it made of the file: its effective pull settings, or why it
refuses the file. The reader must read what the kubelet runs with, and refuse what it
refuses.
"""

import subprocess

import pytest
import yaml

from kube_scale_exporter.collectors.imagepull.kubelet import (
    VERIFICATION_DISABLED,
    VERIFICATION_GATE,
    VERIFICATION_POLICIES,
    KubeletConfigFile,
)
from testbed.builds import kube_binary, kube_version
from tests.imagepull.test_kubelet_verification import (
    KUBEADM_1_37,
    NOT_MET,
    REFUSED,
    kubeadm,
)

pytestmark = pytest.mark.integration

STOP = "stop-at-validation"
STOP_ERROR = f'option \\"{STOP}\\" specified for hairpinMode'
ALLOWLISTED = "NeverVerifyAllowlistedImages"


@pytest.fixture(scope="module")
def kubelet():
    binary = kube_binary("kubelet")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == f"Kubernetes {kube_version()}"
    return binary


def run(kubelet, tmp_path, text):
    """(the kubelet's effective config or None, its error line) for a config file."""
    path = tmp_path / "config.yaml"
    path.write_text(text + f"hairpinMode: {STOP}\n")
    done = subprocess.run(
        [kubelet, "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    failed = [line for line in lines if '"command failed"' in line]
    assert len(failed) == 1, done.stderr
    effective = None
    for i, line in enumerate(lines):
        if '"Effective KubeletConfiguration" config=<' in line:
            # klog's multi-line value: each line indented by a tab, then " >".
            body = []
            for follow in lines[i + 1 :]:
                if follow == " >":
                    break
                body.append(follow.removeprefix("\t"))
            effective = yaml.safe_load("\n".join(body))
    return effective, failed[0]


def refused_beyond_the_stop(error: str) -> bool:
    """The kubelet refused the file for more than the hairpinMode put there to stop it."""
    if "failed to load kubelet config file" in error:
        return True
    return error.count("invalid configuration:") > error.count(STOP_ERROR)


ACCEPTED = [
    {},
    {"maxParallelImagePulls": 5},
    {"maxParallelImagePulls": 1},
    {"serializeImagePulls": False},
    {"serializeImagePulls": False, "maxParallelImagePulls": 3},
    {"serializeImagePulls": True, "maxParallelImagePulls": 1},
    *(
        {"imagePullCredentialsVerificationPolicy": p}
        for p in VERIFICATION_POLICIES
        if p != ALLOWLISTED
    ),
    {"imagePullCredentialsVerificationPolicy": ALLOWLISTED},
    {
        "imagePullCredentialsVerificationPolicy": ALLOWLISTED,
        "preloadedImagesVerificationAllowlist": [
            "registry.k8s.io/pause",
            "nvcr.io/nvidia/*",
            "registry.example:5000/team/app",
        ],
    },
    {"featureGates": {VERIFICATION_GATE: False}},
    {"featureGates": {VERIFICATION_GATE: True}, "imagePullCredentialsVerificationPolicy": ""},
]


@pytest.mark.parametrize(
    "fields", ACCEPTED, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()) or "kubeadm"
)
def test_the_reader_reads_what_the_kubelet_runs_with(kubelet, tmp_path, fields):
    text = kubeadm(**fields) if fields else KUBEADM_1_37
    effective, error = run(kubelet, tmp_path, text)
    assert effective is not None and not refused_beyond_the_stop(error), error
    (tmp_path / "ours.yaml").write_text(text)
    ours = KubeletConfigFile(str(tmp_path / "ours.yaml")).read()
    assert ours is not None
    serialize = effective["serializeImagePulls"]
    assert ours.serialize == serialize
    limit = effective.get("maxParallelImagePulls")  # absent: no limit
    assert ours.max_parallel == (1 if serialize else limit or 0)
    if effective.get("featureGates", {}).get(VERIFICATION_GATE) is False:
        assert "imagePullCredentialsVerificationPolicy" not in effective
        assert ours.verification_policy == VERIFICATION_DISABLED
    else:
        assert ours.verification_policy == effective["imagePullCredentialsVerificationPolicy"]
    assert ours.allowlist == tuple(effective.get("preloadedImagesVerificationAllowlist", ()))


@pytest.mark.parametrize("fields,named", REFUSED + NOT_MET)
def test_what_the_reader_does_not_read_the_kubelet_refuses(kubelet, tmp_path, fields, named):
    _, error = run(kubelet, tmp_path, kubeadm(**fields))
    assert refused_beyond_the_stop(error), error


def test_the_policies_are_the_kubelet_s(kubelet, tmp_path):
    _, error = run(kubelet, tmp_path, kubeadm(imagePullCredentialsVerificationPolicy="Bogus"))
    listed = ", ".join(f'\\"{p}\\"' for p in VERIFICATION_POLICIES[:-1])
    assert f'Valid options are {listed} or \\"{VERIFICATION_POLICIES[-1]}\\"' in error, error


def test_v1beta1_is_the_only_version_the_kubelet_reads(kubelet, tmp_path):
    for version in ("kubelet.config.k8s.io/v1", "kubelet.config.k8s.io/v1alpha1"):
        _, error = run(kubelet, tmp_path, kubeadm(apiVersion=version))
        assert "no kind" in error and version in error, error


@pytest.mark.parametrize(
    "pattern",
    [
        "registry.k8s.io/pause",
        "registry.example:5000/team/app",
        "nvcr.io/nvidia/*",
        "nginx",
        "registry.k8s.io/pause:3.10",
        "registry.k8s.io/pause@sha256:" + "a" * 64,
        " registry.k8s.io/pause",
        "nvcr.io/nvidia/cuda*",
        "nvcr.io/*/cuda",
        "/*",
        "",
        "registry.example/Team/App",
        "registry.example//app",
    ],
)
def test_allowlist_patterns_are_refused_as_the_kubelet_refuses_them(kubelet, tmp_path, pattern):
    text = kubeadm(
        imagePullCredentialsVerificationPolicy=ALLOWLISTED,
        preloadedImagesVerificationAllowlist=[pattern],
    )
    _, error = run(kubelet, tmp_path, text)
    (tmp_path / "ours.yaml").write_text(text)
    ours = KubeletConfigFile(str(tmp_path / "ours.yaml"))
    assert (ours.read() is None) == refused_beyond_the_stop(error), (ours.error, error)
