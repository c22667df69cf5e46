# Every target is what CI or a newcomer runs; see README.md.
PYTHON ?= python3
MIXIN_SOURCES = $(shell find mixin -name '*.jsonnet' -o -name '*.libsonnet')

.PHONY: image image-push run test test-kube-1.35 test-thanos test-unit install lint generate check-generated deploy-check mixin-fmt bench bench-setup demo e2e e2e-up e2e-down test-containerd-2.4 fuzz fuzz-replay

install:
	$(PYTHON) -m pip install -q -e '.[test]'

run:
	$(PYTHON) -m kube_scale_exporter

# The image, from ./Dockerfile with buildah (Debian: `apt install buildah`; building arm64
# on an amd64 host takes qemu-user-static and binfmt-support too, for the build's last check
# only: the build stage runs on this host's platform, BUILD_PLATFORM, which buildah 1.28
# does not set itself, and unpacks the files of the target architecture, TARGETARCH): one
# image per architecture in ARCHS, tagged IMAGE-ARCH, and the manifest list IMAGE naming
# them all, which `make image-push` pushes with every image in it. IMAGE is where you push
# it, e.g.
# `make image image-push IMAGE=registry.example.com/team/kube-scale-exporter:$(VERSION)`;
# BUILD_FLAGS adds `buildah build` flags (e.g. --build-arg BUILD_IMAGE=a bookworm mirror),
# PUSH_FLAGS `buildah manifest push` flags (e.g. --creds, --tls-verify=false).
# docs/deploy.md "Build and push the image"; the release workflow runs the same two.
# --layers: one layer per COPY of the final stage, as docker build makes them (buildah
# otherwise commits the stage as one layer), so a release changing only the package
# changes only its small top layer.
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' kube_scale_exporter/__init__.py)
IMAGE ?= localhost/kube-scale-exporter:$(VERSION)
ARCHS ?= amd64 arm64
BUILDAH ?= buildah
BUILD_FLAGS ?=
PUSH_FLAGS ?=
BUILD_PLATFORM ?= linux/$(subst aarch64,arm64,$(subst x86_64,amd64,$(shell uname -m)))
image:
	$(BUILDAH) manifest rm $(IMAGE) >/dev/null 2>&1 || true
	$(BUILDAH) manifest create $(IMAGE) >/dev/null
	@set -e; for arch in $(ARCHS); do \
		start=$$(date +%s); \
		flags="--layers --platform linux/$$arch --build-arg BUILDPLATFORM=$(BUILD_PLATFORM)"; \
		echo "$(BUILDAH) build $$flags --build-arg VERSION=$(VERSION) $(BUILD_FLAGS) --tag $(IMAGE)-$$arch ."; \
		$(BUILDAH) build $$flags --build-arg VERSION=$(VERSION) $(BUILD_FLAGS) --tag $(IMAGE)-$$arch .; \
		$(BUILDAH) manifest add $(IMAGE) containers-storage:$(IMAGE)-$$arch >/dev/null; \
		echo "image: $(IMAGE)-$$arch built in $$(( $$(date +%s) - start )) s"; \
	done

image-push:
	$(BUILDAH) manifest push --all $(PUSH_FLAGS) $(IMAGE) docker://$(IMAGE)

# The API-level tests again on Kubernetes 1.35's kube-apiserver, the oldest release upstream
# supports (`make test` runs them on 1.37): the client and informers (watch-list and its
# fallbacks, 410s), TokenReview/SubjectAccessReview for --web.kube-rbac, every component's
# RBAC through a server-side dry-run, events as the kubelet writes them.
KUBE_API_TESTS = tests/kube tests/web/test_kube_rbac.py tests/deploy/test_dryrun.py \
	tests/imagepull_events tests/balloon/test_balloon.py tests/imagepull/test_pods.py
test-kube-1.35:
	KSE_KUBE_RELEASE=1.35 $(PYTHON) -m pytest -n $(TEST_WORKERS) -m integration -p no:cacheprovider $(KUBE_API_TESTS)

# Everything but tests/e2e (root, the binaries .ci/setup.d installs; see docs/development.md),
# on TEST_WORKERS pytest-xdist workers: most tests wait on real servers, not on the CPU (one
# per core: a third ran the suite 1.5 min sooner but made tests' timing flaky). Tests
# change host state only inside the network and mount namespaces they create. A module
# whose tests share one costly setup (a Prometheus run, a fleet, the chart's renders) keeps
# them on one worker with `pytest.mark.xdist_group(NAME)`, so the setup runs once. The 25
# slowest tests are listed at the end.
TEST_WORKERS ?= 2
test:
	$(PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25

# The mixin on Thanos (tests/mixin/test_thanos_live.py), by hand: Thanos is built by
# .ci/bench.d/16-thanos.sh, which .ci/run leaves out (a 15 min first build).
test-thanos:
	bash .ci/bench.d/16-thanos.sh
	KSE_THANOS=1 $(PYTHON) -m pytest -p no:cacheprovider tests/mixin/test_thanos_live.py

# The fast loop: the unit tier alone, as any user, with no binary installed; on the same
# workers as `test` (two finish it sooner than one: docs/development.md has the times).
test-unit:
	$(PYTHON) -m pytest -m unit -n $(TEST_WORKERS) --dist loadgroup

# Every fuzz corpus through its harness once, plain Python (fuzz/; under a minute).
fuzz-replay:
	$(PYTHON) -m fuzz replay

# Coverage-guided fuzzing with atheris, FUZZ_SECONDS (default 60) per harness, one at a
# time; found inputs in .cache/fuzz/, any that breaks an invariant in .cache/fuzz/crashes/.
fuzz:
	$(PYTHON) -m fuzz run

# ruff: lint and the format check (settings in pyproject.toml; `ruff format .` fixes the latter);
# actionlint (with shellcheck on run: scripts) on .github/workflows (built by
# .ci/setup.d/45-image.sh);
# then pint's offline checks on the generated rule files (.pint.hcl; pint is built by
# .ci/setup.d/49-mixin-tools.sh, and its online checks run in tests/mixin/test_live.py);
# then the linters mixin users run, built by .ci/setup.d/49-mixin-linters.sh: `mixtool lint`
# on the mixin (alerts and dashboards) and Grafana's dashboard-linter on each generated
# dashboard, both with mixin/.lint, whose every exclusion says why (docs/mixin.md).
RULE_FILES = rules/prometheus_alerts.yaml rules/prometheus_rules.yaml rules/prometheus_selfprotection_alerts.yaml
DASHBOARD_FILES = $(sort $(wildcard dashboards/*.json))
lint:
	ruff check .
	ruff format --check .
	@actionlint=$$($(PYTHON) -m testbed.builds actionlint_binary) || { echo "lint: actionlint is missing (above)" >&2; exit 1; }; \
	command -v shellcheck >/dev/null || { echo "lint: no shellcheck (actionlint checks run: scripts with it); run .ci/setup.d/45-image.sh" >&2; exit 1; }; \
	echo "$$actionlint .github/workflows/*.yml"; \
	"$$actionlint" -no-color .github/workflows/*.yml
	@pint=$$($(PYTHON) -m testbed.builds pint_binary) || { echo "lint: pint is missing (above)" >&2; exit 1; }; \
	echo "$$pint --offline lint --min-severity=info --fail-on=info $(RULE_FILES)"; \
	"$$pint" --offline --no-color lint --min-severity=info --fail-on=info $(RULE_FILES)
	@mixtool=$$($(PYTHON) -m testbed.builds mixtool_binary) || { echo "lint: mixtool is missing (above)" >&2; exit 1; }; \
	echo "$$mixtool lint mixin/mixin.libsonnet"; \
	"$$mixtool" lint mixin/mixin.libsonnet
	@linter=$$($(PYTHON) -m testbed.builds dashboard_linter_binary) || { echo "lint: dashboard-linter is missing (above)" >&2; exit 1; }; \
	echo "$$linter lint --strict --config mixin/.lint DASHBOARD, for each of $(DASHBOARD_FILES)"; \
	for d in $(DASHBOARD_FILES); do \
		out=$$("$$linter" lint --strict --config mixin/.lint "$$d" 2>&1) || \
			{ echo "$$out"; echo "lint: dashboard-linter's findings in $$d above" >&2; exit 1; }; \
	done

# Regenerate committed files: the series budgets where jsonnet and YAML read them
# (mixin/budgets.libsonnet, deploy/'s sample limits), then rules YAML and dashboards JSON
# from the mixin's jsonnet, then the Helm chart (charts/kube-scale-exporter, and its
# values table in docs/deploy.md) from what kustomize renders of deploy/. The rest of
# deploy/ is written by hand.
generate:
	$(PYTHON) -m tools.budget_files
	$(PYTHON) -m tools.build_mixin
	$(PYTHON) -m tools.helm_chart

# Fail, naming the files, when a committed generated file differs from its source, or
# when a kustomization in deploy/ (or the base with one component) does not render.
check-generated: deploy-check
	$(PYTHON) -m tools.budget_files --check
	$(PYTHON) -m tools.build_mixin --check
	$(PYTHON) -m tools.helm_chart --check
	jsonnetfmt --test $(MIXIN_SOURCES)
	@test -x "$(HELM)" || { echo "check-generated: no $(HELM); run .ci/setup.d/48-helm.sh" >&2; exit 1; }
	$(HELM) lint --strict --quiet charts/kube-scale-exporter

# The Helm of .ci/go/helm/go.mod's pin, where .ci/setup.d/48-helm.sh builds it.
HELM ?= /var/cache/kube-scale-exporter/helm-$(shell sed -nE 's/^(require)?[[:space:]]*helm.sh\/helm\/v4 (v[0-9.]+).*/\2/p' .ci/go/helm/go.mod)/helm

# A kubectl whose kustomize knows Components: the one .ci/setup.d/40-kubernetes.sh builds, else
# the machine's own (tests/deploy looks in the same order).
KUSTOMIZE_KUBECTL ?= $(firstword $(shell $(PYTHON) -m testbed.builds kube_binary kubectl 2>/dev/null) $(shell command -v kubectl))

# kustomize renders the default install, the base, every overlay, and the base with each
# component alone (a kustomization of our own in a temporary directory: kustomize takes
# only relative paths). What they grant is tests/deploy's business; this is the quick part.
deploy-check:
	@test -n "$(KUSTOMIZE_KUBECTL)" || { echo "deploy-check: no kubectl; run .ci/setup.d/40-kubernetes.sh" >&2; exit 1; }
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	for k in deploy deploy/base deploy/overlays/*/; do \
		$(KUSTOMIZE_KUBECTL) kustomize $$k >/dev/null || { echo "deploy-check: $$k does not render" >&2; exit 1; }; \
	done; \
	for c in deploy/components/*/; do \
		printf 'resources: [%s]\ncomponents: [%s]\n' "$$(realpath --relative-to=$$tmp deploy/base)" \
			"$$(realpath --relative-to=$$tmp $$c)" >$$tmp/kustomization.yaml; \
		$(KUSTOMIZE_KUBECTL) kustomize $$tmp >/dev/null || { echo "deploy-check: base + $$c does not render" >&2; exit 1; }; \
	done; \
	echo "deploy-check: every kustomization in deploy/ renders"

mixin-fmt:
	jsonnetfmt -i $(MIXIN_SOURCES)

# Real etcd, exporters and Prometheus with the generated rules; Ctrl-C stops it.
demo:
	$(PYTHON) -m tools.demo

# The peers only benches run (kube-rbac-proxy, kube-state-metrics): built by .ci/bench.d, which
# .ci/run leaves out (no test needs them; they would add ~20 min to a cold CI run).
bench-setup:
	for s in .ci/bench.d/*.sh; do bash $$s || exit 1; done

bench: bench-setup
	$(PYTHON) -m bench

# End to end on a real single-node Kubernetes 1.37 cluster on this host (root): builds the
# image from the working tree, applies deploy/, runs Prometheus with its Kubernetes service
# discovery and produces each failure the alerts are for; takes the cluster down and checks
# the host is as before. Parts are built once and cached (.ci/setup.d/26-etcd.sh,
# 40-kubernetes.sh, 46-e2e.sh); see docs/deploy.md "Tested end to end".
E2E_SETUP = .ci/setup.d/15-prometheus.sh .ci/setup.d/26-etcd.sh .ci/setup.d/40-kubernetes.sh .ci/setup.d/44-prometheus-operator.sh .ci/setup.d/45-deploy.sh .ci/setup.d/45-image.sh .ci/setup.d/46-e2e.sh .ci/setup.d/48-helm.sh .ci/setup.d/50-containerd.sh
e2e:
	for s in $(E2E_SETUP); do bash $$s || exit 1; done
	KSE_E2E=1 $(PYTHON) -m pytest tests/e2e -v -p no:cacheprovider

# The cluster alone, to look around (`make e2e-up`, then KUBECONFIG=/var/lib/kse-e2e/admin.kubeconfig).
e2e-up:
	for s in $(E2E_SETUP); do bash $$s || exit 1; done
	$(PYTHON) -m testbed.cluster up

# Stops it and restores the host; fails, listing them, if any change remains.
e2e-down:
	$(PYTHON) -m testbed.cluster down

# The imagepull suite again with containerd 2.4 as the containerd its tests start (`make test`
# runs 2.3, the LTS; both built by .ci/setup.d/50-containerd.sh). Its tests parametrized by
# containerd line (1.7, 2.3, 2.4) ran in `make test` and are left out here.
test-containerd-2.4:
	dir=$$($(PYTHON) -m testbed.builds containerd_dir 2.4) || exit 1; \
	KSE_CONTAINERD_DIR=$$dir $(PYTHON) -m pytest tests/imagepull -v -p no:cacheprovider
