# sfma - one plain GNU Makefile.
#
#   make                 build every program into bin/
#   make check           run the test suite (bats)
#   make check-sanitize  the same suite against an ASan+UBSan build
#   make check-valgrind  every stage under valgrind: no leaks, no errors
#   make bench           benchmarks (verify vs sha256 floor, sandbox vs unshare/bwrap)
#   make lint-man        mandoc -Tlint over every man page
#   make deps            install missing Debian packages (as root)
#   make install PREFIX=/usr/local DESTDIR=

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

PROGRAMS := sfma sfma-plan sfma-model sfma-exec sfma-chain sfma-seal sfma-verify sfma-replay sfma-chat sfma-log sfma-report
# Programs exist as src/NAME.c or src/NAME/*.c; only those present are built.
PRESENT  := $(foreach p,$(PROGRAMS) sfma-telegram,$(if $(wildcard src/$(p).c src/$(p)/*.c),$(p)))
BINS     := $(addprefix $(BINDIR)/,$(PRESENT))

LIB_SRC  := $(wildcard lib/*.c)
LIB_OBJ  := $(patsubst lib/%.c,$(BUILD)/lib/%.o,$(LIB_SRC))
LIBA     := $(BUILD)/libsfma.a

BASE_LIBS := -ljansson -lcrypto -lpthread -lm
LIBS_sfma-model    := -lcurl
LIBS_sfma-telegram := -lcurl
LIBS_sfma-exec     := -lseccomp

DEB_PACKAGES := build-essential clang libjansson-dev libssl-dev openssl \
                libcurl4-openssl-dev libseccomp-dev git jq bats mandoc \
                bubblewrap util-linux valgrind python3 procps nodejs chromium

.DELETE_ON_ERROR:
.PHONY: all check check-sanitize check-valgrind bench lint-man deps install clean

all: $(BINS)

$(BUILD)/lib/%.o: lib/%.c $(wildcard lib/*.h) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(WARN) $(CFLAGS) -c -o $@ $<

$(LIBA): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

.SECONDEXPANSION:
$(BINDIR)/%: $$(wildcard src/$$*.c src/$$*/*.c) $(LIBA) $(wildcard lib/*.h) $$(wildcard src/$$*/*.h)
	@mkdir -p $(BINDIR)
	$(CC) $(CPPFLAGS) $(WARN) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^) $(LIBA) $(BASE_LIBS) $(LIBS_$*)

check: all
	sh tests/lint.sh
	SFMA_BINDIR=$(abspath $(BINDIR)) bats --print-output-on-failure tests

# The whole suite against an ASan+UBSan build kept apart from bin/.
check-sanitize:
	sh tests/lint.sh
	$(MAKE) BUILD=$(BUILD)/san BINDIR=$(BUILD)/san/bin CC=clang \
	        CFLAGS="-O1 -g $(SAN_FLAGS)" LDFLAGS="$(SAN_FLAGS)" all
	SFMA_BINDIR=$(abspath $(BUILD)/san/bin) SFMA_SANITIZED=1 \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=98 \
	        bats --print-output-on-failure tests

check-valgrind: all
	SFMA_BINDIR=$(abspath $(BINDIR)) sh tests/valgrind.sh

bench: all
	SFMA_BINDIR=$(abspath $(BINDIR)) sh tests/bench/run.sh

lint-man:
	@for m in man/*.[0-9]; do mandoc -Tlint -W warning $$m || exit 1; done; echo "man pages: lint clean"

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else echo "deps: all present"; fi

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 0755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	for m in man/*.1; do [ -e "$$m" ] && install -m 0644 $$m $(DESTDIR)$(PREFIX)/share/man/man1/; done; true
	for m in man/*.5; do [ -e "$$m" ] && install -m 0644 $$m $(DESTDIR)$(PREFIX)/share/man/man5/; done; true

clean:
	rm -rf $(BUILD) $(BINDIR)/sfma*
