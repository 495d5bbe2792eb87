# One Makefile; CI (.ci/run) calls these targets verbatim.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
KUBEPROF := $(VENV)/bin/kubeprof
DEMO_STORE := sqlite:///$(CURDIR)/kubeprof-out/demo.db
# make test: tests/integration (eBPF sampling: sample counts need the CPUs) runs alone
# first; then the rest on xdist workers (5 on 2 cores: the control-plane tests mostly wait;
# 373 s against 411 s with 4, BENCHMARKS "The test suite"),
# each group of tests (tests/conftest.py: `serial` = machine-wide state, `cluster:<module>`,
# handed out first) in order on one; TEST_WORKERS=0: one process.
TEST_WORKERS ?= 5

.PHONY: setup demo test lint unit chart integration e2e helm-build cluster-build cluster-up cluster-down images bench clean

setup:  ## system packages, eBPF prerequisites, .venv with kubeprof (idempotent)
	@scripts/setup.sh

demo: setup  ## record the bundled example workload and write its reports to kubeprof-out/
	@mkdir -p kubeprof-out
	$(KUBEPROF) record --store $(DEMO_STORE) --output demo-$$(date +%s) -- $(PY) examples/demo_workload.py 5
	$(KUBEPROF) report --store $(DEMO_STORE) --format text | tee kubeprof-out/demo.txt | head -40
	$(KUBEPROF) report --store $(DEMO_STORE) --format html --out kubeprof-out/demo.html
	@echo "open kubeprof-out/demo.html (self-contained flame graph); text in kubeprof-out/demo.txt"

lint: setup  ## ruff check (A005 strict) and format --check, mypy (--strict for analysis, protocol), import-linter contracts (forbidden and layers)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict src/kubeprof/analysis src/kubeprof/protocol
	$(VENV)/bin/lint-imports

helm-build:  ## build (or reuse) the pinned helm from the Go module proxy (chart tests)
	tests/e2e/cluster/build_helm.sh

cluster-build: setup helm-build  ## build (or reuse) kube-apiserver, controller-manager, scheduler, etcd, kwok, helm
	tests/e2e/cluster/build.sh

images:  ## operator and agent images with podman from a Debian base made by mmdebstrap (cached)
	scripts/build_images.sh

cluster-up: cluster-build  ## start control plane + kwok nodes + PostgreSQL; prints export lines
	$(PY) -m tests.e2e.cluster up

cluster-down:
	@if [ -x $(PY) ]; then $(PY) -m tests.e2e.cluster down; fi

unit: setup  ## the unit tier: pure and fast, no helm, no cluster, no root
	$(VENV)/bin/pytest -q tests/unit

chart: setup helm-build  ## the chart tier: helm lint/template and promtool over charts/kubeprof
	$(VENV)/bin/pytest -q tests/chart

test: setup lint cluster-build images  ## everything: lint, unit, eBPF integration, e2e on a real control plane
	@rc=0; $(VENV)/bin/pytest -q -rs tests/integration || rc=$$?; \
	$(VENV)/bin/pytest -q -rs -n $(TEST_WORKERS) --dist loadgroup --ignore=tests/integration tests \
	  || rc=$$?; exit $$rc

bench: setup
	$(PY) bench/cpu_overhead.py
	$(PY) bench/flamegraph_scale.py

clean:
	rm -rf kubeprof-out
