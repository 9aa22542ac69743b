#!/bin/sh
# NEON kernels in instructions (qemu_insn.c; qemu's time says nothing of an ARM core):
# 1. the prefill GEMM against the x8 kernel, per 8 rows x 32 values x token, with sdot alone
#    (-cpu cortex-a76) and with i8mm (qemu's default CPU), for each interleaved type and 2-16 tokens;
# 2. the fp16 attention tiles (scores, values streamed, values in cache) per key x head x dim, at 8
#    heads (Gemma 4's tiles) and at 4 (the per-row kernels, which 8 heads ran before); at 8 heads
#    also the f32-row entries over rows converted once (scores32, values32: a prefill group's tile);
# 3. the int8 K/V tile kernels against the int8 matrix products (i8mm) per key x query head x dim.
# Run from the repository root after make CROSS=aarch64: sh bench/neon_counts.sh [ROWS COLS REPS]
# (TYPES="q4_0 q4_K" and NTS="8 16" narrow the first table; ATTN=0 skips the second; LIB=path/to/
# libhachi.a counts another aarch64 build).
set -e
ROWS=${1:-64} COLS=${2:-1536} REPS=${3:-4}
QEMU="qemu-aarch64 -L /usr/aarch64-linux-gnu"
gcc -O2 -shared -fPIC -fvisibility=hidden -o /tmp/qemu_insn.so bench/qemu_insn.c
for b in gemm attn; do
    aarch64-linux-gnu-gcc -O2 -Isrc -Iinclude -static -o /tmp/bench_neon_$b bench/bench_neon_$b.c \
        "${LIB:-build-aarch64/libhachi.a}" -lm -lpthread
done
# per_unit CPU PROGRAM ARGS...: (instructions with REPS - with 0) / units, and the multiply instructions
per_unit() {
    cpu=$1 prog=$2; shift 2
    a=$($QEMU -cpu "$cpu" -plugin /tmp/qemu_insn.so "$prog" "$@" 0 2>&1) || { echo "$a" >&2; exit 1; }
    b=$($QEMU -cpu "$cpu" -plugin /tmp/qemu_insn.so "$prog" "$@" "$REPS" 2>&1) || { echo "$b" >&2; exit 1; }
    printf '%s\n%s\n' "$a" "$b" | awk '/^insns/ {n++; i[n] = $2; m[n] = $4 + $6} /units/ {for (k = 1; k < NF; k++) if ($k == "units") u = $(k + 1) + 0}
        END {printf "%.2f %.2f\n", (i[2] - i[1]) / u, (m[2] - m[1]) / u}'
}
echo "prefill GEMM ($ROWS rows x $COLS columns): instructions (multiplies) per 8 rows x 32 values x token"
echo "type  nt  cpu         x8 kernel      GEMM           GEMM/x8"
for type in ${TYPES:-q4_0 q8_0 q4_K q5_K q6_K}; do
    for nt in ${NTS:-1 2 3 4 5 8 16}; do
        for cpu in cortex-a76 max; do
            set -- $(per_unit $cpu /tmp/bench_neon_gemm "$type" x8 "$ROWS" "$COLS" "$nt"); x=$1 xm=$2
            set -- $(per_unit $cpu /tmp/bench_neon_gemm "$type" gemm "$ROWS" "$COLS" "$nt"); g=$1 gm=$2
            echo "$type  $nt  $cpu  $x ($xm)  $g ($gm)  $(echo "$g $x" | awk '{printf "%.2f", $1 / $2}')"
        done
    done
done
[ "${ATTN:-1}" = 0 ] && exit 0
echo "fp16 attention tiles, 128 keys: instructions per key x head x dim"
echo "way     hd   8 heads  4 heads (per-row kernels)"
for way in scores values hot; do
    for hd in 256 512; do
        echo "$way  $hd  $(per_unit max /tmp/bench_neon_attn $way 8 $hd 128 | cut -d' ' -f1)  $(per_unit max /tmp/bench_neon_attn $way 4 $hd 128 | cut -d' ' -f1)"
    done
done
for way in scores32 values32; do
    for hd in 256 512; do echo "$way  $hd  $(per_unit max /tmp/bench_neon_attn $way 8 $hd 128 | cut -d' ' -f1)"; done
done
echo "int8 attention, 128 keys, 8 heads: instructions per key x query head x dim (tile kernels: one token's"
echo "heads; products: a prefill group's 16 tokens x 8 heads, i8mm)"
for way in scores8 dots8 values8 wsums8; do
    for hd in 256 512; do echo "$way  $hd  $(per_unit max /tmp/bench_neon_attn $way 8 $hd 128 | cut -d' ' -f1)"; done
done
