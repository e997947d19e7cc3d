# Makefile - builds, tests and installs libredisync. GNU make 4.3 or later.
#
#   make              build/libredisync.a, build/libredisync.so.X.Y.Z with its links
#                     build/libredisync.so.X and build/libredisync.so, the command
#                     build/redisync (tools/cli/), and build/redisync-demo when
#                     tools/demo/ has sources
#   make deps         scripts/deps.sh: as root installs missing Debian packages, else checks
#   make test         deps, then the Criterion suite (tests/*.c) linked with the static library;
#                     builds build/redisync, the examples and the clock shim
#                     build/tests/rs-clockshim.so first (tests/test_cli.c,
#                     tests/test_examples.c and tests/test_clock.c run them; mk/clock.mk)
#   make examples     deps, then build/examples/NAME for every examples/NAME.c
#   make check-asan   deps, then library and suite rebuilt under build/asan/ with ASan+UBSan
#   make check-layers the library's objects, then scripts/layers.sh: no lib/*.c references
#                     a function of a file listed above it in lib/internal.h's layer list
#   make demo         deps, then builds and runs build/redisync-demo (tools/demo/)
#   make bench        deps, then builds and runs build/redisync-bench (bench/*.c); not in test
#   make test-network deps, then the fault suite in a network namespace of its own: black
#                     holes, one-way partitions, delay + loss, flaps, a Redlock master cut
#                     from one client (mk/network.mk; make
#                     test-network-ci is the CI-sized run; needs root)
#   make load         deps, then the load test: 64 processes x 4 threads on 16 names for 60 s
#                     (mk/load.mk; make load-ci is the CI-sized run)
#   make install      header, libraries, redisync.pc, the command and the man pages
#                     redisync(1), redisync(3) under DESTDIR/PREFIX
#   make uninstall    removes exactly what install wrote
#   make clean        removes build/
#
# Knobs: CC, CFLAGS (default -O2 -g), CPPFLAGS, LDFLAGS, WERROR=1 (warnings are errors; CI
# sets it), TEST_JOBS, TEST_ARGS (e.g. TEST_ARGS='--filter mutex/*'), PREFIX, LIBDIR,
# INCLUDEDIR, BINDIR, MANDIR, DESTDIR.
#
# Sources are found with wildcards (lib/*.c, primitives/*/*.c and *.lua, tests/*.c,
# tests/support/*.c, bench/*.c, tools/demo/*.c, examples/*.c), so a new file or a new primitive needs no
# edit here, and an empty directory is simply nothing to build. Everything generated goes
# under build/: build/gen/ holds the embedded Lua scripts and the linker version script,
# build/obj/ the objects and their .d files (-MMD -MP: editing a header rebuilds what
# includes it). check-asan runs this Makefile again with BUILDDIR=build/asan SANITIZE=1.

ifeq ($(filter grouped-target,$(.FEATURES)),)
$(error this Makefile needs GNU make 4.3 or later (grouped targets))
endif

# ---- tools and places --------------------------------------------------------------------
CC         ?= cc
AR         ?= ar
PKG_CONFIG ?= pkg-config
PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
BINDIR     ?= $(PREFIX)/bin
MANDIR     ?= $(PREFIX)/share/man
DESTDIR    ?=

# ---- version, read from the public header ------------------------------------------------
# ('.define' rather than '#define': a '#' inside $(shell) means different things to
# different make versions.)
version_part = $(shell sed -n 's/^.define[[:space:]]*RS_VERSION_$(1)[[:space:]][[:space:]]*\([0-9][0-9]*\).*/\1/p' include/redisync.h)
VERSION_MAJOR := $(call version_part,MAJOR)
VERSION_MINOR := $(call version_part,MINOR)
VERSION_PATCH := $(call version_part,PATCH)
ifeq ($(and $(VERSION_MAJOR),$(VERSION_MINOR),$(VERSION_PATCH)),)
$(error cannot read RS_VERSION_MAJOR/MINOR/PATCH from include/redisync.h)
endif
VERSION := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)

# ---- outputs -----------------------------------------------------------------------------
BUILDDIR  ?= build
GEN       ?= build/gen
OBJ       := $(BUILDDIR)/obj
LIB_A     := $(BUILDDIR)/libredisync.a
SONAME    := libredisync.so.$(VERSION_MAJOR)
LIB_SO    := $(BUILDDIR)/libredisync.so.$(VERSION)
LIB_LINKS := $(BUILDDIR)/$(SONAME) $(BUILDDIR)/libredisync.so
TEST_BIN  := $(BUILDDIR)/tests/redisync-tests
DEMO_BIN  := $(BUILDDIR)/redisync-demo
BENCH_BIN := $(BUILDDIR)/redisync-bench
CLI_BIN   := $(BUILDDIR)/redisync
ASAN_DIR  := build/asan

# ---- sources -----------------------------------------------------------------------------
LIB_SRCS     := $(sort $(wildcard lib/*.c) $(wildcard primitives/*.c) $(wildcard primitives/*/*.c))
LUA_SRCS     := $(sort $(wildcard primitives/*/*.lua))
TEST_SRCS    := $(sort $(wildcard tests/*.c))
SUPPORT_SRCS := $(sort $(wildcard tests/support/*.c))
BENCH_SRCS   := $(sort $(wildcard bench/*.c))
DEMO_SRCS    := $(sort $(wildcard tools/demo/*.c))
CLI_SRCS     := $(sort $(wildcard tools/cli/*.c))
EXAMPLE_SRCS := $(sort $(wildcard examples/*.c))

LIB_OBJS     := $(LIB_SRCS:%.c=$(OBJ)/%.o) $(OBJ)/gen/scripts.o
TEST_OBJS    := $(TEST_SRCS:%.c=$(OBJ)/%.o)
SUPPORT_OBJS := $(SUPPORT_SRCS:%.c=$(OBJ)/%.o)
BENCH_OBJS   := $(BENCH_SRCS:%.c=$(OBJ)/%.o)
DEMO_OBJS    := $(DEMO_SRCS:%.c=$(OBJ)/%.o)
CLI_OBJS     := $(CLI_SRCS:%.c=$(OBJ)/%.o)
EXAMPLE_OBJS := $(EXAMPLE_SRCS:%.c=$(OBJ)/%.o)
EXAMPLE_BINS := $(EXAMPLE_SRCS:examples/%.c=$(BUILDDIR)/examples/%)

# ---- flags -------------------------------------------------------------------------------
# pkg-config when it is there, the plain library name when it is not.
HIREDIS_CFLAGS   := $(shell $(PKG_CONFIG) --cflags hiredis 2>/dev/null)
HIREDIS_LIBS     := $(shell $(PKG_CONFIG) --libs hiredis 2>/dev/null || echo -lhiredis)
# OpenSSL 3 (libssl-dev): the TLS transport (lib/transport.c).
SSL_CFLAGS       := $(shell $(PKG_CONFIG) --cflags openssl 2>/dev/null)
SSL_LIBS         := $(shell $(PKG_CONFIG) --libs openssl 2>/dev/null || echo -lssl -lcrypto)
# libuv (libuv1-dev): examples/uv_lock.c alone.
LIBUV_CFLAGS     := $(shell $(PKG_CONFIG) --cflags libuv 2>/dev/null)
LIBUV_LIBS       := $(shell $(PKG_CONFIG) --libs libuv 2>/dev/null || echo -luv)
CRITERION_CFLAGS := $(shell $(PKG_CONFIG) --cflags criterion 2>/dev/null)
CRITERION_LIBS   := $(shell $(PKG_CONFIG) --libs criterion 2>/dev/null || echo -lcriterion)

CFLAGS    ?= -O2 -g
WERROR    ?= 0
TEST_JOBS ?= 6
TEST_ARGS ?=
WARNINGS := -Wall -Wextra -Wshadow -Wstrict-prototypes
ifeq ($(WERROR),1)
WARNINGS += -Werror
endif

SANITIZE ?= 0
ifeq ($(SANITIZE),1)
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif

# Every object: language, warnings, header search (generated, core, public), threads.
# The user's CFLAGS come last so they can override.
BASE_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARNINGS) -I$(GEN) -Ilib -Iinclude $(HIREDIS_CFLAGS) $(SSL_CFLAGS) \
              -pthread $(SAN_FLAGS)
DEPFLAGS    = -MMD -MP
# Library objects: position independent, everything hidden except what RS_API marks.
COMPILE_LIB  = $(CC) $(CPPFLAGS) $(BASE_CFLAGS) -fPIC -fvisibility=hidden -DRS_BUILDING_LIBRARY \
               $(CFLAGS) $(DEPFLAGS)
# Tests, test support, bench, demo: plain programs. They still see lib/internal.h, and
# -Itests/support lets any of them #include "redis_server.h".
COMPILE_PROG = $(CC) $(CPPFLAGS) $(BASE_CFLAGS) -Itests/support $(CFLAGS) $(DEPFLAGS)
# The command and the examples see the public header only (nothing from lib/ can creep in).
COMPILE_PUBLIC = $(CC) $(CPPFLAGS) -std=c11 -D_GNU_SOURCE $(WARNINGS) -Iinclude -pthread \
                 $(SAN_FLAGS) $(CFLAGS) $(DEPFLAGS)
# Tests find the command and the examples of this build through this absolute path.
TEST_DEFS    = -DRS_TEST_BUILDDIR='"$(abspath $(BUILDDIR))"'
# Programs link the static library, so tests can also reach the hidden rs__ functions.
LINK_PROG    = $(CC) $(SAN_FLAGS) $(CFLAGS) $(LDFLAGS)
PROG_LIBS    = $(LIB_A) $(HIREDIS_LIBS) $(SSL_LIBS) -pthread

# ---- top-level targets -------------------------------------------------------------------
.PHONY: all deps test test-acl check-asan check-layers demo bench examples install uninstall clean \
        test-build demo-build bench-build examples-build
.DEFAULT_GOAL := all
.DELETE_ON_ERROR:
.SUFFIXES:

all: $(LIB_A) $(LIB_SO) $(LIB_LINKS) $(if $(DEMO_SRCS),$(DEMO_BIN)) $(if $(CLI_SRCS),$(CLI_BIN))

deps:
	@sh scripts/deps.sh

# test, check-asan, demo and bench run deps first, then build in a second make: that make
# starts after the packages are installed (so pkg-config answers) and cannot race deps
# under -j.
#
# Criterion 2.4.1's --timeout only lowers timeouts that tests declare themselves, so every
# suite should declare one (TestSuite(name, .timeout = 60)); CI also bounds the whole run.
test: | deps
	@$(MAKE) --no-print-directory test-build
	$(TEST_BIN) --jobs $(TEST_JOBS) $(TEST_ARGS)

# The whole suite again, the library logged in as a Redis ACL user with exactly the rights
# docs/security.md lists (tests/support/redis_acl.c sets the user up).
test-acl: | deps
	@$(MAKE) --no-print-directory test-build
	RS_TEST_ACL=1 $(TEST_BIN) --jobs $(TEST_JOBS) $(TEST_ARGS)

# The ASan+UBSan run and its report handling: scripts/run-asan.sh.
ASAN_REPORTS := $(CURDIR)/$(ASAN_DIR)/reports

# Without TEST_ARGS the suite runs in two parts, the cluster suite on its own: with it and
# the rest in one Criterion run, Criterion 2.4.1's runner process (not a test) leaks 96
# bytes under ASan (its own calloc, reproducible: 155+ tests including cluster/*), which
# LeakSanitizer would report at the runner's exit.
check-asan: | deps
	@$(MAKE) --no-print-directory BUILDDIR=$(ASAN_DIR) SANITIZE=1 test-build
ifeq ($(strip $(TEST_ARGS)),)
	sh scripts/run-asan.sh $(ASAN_REPORTS) $(ASAN_DIR)/tests/redisync-tests --jobs $(TEST_JOBS) --filter '!(cluster*)/*'
	sh scripts/run-asan.sh $(ASAN_REPORTS)-cluster $(ASAN_DIR)/tests/redisync-tests --jobs $(TEST_JOBS) --filter 'cluster*/*'
else
	sh scripts/run-asan.sh $(ASAN_REPORTS) $(ASAN_DIR)/tests/redisync-tests --jobs $(TEST_JOBS) $(TEST_ARGS)
endif

# nm over build/obj/lib (under a second once the objects are built; .ci/run runs it after
# make test, which built them).
check-layers: $(filter $(OBJ)/lib/%,$(LIB_OBJS))
	sh scripts/layers.sh $(OBJ)/lib

demo: | deps
	@$(MAKE) --no-print-directory demo-build
	$(DEMO_BIN)

bench: | deps
	@$(MAKE) --no-print-directory bench-build
	$(BENCH_BIN)

examples: | deps
	@$(MAKE) --no-print-directory examples-build

# The *-build targets are the second make's goals. An empty directory is an error here,
# not a binary that tests nothing.
ifeq ($(TEST_SRCS),)
test-build:
	@echo "make test: there are no tests/*.c yet" >&2; exit 1
else
test-build: $(TEST_BIN) $(if $(CLI_SRCS),$(CLI_BIN)) $(EXAMPLE_BINS)
endif

ifeq ($(DEMO_SRCS),)
demo-build:
	@echo "make demo: there is no tools/demo/*.c yet" >&2; exit 1
else
demo-build: $(DEMO_BIN)
endif

ifeq ($(EXAMPLE_SRCS),)
examples-build:
	@echo "make examples: there are no examples/*.c yet" >&2; exit 1
else
examples-build: $(EXAMPLE_BINS)
endif

ifeq ($(BENCH_SRCS),)
bench-build:
	@echo "make bench: there are no bench/*.c yet" >&2; exit 1
else
bench-build: $(BENCH_BIN)
endif

# ---- generated sources -------------------------------------------------------------------
# All Lua scripts become C data in one pair of files; see scripts/embed-lua.sh.
$(GEN)/scripts.c $(GEN)/scripts.h &: $(LUA_SRCS) primitives/core.lua primitives/common.lua scripts/embed-lua.sh
	@mkdir -p $(@D)
	sh scripts/embed-lua.sh -p primitives/core.lua -c primitives/common.lua $(GEN)/scripts.c $(GEN)/scripts.h $(LUA_SRCS)

# The linker's version script, a second fence behind -fvisibility=hidden: rs_ followed by
# anything but '_' is exported; rs__ internals and everything else stay local.
$(GEN)/redisync.map: Makefile
	@mkdir -p $(@D)
	printf '{\n  global: rs_[!_]*;\n  local: *;\n};\n' > $@

# ---- objects -----------------------------------------------------------------------------
# Anything may include the generated scripts.h, so it exists before the first compile;
# after that the .d files know who really includes it.
$(OBJ)/lib/%.o: lib/%.c | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_LIB) -c $< -o $@

$(OBJ)/primitives/%.o: primitives/%.c | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_LIB) -c $< -o $@

$(OBJ)/gen/scripts.o: $(GEN)/scripts.c
	@mkdir -p $(@D)
	$(COMPILE_LIB) -c $< -o $@

# (tests/support/x.c matches both rules below; make picks the one with the shorter stem.)
$(OBJ)/tests/support/%.o: tests/support/%.c | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) -c $< -o $@

$(OBJ)/tests/%.o: tests/%.c | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) $(CRITERION_CFLAGS) $(TEST_DEFS) -c $< -o $@

$(OBJ)/bench/%.o: bench/%.c | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) -c $< -o $@

$(OBJ)/tools/%.o: tools/%.c | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) -c $< -o $@

# the command (tools/cli/): the public header alone (a more specific pattern: it wins)
$(OBJ)/tools/cli/%.o: tools/cli/%.c
	@mkdir -p $(@D)
	$(COMPILE_PUBLIC) -Itools/cli -c $< -o $@

$(OBJ)/examples/%.o: examples/%.c
	@mkdir -p $(@D)
	$(COMPILE_PUBLIC) $(EXAMPLE_CFLAGS) -c $< -o $@

# An example that needs a library of its own gets its flags here (empty for the others).
$(OBJ)/examples/uv_lock.o: EXAMPLE_CFLAGS = $(LIBUV_CFLAGS)
$(BUILDDIR)/examples/uv_lock: EXAMPLE_LIBS = $(LIBUV_LIBS)

-include $(LIB_OBJS:.o=.d) $(TEST_OBJS:.o=.d) $(SUPPORT_OBJS:.o=.d) $(BENCH_OBJS:.o=.d) \
         $(DEMO_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(EXAMPLE_OBJS:.o=.d)

# ---- libraries ---------------------------------------------------------------------------
# rm first: ar would otherwise keep members whose source was deleted.
$(LIB_A): $(LIB_OBJS)
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $(LIB_OBJS)

$(LIB_SO): $(LIB_OBJS) $(GEN)/redisync.map
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=$(GEN)/redisync.map \
	    -Wl,--no-undefined $(SAN_FLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(LIB_OBJS) $(HIREDIS_LIBS) $(SSL_LIBS) -pthread

$(BUILDDIR)/$(SONAME): $(LIB_SO)
	ln -sf $(notdir $<) $@

$(BUILDDIR)/libredisync.so: $(BUILDDIR)/$(SONAME)
	ln -sf $(notdir $<) $@

# ---- programs ----------------------------------------------------------------------------
$(TEST_BIN): $(TEST_OBJS) $(SUPPORT_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $(TEST_OBJS) $(SUPPORT_OBJS) $(LIB_A) $(CRITERION_LIBS) $(HIREDIS_LIBS) $(SSL_LIBS) -pthread

$(DEMO_BIN): $(DEMO_OBJS) $(SUPPORT_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $(DEMO_OBJS) $(SUPPORT_OBJS) $(PROG_LIBS)

$(BENCH_BIN): $(BENCH_OBJS) $(SUPPORT_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $(BENCH_OBJS) $(SUPPORT_OBJS) $(PROG_LIBS)

# The command links the static library: it runs without any ld.so configuration.
$(CLI_BIN): $(CLI_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $(CLI_OBJS) $(PROG_LIBS) -lm

$(EXAMPLE_BINS): $(BUILDDIR)/examples/%: $(OBJ)/examples/%.o $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $< $(PROG_LIBS) $(EXAMPLE_LIBS)

# ---- install -----------------------------------------------------------------------------
# redisync.pc is written straight from redisync.pc.in at install time, so it always carries
# the PREFIX/LIBDIR/INCLUDEDIR of this install. Run ldconfig yourself for a system LIBDIR.
INSTALLED_LIBS := libredisync.a libredisync.so.$(VERSION) $(SONAME) libredisync.so
# Man pages: redisync(1) for the command, redisync(3) for the library, and one-line ".so"
# pages so that `man rs_mutex_lock` (any function of the header) opens redisync(3).
# Installed uncompressed (man reads both).
# (the sed script sits in a variable: make would count its parentheses inside $(shell ...))
MAN3_SED   := s/^RS_API[^(]*[ *]\(rs_[a-z0-9_]*\)(.*/\1/p
MAN3_FUNCS := $(shell sed -n '$(MAN3_SED)' include/redisync.h)

install: $(LIB_A) $(LIB_SO) $(LIB_LINKS) $(CLI_BIN)
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 644 include/redisync.h $(DESTDIR)$(INCLUDEDIR)/redisync.h
	install -m 644 $(LIB_A) $(DESTDIR)$(LIBDIR)/libredisync.a
	install -m 755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/libredisync.so.$(VERSION)
	ln -sf libredisync.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libredisync.so
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    redisync.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/redisync.pc
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3
	install -m 755 $(CLI_BIN) $(DESTDIR)$(BINDIR)/redisync
	install -m 644 docs/redisync.1 $(DESTDIR)$(MANDIR)/man1/redisync.1
	install -m 644 docs/redisync.3 $(DESTDIR)$(MANDIR)/man3/redisync.3
	@echo 'writing $(words $(MAN3_FUNCS)) .so pages (rs_*.3 -> redisync.3) in $(DESTDIR)$(MANDIR)/man3'
	@for f in $(MAN3_FUNCS); do \
	    printf '.so man3/redisync.3\n' > $(DESTDIR)$(MANDIR)/man3/$$f.3 || exit 1; \
	done

uninstall:
	rm -f $(DESTDIR)$(INCLUDEDIR)/redisync.h
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,$(INSTALLED_LIBS))
	rm -f $(DESTDIR)$(PKGCONFIGDIR)/redisync.pc
	rm -f $(DESTDIR)$(BINDIR)/redisync
	rm -f $(DESTDIR)$(MANDIR)/man1/redisync.1 $(DESTDIR)$(MANDIR)/man3/redisync.3
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man3/,$(addsuffix .3,$(MAN3_FUNCS)))

-include mk/checks.mk
-include mk/bench.mk
-include mk/faults.mk
-include mk/network.mk
-include mk/load.mk
-include mk/clock.mk

clean:
	rm -rf build
