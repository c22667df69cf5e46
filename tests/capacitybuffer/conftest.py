"""An API server of this module's own (the first test needs one without the CapacityBuffer
API), and the CRD of the pinned cluster-autoscaler release.

The CRD is the file the release's source tarball holds: where .ci/setup.d's autoscaler step
has extracted it into the cache (testbed.builds.capacity_buffer_crd), that copy; else it is
taken from the tarball in ../shared/third_party here, after its sha256 is checked.
"""

import hashlib
import tarfile
from pathlib import Path

import pytest
import yaml

from testbed import builds
from testbed.kube_apiserver import apiserver_on_new_etcd

TARBALL = Path("/work/shared/third_party/cluster-autoscaler-1.36.1.tar.gz")
SHA256 = "129c2f69b7de71ad87832fb80efe99ff8a9f900564b3da11d1aae3f295ccc3fe"
MEMBER = "cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_capacitybuffers.yaml"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _from_cache():
    find = getattr(builds, "capacity_buffer_crd", None)
    if find is None:
        return None
    try:
        path = Path(find())
    except (FileNotFoundError, LookupError, OSError):
        return None
    return path if path.exists() else None


def _from_tarball(directory: Path) -> Path:
    digest = hashlib.sha256(TARBALL.read_bytes()).hexdigest()
    assert digest == SHA256, f"{TARBALL}: sha256 {digest}, not the pinned {SHA256}"
    with tarfile.open(TARBALL) as tar:
        [member] = [m for m in tar.getmembers() if m.name.endswith("/" + MEMBER)]
        out = directory / "capacitybuffers.yaml"
        out.write_bytes(tar.extractfile(member).read())
    return out


@pytest.fixture(scope="session")
def capacity_buffer_crd(tmp_path_factory) -> dict:
    path = _from_cache() or _from_tarball(tmp_path_factory.mktemp("crd"))
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def own_apiserver(tmp_path_factory):
    with apiserver_on_new_etcd(tmp_path_factory.mktemp("cb-api")) as api:
        yield api
