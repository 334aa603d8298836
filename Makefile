# Atoll — common tasks. `make install` then `atoll simulate`; `make test` runs everything CI runs.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install install-test test test-unit lint bench envtest fuzz chaos

# What the atoll commands need at run time.
install:
	$(PIP) install -q -e .

# Plus what the tests and lint need (pytest, hypothesis, import-linter, mypy, ruff).
install-test:
	$(PIP) install -q -e ".[test]"

# A real control plane: KUBEBUILDER_ASSETS for the apiserver, and Atoll's own build (kube-apiserver,
# kube-scheduler, kube-controller-manager, etcd, Kueue, KWOK from their Go modules, once, cached);
# Debian's 1.20 source package only where no Go 1.26 exists.
envtest: install
	$(PYTHON) -m tests.envtest ensure

# Atoll's OCI image without a Docker engine (helm/image/build.sh): a Debian base layer by debootstrap,
# Atoll's wheel and numba's compiled kernels in a second layer, assembled by umoci (built from its
# Go module); kept in Atoll's cache and reused while the tree is unchanged.
image:
	helm/image/build.sh

# The image run with runc: its entrypoint, and the chart's pod against the test apiserver. Not part
# of `make test`: a cold build takes longer than the rest of the suite allows (docs/install.md).
image-test: install-test envtest
	ATOLL_IMAGE_TEST=1 $(PYTHON) -m pytest -q -p no:cacheprovider tests/image

# Pin the image's Python dependencies to the versions installed here (after the suite passed).
image-lock:
	$(PYTHON) helm/image/lock.py

.PHONY: image image-test image-lock

# Import contracts, static types (mypy strict, [tool.mypy]; the chaos harness too, not strict) and the linter ([tool.ruff]).
lint: install-test
	lint-imports
	$(PYTHON) -m mypy admission topology policies tests/chaos
	$(PYTHON) -m ruff check admission topology policies tests

# The whole suite. pytest's exit code 5 (no tests collected) is a failure here.
test: install-test envtest lint
	$(PYTHON) -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

test-unit: install-test
	$(PYTHON) -m pytest -q -m "not apiserver"

# Hostile input at volume: 10,000 cases per fuzz test (the default run draws a few hundred).
fuzz: install-test
	ATOLL_FUZZ_EXAMPLES=10000 $(PYTHON) -m pytest -q -p no:cacheprovider tests/fuzz

# Speed and quality, measured (never asserted in tests): finder, controller on a real apiserver,
# and placement quality on the ITP trace shipped in the package (admission/simulator/traces).
bench: install envtest
	atoll bench finder --nodes 1000
	atoll bench finder --nodes 10000
	atoll bench finder --nodes 50000
	atoll bench controller --workloads 1000
	atoll bench controller --workloads 1000 --mode backlog
	atoll bench webhook --pods 500
	atoll bench webhook --pods 500 --no-ranked
	atoll bench failover --goal-seconds 2
	atoll bench kueue --nodes 640 --workloads 2000
	atoll bench simulate
	atoll bench collectives
	atoll bench decide
	atoll bench quality
	atoll bench serving

# Placements that hold under faults: 200 seeded runs, 20 % of API requests faulted, the controller
# killed at random points, two replicas electing a leader (the leader is the one killed), an
# adversarial scheduler, running pods that fail and are replaced; prints one line and fails on
# any violation.
chaos: install-test envtest
	$(PYTHON) -m tests.chaos --runs 200 --fault-rate 0.2 --seed 1 --replicas
