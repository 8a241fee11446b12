# sfma - one plain GNU Makefile.
#
#   make                 build every program into bin/
#   make check           run the test suite (bats), after the fuzz regressions
#   make check-sanitize  the same suite against an ASan+UBSan build
#   make check-valgrind  every stage under valgrind: no leaks, no errors
#   make fuzz            libFuzzer harnesses, FUZZ_SECONDS each (fuzz-short: 60 s)
#   make bench           benchmarks (verify vs sha256 floor, sandbox vs unshare/bwrap, a batch with make -j2 and as a Slurm array)
#   make lint-man        mandoc -Tlint over every man page
#   make deps            install the missing Debian packages building and running need (as root)
#   make test-deps       make deps, the Debian packages the tests need, and the tests' npm
#                        packages (tests/package.json, pinned by tests/package-lock.json)
#   make install PREFIX=/usr/local DESTDIR=   (make uninstall: the same files removed)

VERSION  := 0.3.0
CC       ?= cc
PREFIX   ?= /usr/local
DESTDIR  ?=
BUILD    ?= build
BINDIR   ?= bin
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
WARN     := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
            -Wmissing-prototypes -Wformat=2 -Wno-format-nonliteral
CPPFLAGS += -D_GNU_SOURCE -Ilib -DSFMA_VERSION='"$(VERSION)"'
LDFLAGS  ?=
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

PROGRAMS := sfma sfma-plan sfma-model sfma-exec sfma-chain sfma-seal sfma-mem sfma-verify sfma-replay sfma-chat sfma-log sfma-report sfma-summary sfma-check sfma-export sfma-endpoints sfma-prove sfma-attest sfma-tap sfma-init
# Programs exist as src/NAME.c or src/NAME/*.c; only those present are built.
PRESENT  := $(foreach p,$(PROGRAMS) sfma-telegram,$(if $(wildcard src/$(p).c src/$(p)/*.c),$(p)))
BINS     := $(addprefix $(BINDIR)/,$(PRESENT))

# The test suite's npm packages, installed (test-deps, below).
TEST_NODE := tests/node_modules/.package-lock.json

LIB_SRC  := $(wildcard lib/*.c)
LIB_OBJ  := $(patsubst lib/%.c,$(BUILD)/lib/%.o,$(LIB_SRC))
LIBA     := $(BUILD)/libsfma.a

BASE_LIBS := -ljansson -lcrypto -lpthread -lm -lseccomp
# sfma-model is not linked with libcurl: it dlopen()s it when a request
# first needs HTTP (src/sfma-model/curl-load.c; dlopen is in glibc's libc
# since 2.34), by the SONAME the linker records for -lcurl, read here from
# the development library. Empty when it cannot be read: curl-load.c then
# names libcurl.so.4.
CURL_SONAME := $(shell readelf -d "$$($(CC) -print-file-name=libcurl.so)" 2>/dev/null | \
                 sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
CPPFLAGS += $(if $(CURL_SONAME),-DSFMA_CURL_SONAME='"$(CURL_SONAME)"')
LIBS_sfma-telegram := -lcurl
LIBS_sfma-export   := -lcurl
LIBS_sfma-exec     := -lseccomp

# What building and running need (jq: the examples' scripts)...
DEB_PACKAGES := build-essential libjansson-dev libssl-dev openssl \
                libcurl4-openssl-dev libseccomp-dev git jq
# ...and what only the tests, benchmarks and fuzzers need: clang and its
# sanitizer runtime (check-sanitize, fuzz), the bats suite and the tools
# it drives, node for the canonical JSON cross-check and the JSON Schema
# validator (npm, when node came without it), chromium for the report's
# rendering, Slurm for the batch example, bubblewrap for the sandbox
# benchmark, Go and its x/mod module for the transparency-log formats'
# reference verifier (tests/tlog.bats).
TEST_DEB_PACKAGES := clang libclang-rt-14-dev bats mandoc bubblewrap util-linux valgrind \
                     python3 python3-yaml procps nodejs chromium slurmctld slurmd slurm-client munge \
                     parallel strace golang-go golang-golang-x-mod-dev
SCHEMA := schema/sfma-manifest.schema.json

.DELETE_ON_ERROR:
.PHONY: all check check-sanitize check-valgrind bench lint-man deps test-deps install uninstall clean

all: $(BINS)

# One object per source file; -MMD records the headers each includes
# (the .d files read at the end), so a change rebuilds what uses it.
$(BUILD)/lib/%.o: lib/%.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(WARN) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/src/%.o: src/%.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(WARN) $(CFLAGS) -MMD -MP -c -o $@ $<

$(LIBA): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

prog_objs = $(patsubst src/%.c,$(BUILD)/src/%.o,$(wildcard src/$(1).c src/$(1)/*.c))

.SECONDEXPANSION:
# --as-needed: a program records only the libraries it calls, so one that
# never hashes (sfma, sfma-mem, ...) does not load libcrypto, whose
# loading and linking is about 0.8 ms of every start (tests/bench/run-cost.sh).
$(BINDIR)/%: $$(call prog_objs,$$*) $(LIBA)
	@mkdir -p $(BINDIR)
	$(CC) $(CFLAGS) $(LDFLAGS) -Wl,--as-needed -o $@ $(call prog_objs,$*) $(LIBA) $(BASE_LIBS) $(LIBS_$*)

# Every input that ever found a bug (tests/fuzz/regressions/) runs first.
# The suite's directories are kept until every honest record it made has
# replayed (tests/replay-sweep.sh).
check: all $(TEST_NODE)
	sh tests/lint.sh
	$(MAKE) --no-print-directory fuzz-regress
	SFMA_BINDIR=$(abspath $(BINDIR)) sh tests/suite.sh tests

# The whole suite against an ASan+UBSan build kept apart from bin/.
check-sanitize: $(TEST_NODE)
	sh tests/lint.sh
	$(MAKE) BUILD=$(BUILD)/san BINDIR=$(BUILD)/san/bin CC=clang \
	        CFLAGS="-O1 -g $(SAN_FLAGS)" LDFLAGS="$(SAN_FLAGS)" all
	SFMA_BINDIR=$(abspath $(BUILD)/san/bin) SFMA_SANITIZED=1 \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=98 \
	        sh tests/suite.sh tests

check-valgrind: all
	SFMA_BINDIR=$(abspath $(BINDIR)) sh tests/valgrind.sh

# libFuzzer harnesses (tests/fuzz/README): built with clang into
# $(FUZZ_DIR), run over a scratch copy of their seed corpus.
.PHONY: fuzz fuzz-short fuzz-regress fuzz-build
FUZZ_CC      ?= clang
FUZZ_DIR     ?= $(BUILD)/fuzz
FUZZ_SECONDS ?= 300
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := -O1 -g $(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_NAMES   := canon line_reader manifest chain record reply providers hardtier gitconfig gitref memory journal runview otlp proof sha confine
FUZZ_BINS    := $(addprefix $(FUZZ_DIR)/,$(FUZZ_NAMES))
FUZZ_LIBA    := $(FUZZ_DIR)/libsfma.a
FUZZ_LIB_OBJ := $(patsubst lib/%.c,$(FUZZ_DIR)/obj/lib/%.o,$(LIB_SRC))
# A harness may link one program's own files; their main() is renamed.
FUZZ_SRC_memory    := src/sfma-plan/memory.c
FUZZ_SRC_providers := $(wildcard src/sfma-model/*.c)
fuzz_objs = $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_SRC_$(1)))
# line_reader feeds lr_next a descriptor of its own: every read() of the
# harness goes to its __wrap_read (ld(1) --wrap), lib/ndjson.o unchanged.
FUZZ_LIBS_line_reader := -Wl,--wrap=read

$(FUZZ_DIR)/obj/%.o: %.c $(wildcard lib/*.h src/*/*.h) Makefile
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(WARN) -Wno-missing-prototypes $(FUZZ_CFLAGS) -Dmain=program_main -c -o $@ $<

.PRECIOUS: $(FUZZ_DIR)/obj/%.o

$(FUZZ_LIBA): $(FUZZ_LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(FUZZ_DIR)/%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(FUZZ_LIBA) $$(call fuzz_objs,$$*) \
               $(wildcard lib/*.c lib/*.h src/*/*.c src/*/*.h)
	$(FUZZ_CC) $(CPPFLAGS) -I. $(WARN) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< \
	        $(call fuzz_objs,$*) $(FUZZ_LIBA) $(BASE_LIBS) $(FUZZ_LIBS_$*)

fuzz-build: $(FUZZ_BINS)

# The saved inputs replayed by the same harnesses built with $(CC) and a
# small driver (tests/fuzz/standalone.c) instead of libFuzzer, sanitized
# like the rest: `make check` needs no clang.
REGRESS_DIR  ?= $(BUILD)/fuzz-regress
REGRESS_BINS := $(addprefix $(REGRESS_DIR)/,$(FUZZ_NAMES))
REGRESS_CFLAGS := -O1 -g $(SAN_FLAGS)
REGRESS_LIB_OBJ := $(patsubst lib/%.c,$(REGRESS_DIR)/obj/lib/%.o,$(LIB_SRC))
regress_objs = $(patsubst %.c,$(REGRESS_DIR)/obj/%.o,$(FUZZ_SRC_$(1)))

$(REGRESS_DIR)/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(WARN) -Wno-missing-prototypes $(REGRESS_CFLAGS) -MMD -MP -Dmain=program_main -c -o $@ $<

.PRECIOUS: $(REGRESS_DIR)/obj/%.o

$(REGRESS_DIR)/libsfma.a: $(REGRESS_LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(REGRESS_DIR)/%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h tests/fuzz/standalone.c $(REGRESS_DIR)/libsfma.a \
                  $$(call regress_objs,$$*) $(wildcard lib/*.h src/*/*.h)
	$(CC) $(CPPFLAGS) -I. $(WARN) -Wno-missing-prototypes $(REGRESS_CFLAGS) -o $@ $< tests/fuzz/standalone.c \
	        $(call regress_objs,$*) $(REGRESS_DIR)/libsfma.a $(BASE_LIBS) $(FUZZ_LIBS_$*)

# Each harness FUZZ_SECONDS (default 300); a crash, leak or timeout fails.
# Then the fuzzers that drive the programs themselves (tests/fuzz/pipeline.sh).
fuzz: fuzz-build all
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_DIR=$(FUZZ_DIR) sh tests/fuzz/run.sh $(FUZZ_NAMES)
	SFMA_BINDIR=$(abspath $(BINDIR)) sh tests/fuzz/pipeline.sh $(FUZZ_SECONDS)

fuzz-short: fuzz-build all
	FUZZ_SECONDS=60 FUZZ_DIR=$(FUZZ_DIR) sh tests/fuzz/run.sh $(FUZZ_NAMES)
	SFMA_BINDIR=$(abspath $(BINDIR)) sh tests/fuzz/pipeline.sh 60

# Every saved input of tests/fuzz/regressions/<harness>/ once.
fuzz-regress: $(REGRESS_BINS)
	FUZZ_DIR=$(REGRESS_DIR) sh tests/fuzz/run.sh --regress $(FUZZ_NAMES)

bench: all
	SFMA_BINDIR=$(abspath $(BINDIR)) sh tests/bench/run.sh

lint-man:
	@for m in man/*.[0-9]; do mandoc -Tlint -W warning $$m || exit 1; done; echo "man pages: lint clean"

# install-debs PACKAGES: those not installed yet, with apt-get.
install-debs = missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else echo "$(2): all present"; fi

deps:
	@$(call install-debs,$(DEB_PACKAGES),deps)

# npm comes with some builds of nodejs; Debian's own nodejs needs the npm
# package beside it.
test-deps: deps
	@$(call install-debs,$(TEST_DEB_PACKAGES),test-deps)
	@command -v npm >/dev/null || { $(call install-debs,npm,test-deps); }
	@$(MAKE) --no-print-directory $(TEST_NODE)

# Libraries that are not ours, which the tests check sfma's output with
# (ajv for the manifest schema, protobufjs for sfma export), at the
# versions tests/package-lock.json pins, in tests/node_modules: installed
# again when the lock changes, and by `make check` in a clone that has
# none yet (npm ci needs the registry).
$(TEST_NODE): tests/package.json tests/package-lock.json
	@command -v npm >/dev/null || { echo "test-deps: npm is missing (make test-deps installs it)" >&2; exit 1; }
	npm ci --prefix tests --no-audit --no-fund --loglevel=error
	@touch $@

MAN1 := $(wildcard man/*.1)
MAN5 := $(wildcard man/*.5)
MAN7 := $(wildcard man/*.7)

# The manifest's JSON Schema goes to share/sfma, where an editor or
# another validator can be pointed at it.
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5 \
	        $(DESTDIR)$(PREFIX)/share/man/man7 $(DESTDIR)$(PREFIX)/share/sfma
	install -m 0755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 $(MAN1) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 $(MAN5) $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 0644 $(MAN7) $(DESTDIR)$(PREFIX)/share/man/man7/
	install -m 0644 $(SCHEMA) $(DESTDIR)$(PREFIX)/share/sfma/

uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(PRESENT)) \
	      $(addprefix $(DESTDIR)$(PREFIX)/share/man/man1/,$(notdir $(MAN1))) \
	      $(addprefix $(DESTDIR)$(PREFIX)/share/man/man5/,$(notdir $(MAN5))) \
	      $(addprefix $(DESTDIR)$(PREFIX)/share/man/man7/,$(notdir $(MAN7))) \
	      $(DESTDIR)$(PREFIX)/share/sfma/$(notdir $(SCHEMA))
	-rmdir $(DESTDIR)$(PREFIX)/share/sfma 2>/dev/null

clean:
	rm -rf $(BUILD) $(BINDIR)/sfma*

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
