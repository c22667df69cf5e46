"""The release workflow: on a version tag it builds and pushes both architectures with the same
`make image image-push` users run (docs/deploy.md), and actionlint, with shellcheck on its
run: scripts, passes it and fails a broken copy (`make lint` runs the same check)."""

import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

from kube_scale_exporter import __version__
from testbed import builds, image

REPO = pathlib.Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "release.yml"


def runs(doc) -> str:
    return "\n".join(step.get("run", "") for step in doc["jobs"]["image"]["steps"])


@pytest.mark.unit
def test_a_version_tag_builds_and_pushes_every_architecture_with_make():
    doc = yaml.safe_load(WORKFLOW.read_text())
    # PyYAML reads the key `on` as True (YAML 1.1).
    assert doc[True] == {"push": {"tags": ["v*"]}}
    assert doc["permissions"] == {"contents": "read", "packages": "write"}
    script = runs(doc)
    assert re.search(r"^\s*sudo make image IMAGE=\"\$IMAGE\"$", script, re.M)
    assert re.search(r"^\s*sudo make image-push IMAGE=\"\$IMAGE\"$", script, re.M)
    # make image's default ARCHS are the ones the tests run, so the release builds them all.
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^ARCHS \?= (.*)$", makefile, re.M)[1].split() == list(image.ARCHS)
    # The tag must be the package's version: v0.1.0 pushes :0.1.0.
    assert 'if [ "$TAG" != "v$version" ]' in script
    assert "kube_scale_exporter/__init__.py" in script
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def actionlint(*paths, cwd=REPO):
    return subprocess.run(
        [builds.actionlint_binary(), "-no-color", *map(str, paths)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.integration
def test_actionlint_passes_the_workflows():
    assert shutil.which("shellcheck"), "no shellcheck: run .ci/setup.d/45-image.sh"
    result = actionlint(*sorted((REPO / ".github" / "workflows").glob("*.yml")))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.integration
def test_actionlint_fails_a_broken_copy(tmp_path):
    """Each break is one actionlint finds only through what the test relies on: its own
    expression checks, and shellcheck on run: scripts."""
    text = WORKFLOW.read_text()
    copy = tmp_path / ".github" / "workflows" / "release.yml"
    copy.parent.mkdir(parents=True)
    for old, new, finding in (
        ('make image IMAGE="$IMAGE"', "make image IMAGE=$IMAGE", "SC2086"),
        ("${{ github.ref_name }}", "${{ github.ref_nam }}", 'property "ref_nam" is not defined'),
        ("runs-on: ubuntu-24.04", "runs-on: ubuntu-24.04\n    runs-on: ubuntu-22.04", "runs-on"),
    ):
        assert old in text
        copy.write_text(text.replace(old, new, 1))
        result = actionlint(copy, cwd=tmp_path)
        assert result.returncode == 1, (new, result.stdout + result.stderr)
        assert finding in result.stdout, result.stdout
