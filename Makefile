# Every target is what CI or a newcomer runs; see README.md.
PYTHON ?= python3
MIXIN_SOURCES = $(shell find mixin -name '*.jsonnet' -o -name '*.libsonnet')

.PHONY: run test install lint generate check-generated mixin-fmt bench demo

include deploy/Makefile.inc

install:
	$(PYTHON) -m pip install -q -e '.[test]'

run:
	$(PYTHON) -m kube_scale_exporter

test:
	$(PYTHON) -m pytest

# Regenerate committed files (rules YAML, dashboards JSON) from the mixin's jsonnet.
generate: deploy-generate
	$(PYTHON) -m tools.build_mixin

# Fail, naming the files, when a committed generated file differs from its source.
check-generated: deploy-check
	$(PYTHON) -m tools.build_mixin --check
	jsonnetfmt --test $(MIXIN_SOURCES)

mixin-fmt:
	jsonnetfmt -i $(MIXIN_SOURCES)

# Real etcd, exporters and Prometheus with the generated rules; Ctrl-C stops it.
demo:
	$(PYTHON) -m tools.demo

bench:
	$(PYTHON) -m bench
