# storectl: `make demo` runs the main job on a sample store under a live writer; `make test` runs the tests.
# Both install the system libraries first when they are missing (Debian/Ubuntu, apt-get).

SWIFT    ?= swift
PACKAGES := libsqlite3-dev zlib1g-dev libarchive-dev libzstd-dev
BIN      := .build/debug
DEMO     := demo

.PHONY: deps build test demo bench clean

deps:
	@missing=""; for p in $(PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing >/dev/null; \
	fi

build: deps
	$(SWIFT) build

test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test

# A Core Data-shaped WAL store (200,000 items, a fifth soft-deleted, external data), an app writing
# to it every 2 ms, and storectl preflight + backup running against it while it writes.
demo: build
	@rm -rf $(DEMO) && mkdir -p $(DEMO)/backups
	@echo "== sample store"; $(BIN)/storectl-lab make-store $(DEMO)/Tasks.sqlite --items 200000 --external-files 3 >/dev/null
	@ls -l $(DEMO)/Tasks.sqlite
	@$(BIN)/storectl-lab writer $(DEMO)/Tasks.sqlite --interval-ms 2 --ready-file $(DEMO)/writer.ready > $(DEMO)/writer.json & \
	  echo $$! > $(DEMO)/writer.pid; \
	  while [ ! -e $(DEMO)/writer.ready ]; do sleep 0.05; done; \
	  echo "== a second process commits a transaction every 2 ms (pid $$(cat $(DEMO)/writer.pid))"; \
	  echo; echo "== storectl preflight $(DEMO)/Tasks.sqlite --for backup --dest $(DEMO)/backups"; \
	  $(BIN)/storectl preflight $(DEMO)/Tasks.sqlite --for backup --dest $(DEMO)/backups; \
	  echo; echo "== storectl backup $(DEMO)/Tasks.sqlite --output $(DEMO)/backups"; \
	  $(BIN)/storectl backup $(DEMO)/Tasks.sqlite --output $(DEMO)/backups; status=$$?; \
	  sleep 0.5; kill -TERM $$(cat $(DEMO)/writer.pid); wait; \
	  echo; echo "== the writer during the demo"; cat $(DEMO)/writer.json; \
	  echo; echo "== the backup folder"; ls -la $(DEMO)/backups; \
	  echo; echo "== the manifest (first lines)"; head -n 30 $(DEMO)/backups/*.manifest.json; \
	  echo; echo "== the copy checks clean on its own"; \
	  $(BIN)/storectl preflight $(DEMO)/backups/Tasks-*.sqlite --dest $(DEMO) | tail -n 12; \
	  exit $$status

bench:
	bash bench/backup.sh
	bash bench/snapshot.sh
	bash bench/purge.sh
	bash bench/migrate.sh

clean:
	rm -rf .build $(DEMO) bench/out
