# hachi — GNU make build.
#   make            build/libhachi.a, build/libhachi.so, build/hachi
#   make test       release tests + ASan/UBSan tests + aarch64 tests under qemu (when the
#                   cross compiler and qemu-aarch64 are installed; .ci/run installs them)
#   make CROSS=aarch64   cross-compile into build-aarch64/ with aarch64-linux-gnu-gcc
#   make fuzz       libFuzzer targets (clang): the GGUF parser, the tokenizer and detokenizer, the
#                   prompt-cache loader, hachi serve's request JSON
#   make bench      headline benchmark (synthetic E2B-shaped Q4_0, depths 128/2048/8192)
#   make install    the tool, header, static and shared library and hachi.pc into
#                   $(DESTDIR)$(PREFIX) (PREFIX=/usr/local, LIBDIR=lib); make uninstall
#   make lint       cppcheck + clang-tidy over src/, tools/, tests/; fails on any finding;
#                   make lint-report lists every finding, exit 0

CC      ?= cc
ifeq ($(CC),cc)
CC := gcc
endif
ifeq ($(CROSS),aarch64)
CC      := aarch64-linux-gnu-gcc
BUILD   ?= build-aarch64
endif
BUILD   ?= build
SAN     ?=
OPT     ?= -O2

MACHINE := $(shell $(CC) -dumpmachine)
CFLAGS  := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Iinclude -pthread -fPIC -g $(OPT) $(SAN) $(EXTRA_CFLAGS)
LDFLAGS := -pthread $(SAN)
LDLIBS  := -lm

ifneq ($(findstring x86_64,$(MACHINE)),)
FLAGS_avx2   := -mavx2 -mfma -mf16c
FLAGS_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c
FLAGS_avxvnni := -mavxvnni -mavx2 -mfma -mf16c
FLAGS_amx    := $(FLAGS_avx512) -mamx-tile -mamx-int8
endif
ifneq ($(findstring aarch64,$(MACHINE)),)
FLAGS_neon   := -march=armv8.2-a+dotprod+fp16
endif

LIB_SRC  := $(wildcard src/*.c) $(wildcard src/kernels/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
TOOL_SRC := $(wildcard tools/*.c)
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/*.c)

# hachi serve links libmicrohttpd and cJSON; the library knows no HTTP or JSON. A target whose
# compiler finds neither (the aarch64 cross build: Debian has no arm64 libmicrohttpd installed
# here) builds the tool without the server (HACHI_NO_SERVE: `hachi serve` says so and exits 1).
SERVE_OK := $(shell printf '\043include <microhttpd.h>\n\043include <cjson/cJSON.h>\nint main(void) { return MHD_is_feature_supported(MHD_FEATURE_IPv6) + (cJSON_Version() != 0); }\n' | \
              $(CC) -x c - -o /dev/null -lmicrohttpd -lcjson >/dev/null 2>&1 && echo 1)
ifeq ($(SERVE_OK),1)
SERVE_LIBS := -lmicrohttpd -lcjson
else
SERVE_DEFS := -DHACHI_NO_SERVE
endif
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

.PHONY: all test test-fast fuzz bench clean lint lint-report install uninstall
all: $(BUILD)/libhachi.a $(BUILD)/libhachi.so $(BUILD)/hachi $(BUILD)/test_hachi

# The library exports only include/hachi.h's HACHI_API functions; tools/ sees only that header
# (no -Isrc), tests also the internals.
$(LIB_OBJ):  DIR_FLAGS = -Isrc -fvisibility=hidden -DHACHI_BUILD
$(TOOL_OBJ): DIR_FLAGS = -Itools $(SERVE_DEFS)
$(TEST_OBJ): DIR_FLAGS = -Isrc $(SERVE_DEFS)

$(BUILD)/src/kernels/x86_avx2.o:   ISA_FLAGS = $(FLAGS_avx2)
$(BUILD)/src/kernels/x86_avx512.o: ISA_FLAGS = $(FLAGS_avx512)
$(BUILD)/src/kernels/x86_avxvnni.o: ISA_FLAGS = $(FLAGS_avxvnni)
$(BUILD)/src/kernels/x86_amx.o: ISA_FLAGS = $(FLAGS_amx)
$(BUILD)/src/kernels/x86_avx2_attn.o: ISA_FLAGS = $(FLAGS_avx2)
$(BUILD)/src/kernels/arm_neon.o:   ISA_FLAGS = $(FLAGS_neon)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DIR_FLAGS) $(ISA_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libhachi.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

VERSION := $(shell sed -n 's/^\#define HACHI_VERSION "\(.*\)"/\1/p' include/hachi.h)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))

$(BUILD)/libhachi.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libhachi.so.$(SOMAJOR) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/hachi: $(TOOL_OBJ) $(BUILD)/libhachi.a
	$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libhachi.a $(LDLIBS) $(SERVE_LIBS)

# (the tests of serve's JSON link tools/serve_api.c where the server is built, and its JSON constraint)
TEST_SERVE_OBJ := $(if $(SERVE_LIBS),$(BUILD)/tools/serve_api.o) $(BUILD)/tools/json_grammar.o $(BUILD)/tools/json_pattern.o
$(BUILD)/test_hachi: $(TEST_OBJ) $(TEST_SERVE_OBJ) $(BUILD)/libhachi.a
	$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) $(TEST_SERVE_OBJ) $(BUILD)/libhachi.a $(LDLIBS) $(if $(SERVE_LIBS),-lcjson)

# The test command of the README: release build, then an ASan+UBSan build, one closing line.
test:
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory all BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
	@if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then \
	    $(MAKE) --no-print-directory all CROSS=aarch64; \
	else echo "aarch64 cross compiler or qemu-aarch64 missing: NEON tests not run"; rm -rf build-aarch64; fi
	@sh tests/run.sh

# Only the release tests (quick iteration).
test-fast: all
	@HACHI_BIN=$(BUILD)/hachi $(BUILD)/test_hachi $(T)

fuzz:
	@mkdir -p build-fuzz
	clang -std=c11 -D_GNU_SOURCE -DHACHI_BUILD -Iinclude -Isrc -g -O1 -fsanitize=fuzzer,address,undefined \
	    fuzz/fuzz_gguf.c src/gguf.c src/util.c src/quant.c -o build-fuzz/fuzz_gguf -lm
	@$(MAKE) --no-print-directory BUILD=build-fuzz/lib CC=clang OPT=-O1 \
	    SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" build-fuzz/lib/libhachi.a
	for t in tokenizer prompt_cache; do \
	    clang -std=c11 -D_GNU_SOURCE -Iinclude -g -O1 -fsanitize=fuzzer,address,undefined \
	        fuzz/fuzz_$$t.c build-fuzz/lib/libhachi.a -o build-fuzz/fuzz_$$t -lm -pthread || exit 1; \
	done
	@if [ "$(SERVE_OK)" = 1 ]; then \
	    echo "clang ... fuzz/fuzz_serve.c tools/serve_api.c tools/json_grammar.c tools/json_pattern.c -o build-fuzz/fuzz_serve -lcjson"; \
	    clang -std=c11 -D_GNU_SOURCE -Iinclude -Itools -g -O1 -fsanitize=fuzzer,address,undefined \
	        fuzz/fuzz_serve.c tools/serve_api.c tools/json_grammar.c tools/json_pattern.c -o build-fuzz/fuzz_serve -lcjson -lm; \
	else echo "cJSON absent: build-fuzz/fuzz_serve not built"; fi

bench: all
	@sh bench/headline.sh

# ---- install: what `pkg-config --cflags --libs hachi` (and --static) needs ----------------
PREFIX ?= /usr/local
LIBDIR ?= lib
INSTALL_LIB := $(DESTDIR)$(PREFIX)/$(LIBDIR)

install: $(BUILD)/libhachi.a $(BUILD)/libhachi.so $(BUILD)/hachi
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include $(INSTALL_LIB)/pkgconfig
	install -m 755 $(BUILD)/hachi $(DESTDIR)$(PREFIX)/bin/hachi
	install -m 644 include/hachi.h $(DESTDIR)$(PREFIX)/include/hachi.h
	install -m 644 $(BUILD)/libhachi.a $(INSTALL_LIB)/libhachi.a
	install -m 755 $(BUILD)/libhachi.so $(INSTALL_LIB)/libhachi.so.$(VERSION)
	ln -sf libhachi.so.$(VERSION) $(INSTALL_LIB)/libhachi.so.$(SOMAJOR)
	ln -sf libhachi.so.$(SOMAJOR) $(INSTALL_LIB)/libhachi.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@VERSION@|$(VERSION)|' hachi.pc.in \
	    > $(INSTALL_LIB)/pkgconfig/hachi.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/hachi $(DESTDIR)$(PREFIX)/include/hachi.h $(INSTALL_LIB)/libhachi.a \
	    $(INSTALL_LIB)/libhachi.so $(INSTALL_LIB)/libhachi.so.$(SOMAJOR) $(INSTALL_LIB)/libhachi.so.$(VERSION) \
	    $(INSTALL_LIB)/pkgconfig/hachi.pc

# ---- static analysis ---------------------------------------------------------------------
# One result file per source (build-lint/<path>.txt, one finding a line: file:line:col: tool
# check: message), redone when the source, a project header, .clang-tidy or this Makefile
# changes, so a second `make -j2 lint` checks only what changed. LINT_FILES="a.c b.c" checks
# only those. clang-tidy runs the checks of .clang-tidy (which says why each family is in or
# out); cppcheck runs the families below with --inline-suppr. A false positive gets an in-place
# suppression that says why: `// NOLINT(check): why` or `// cppcheck-suppress id ; why`.
# Kernel files are parsed with their ISA's flags (clang-tidy) or defines (cppcheck) so the
# intrinsics paths are the ones checked; arm_neon.c is checked for aarch64 when the cross
# compiler's headers are installed.
LINT_DIR   ?= build-lint
LINT_FILES ?= $(LIB_SRC) $(TOOL_SRC) $(TEST_SRC)
LINT_HDRS  := $(wildcard include/*.h src/*.h src/kernels/*.h tools/*.h tests/*.h)
# cppcheck: the warning (likely bugs), portability and performance families; style is left
# out (taste, not defects); system headers are not parsed (missingIncludeSystem off), so an
# intrinsic is an unknown function to it. The -D defines pick the one configuration checked.
CPPCHECK_FLAGS := --enable=warning,portability,performance --error-exitcode=1 --inline-suppr --quiet \
                  --std=c11 --platform=unix64 --suppress=missingIncludeSystem -D_GNU_SOURCE -D__linux__ \
                  -Iinclude -Isrc --template='{file}:{line}:{column}: cppcheck {id}: {message}'
TIDY_CFLAGS    := -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -pthread
X86_DEFS_avx2  := -D__x86_64__ -D__AVX2__ -D__FMA__ -D__F16C__
X86_DEFS_avx512 := $(X86_DEFS_avx2) -D__AVX512F__ -D__AVX512BW__ -D__AVX512VL__ -D__AVX512DQ__ -D__AVX512VNNI__
LINT_DEFS  = -D__x86_64__
LINT_FLAGS =
$(LINT_DIR)/src/kernels/x86_avx2.txt $(LINT_DIR)/src/kernels/x86_avx2_attn.txt: LINT_DEFS = $(X86_DEFS_avx2)
$(LINT_DIR)/src/kernels/x86_avx2.txt $(LINT_DIR)/src/kernels/x86_avx2_attn.txt: LINT_FLAGS = $(FLAGS_avx2)
$(LINT_DIR)/src/kernels/x86_avx512.txt: LINT_DEFS = $(X86_DEFS_avx512)
$(LINT_DIR)/src/kernels/x86_avx512.txt: LINT_FLAGS = $(FLAGS_avx512)
$(LINT_DIR)/src/kernels/x86_avxvnni.txt: LINT_DEFS = $(X86_DEFS_avx2) -D__AVXVNNI__
$(LINT_DIR)/src/kernels/x86_avxvnni.txt: LINT_FLAGS = $(FLAGS_avxvnni)
$(LINT_DIR)/src/kernels/x86_amx.txt: LINT_DEFS = $(X86_DEFS_avx512) -D__AMX_TILE__ -D__AMX_INT8__
$(LINT_DIR)/src/kernels/x86_amx.txt: LINT_FLAGS = $(FLAGS_amx)
$(LINT_DIR)/src/kernels/arm_neon.txt: LINT_DEFS = -D__aarch64__ -D__ARM_NEON -D__ARM_FEATURE_DOTPROD -D__ARM_FEATURE_FP16_VECTOR_ARITHMETIC
$(LINT_DIR)/src/kernels/arm_neon.txt: LINT_FLAGS = $(if $(wildcard /usr/aarch64-linux-gnu/include/stdio.h),--target=aarch64-linux-gnu -march=armv8.2-a+dotprod+fp16+i8mm)

LINT_OUT := $(LINT_FILES:%.c=$(LINT_DIR)/%.txt)

# clang-tidy's report as file:line:col: clang-tidy check: message, one line a finding (notes
# dropped); a finding inside a system header (an intrinsic) is placed at the last line of ours
# on its path.
define TIDY_AWK
function flush() { if (sys != "") print (loc != "" ? loc : tu ":1:1") ": clang-tidy " chk ": " msg " (in " sys ")"; sys = "" }
function strip(l) { if (index(l, root) == 1) l = substr(l, length(root) + 1); return l }
/: (warning|error): .* \[[^]]*\]$$/ {
    flush(); l = strip($$0)
    match(l, /^[^ :]+:[0-9]+:[0-9]+: [a-z]+: /); at = l; sub(/: [a-z]+: .*/, "", at); rest = substr(l, RLENGTH + 1)
    match(rest, / \[[^]]*\]$$/); chk = substr(rest, RSTART + 2, RLENGTH - 3); sub(/,.*/, "", chk); msg = substr(rest, 1, RSTART - 1)
    if (at ~ /^\//) { sys = at; loc = "" } else print at ": clang-tidy " chk ": " msg
    next
}
sys != "" && /: note: / { l = strip($$0); if (l !~ /^\//) { match(l, /^[^ :]+:[0-9]+:[0-9]+/); loc = substr(l, 1, RLENGTH) } }
END { flush() }
endef
export TIDY_AWK

# One source: the findings of both tools in one format; a tool that fails without a finding
# (not installed, cannot parse) is a finding too.
$(LINT_DIR)/%.txt: %.c $(LINT_HDRS) .clang-tidy Makefile
	@mkdir -p $(dir $@)
	@echo "lint $<"
	@{ out=$$(cppcheck $(CPPCHECK_FLAGS) $(LINT_DEFS) $< 2>&1 >/dev/null); rc=$$?; \
	   echo "$$out" | grep ': cppcheck '; \
	   [ $$rc -eq 0 ] || echo "$$out" | grep -q ': cppcheck ' || echo "$<:1:1: cppcheck failed ($$rc): $$(echo "$$out" | tr '\n' ' ' | cut -c1-300)"; \
	   out=$$(clang-tidy --quiet $< -- $(TIDY_CFLAGS) $(LINT_FLAGS) 2>&1); rc=$$?; \
	   echo "$$out" | awk -v root="$(CURDIR)/" -v tu="$<" "$$TIDY_AWK"; \
	   [ $$rc -eq 0 ] || echo "$$out" | grep -q ': \(warning\|error\): ' || echo "$<:1:1: clang-tidy failed ($$rc): $$(echo "$$out" | tr '\n' ' ' | cut -c1-300)"; \
	} > $@.tmp; mv $@.tmp $@

lint: $(LINT_OUT)
	@sort -u $(LINT_OUT); n=$$(sort -u $(LINT_OUT) | wc -l); echo "lint: $$n findings"; [ "$$n" -eq 0 ]

lint-report: $(LINT_OUT)
	@sort -u $(LINT_OUT); echo "$$(sort -u $(LINT_OUT) | wc -l) findings"

clean:
	rm -rf build build-asan build-aarch64 build-fuzz build-lint

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
