# cdrun: one build for everything.
#
#   make              bin/cdrun (warnings are errors)
#   make test         build and run every test (unit suites + integration)
#   make asan test    the same under AddressSanitizer + UBSan (build/asan/)
#   make bench        scripts/bench/launch
#   make install      PREFIX=/usr/local

CC      ?= gcc
PREFIX  ?= /usr/local
PKGS    := libuv libcjson

ifneq ($(filter asan,$(MAKECMDGOALS)),)
SAN := 1
endif

ifeq ($(SAN),1)
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
CPPFLAGS += -D_GNU_SOURCE -Ilauncher -Iproto -Irdzvd
CFLAGS   += -std=gnu11 -g $(OPT) $(WARN) $(SANFLAGS) \
            $(shell pkg-config --cflags $(PKGS))
LDFLAGS  += $(SANFLAGS)
LDLIBS   += $(shell pkg-config --libs $(PKGS)) -ldl -lm
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

VERSION  := $(shell cat VERSION)
CPPFLAGS += -DCDRUN_VERSION='"$(VERSION)"'

# Everything but the two mains goes into one archive that cdrun, rdzvd and
# the unit suites link: the rendezvous state machine exists once.
CORE_SRC := $(filter-out launcher/main.c rdzvd/main.c, \
              $(wildcard launcher/*.c rdzvd/*.c proto/*.c))
CORE_OBJ := $(CORE_SRC:%.c=$(OUT)/%.o)
CORE_LIB := $(OUT)/libcdrun_core.a

UNIT_SRC  := $(wildcard tests/unit/check_*.c)
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(OUT)/tests/%)
HELPER_SRC := $(wildcard tests/helpers/*.c)
HELPER_BIN := $(HELPER_SRC:tests/helpers/%.c=$(OUT)/tests/%)
EXAMPLE_SRC := $(wildcard examples/*.c)
EXAMPLE_BIN := $(EXAMPLE_SRC:examples/%.c=$(BINDIR)/%)

.PHONY: all asan test unit integ bench install clean fuzz
all: $(BINDIR)/cdrun $(BINDIR)/rdzvd $(EXAMPLE_BIN)
asan: all

$(OUT)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(CORE_LIB): $(CORE_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(BINDIR)/cdrun: $(OUT)/launcher/main.o $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BINDIR)/rdzvd: $(OUT)/rdzvd/main.o $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BINDIR)/%: $(OUT)/examples/%.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(OUT)/tests/check_%: $(OUT)/tests/unit/check_%.o $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

$(OUT)/tests/%: $(OUT)/tests/helpers/%.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

test: unit integ

unit: $(UNIT_BIN)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; \
	  CK_DEFAULT_TIMEOUT=60 $$t; done

# Under the sanitizers every report of every cdrun process lands in
# $(OUT)/san/; any file there fails the run.
SAN_DIR := $(abspath $(OUT)/san)
ifeq ($(SAN),1)
SAN_ENV := ASAN_OPTIONS=log_path=$(SAN_DIR)/asan:detect_leaks=1 \
           UBSAN_OPTIONS=log_path=$(SAN_DIR)/ubsan:print_stacktrace=1
endif

integ: all $(HELPER_BIN)
	@rm -rf $(SAN_DIR) && mkdir -p $(SAN_DIR)
	$(SAN_ENV) CDRUN=$(abspath $(BINDIR)/cdrun) \
	  TESTWORKER=$(abspath $(OUT)/tests/testworker) bash tests/integ/run.sh
	@if [ -n "$$(ls -A $(SAN_DIR))" ]; then \
	  echo "sanitizer reports:"; cat $(SAN_DIR)/*; exit 1; fi

bench: all
	scripts/bench/launch

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(BINDIR)/cdrun $(DESTDIR)$(PREFIX)/bin/cdrun
	install -m 755 $(BINDIR)/rdzvd $(DESTDIR)$(PREFIX)/bin/rdzvd
	install -m 644 man/cdrun.1 $(DESTDIR)$(PREFIX)/share/man/man1/cdrun.1

# Coverage-guided fuzzing of everything that parses network input (clang's
# libFuzzer).  `make fuzz FUZZ_SECS=60`; the corpus grows in build/fuzz/.
FUZZ_SECS ?= 20
FUZZ_CC   ?= clang
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/corpus_$$t; \
	  $(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined \
	    -D_GNU_SOURCE -Iproto -Irdzvd $$(pkg-config --cflags libcjson) \
	    tests/fuzz/fuzz_$$t.c $$(cat tests/fuzz/fuzz_$$t.srcs) \
	    $$(pkg-config --libs $(PKGS)) -lm -o build/fuzz/fuzz_$$t; \
	  echo "== fuzz $$t for $(FUZZ_SECS)s"; \
	  build/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECS) \
	    build/fuzz/corpus_$$t tests/fuzz/seeds_$$t; \
	done

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
