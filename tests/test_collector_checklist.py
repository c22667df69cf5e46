"""docs/development.md's "Add a collector", checked for every registered collector: its golden
exposition and the test that compares it, a place in deploy/'s base or a component, its docs
page and the README's table, and a budget entry for each of its modes.

deploy/ is read here as text, for the flag that switches the collector on; the rendered
installs, mode by mode, are tests/deploy/test_manifests.py's (it needs kustomize).
"""

import re
from pathlib import Path

import pytest

from kube_scale_exporter.budgets import COLLECTOR_SERIES
from kube_scale_exporter.collectors import COLLECTORS
from testbed.golden import GOLDEN_DIR

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
DEPLOY = REPO / "deploy"
by_name = pytest.mark.parametrize("collector", COLLECTORS, ids=lambda c: c.name)


def docs_page(name: str) -> Path:
    """docs/NAME.md, or the page of the collector it extends (neighbor_gc: docs/neighbor.md)."""
    own = REPO / "docs" / f"{name}.md"
    return own if own.exists() else REPO / "docs" / f"{name.split('_')[0]}.md"


@by_name
def test_its_golden_file_is_compared_by_a_test(collector):
    assert (GOLDEN_DIR / f"{collector.name}.prom").exists(), (
        f"tests/golden/{collector.name}.prom: write its golden test, run it with UPDATE_GOLDEN=1"
    )
    call = re.compile(rf'assert_golden\(\s*"{collector.name}"')
    assert any(call.search(p.read_text()) for p in TESTS.rglob("test_*.py")), (
        f'no test calls assert_golden("{collector.name}", ...)'
    )


@by_name
def test_deploy_s_base_or_a_component_switches_it_on(collector):
    flag = re.compile(rf"^\s*(?:- |value: )--collector\.{collector.name}\s*$", re.M)
    places = [DEPLOY / "base", *(DEPLOY / "components").iterdir()]
    found = [p for place in places for p in place.glob("*.yaml") if flag.search(p.read_text())]
    assert found, f"no --collector.{collector.name} in deploy/base or deploy/components/*"


@by_name
def test_its_docs_page_and_the_readme_name_it(collector):
    page = docs_page(collector.name)
    assert page.exists(), f"docs/{collector.name}.md missing"
    assert f"`{collector.name}`" in page.read_text() or (
        f"--collector.{collector.name}" in page.read_text()
    ), f"{page.relative_to(REPO)} never names {collector.name}"
    assert f"`{collector.name}`" in (REPO / "README.md").read_text(), (
        f"README.md's table of what it makes visible lacks `{collector.name}`"
    )


@by_name
def test_it_has_a_budget_entry_for_each_of_its_modes(collector):
    entry = COLLECTOR_SERIES.get(collector.name, {})
    assert set(entry) == set(collector.modes), (
        f"kube_scale_exporter/budgets.py: COLLECTOR_SERIES[{collector.name!r}] needs the "
        f"series it adds per mode, for {sorted(collector.modes)}"
    )


def test_every_budget_entry_is_a_collector_s():
    assert set(COLLECTOR_SERIES) == {c.name for c in COLLECTORS}
