"""The image is named in one place for deploy/ (deploy/base/kustomization.yaml's `images:`) and
follows the package's version everywhere it is written down: the Makefile's IMAGE, the
Dockerfile's VERSION, the chart's appVersion. An overlay's one `images:` entry moves every
workload, the etcd-node component's included, to another registry."""

import os
import pathlib
import re

import pytest
import yaml

from kube_scale_exporter import __version__
from testbed.kustomize import render

REPO = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
NAME = "kube-scale-exporter"


def documents(path: pathlib.Path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def exporter_images(docs) -> list[str]:
    out = []
    for doc in docs:
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        out += [c["image"] for c in spec.get("containers", []) if "image" in c]
    return out


@pytest.mark.unit
def test_deploy_names_the_image_in_its_base_kustomization_only():
    manifests = [p for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml"]
    images = [i for p in manifests for i in exporter_images(documents(p))]
    assert len(images) >= 3, "the node DaemonSet, the Deployment, the etcd-node DaemonSet"
    assert set(images) == {NAME}, "a bare name, which kustomize's images: sets"
    base = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    assert base["images"] == [{"name": NAME, "newTag": __version__}]
    for path in DEPLOY.rglob("kustomization.yaml"):
        if path.parent != DEPLOY / "base":
            for entry in yaml.safe_load(path.read_text()).get("images", []):
                assert "newTag" not in entry and "digest" not in entry, path


@pytest.mark.unit
def test_the_version_is_the_package_s_wherever_the_image_is_built_or_charted():
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^IMAGE \?= localhost/kube-scale-exporter:\$\(VERSION\)$", makefile, re.M)
    assert "kube_scale_exporter/__init__.py" in re.search(r"^VERSION := (.*)$", makefile, re.M)[1]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(rf"^ARG VERSION={re.escape(__version__)}$", dockerfile, re.M)
    chart = yaml.safe_load((REPO / "charts" / NAME / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__


@pytest.mark.integration
def test_one_overlay_entry_moves_every_workload(tmp_path):
    components = sorted(p.name for p in (DEPLOY / "components").iterdir() if p.is_dir())
    # etcd-node-full includes etcd-node, and imagepull-socket replaces imagepull.
    components = [c for c in components if c not in ("etcd-node", "imagepull-socket")]
    kustomization = {
        "resources": [os.path.relpath(DEPLOY / "base", tmp_path)],
        "components": [os.path.relpath(DEPLOY / "components" / c, tmp_path) for c in components],
        "images": [{"name": NAME, "newName": "registry.example.com/team/kse"}],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    images = exporter_images(render(str(tmp_path)))
    assert len(images) == 3
    assert set(images) == {f"registry.example.com/team/kse:{__version__}"}
