# kgroups: two commands do everything on a fresh machine.
#   make demo   installs, starts a local Kubernetes control plane, a coordinator and the operator,
#               runs three Spark apps as one ConsumerGroup through a kill and a freeze, and
#               checks their output against a single-process count
#   make test   installs, lints (ruff, mypy --strict, import-linter) and runs every test tier
#   make check  the developer's loop (a few minutes): the lints, then the unit and simulation tiers
# Python packages come from PyPI into .venv (pip's cache in ~/.cache/pip is reused);
# Kafka jars (benchmark peer, Java interop member) come from Maven Central into
# ~/.cache/kgroups (see tools/kafka/README.md).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PYTEST_FLAGS ?= -q
# The simulations replay a seed only with the same string hashing (set iteration order).
export PYTHONHASHSEED ?= 0

.PHONY: check fuzz sim-long install lint test test-unit test-sim test-integration test-e2e test-matrix test-cluster cluster-bits peers postgresql prometheus dashboard-picture e2e-kind crds controlplane spark-jars demo demo-notice bench bench-heartbeats bench-rebalance bench-assignors bench-spark bench-spark-delta bench-failover bench-commits bench-scale kafka clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

lint: install
	$(BIN)/ruff format --check src tests bench tools examples
	$(BIN)/ruff check src tests bench tools examples
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# Most tests wait on timers and processes, so more workers than cores: four on this
# 2-core machine (TEST_WORKERS=0 runs everything in one process). The kind cluster's tests
# share a worker, in order; tests marked `alone` (they time latency beside an attack; the
# demo and the Spark tests run three JVMs at a time) run afterwards by themselves. Each run ends with its slowest tests, its time per tier and
# the tests that ended last (tests/tiers.py). tools/run-tests.sh runs both phases and, on
# Ctrl-C and at the end, stops every process the run started (tests/reaper.py).
# The per-tier targets below run the same way, on their tier alone.
TEST_WORKERS ?= 4
RUN_TESTS = @PYTEST=$(BIN)/pytest TEST_WORKERS=$(TEST_WORKERS) PYTEST_FLAGS="$(PYTEST_FLAGS)" \
	bash tools/run-tests.sh
test: lint kafka spark-jars controlplane peers cluster-bits prometheus postgresql
	$(RUN_TESTS) tests

# Both tiers are CPU-bound and independent test by test: one worker per core.
check: lint
	$(BIN)/pytest $(PYTEST_FLAGS) -n auto tests/unit tests/sim

# The simulations at length (make check runs 200 replica seeds, make test 1,000; both 500
# member seeds): 20,000 seeds of the replicas, 5,000 of the members, 2,000 of the group
# core, on every core.
sim-long: install
	KGROUPS_REPLICA_SIM_SEEDS=20000 KGROUPS_MEMBER_SIM_SEEDS=5000 KGROUPS_SIM_SEEDS=2000 \
		$(BIN)/pytest $(PYTEST_FLAGS) -n auto tests/sim

test-unit: install
	$(RUN_TESTS) tests/unit

test-sim: install
	$(RUN_TESTS) tests/sim

test-integration: install kafka spark-jars postgresql
	$(RUN_TESTS) tests/integration

test-e2e: install controlplane
	$(RUN_TESTS) tests/e2e

# The wire fuzzer at length (make test runs it for 25 s): mutated requests of every API and
# version against a real coordinator under an address-space limit. KGROUPS_FUZZ_SECONDS and
# KGROUPS_FUZZ_SEED choose the budget and the seed (a failure prints the seed and frames).
FUZZ_SECONDS ?= 600
fuzz: install
	KGROUPS_FUZZ_SECONDS=$(FUZZ_SECONDS) KGROUPS_FUZZ_SEED=$${KGROUPS_FUZZ_SEED:-$$(date +%s)} \
		$(BIN)/pytest $(PYTEST_FLAGS) tests/integration/test_wire_fuzz.py

# Containers on a real runtime and a kind cluster with real pods (issue 13):
# e2e/cluster/runtime.sh installs Debian's docker.io and starts it without systemd,
# images.sh builds every image here, node.sh assembles the kind node image, kind.sh runs
# the cluster; tests/cluster installs the chart and runs the examples' members as pods.
# Where no runtime can start, every test there fails with the reason (never a skip).
test-cluster: install controlplane spark-jars cluster-bits
	$(RUN_TESTS) tests/cluster

e2e-kind: test-cluster

# kind, kubelet, kubeadm, kube-proxy, kube-scheduler, etcd, CoreDNS, pause and the
# local-path provisioner for the kind node image, built from the Go module proxy into
# ~/.cache/kgroups (first run ~16 min on 2 cores at nice 19, then instant).
cluster-bits: controlplane
	bash e2e/cluster/build.sh >/dev/null

# The client matrix (issue 12): every Kafka client and tool against the coordinator.
test-matrix: install kafka peers
	$(RUN_TESTS) tests/matrix

# The matrix's peers, each from its own registry, cached outside the repository:
# franz-go and sarama built from the Go module proxy, kcat from Debian's packages,
# kafka-consumer-groups and kafka-topics (kafka-tools 4.3.1) from Maven Central.
peers:
	bash tools/peers/go/build.sh >/dev/null
	bash tools/peers/kcat.sh >/dev/null
	bash tools/kafka-tools/fetch.sh >/dev/null

# PostgreSQL's server programs (Debian's package `postgresql`, its default cluster not
# created): the tests and benchmarks start their own servers in temporary directories.
postgresql:
	bash tools/postgresql/install.sh >/dev/null

# Prometheus and promtool (Debian's package, downloaded and unpacked, never installed) into
# ~/.cache/kgroups (tools/prometheus/fetch.sh): the dashboards' PromQL is checked against a
# real Prometheus and promtool unit-tests the alerting rules.
prometheus:
	bash tools/prometheus/fetch.sh >/dev/null

# The README's picture (docs/dashboard-group.png): a rebalance storm and its recovery run
# for real (coordinator, sidecars, Prometheus) and drawn from the group dashboard by
# tools/render_dashboard.py, without Grafana (about 4 minutes).
dashboard-picture: install prometheus
	$(BIN)/python -m tests.observability.picture

# Spark's Kafka source (spark-sql-kafka-0-10 for the pinned pyspark) and Delta Lake's jars from Maven Central
# into ~/.cache/kgroups (tools/spark/fetch.sh); the Spark members' tests use them.
spark-jars:
	bash tools/spark/fetch.sh >/dev/null

# The CRDs are generated from src/kgroups/api/models.py into crds/ and the chart;
# tests/unit/test_crds.py
# fails when the checked-in files drift from the models. The Grafana dashboards and the
# alerting rules (dashboards/) are copied into the chart the same way.
crds: install
	$(BIN)/python -m kgroups.operator.crdgen crds charts/kgroups/crds
	rm -f charts/kgroups/dashboards/*.json charts/kgroups/dashboards/*.yaml
	cp dashboards/*.json dashboards/alerts.yaml charts/kgroups/dashboards/

# kube-apiserver, kube-controller-manager, kubectl, etcd and helm, built from the Go
# module proxy into ~/.cache/kgroups (first run ~10-15 min on 2 cores, then instant).
controlplane:
	bash e2e/controlplane/build.sh >/dev/null

# Kafka 4.4.0 jars and the compiled Java member, cached outside the repository.
kafka:
	bash tools/kafka/fetch.sh

# The first run installs into .venv (pip is quiet, so say so) and builds the control plane:
# examples/demo.py runs e2e/controlplane/build.sh itself, showing its progress and how long
# it has been building; later runs start in seconds and take about two minutes.
demo: demo-notice install
	$(BIN)/python examples/demo.py

demo-notice:
	@test -f $(STAMP) || echo "== make demo, first run: installing kgroups, pyspark and the dev tools into $(VENV) (a few minutes)"

bench: bench-heartbeats bench-rebalance bench-assignors bench-spark bench-spark-delta bench-failover bench-commits bench-scale bench-consumer-protocol

bench-heartbeats: install kafka
	$(BIN)/python bench/heartbeats.py

bench-rebalance: install kafka
	$(BIN)/python bench/rebalance.py

# Coordinator replicas on PostgreSQL losing one (SIGTERM, SIGKILL) beside a 3-broker Kafka
# cluster losing its coordinator's broker; a shard taken over with 100,000 offsets.
bench-failover: install kafka postgresql
	$(BIN)/python bench/failover.py

# Offset commits/s and their latency: SQLite, PostgreSQL with 1 and 3 replicas, Kafka.
bench-commits: install kafka postgresql
	$(BIN)/python bench/commits.py

# Groups per replica: 1 and 3 replicas (1 and 3 Kafka brokers), the same load per node.
bench-scale: install kafka postgresql
	$(BIN)/python bench/scale.py

# Kafka 4's consumer protocol (KIP-848): partitions moving after a leave and a join, and
# heartbeats/s, in groups of 100 and 1,000 members, beside a Kafka 4.4 broker.
bench-consumer-protocol: install kafka
	$(BIN)/python bench/consumer_protocol.py

bench-assignors: install
	$(BIN)/python bench/assignors.py

# Spark applications as members (bench/spark.py): throughput of 1-3 applications beside
# plain Spark loops without kgroups (file log and Spark's Kafka source), and takeover.
bench-spark: install kafka spark-jars
	$(BIN)/python bench/spark.py

# Spark applications writing one Delta table (bench/spark_delta.py): 1-3 applications
# beside a Structured Streaming query with foreachBatch, and takeover.
bench-spark-delta: install kafka spark-jars
	$(BIN)/python bench/spark_delta.py

clean:
	rm -rf $(VENV) .kgroups .mypy_cache .ruff_cache
