# cdrun: one build for everything.
#
#   make              bin/cdrun (warnings are errors)
#   make test         build and run every test (unit suites + integration)
#   make check T=args one unit suite (tests/unit/check_args.c); one test case
#                     of it: CK_RUN_CASE=<tcase> (CK_RUN_SUITE=<suite>)
#   make integ T=signals  the integration scenarios whose name has "signals"
#   make asan test    the same under AddressSanitizer + UBSan (build/asan/)
#   make check-layers the layers hold: no "../" includes, no archive using
#                     a higher layer's symbol, every header compiles alone,
#                     libpg.so exporting only pg.h's pg_* names
#   make bench        scripts/bench/launch
#   make install      PREFIX=/usr/local
#   make wheel        build/pkg/dist/cdrun-*.whl (scripts/pkg/README.md)
#   make deb          build/pkg/cdrun_*_amd64.deb, libpg-dev_*_amd64.deb

.DEFAULT_GOAL := all

CC      ?= gcc
PREFIX  ?= /usr/local
PKGS    := libuv libcjson

ifneq ($(filter asan,$(MAKECMDGOALS)),)
SAN := 1
endif

# FUZZ=1: the layer archives built by clang with libFuzzer's coverage and
# the sanitizers, in build/fuzz/, for `make fuzz` to link its targets with.
ifeq ($(FUZZ),1)
CC       := $(or $(FUZZ_CC),clang)
OUT      := build/fuzz
BINDIR   := build/fuzz/bin
SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined
OPT      := -O1 -Wno-unknown-warning-option
else ifneq ($(filter wheel deb,$(PKG)),)
# PKG=wheel|deb: the binaries that `make wheel` / `make deb` package, in
# build/<pkg>/ (see the packaging block below).
OUT      := build/$(PKG)
BINDIR   := build/$(PKG)/bin
SANFLAGS :=
OPT      := -O2
CUDA_HOME := /nonexistent
else ifeq ($(SAN),1)
OUT      := build/asan
BINDIR   := build/asan/bin
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer \
            -fno-sanitize-recover=undefined
OPT      := -O1
else
OUT      := build/release
BINDIR   := bin
SANFLAGS :=
OPT      := -O2
endif

WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
            -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 \
            -Wno-format-truncation
CPPFLAGS += -D_GNU_SOURCE
# Layering: each folder sees its own headers and those of the layers it is
# built on (util <- proto <- rdzvd <- launcher; libpg: libpg, worker and
# util, Note [libpg's own copies]; examples: pg.h only).  Inside libpg the
# same holds for its floors (Note [floors] in libpg/core/hooks.h): core
# (with the backends cpu/ and nccl/) <- ddp <- live <- init.c.  `make
# check-layers` checks that the archives and objects keep to it.
# proto/worker is the worker contract (worker_contract.h): part of the
# proto layer, and compiled into libpg too.
INC_util     := -Iproto/util
INC_worker   := -Iproto/worker
INC_proto    := -Iproto $(INC_worker) $(INC_util)
INC_rdzvd    := -Irdzvd $(INC_proto)
INC_launcher := -Ilauncher $(INC_rdzvd)
INC_pg_core  := -Ilibpg/include -Ilibpg/core $(INC_worker) $(INC_util)
INC_pg_ddp   := -Ilibpg/ddp $(INC_pg_core)
INC_pg_live  := -Ilibpg/live $(INC_pg_ddp)
INC_libpg    := -Ilibpg $(INC_pg_live)
CFLAGS   += -std=gnu11 -g $(OPT) $(WARN) $(SANFLAGS) \
            $(shell pkg-config --cflags $(PKGS))
LDFLAGS  += $(SANFLAGS)
LDLIBS   += $(shell pkg-config --libs $(PKGS)) -ldl -lm
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

VERSION  := $(shell cat VERSION)
CPPFLAGS += -DCDRUN_VERSION='"$(VERSION)"'

# One archive per layer, lowest first: util (proto/util: numbers, errors,
# the clock, the timer heap, the hash table, the intrusive list),
# proto (the wire protocol), rdzvd (the daemon; its state machine is
# linked into cdrun for embedded mode: it exists once), launcher.  A layer uses only the layers below it;
# every .c in a layer's folder is built into its archive (but the mains).
LAYERS       := util proto rdzvd launcher
util_SRC     := $(wildcard proto/util/*.c)
proto_SRC    := $(wildcard proto/*.c proto/worker/*.c)
rdzvd_SRC    := $(filter-out rdzvd/main.c, $(wildcard rdzvd/*.c))
launcher_SRC := $(filter-out launcher/main.c launcher/cjson_dl.c, \
                $(wildcard launcher/*.c))
$(foreach l,$(LAYERS),$(eval $(l)_OBJ := $$($(l)_SRC:%.c=$$(OUT)/%.o)))
$(foreach l,$(LAYERS),$(eval $(l)_LIB := $$(OUT)/libcdrun_$(l).a))
$(foreach l,$(LAYERS),$(eval $$($(l)_LIB): $$($(l)_OBJ)))
# Highest first, as the linker wants them.
LAYER_LIBS   := $(launcher_LIB) $(rdzvd_LIB) $(proto_LIB) $(util_LIB)
$(util_OBJ): CPPFLAGS += $(INC_util)
$(proto_OBJ): CPPFLAGS += $(INC_proto)
$(OUT)/rdzvd/%.o: CPPFLAGS += $(INC_rdzvd)
# rdzvd/live_store.c loads libpg.so and types its calls by pg.h, libpg's
# installed public header; it links nothing of libpg's.
$(OUT)/rdzvd/live_store.o: CPPFLAGS += -Ilibpg/include
$(OUT)/launcher/%.o: CPPFLAGS += $(INC_launcher)
$(OUT)/examples/%.o: CPPFLAGS += -Ilibpg/include
$(OUT)/tests/%.o: CPPFLAGS += $(INC_launcher) $(INC_libpg)

# ---- libpg: lib/libpg.a, lib/libpg.so, lib/libpg.pc ----------------------
# The NCCL backend is built when CUDA and NCCL headers and libraries are
# found (CUDA_HOME, default /usr/local/cuda); otherwise a stub returns
# -ENOTSUP at run time.
CUDA_HOME ?= /usr/local/cuda
NCCL_H      := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h \
                 /usr/local/include/nccl.h /usr/include/nccl.h))
CUDART_H    := $(wildcard $(CUDA_HOME)/include/cuda_runtime.h)
CUDA_LIBDIR := $(patsubst %/,%,$(dir $(firstword $(wildcard \
                 $(CUDA_HOME)/lib64/libcudart.so $(CUDA_HOME)/lib/libcudart.so))))
NCCL_LIBDIR := $(patsubst %/,%,$(dir $(firstword $(wildcard \
                 $(CUDA_HOME)/lib64/libnccl.so $(CUDA_HOME)/lib/libnccl.so \
                 /usr/lib/x86_64-linux-gnu/libnccl.so /usr/local/lib/libnccl.so))))
ifneq ($(and $(NCCL_H),$(CUDART_H),$(CUDA_LIBDIR),$(NCCL_LIBDIR)),)
WITH_NCCL   := 1
PG_NCCL_SRC := libpg/nccl/nccl.c libpg/nccl/nccl_comm.c \
               libpg/nccl/nccl_fence.c libpg/nccl/nccl_watchdog.c \
               libpg/nccl/nccl_peers.c libpg/nccl/nccl_live.c
PG_NCCL_CFLAGS := -DPG_WITH_NCCL -I$(CUDA_HOME)/include -I$(dir $(NCCL_H))
PG_NCCL_LIBS := -L$(NCCL_LIBDIR) -L$(CUDA_LIBDIR) -lnccl -lcudart \
                -Wl,-rpath,$(NCCL_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR)
PG_BACKENDS := cpu(shm,tcp,hier) nccl
else
PG_NCCL_SRC := libpg/nccl/nccl_none.c
PG_BACKENDS := cpu(shm,tcp,hier) [nccl not built: no CUDA/NCCL under $(CUDA_HOME)]
endif

# Note [libpg's own copies]: libpg is installed alone (libpg.so, pg.h,
# nothing of cdrun's), so it links none of cdrun's archives; but that is
# about binaries, not sources.  The helpers of proto/util that libpg uses
# are compiled into it, as redis compiles sds.o into three binaries: one
# copy of each rule, built twice.  Like every internal symbol of libpg
# they are hidden (-fvisibility=hidden): libpg.so exports only pg_* names,
# which scripts/check-layers.sh checks.  libpg keeps its own only where
# the shape differs: the store's table (store_table.h).  The store
# server's deadlines are util's timer heap (timer_heap.h).  So is the
# worker contract's round file parser (proto/worker/round_file.h): cdrun
# writes what libpg reads, one grammar.
PG_UTIL_SRC := proto/util/num.c proto/util/sha256.c proto/util/hashtab.c \
               proto/util/timer_heap.c proto/worker/round_file.c
LIBDIR   := $(if $(filter build/release,$(OUT)),lib,$(OUT)/lib)
PG_SRC   := $(wildcard libpg/*.c libpg/core/*.c libpg/ddp/*.c libpg/live/*.c \
              libpg/cpu/*.c) $(PG_NCCL_SRC) $(PG_UTIL_SRC)
PG_OBJ   := $(PG_SRC:%.c=$(OUT)/pic/%.o)
PG_LIBS  := -lpthread -lrt -lm $(PG_NCCL_LIBS)
PG_CFLAGS := -fPIC -fvisibility=hidden
# Each floor's objects see their floor's headers and those below only.
PG_INC   := $(INC_util)
$(OUT)/pic/libpg/core/%.o $(OUT)/pic/libpg/cpu/%.o \
$(OUT)/pic/libpg/nccl/%.o: PG_INC := $(INC_pg_core)
$(OUT)/pic/libpg/ddp/%.o: PG_INC := $(INC_pg_ddp)
$(OUT)/pic/libpg/live/%.o: PG_INC := $(INC_pg_live)
$(OUT)/pic/libpg/init.o: PG_INC := $(INC_libpg)

$(OUT)/pic/libpg/nccl/%.o: libpg/nccl/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(PG_CFLAGS) $(PG_INC) $(PG_NCCL_CFLAGS) \
	    -MMD -MP -c $< -o $@

$(OUT)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(PG_CFLAGS) $(PG_INC) -MMD -MP -c $< -o $@

$(LIBDIR)/libpg.a: $(PG_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@
	$(AR) rcs $@ $^
	@echo "libpg: built backends: $(PG_BACKENDS)"

$(LIBDIR)/libpg.so: $(PG_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libpg.so.0 -Wl,--no-undefined \
	    -o $@.0 $^ $(PG_LIBS)
	ln -sf libpg.so.0 $@

# The build tree's libpg.pc points at the build tree (PKG_CONFIG_PATH=lib
# builds against it); the installed one, written by install, at PREFIX.
$(LIBDIR)/libpg.pc: libpg/libpg.pc.in Makefile
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(CURDIR)|' -e 's|@VERSION@|$(VERSION)|' \
	    -e 's|@LIBDIR@|$(abspath $(LIBDIR))|' \
	    -e 's|@INCLUDEDIR@|$(CURDIR)/libpg/include|' \
	    -e 's|@LIBS_PRIVATE@|$(PG_LIBS)|' $< > $@

libpg: $(LIBDIR)/libpg.a $(LIBDIR)/libpg.so $(LIBDIR)/libpg.pc

UNIT_SRC  := $(wildcard tests/unit/check_*.c)
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(OUT)/tests/%)
HELPER_SRC := $(wildcard tests/helpers/*.c)
HELPER_BIN := $(HELPER_SRC:tests/helpers/%.c=$(OUT)/tests/%)
EXAMPLE_SRC := $(wildcard examples/*.c)
EXAMPLE_BIN := $(EXAMPLE_SRC:examples/%.c=$(BINDIR)/%)

# cdrun and rdzvd link no crypto library (proto/util/sha256.h says why);
# the unit suites link libcrypto to check that SHA-256 against OpenSSL's.
CRYPTO_LIBS := $(shell pkg-config --libs libcrypto)
$(UNIT_BIN): LDLIBS += $(CRYPTO_LIBS)

.PHONY: all asan test unit check integ bench install clean fuzz libpg \
        check-layers check-headers
all: $(BINDIR)/cdrun $(BINDIR)/rdzvd libpg $(EXAMPLE_BIN)
asan: all

$(OUT)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(OUT)/libcdrun_%.a:
	@rm -f $@
	$(AR) rcs $@ $^

# cdrun loads libcjson only when it needs it (Note [cJSON on demand] in
# launcher/cjson_dl.c), takes its few libm functions from libm.a, and
# links libuv's archive where there is one (Debian's libuv1-dev): a
# launch then maps and relocates libc alone, and touches only the part of
# libuv it uses.
#
# Note [cdrun stays dynamic]: a static-pie cdrun (issue 37) starts in 0.25
# ms of CPU instead of 0.62 (`cdrun --version`, perf stat -r 200; 46 page
# faults instead of 72), a twentieth of a launch of 8, and is 2.9 MB
# instead of 1.7.  But everything cdrun loads at run time brings the
# system's libc.so.6 into a process that has its own: with the etcd back
# end (libcurl) both agents aborted with "double free or corruption", and
# live recovery (libpg.so) segfaulted (t_etcd_basic, t_live_agent); NSS
# (getaddrinfo of a host name, getpwuid in libuv) and libcuda
# (--nproc_per_node=gpu) load the same way, and glibc supports none of it
# unless the system's glibc is the very one linked.  -z now, -z norelro,
# -z noseparate-code and -no-pie changed the start by no measurable CPU
# and 2-5 page faults.  So cdrun links libc dynamically and nothing else.
LIBUV_A    := $(shell $(CC) -print-file-name=libuv_a.a)
CDRUN_UV   := $(if $(filter /%,$(LIBUV_A)),$(LIBUV_A) -lpthread -ldl -lrt,-luv)
CDRUN_LIBS := $(CDRUN_UV) $(filter-out -luv -lcjson -lm,$(LDLIBS)) \
              -Wl,--push-state,-Bstatic -lm -Wl,--pop-state
# PKG=wheel: cJSON linked from Debian's source package (Debian has no
# libcjson.a; scripts/pkg/cjson-src.sh)
# in both binaries, and rdzvd links libuv's and libm's archives too: the
# wheel's binaries need nothing but glibc (the packaging block below).
ifeq ($(PKG),wheel)
CDRUN_CJSON := $(OUT)/cjson/cJSON.o
RDZVD_EXTRA := $(OUT)/cjson/cJSON.o
RDZVD_LIBS   = $(CDRUN_LIBS)
else
CDRUN_CJSON := $(OUT)/launcher/cjson_dl.o
RDZVD_LIBS   = $(LDLIBS)
endif
$(BINDIR)/cdrun: $(OUT)/launcher/main.o $(CDRUN_CJSON) \
                 $(LAYER_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CDRUN_LIBS)

$(BINDIR)/rdzvd: $(OUT)/rdzvd/main.o $(rdzvd_LIB) $(proto_LIB) $(util_LIB) \
                 $(RDZVD_EXTRA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(RDZVD_LIBS)

$(BINDIR)/%: $(OUT)/examples/%.o $(LIBDIR)/libpg.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(LDLIBS) \
	    $(PG_LIBS)
# An example's own modules (examples/<name>/*.c) link into it.
$(BINDIR)/train_mlp: $(patsubst %.c,$(OUT)/%.o,$(wildcard examples/train_mlp/*.c))

# The NCCL suite must know whether libpg was built with NCCL.
$(OUT)/tests/unit/check_pg_nccl.o: CPPFLAGS += $(PG_NCCL_CFLAGS)

$(OUT)/tests/check_%: $(OUT)/tests/unit/check_%.o $(LAYER_LIBS) \
                      $(LIBDIR)/libpg.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS) $(PG_LIBS)

$(OUT)/tests/%: $(OUT)/tests/helpers/%.o $(LIBDIR)/libpg.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(PG_LIBS)

# ---- NCCL on a fake GPU: CI runs libpg/nccl/ -----------------------------
# tests/fakecuda/ fakes the CUDA runtime and NCCL functions libpg/nccl/
# calls (host memory, a thread per stream, events, real reductions between
# processes).  $(FAKE_DIR)/libpg.a is libpg's own objects (libpg/nccl/ as
# built for real NCCL) with the fake in place of libcudart/libnccl; the
# NCCL suite and the workers are linked against it as well.
FAKE_DIR := $(OUT)/fake-nccl
ifeq ($(WITH_NCCL),1)
FAKE_SRC := $(wildcard tests/fakecuda/*.c)
FAKE_OBJ := $(FAKE_SRC:%.c=$(FAKE_DIR)/%.o)
FAKE_UNIT := $(FAKE_DIR)/tests/check_pg_nccl
FAKE_BINS := $(FAKE_UNIT) $(FAKE_DIR)/tests/pgtest \
             $(FAKE_DIR)/tests/reducertest $(FAKE_DIR)/tests/pg_live_worker \
             $(FAKE_DIR)/tests/pg_live_sub

$(FAKE_DIR)/tests/fakecuda/%.o: tests/fakecuda/%.c tests/fakecuda/fake.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(PG_NCCL_CFLAGS) -c $< -o $@

$(FAKE_DIR)/libpg.a: $(PG_OBJ) $(FAKE_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(FAKE_DIR)/tests/check_pg_nccl: $(OUT)/tests/unit/check_pg_nccl.o \
    $(LAYER_LIBS) $(FAKE_DIR)/libpg.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS) -lpthread -lrt -lm

$(FAKE_DIR)/tests/%: $(OUT)/tests/helpers/%.o $(FAKE_DIR)/libpg.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lpthread -lrt -lm
endif

test: unit integ

# T=pg_nccl runs the NCCL suite on the fake as well; the fake's suite
# runs twice: with several fake devices and with one (a 1-GPU machine).
UNIT_RUN := $(if $(T),$(T:%=$(OUT)/tests/check_%) \
              $(if $(filter pg_nccl,$(T)),$(FAKE_UNIT)),$(UNIT_BIN) $(FAKE_UNIT))
unit check: $(UNIT_RUN)
	@set -e; for t in $(UNIT_RUN); do echo "== $$t"; \
	  CK_DEFAULT_TIMEOUT=60 $$t; \
	  if [ "$$t" = "$(FAKE_UNIT)" ]; then echo "== $$t (1 fake device)"; \
	    FAKECUDA_DEVICES=1 CK_DEFAULT_TIMEOUT=60 $$t; fi; done

# Under the sanitizers every report of every cdrun process lands in
# $(OUT)/san/; any file there fails the run.
SAN_DIR := $(abspath $(OUT)/san)
ifeq ($(SAN),1)
SAN_ENV := ASAN_OPTIONS=log_path=$(SAN_DIR)/asan:detect_leaks=1 \
           UBSAN_OPTIONS=log_path=$(SAN_DIR)/ubsan:print_stacktrace=1
endif

integ: all $(HELPER_BIN) $(FAKE_BINS)
	@rm -rf $(SAN_DIR) && mkdir -p $(SAN_DIR)
	$(SAN_ENV) CDRUN=$(abspath $(BINDIR)/cdrun) RDZVD=$(abspath $(BINDIR)/rdzvd) \
	  TESTWORKER=$(abspath $(OUT)/tests/testworker) bash tests/integ/run.sh $(T)
	@if [ -n "$$(ls -A $(SAN_DIR))" ]; then \
	  echo "sanitizer reports:"; cat $(SAN_DIR)/*; exit 1; fi

# ---- layers: scripts/check-layers.sh, and every header compiles alone ----
# A header is compiled as its own translation unit with its layer's -I
# (libpg's with libpg's); a stamp per header keeps the check incremental.
HDR_util     := $(wildcard proto/util/*.h)
HDR_proto    := $(wildcard proto/*.h proto/worker/*.h)
HDR_rdzvd    := $(wildcard rdzvd/*.h)
HDR_launcher := $(wildcard launcher/*.h)
HDR_pg_core  := $(wildcard libpg/include/*.h libpg/core/*.h libpg/cpu/*.h)
HDR_pg_ddp   := $(wildcard libpg/ddp/*.h)
HDR_pg_live  := $(wildcard libpg/live/*.h)
HDR_libpg    := $(wildcard libpg/*.h)
# The NCCL backend's headers need CUDA's and NCCL's (PG_NCCL_CFLAGS): they
# are checked wherever that backend is built (the fake's CI included).
ifeq ($(WITH_NCCL),1)
HDR_nccl     := $(wildcard libpg/nccl/*.h)
HDR_pg_core  += $(HDR_nccl)
endif
HDR_SETS := $(LAYERS) pg_core pg_ddp pg_live libpg
HDR_OK := $(foreach l,$(HDR_SETS),$(HDR_$(l):%=$(OUT)/hdr/%.ok))
$(foreach l,$(HDR_SETS),$(eval \
  $$(HDR_$(l):%=$$(OUT)/hdr/%.ok): HDR_INC := $$(INC_$(l))))
$(HDR_nccl:%=$(OUT)/hdr/%.ok): HDR_INC := $(INC_pg_core) $(PG_NCCL_CFLAGS)
$(OUT)/hdr/%.ok: %
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(HDR_INC) $(CFLAGS) -fsyntax-only -MMD -MP \
	  -MT $@ -MF $@.d -x c $<
	@touch $@

check-headers: $(HDR_OK)
	@echo "check-headers: $(words $(HDR_OK)) headers compile alone"

check-layers: check-headers $(LAYER_LIBS) $(LIBDIR)/libpg.a \
              $(LIBDIR)/libpg.so
	scripts/check-layers.sh $(OUT) $(LIBDIR)/libpg.a $(LIBDIR)/libpg.so

bench: all
	scripts/bench/launch

# `make install PREFIX=/usr DESTDIR=/tmp/root`: binaries, man pages, pg.h,
# libpg (static, shared with its libpg.so development link, libpg.pc for
# the installed PREFIX) and the systemd unit (ExecStart in PREFIX/bin).
SYSTEMD_UNITDIR ?= $(PREFIX)/lib/systemd/system
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(BINDIR)/cdrun $(DESTDIR)$(PREFIX)/bin/cdrun
	install -m 755 $(BINDIR)/rdzvd $(DESTDIR)$(PREFIX)/bin/rdzvd
	scripts/pkg/man.sh $(VERSION) man/cdrun.1 >$(DESTDIR)$(PREFIX)/share/man/man1/cdrun.1
	install -d $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/share/man/man3
	scripts/pkg/man.sh $(VERSION) man/rdzvd.8 >$(DESTDIR)$(PREFIX)/share/man/man8/rdzvd.8
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 644 libpg/include/pg.h $(DESTDIR)$(PREFIX)/include/pg.h
	install -m 644 $(LIBDIR)/libpg.a $(DESTDIR)$(PREFIX)/lib/libpg.a
	install -m 755 $(LIBDIR)/libpg.so.0 $(DESTDIR)$(PREFIX)/lib/libpg.so.0
	ln -sf libpg.so.0 $(DESTDIR)$(PREFIX)/lib/libpg.so
	scripts/pkg/man.sh $(VERSION) man/libpg.3 >$(DESTDIR)$(PREFIX)/share/man/man3/libpg.3
	chmod 644 $(DESTDIR)$(PREFIX)/share/man/man[138]/*.[138]
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
	    -e 's|@LIBDIR@|$${prefix}/lib|' \
	    -e 's|@INCLUDEDIR@|$${prefix}/include|' \
	    -e 's|@LIBS_PRIVATE@|$(PG_LIBS)|' libpg/libpg.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/libpg.pc
	chmod 644 $(DESTDIR)$(PREFIX)/lib/pkgconfig/libpg.pc
	install -d $(DESTDIR)$(SYSTEMD_UNITDIR)
	sed -e 's|/usr/local/bin/rdzvd|$(PREFIX)/bin/rdzvd|' \
	    scripts/rdzvd.service > $(DESTDIR)$(SYSTEMD_UNITDIR)/rdzvd.service
	chmod 644 $(DESTDIR)$(SYSTEMD_UNITDIR)/rdzvd.service
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions && $(BINDIR)/cdrun --print-completion bash >$(DESTDIR)$(PREFIX)/share/bash-completion/completions/cdrun

# Coverage-guided fuzzing of everything that parses network input, and of
# the round file's parser that every live worker runs (clang's
# libFuzzer).  `make fuzz FUZZ_SECS=60`; the corpus grows in build/fuzz/.
# Each target links the archives of the layers that face the network
# (rdzvd and below) and libpg's, built by clang with the fuzzer's coverage
# in build/fuzz/ (FUZZ=1 above): the linker takes what the target uses, so
# no target keeps a list of sources.
FUZZ_SECS ?= 20
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN := $(FUZZ_TARGETS:%=$(OUT)/fuzz_%)
.PHONY: fuzz-build
fuzz-build: $(FUZZ_BIN)

$(OUT)/fuzz_%: $(OUT)/tests/fuzz/fuzz_%.o $(rdzvd_LIB) $(proto_LIB) \
               $(util_LIB) $(LIBDIR)/libpg.a
	$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS) -lpthread -lrt

ifneq ($(FUZZ),1)
fuzz:
	$(MAKE) FUZZ=1 fuzz-build
	@set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/corpus_$$t; \
	  echo "== fuzz $$t for $(FUZZ_SECS)s"; \
	  build/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECS) \
	    build/fuzz/corpus_$$t tests/fuzz/seeds_$$t; \
	done
endif

# ---- packages: make wheel, make deb (issue 36) ----------------------------
# Both package binaries built for them in build/wheel/ and build/deb/
# (PKG=..., without NCCL: a package's libpg needs no CUDA; the stub
# returns -ENOTSUP), then scripts/pkg/wheel.sh and scripts/pkg/deb.sh
# assemble and check the package in build/pkg/.  The wheel's cdrun and
# rdzvd link cJSON (Debian's source package, unpacked in $(CJSON_SRC) by
# scripts/pkg/cjson-src.sh), libuv and libm
# statically, so that they need only glibc; the .deb's use Debian's libs.
CJSON_SRC := build/pkg/cjson-src
PKG_BINS := $(BINDIR)/cdrun $(BINDIR)/rdzvd $(LIBDIR)/libpg.so \
            $(LIBDIR)/libpg.a $(LIBDIR)/libpg.pc
.PHONY: wheel deb pkg-bins
pkg-bins: $(PKG_BINS)
ifeq ($(PKG),wheel)
CPPFLAGS := -I$(CJSON_SRC) $(CPPFLAGS)
$(OUT)/cjson/cJSON.o: $(CJSON_SRC)/cJSON.c $(CJSON_SRC)/cJSON.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -g -O2 -I$(CJSON_SRC) -c $< -o $@
endif
wheel:
	scripts/pkg/cjson-src.sh $(CJSON_SRC)
	$(MAKE) PKG=wheel pkg-bins
	scripts/pkg/wheel.sh build/wheel build/pkg
deb:
	$(MAKE) PKG=deb PREFIX=/usr pkg-bins
	scripts/pkg/deb.sh build/deb build/pkg

clean:
	rm -rf build bin lib

-include $(shell find build -name '*.d' 2>/dev/null)
