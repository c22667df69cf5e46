"""The Helm that .ci/setup.d/48-helm.sh builds, run on charts/kube-scale-exporter."""

import json
import subprocess
import tempfile

import yaml

from testbed.builds import ROOT, helm_binary

CHART = ROOT / "charts" / "kube-scale-exporter"


def helm(*args, kubeconfig=None, check=True, timeout=300) -> subprocess.CompletedProcess:
    """`helm ARGS` with none of the user's Helm configuration or repositories."""
    with tempfile.TemporaryDirectory() as home:
        env = {
            "HOME": home,
            "PATH": "/usr/bin:/bin",
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_DATA_HOME": f"{home}/data",
        }
        if kubeconfig:
            env["KUBECONFIG"] = str(kubeconfig)
        result = subprocess.run(
            [helm_binary(), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {result.returncode}\n{result.stderr}")
    return result


def values_file(values: dict, directory) -> str:
    path = f"{directory}/values.json"
    with open(path, "w") as f:
        json.dump(values, f)
    return path


def template(values: dict, namespace="kube-scale-exporter", check=True):
    """The objects `helm install` would send for these values (a list of dicts), or, with
    check=False, the finished process (to read a refusal's message)."""
    with tempfile.TemporaryDirectory() as tmp:
        result = helm(
            "template",
            "kube-scale-exporter",
            str(CHART),
            "--namespace",
            namespace,
            "--values",
            values_file(values, tmp),
            check=check,
        )
    if not check:
        return result
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]
