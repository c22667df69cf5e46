"""kustomize renders of deploy/, with a kubectl whose kustomize knows Components (1.21+):
$KUSTOMIZE_KUBECTL, the one .ci/setup.d/40-kubernetes.sh builds, or the machine's own.
"""

import functools
import os
import shutil
import subprocess
import tempfile

import pytest
import yaml

from .builds import kube_dir

PROBE_COMPONENT = {
    "apiVersion": "kustomize.config.k8s.io/v1alpha1",
    "kind": "Component",
    "resources": ["probe.yaml"],
}
PROBE = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"}}


@functools.cache
def kustomize_kubectl() -> str:
    """The first kubectl whose kustomize renders a Component: $KUSTOMIZE_KUBECTL, the built
    one, the one on PATH. None of them fails the test (never a skip)."""
    candidates = [
        os.environ.get("KUSTOMIZE_KUBECTL"),
        str(kube_dir() / "kubectl"),
        shutil.which("kubectl"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "c"))
        with open(os.path.join(tmp, "c", "kustomization.yaml"), "w") as f:
            yaml.safe_dump(PROBE_COMPONENT, f)
        with open(os.path.join(tmp, "c", "probe.yaml"), "w") as f:
            yaml.safe_dump(PROBE, f)
        with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
            yaml.safe_dump({"components": ["c"]}, f)
        for path in filter(None, candidates):
            if not os.access(path, os.X_OK):
                continue
            result = subprocess.run(
                [path, "kustomize", tmp], capture_output=True, timeout=60, check=False
            )
            if result.returncode == 0:
                return path
    pytest.fail(
        f"no kubectl with kustomize Components among {candidates}: "
        "run .ci/setup.d/40-kubernetes.sh (or set KUSTOMIZE_KUBECTL)"
    )


def kustomize(path) -> str:
    """`kubectl kustomize PATH`; a warning (a deprecated field, say) fails like an error."""
    result = subprocess.run(
        [kustomize_kubectl(), "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0 or result.stderr.strip():
        raise AssertionError(f"kubectl kustomize {path}: {result.stderr}")
    return result.stdout


def render(path) -> list[dict]:
    """Every object `kubectl apply -k PATH` would send."""
    return [doc for doc in yaml.safe_load_all(kustomize(path)) if doc]
