# hachi — GNU make build.
#   make            build/libhachi.a, build/libhachi.so, build/hachi
#   make test       release tests + ASan/UBSan tests + aarch64 tests under qemu (when the
#                   cross compiler and qemu-aarch64 are installed; .ci/run installs them)
#   make CROSS=aarch64   cross-compile into build-aarch64/ with aarch64-linux-gnu-gcc
#   make fuzz       libFuzzer target for the GGUF parser (clang)
#   make bench      headline benchmark (synthetic E2B-shaped Q4_0, depths 128/2048/8192)

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
endif
ifneq ($(findstring aarch64,$(MACHINE)),)
FLAGS_neon   := -march=armv8.2-a+dotprod+fp16
endif

LIB_SRC  := $(wildcard src/*.c) $(wildcard src/kernels/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
TOOL_SRC := $(wildcard tools/*.c)
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

.PHONY: all test test-fast fuzz bench clean
all: $(BUILD)/libhachi.a $(BUILD)/libhachi.so $(BUILD)/hachi $(BUILD)/test_hachi

# The library exports only include/hachi.h's HACHI_API functions; tools/ sees only that header
# (no -Isrc), tests also the internals.
$(LIB_OBJ):  DIR_FLAGS = -Isrc -fvisibility=hidden -DHACHI_BUILD
$(TOOL_OBJ): DIR_FLAGS = -Itools
$(TEST_OBJ): DIR_FLAGS = -Isrc

$(BUILD)/src/kernels/x86_avx2.o:   ISA_FLAGS = $(FLAGS_avx2)
$(BUILD)/src/kernels/x86_avx512.o: ISA_FLAGS = $(FLAGS_avx512)
$(BUILD)/src/kernels/x86_avx2_attn.o: ISA_FLAGS = $(FLAGS_avx2)
$(BUILD)/src/kernels/arm_neon.o:   ISA_FLAGS = $(FLAGS_neon)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DIR_FLAGS) $(ISA_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libhachi.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libhachi.so: $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/hachi: $(TOOL_OBJ) $(BUILD)/libhachi.a
	$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libhachi.a $(LDLIBS)

$(BUILD)/test_hachi: $(TEST_OBJ) $(BUILD)/libhachi.a
	$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) $(BUILD)/libhachi.a $(LDLIBS)

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

bench: all
	@sh bench/headline.sh

clean:
	rm -rf build build-asan build-aarch64 build-fuzz

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
