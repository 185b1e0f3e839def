# corral — build, test, demo, bench, install.
#
#   make            library (static + shared), CLI, test binaries, helpers
#   make test       install missing Debian packages, build, run every test binary
#   make demo       install, build, run the demonstration
#   make asan       build and run the tests under AddressSanitizer + UBSan
#   make bench      benchmarks (never fail the build)
#   make compat     CPython's regression suite directly and under every tier
#                   (scripts/compat, tests/compat/); `make test` runs its quick subset
#   make install    PREFIX=/usr/local DESTDIR=: bin/corral, lib/libcorral.{so,a},
#                   include/corral, lib/pkgconfig/corral{,-static}.pc, man 1 and 3,
#                   share/doc/corral/{examples,schema,LICENSE,CHANGELOG.md},
#                   bash completion, and the Python package (PYTHON_PREFIX,
#                   PYTHONDIR)
#   make uninstall  (same PREFIX/DESTDIR) removes what install put there

BUILD    ?= build
CXX      ?= g++
CC       ?= gcc
PKGS     := libseccomp libcap liburing libcrypto libutf8proc
VERSION  := 0.1.0
SOMAJOR  := 0

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
PKG_STATIC_LIBS := $(shell pkg-config --libs --static $(PKGS) 2>/dev/null)

OPT      ?= -O2 -g
SANITIZE ?=
GEN      := $(BUILD)/gen
CPPFLAGS += -Iinclude -I$(GEN) -MMD -MP -D_GNU_SOURCE
# -ffunction-sections: a function per section, so the CLI's link can gather
# the code a one-run `corral run` executes (HOT_TEXT_LD, below).
CXXFLAGS += -std=c++20 -Wall -Wextra -Werror $(OPT) $(SANITIZE) -fPIC \
            -fvisibility=hidden -fvisibility-inlines-hidden -ffunction-sections $(PKG_CFLAGS)
CFLAGS   += -std=c11 -Wall -Wextra -Werror $(OPT) $(SANITIZE)
LDFLAGS  += $(SANITIZE)

# The flags objects were compiled with: a change of them (a new -f option,
# OPT, SANITIZE) rebuilds every object, as a change of its source does. An
# object of the old flags would still link, only wrong: one compiled
# without -ffunction-sections keeps its code out of the CLI's hot range.
FLAGS_STAMP := $(BUILD)/obj/compile-flags
ifneq ($(strip $(CPPFLAGS) $(CXXFLAGS)),$(strip $(file <$(FLAGS_STAMP))))
$(shell mkdir -p $(BUILD)/obj)
$(file >$(FLAGS_STAMP),$(strip $(CPPFLAGS) $(CXXFLAGS)))
endif

LIB_SRCS    := $(sort $(wildcard src/*.cpp))
CLI_SRCS    := $(sort $(wildcard src/cli/*.cpp))
TEST_SRCS   := $(sort $(wildcard tests/*_test.cpp))
HELPER_SRCS := $(sort $(wildcard tests/helpers/*.c))
BENCH_SRCS  := $(sort $(wildcard tests/bench/*.c))
BENCHXX_SRCS := $(sort $(wildcard tests/bench/*.cpp))

LIB_OBJS := $(LIB_SRCS:%.cpp=$(BUILD)/obj/%.o)
CLI_OBJS := $(CLI_SRCS:%.cpp=$(BUILD)/obj/%.o)
TEST_BINS   := $(TEST_SRCS:tests/%.cpp=$(BUILD)/tests/%)
HELPER_BINS := $(HELPER_SRCS:tests/helpers/%.c=$(BUILD)/helpers/%)
BENCH_BINS  := $(BENCH_SRCS:tests/bench/%.c=$(BUILD)/bench/%) $(BENCHXX_SRCS:tests/bench/%.cpp=$(BUILD)/bench/%)

STATIC_LIB := $(BUILD)/lib/libcorral.a
SHARED_LIB := $(BUILD)/lib/libcorral.so
CLI        := $(BUILD)/bin/corral

.PHONY: all deps test demo asan bench compat clean install uninstall
.DEFAULT_GOAL := all

all: $(STATIC_LIB) $(SHARED_LIB) $(CLI) $(TEST_BINS) $(HELPER_BINS) $(BENCH_BINS)

deps:
	@scripts/install-deps

$(BUILD)/obj/%.o: %.cpp $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -DCORRAL_VERSION='"$(VERSION)"' -c $< -o $@

# The tiers' seccomp filters, compiled at build time (src/seccomp_bpf.cpp) and built
# into libcorral (src/seccomp_builtin.hpp says when they are used). The
# generator links the seccomp module with an empty table of its own.
SECCOMP_GEN := $(GEN)/seccomp-gen
$(BUILD)/obj/gen/seccomp_builtin_empty.o: src/seccomp_builtin.cpp $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -DCORRAL_SECCOMP_NO_BUILTIN -c $< -o $@
$(SECCOMP_GEN): src/gen/seccomp_gen.cpp $(BUILD)/obj/src/seccomp.o $(BUILD)/obj/src/seccomp_bpf.o $(BUILD)/obj/src/status.o \
                $(BUILD)/obj/gen/seccomp_builtin_empty.o
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -MF $@.d -o $@ $(filter %.cpp %.o,$^) $(LDFLAGS) $(PKG_LIBS)
$(GEN)/seccomp_builtin.inc: $(SECCOMP_GEN)
	$(SECCOMP_GEN) > $@.tmp && mv $@.tmp $@
$(BUILD)/obj/src/seccomp_builtin.o: $(GEN)/seccomp_builtin.inc

$(STATIC_LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# Only corral_* leaves the shared object: -fvisibility=hidden plus a version
# script, so a stray default-visibility symbol cannot leak either.
$(SHARED_LIB): $(LIB_OBJS) src/corral.map
	@mkdir -p $(dir $@)
	$(CXX) -shared -Wl,-soname,libcorral.so.$(SOMAJOR) -Wl,--version-script=src/corral.map \
	  -o $@.$(VERSION) $(LIB_OBJS) $(LDFLAGS) $(PKG_LIBS)
	ln -sf libcorral.so.$(VERSION) $@.$(SOMAJOR)
	ln -sf libcorral.so.$(VERSION) $@

# The CLI is a static PIE: a one-run `corral run` is a process start, and
# the dynamic loader's relocations of libstdc++, libcrypto and friends cost
# ~1.7 ms of it (corral --help: 3.0 ms dynamic, 0.9 ms static on the
# reference host). Sanitizer runtimes cannot be linked statically, so a
# SANITIZE build links the CLI dynamically. Its relative relocations
# (~5,700, nearly all of them) are packed (DT_RELR, glibc 2.36): a 1 KiB
# bitmap instead of 135 KiB of Elf64_Rela for the start-up to read. The
# pages they write (.data.rel.ro: vtables, tables of pointers) are the same
# either way: the price of a PIE (ASLR). The entry is corral_cli_entry
# (src/cli/start.cpp): it makes those data pages in a few madvise calls
# before glibc's _start, instead of ~20 copy-on-write faults, and maps the
# code a one-run `corral run` executes in one more call: HOT_TEXT_LD
# (written by scripts/hot-text) gathers those functions (each in a section
# of its own: -ffunction-sections) into one range. That file also keeps
# glibc's start from reading /proc/self/exe and libcrypto's from running
# CPUID.
HOT_TEXT_LD ?= src/cli/hot_text.ld
CLI_LINK ?= -Wl,-T,$(HOT_TEXT_LD) \
            $(if $(SANITIZE),$(PKG_LIBS),-static-pie -Wl,-z,pack-relative-relocs -Wl,-e,corral_cli_entry $(PKG_STATIC_LIBS))
$(CLI): $(CLI_OBJS) $(STATIC_LIB) $(HOT_TEXT_LD)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $(CLI_OBJS) $(STATIC_LIB) $(LDFLAGS) $(CLI_LINK)

$(BUILD)/tests/%: tests/%.cpp $(STATIC_LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -Itests -MF $@.d -o $@ $< $(STATIC_LIB) $(LDFLAGS) $(PKG_LIBS) -lcriterion

# Helpers are the hostile programs tests run; plain C, static-free, small.
# Never sanitized: they are the programs under test, not our code, and run
# in tiers whose clean environment and seccomp filter a sanitizer runtime
# (LeakSanitizer's ptrace, its shadow memory under memory_bytes) would trip over.
$(BUILD)/helpers/%: tests/helpers/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -Wall -Wextra -Werror -O2 -g -D_GNU_SOURCE -o $@ $<

$(BUILD)/bench/%: tests/bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -D_GNU_SOURCE -O2 -o $@ $<

$(BUILD)/bench/%: tests/bench/%.cpp $(STATIC_LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -MF $@.d -o $@ $< $(STATIC_LIB) $(LDFLAGS) $(PKG_LIBS)

# The builds the targets below start use every CPU unless make was given
# -j itself: a serial build of a clean clone took ~22 of CI's 26 minutes.
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
PARALLEL = $(if $(findstring -j,$(MAKEFLAGS)),,-j$(JOBS))

test: deps
	@$(MAKE) --no-print-directory $(PARALLEL) all
	@BUILD=$(BUILD) scripts/run-tests

# Real programs, unmodified: tests/compat/modules.txt run directly and under
# each tier; a failure tests/compat/allow.txt does not explain fails it.
compat: deps
	@$(MAKE) --no-print-directory $(PARALLEL) all
	@BUILD=$(BUILD) scripts/compat

demo: deps
	@$(MAKE) --no-print-directory $(PARALLEL) all
	@BUILD=$(BUILD) scripts/demo

asan: deps
	@$(MAKE) --no-print-directory $(PARALLEL) BUILD=build/asan OPT="-O1 -g" \
	  SANITIZE="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" all
	@# Leak checking is off: a failed Criterion assertion exits without running
	@# destructors, and LeakSanitizer cannot stop a subreaper's world reliably.
	@BUILD=build/asan ASAN_OPTIONS=detect_leaks=0 scripts/run-tests

bench: deps
	@$(MAKE) --no-print-directory $(PARALLEL) all
	@BUILD=$(BUILD) scripts/bench

# Install layout. DESTDIR stages (packaging); PREFIX is where it will live.
# The .pc files name the prefix, so `pkg-config --define-variable=prefix=`
# can point a staged tree's users at DESTDIR.
PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
MANDIR       ?= $(PREFIX)/share/man
DOCDIR       ?= $(PREFIX)/share/doc/corral
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
HEADERS      := $(sort $(wildcard include/corral/*.h include/corral/*.hpp))
EXAMPLES     := $(sort $(wildcard examples/*.c examples/*.cpp examples/*.py examples/*.toml))
SCHEMAS      := $(sort $(wildcard schema/*.json))
# Where bash-completion looks for a command's completion (loaded on demand).
COMPLETIONSDIR ?= $(PREFIX)/share/bash-completion/completions
# The corral Python package (python/corral: pure Python, no build step),
# for the python3 Debian ships (/usr/bin/python3 when present). Debian's
# python looks in /usr/lib/python3/dist-packages and
# /usr/local/lib/python3.X/dist-packages; others in lib/python3.X/site-packages
# under their prefix. PYTHON_PREFIX (default PREFIX) picks the tree;
# PYTHONDIR overrides the directory.
PYTHON       ?= $(firstword $(wildcard /usr/bin/python3) python3)
PYTHON_PREFIX ?= $(PREFIX)
PYTHONDIR    ?= $(shell $(PYTHON) -c 'import sys; p = "$(PYTHON_PREFIX)"; v = "%d.%d" % sys.version_info[:2]; \
  deb = any(x.endswith("dist-packages") for x in sys.path); \
  print(p + ("/lib/python3/dist-packages" if deb and p == "/usr" else \
             "/lib/python%s/%s" % (v, "dist-packages" if deb else "site-packages")))' 2>/dev/null)
PY_SRCS      := $(sort $(wildcard python/corral/*.py))
# ${prefix}-relative where they are below PREFIX, so redefining prefix moves them.
pc_path = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))
# Written at install time (not cached in $(BUILD)): they name PREFIX.
PC_SED = -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(call pc_path,$(LIBDIR))|' \
         -e 's|@INCLUDEDIR@|$(call pc_path,$(INCLUDEDIR))|' -e 's|@VERSION@|$(VERSION)|' \
         -e 's|@PKGS@|$(PKGS)|'

install: $(STATIC_LIB) $(SHARED_LIB) $(CLI)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) \
	  $(DESTDIR)$(INCLUDEDIR)/corral $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 \
	  $(DESTDIR)$(DOCDIR)/examples
	install -m 0755 $(CLI) $(DESTDIR)$(BINDIR)/corral
	install -m 0755 $(SHARED_LIB).$(VERSION) $(DESTDIR)$(LIBDIR)/libcorral.so.$(VERSION)
	ln -sf libcorral.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libcorral.so.$(SOMAJOR)
	ln -sf libcorral.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libcorral.so
	install -m 0644 $(STATIC_LIB) $(DESTDIR)$(LIBDIR)/libcorral.a
	install -m 0644 $(HEADERS) $(DESTDIR)$(INCLUDEDIR)/corral/
	for pc in corral corral-static; do \
	  sed $(PC_SED) pkgconfig/$$pc.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/$$pc.pc && \
	  chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/$$pc.pc || exit 1; \
	done
	install -m 0644 man/corral.1 $(DESTDIR)$(MANDIR)/man1/corral.1
	install -m 0644 man/corral.3 $(DESTDIR)$(MANDIR)/man3/corral.3
	install -m 0644 $(EXAMPLES) $(DESTDIR)$(DOCDIR)/examples/
	install -d $(DESTDIR)$(DOCDIR)/schema $(DESTDIR)$(COMPLETIONSDIR) $(DESTDIR)$(PYTHONDIR)/corral
	install -m 0644 $(SCHEMAS) $(DESTDIR)$(DOCDIR)/schema/
	install -m 0644 LICENSE CHANGELOG.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 completion/corral.bash $(DESTDIR)$(COMPLETIONSDIR)/corral
	install -m 0644 $(PY_SRCS) $(DESTDIR)$(PYTHONDIR)/corral/
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

# Removes exactly what install put there (include/corral and share/doc/corral
# are corral's own).
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/corral
	rm -f $(DESTDIR)$(LIBDIR)/libcorral.so $(DESTDIR)$(LIBDIR)/libcorral.so.$(SOMAJOR) \
	  $(DESTDIR)$(LIBDIR)/libcorral.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libcorral.a
	rm -f $(DESTDIR)$(PKGCONFIGDIR)/corral.pc $(DESTDIR)$(PKGCONFIGDIR)/corral-static.pc
	rm -rf $(DESTDIR)$(INCLUDEDIR)/corral
	rm -f $(DESTDIR)$(MANDIR)/man1/corral.1 $(DESTDIR)$(MANDIR)/man3/corral.3
	rm -rf $(DESTDIR)$(DOCDIR)
	rm -f $(DESTDIR)$(COMPLETIONSDIR)/corral
	rm -rf $(DESTDIR)$(PYTHONDIR)/corral

clean:
	rm -rf build

-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(TEST_BINS:=.d) $(SECCOMP_GEN).d
