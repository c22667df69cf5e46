# Every target is what CI or a newcomer runs; see README.md.
PYTHON ?= python3

.PHONY: run test install generate check-generated bench demo

include mixin/Makefile.inc
include deploy/Makefile.inc

install:
	$(PYTHON) -m pip install -q -e '.[test]'

run:
	$(PYTHON) -m exporter

test:
	$(PYTHON) -m pytest

# Regenerate committed files (rules YAML, dashboards JSON, manifests) from their sources.
generate: mixin-generate deploy-generate

# Fail when a committed generated file differs from what its source gives.
check-generated: mixin-check deploy-check

# Real Prometheus with the generated rules, scraping the exporter and a small-quota etcd.
demo: mixin-demo

bench:
	$(PYTHON) -m bench
