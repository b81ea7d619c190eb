# ragtime: `make run` serves with the embedded defaults; `make test` runs every test.
GO            ?= go
BIN           := bin/ragtime
DATABASE_URL  ?= postgres://postgres@127.0.0.1:5432/ragtime?sslmode=disable
# Tests make one throw-away database per test on this server.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/ragtime_test?sslmode=disable
TEST_REDIS_URL ?= redis://127.0.0.1:6379/0
ADDR          ?= 127.0.0.1:8080
# grpcnotrace leaves out golang.org/x/net/trace, which gRPC (Qdrant, OTLP over
# gRPC) links only for its /debug/requests pages: its templates make the linker
# keep every exported method of every type held in an interface, 15 MB of the
# binary (54 MB without the tag, 39 MB with it).
GOTAGS        ?= grpcnotrace

.PHONY: build install run test fuzz bench bench-ann bench-pgdocs bench-retrieval bench-peer bench-streams bench-capacity vet fmt clean llmsim bench-outage grafana

build:
	@echo "make: building $(BIN) (the first build downloads modules and compiles everything: a few minutes on 2 cores)"
	$(GO) build -tags '$(GOTAGS)' -o $(BIN) ./cmd/ragtime

# Puts ragtime in $(go env GOPATH)/bin (on PATH in most Go setups), so that
# the docs' `ragtime …` commands run as written.
install:
	$(GO) install -tags '$(GOTAGS)' ./cmd/ragtime

# Builds, creates the database if missing and migrates it, ingests docs/ and
# serves on $(ADDR) with the embedded defaults (no network, no keys).
run: build
	@echo "make: creating the database if it is missing and migrating it (DATABASE_URL, not echoed: it may hold a password)"
	@./$(BIN) migrate --database-url '$(DATABASE_URL)'
	@echo "make: ingesting docs/ into ./data"
	@./$(BIN) ingest --data-dir ./data docs
	@echo "make: serving on http://$(ADDR)/ (Ctrl-C stops)"
	@./$(BIN) serve --database-url '$(DATABASE_URL)' --data-dir ./data --addr '$(ADDR)'

# Every test, against a real PostgreSQL (started here when installed but down),
# a headless Chromium for the pages (installed here when missing), the npm
# OpenAI clients the front door is tested with (npm ci, once per lock file)
# and a Jaeger v2 for the traces (built once from tools/jaeger into ~/.cache).
test:
	@echo "make: checking what the tests need (PostgreSQL, Chromium, the npm clients, Jaeger); a fresh machine sets them up once, saying each step"
	@scripts/ensure-postgres.sh '$(TEST_DATABASE_URL)'
	@scripts/ensure-redis.sh '$(TEST_REDIS_URL)'
	@scripts/ensure-chromium.sh
	@scripts/ensure-npm-clients.sh
	@scripts/ensure-jaeger.sh >/dev/null
	@echo "make: compiling and running every test (the first compile of the packages takes minutes on 2 cores)"
	RAGTIME_JAEGER="$$(scripts/ensure-jaeger.sh)" DATABASE_URL='$(TEST_DATABASE_URL)' REDIS_URL='$(TEST_REDIS_URL)' $(GO) test -count=1 -timeout 8m ./...
	cd deploy/grafana/gen && $(GO) test -count=1 ./... && $(GO) vet ./...
	$(GO) vet ./...
	# The Helm chart, rendered and decoded with helm's and k8s.io's Go packages
	# in a module of its own, so they never enter ragtime's build.
	cd deploy/helm/chart_test && $(GO) test -count=1 -timeout 5m ./... && $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt would change:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

# Every native fuzz target, FUZZ_TOTAL (9m) shared among them after the
# instrumented builds, or FUZZTIME each (e.g. FUZZTIME=2m make fuzz); it ends
# with each target's executions. `make test` replays their seeds and the
# inputs they found (testdata/fuzz).
FUZZ_TOTAL ?= 9m
FUZZTIME ?=
fuzz:
	FUZZ_TOTAL=$(FUZZ_TOTAL) FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

# Benchmarks; figures go in issue notes, never into assertions.
bench:
	@scripts/ensure-postgres.sh '$(TEST_DATABASE_URL)'
	DATABASE_URL='$(TEST_DATABASE_URL)' $(GO) test -run '^$$' -bench . -benchmem ./...

# A PostgreSQL outage under load: a real serve at RAGTIME_OUTAGE_RATE asks/s (100)
# while a proxy cuts PostgreSQL for OUTAGE (30s), then 10 s more while the spool
# drains; reports asks finished vs rows stored (docs/recording.md).
OUTAGE ?= 30s
bench-outage:
	@scripts/ensure-postgres.sh '$(TEST_DATABASE_URL)'
	RAGTIME_OUTAGE='$(OUTAGE)' DATABASE_URL='$(TEST_DATABASE_URL)' $(GO) test -run '^$$' -bench BenchmarkOutage -benchtime 1x -timeout 90m ./cmd/ragtime

# Two replicas (a writer and a read-only follower) recording into one PostgreSQL:
# asks/s, CPU ms per ask, rows and bytes per query for docs/scaling.md.
bench-capacity:
	scripts/bench-capacity.sh

# The embedded index's HNSW search at 100k clustered 384-d vectors (the index is
# built once and cached under $TMPDIR); add ANNSearch/1M for the million.
bench-ann:
	$(GO) test -run '^$$' -bench 'ANNSearch/100k' -benchtime 2000x ./retrieval

# Ingests PostgreSQL's HTML documentation (installs postgresql-doc-15 when missing).
bench-pgdocs:
	scripts/bench-ingest-pgdocs.sh

# Retrieval quality (hit@k, MRR@10, nDCG@10) and latency of vector, lexical
# and hybrid retrieval, without and with the reranker, on 149 labelled
# questions over PostgreSQL's manual (bench/retrieval/README.md).
bench-retrieval:
	DATABASE_URL='$(DATABASE_URL)' scripts/bench-retrieval.sh

# ragtime against a LangChain.js peer and against bench/relay (the floor: the
# same two upstream calls, one read and one write per token, nothing else)
# over the same llmsim (installs the peer's npm packages; about 6 minutes).
# See docs/performance.md.
bench-peer:
	scripts/bench-peer.sh

# 2,000 SSE streams held open against ragtime (llmsim ITL 200 ms, 64 tokens:
# ~13 s per answer, each stream asking again when its answer ends) while 100
# short probe asks, one at a time and 150 ms apart (15 s: every phase of the
# held streams' waves of re-asks), measure the TTFT a newcomer sees against
# the idle server's; prints errors, RSS per open stream, the CPU of serve,
# llmsim and the load client, serve's context switches, how long serve's
# goroutines waited to run, how the probes in waves fared and where the
# probes' TTFT went, stage by stage (docs/performance.md, "2,000 streams
# held open"). About 3 minutes.
# PPROF_ADDR=127.0.0.1:6060 HOLD_PROFILE=cpu.pprof also takes a 10 s CPU
# profile of the held target from the first held probe.
bench-streams:
	HOLD=2000 ITL_MS=200 TARGETS=llmsim,ragtime scripts/bench-peer.sh

# The inference simulator on :8081 (a simulator: no model runs), built on its
# own from cmd/llmsim (the same command as `ragtime llmsim`).
llmsim:
	$(GO) build -o bin/llmsim ./cmd/llmsim
	./bin/llmsim --addr :8081

# Regenerates deploy/grafana/dashboards/ragtime.json from deploy/grafana/gen
# (the Grafana Foundation SDK, in a module of its own); `make test` checks
# that the committed JSON is its output.
grafana:
	cd deploy/grafana/gen && $(GO) run .

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
