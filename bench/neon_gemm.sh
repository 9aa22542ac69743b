#!/bin/sh
# The NEON prefill GEMM against the x8 kernel in instructions (qemu_insn.c), per 8 rows x 32
# values x token, with sdot alone (-cpu cortex-a76) and with i8mm (qemu's default CPU).
# Run from the repository root after make CROSS=aarch64: sh bench/neon_gemm.sh [ROWS COLS REPS]
# (TYPES="q4_0 q4_K" and NTS="8 16" narrow it; by default all five types, 2-16 tokens).
set -e
ROWS=${1:-64} COLS=${2:-1536} REPS=${3:-4}
gcc -O2 -shared -fPIC -fvisibility=hidden -o /tmp/qemu_insn.so bench/qemu_insn.c
aarch64-linux-gnu-gcc -O2 -Isrc -Iinclude -static -o /tmp/bench_neon_gemm bench/bench_neon_gemm.c \
    build-aarch64/libhachi.a -lm -lpthread
count() {   # CPU TYPE WAY NT REPS -> "insns smmla sdot units"
    out=$(qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu "$1" -plugin /tmp/qemu_insn.so /tmp/bench_neon_gemm \
          "$2" "$3" "$ROWS" "$COLS" "$4" "$5" 2>&1) || { echo "$out" >&2; exit 1; }
    echo "$out" | awk '/^insns/ {i = $2; m = $4; d = $6} /units/ {u = $7 + 0} END {print i, m, d, u}'
}
echo "type  nt  cpu         x8 insns (mul)   gemm insns (mul)   gemm/x8"
for type in ${TYPES:-q4_0 q8_0 q4_K q5_K q6_K}; do
    for nt in ${NTS:-2 3 4 5 8 16}; do
        for cpu in cortex-a76 max; do
            line="$type  $nt  $cpu"
            for way in x8 gemm; do
                set -- $(count $cpu $type $way $nt 0) ; i0=$1 m0=$(($2 + $3))
                set -- $(count $cpu $type $way $nt "$REPS"); i1=$1 m1=$(($2 + $3)) u=$4
                r=$(echo "$i0 $i1 $m0 $m1 $u" | awk '{printf "%.1f (%.1f)", ($2 - $1) / $5, ($4 - $3) / $5}')
                line="$line  $r"; eval "v_$way=\$(echo \"$i0 $i1 $u\" | awk '{print (\$2 - \$1) / \$3}')"
            done
            echo "$line  $(echo "$v_gemm $v_x8" | awk '{printf "%.2f", $1 / $2}')"
        done
    done
done
