"""The mixin as a kube-prometheus style stack gets it: vendored by the real jsonnet-bundler
with the command docs/mixin.md gives, imported by the path it documents, rendered with
go-jsonnet (what kube-prometheus builds with) and with the C++ jsonnet.

The "upstream" is a git repository in a temporary directory holding this checkout's mixin/
on a `main` branch; git's `url.insteadOf` points the GitHub remote jb records at it over
file://. jb first tries GitHub's archive download over HTTPS: a proxy on a closed loopback
port refuses it, so nothing leaves the host and jb falls back to git, as it does for any
repository whose archive it cannot fetch."""

import json
import re
import shutil
import socket
import subprocess

import _jsonnet
import pytest

from testbed import builds
from tests.mixin.support import REPO, alert_rules, binary, build

IMPORT_PATH = "github.com/kube-scale-exporter/kube-scale-exporter/mixin"
REMOTE = "https://github.com/kube-scale-exporter/kube-scale-exporter.git"
DOCS = REPO / "docs" / "mixin.md"
OVERRIDES = {
    "clusterLabel": "k8s_cluster",
    "criticalSeverity": "warning",
    "prometheusSelfProtection": True,
    "etcdQuotaAlerts": False,
}
ETCD_MIXIN_OVERLAP = {
    "KubeScaleEtcdDatabaseNearQuota",
    "KubeScaleEtcdDatabaseQuotaPredictedFull",
    "KubeScaleEtcdHighFragmentation",
}
# What the generated files hold, as a stack renders it from the vendored mixin.
DEFAULT_STACK = (
    "local kubescale = import '%s/mixin.libsonnet';\n"
    "{ alerts: kubescale.prometheusAlerts, rules: kubescale.prometheusRules,\n"
    "  dashboards: kubescale.grafanaDashboards }\n" % IMPORT_PATH
)


def documented(kind: str) -> list[str]:
    """The `kind` code blocks of docs/mixin.md's jsonnet-bundler section."""
    section = (
        DOCS.read_text().split("### Vendored with jsonnet-bundler", 1)[1].split("\n### ", 1)[0]
    )
    return re.findall(rf"```{kind}\n(.*?)```", section, re.S)


def commands(block: str) -> list[list[str]]:
    """A shell block's commands as argv lists (comments dropped)."""
    return [line.split("#", 1)[0].split() for line in block.strip().splitlines()]


def closed_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(argv, cwd, env=None, check=True):
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check and out.returncode != 0:
        pytest.fail(f"{argv} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out


def go_jsonnet(stack, *args, check=True):
    return run(
        [builds.go_jsonnet_binary("jsonnet"), "-J", "vendor", *args, stack.name],
        stack.parent,
        check=check,
    )


def cpp_jsonnet(stack, *args, check=True):
    return run([binary("jsonnet"), "-J", "vendor", *args, stack.name], stack.parent, check=check)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A stack that ran `jb init` and the documented `jb install`; (its directory, jb's output)."""
    top = tmp_path_factory.mktemp("vendoring")
    upstream = top / "upstream"
    shutil.copytree(REPO / "mixin", upstream / "mixin")
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@invalid"]
    run([*git, "init", "-q", "-b", "main"], upstream)
    run([*git, "add", "mixin"], upstream)
    run([*git, "commit", "-q", "-m", "the mixin as this checkout has it"], upstream)
    head = run(["git", "rev-parse", "HEAD"], upstream).stdout.strip()
    (top / "gitconfig").write_text(f'[url "file://{upstream}"]\n\tinsteadOf = {REMOTE}\n')
    proxy = f"http://127.0.0.1:{closed_loopback_port()}"
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(top),
        "GIT_CONFIG_GLOBAL": str(top / "gitconfig"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "HTTPS_PROXY": proxy,
        "HTTP_PROXY": proxy,
    }
    stack = top / "stack"
    stack.mkdir()
    vendoring = commands(documented("sh")[0])
    assert vendoring == [["jb", "init"], ["jb", "install", f"{IMPORT_PATH}@main"]]
    output = ""
    for argv in vendoring:
        done = run([builds.jb_binary(), *argv[1:]], stack, env)
        output += done.stdout + done.stderr
    return stack, head, output


@pytest.mark.integration
def test_jb_installs_the_mixin_where_the_docs_import_it(project):
    stack, head, output = project
    assert "connection refused" in output and "retrying with git" in output
    vendored = stack / "vendor" / IMPORT_PATH
    assert sorted(p.relative_to(vendored) for p in vendored.rglob("*")) == sorted(
        p.relative_to(REPO / "mixin") for p in (REPO / "mixin").rglob("*")
    )
    jsonnetfile = json.loads((stack / "jsonnetfile.json").read_text())
    assert jsonnetfile["dependencies"] == [
        {"source": {"git": {"remote": REMOTE, "subdir": "mixin"}}, "version": "main"}
    ]
    (locked,) = json.loads((stack / "jsonnetfile.lock.json").read_text())["dependencies"]
    assert locked["version"] == head
    # `jb init` turns legacy imports on: the short link the docs warn about is there too.
    assert jsonnetfile["legacyImports"] is True
    assert (stack / "vendor" / "mixin").resolve() == vendored.resolve()


@pytest.mark.integration
def test_go_jsonnet_renders_the_committed_files_from_the_vendored_mixin(project):
    stack, _, _ = project
    (stack / "default.jsonnet").write_text(DEFAULT_STACK)
    got = json.loads(go_jsonnet(stack / "default.jsonnet").stdout)
    assert build.to_yaml(got["alerts"]) == (REPO / "rules" / "prometheus_alerts.yaml").read_text()
    assert build.to_yaml(got["rules"]) == (REPO / "rules" / "prometheus_rules.yaml").read_text()
    assert sorted(got["dashboards"]) == sorted(p.name for p in (REPO / "dashboards").glob("*.json"))
    for name, dashboard in got["dashboards"].items():
        assert build.to_json(dashboard) == (REPO / "dashboards" / name).read_text(), name


@pytest.mark.integration
def test_overrides_render_alike_in_go_jsonnet_and_the_cpp_jsonnet(project):
    stack, _, _ = project
    (stack / "overridden.jsonnet").write_text(
        "local kubescale = (import '%s/mixin.libsonnet') + { _config+:: %s };\n"
        "{ alerts: kubescale.prometheusAlerts, rules: kubescale.prometheusRules,\n"
        "  dashboards: kubescale.grafanaDashboards }\n" % (IMPORT_PATH, json.dumps(OVERRIDES))
    )
    got = json.loads(go_jsonnet(stack / "overridden.jsonnet").stdout)
    # PyPI jsonnet (the C++ implementation) on the checkout.
    expected = build.mixin_object(OVERRIDES, evaluate=_jsonnet.evaluate_snippet)
    assert got == {
        "alerts": expected["alerts"],
        "rules": expected["rules"],
        "dashboards": expected["dashboards"],
    }
    assert {r["labels"]["severity"] for r in alert_rules(got)} <= {"warning", "info"}
    assert "kube-scale-exporter-prometheus" in [g["name"] for g in got["alerts"]["groups"]]
    assert {r["alert"] for r in alert_rules(got)} & ETCD_MIXIN_OVERLAP == set()
    assert "by (k8s_cluster" in json.dumps(got["rules"])


@pytest.mark.integration
def test_the_documented_stack_writes_the_same_files_with_both_jsonnets(project):
    """docs/mixin.md's jsonnet, run as its `jsonnet -m` line says, by go-jsonnet and by
    Debian's C++ jsonnet CLI: the same rule files byte for byte and the same dashboards
    (the C++ std.manifestJsonEx writes 0.8 as 0.80000000000000004: the same number),
    with the overrides in them."""
    stack, _, _ = project
    (source,) = documented("jsonnet")
    ((program, *flags, file),) = commands(documented("sh")[1])
    assert program == "jsonnet" and flags == ["-J", "vendor", "-m", "out", "-S"]
    (stack / file).write_text(source)
    for out, render in (("go-out", go_jsonnet), ("cpp-out", cpp_jsonnet)):
        (stack / out).mkdir()
        render(stack / file, "-m", out, "-S")
    go_files = {p.name: p.read_text() for p in (stack / "go-out").iterdir()}
    cpp_files = {p.name: p.read_text() for p in (stack / "cpp-out").iterdir()}
    rule_files = {"kube-scale-exporter-alerts.yaml", "kube-scale-exporter-rules.yaml"}
    dashboards = {p.name for p in (REPO / "dashboards").glob("*.json")}
    assert set(go_files) == set(cpp_files) == rule_files | dashboards
    for name in rule_files:
        assert go_files[name] == cpp_files[name], name
    for name in dashboards:
        assert json.loads(go_files[name]) == json.loads(cpp_files[name]), name
    assert "severity: critical" not in go_files["kube-scale-exporter-alerts.yaml"]
    assert "by (k8s_cluster" in go_files["kube-scale-exporter-rules.yaml"]
    assert 'namespace=\\"monitoring\\"' in go_files["kubescale-node.json"]


@pytest.mark.integration
def test_a_config_typo_fails_rendering_in_both_jsonnets_naming_it(project):
    stack, _, _ = project
    (stack / "typo.jsonnet").write_text(
        "((import '%s/mixin.libsonnet') + { _config+:: { clusterLable: 'k8s_cluster' } })"
        ".prometheusAlerts\n" % IMPORT_PATH
    )
    for render in (go_jsonnet, cpp_jsonnet):
        out = render(stack / "typo.jsonnet", check=False)
        assert out.returncode == 1 and out.stdout == ""
        assert "unknown _config knob: clusterLable;" in out.stderr, out.stderr


@pytest.mark.unit
def test_a_config_typo_fails_rendering_naming_every_unknown_knob():
    with pytest.raises(
        RuntimeError, match=r"unknown _config knobs: clusterLable, topk; the knobs are in"
    ):
        build.mixin_object({"clusterLable": "k8s_cluster", "topk": 5, "topK": 5})


@pytest.mark.unit
def test_every_documented_knob_is_accepted(mixin):
    table = DOCS.read_text().split("\n## Config knobs\n", 1)[1].split("\n## ", 1)[0]
    knobs = set(re.findall(r"^\| (`.+?`) \|", table, re.M))
    names = {n for cell in knobs for n in re.findall(r"`(\w+)`", cell)}
    assert names and names <= set(mixin["config"])
    build.mixin_object({name: mixin["config"][name] for name in names})
