#!/bin/sh
# The house rules that a compiler does not check (issue 9): the shared library exports
# exactly the functions of include/hachi.h; tools/ includes no src/ header; attention
# knows neither the model nor the session; the ring arithmetic and the KV storage type
# live in kv.c alone; kernels include no model header. Usage: tests/house.sh BUILD_DIR
cd "$(dirname "$0")/.." || exit 1
BUILD=${1:-build}
pass=0; fail=0
check() {  # name, then a command that succeeds when the rule holds; its output is shown on failure
    name=$1; shift
    if out=$("$@" 2>&1); then echo "ok   $name"; pass=$((pass + 1))
    else echo "FAIL $name"; printf '%s\n' "$out" | sed 's/^/    /'; fail=$((fail + 1)); fi
}
exports_match_header() {
    command -v nm >/dev/null || { echo "nm missing"; return 1; }
    nm -D --defined-only "$BUILD/libhachi.so" | awk '$2 == "T" {print $3}' | sort > /tmp/house_exp.$$
    grep -o 'hachi_[a-z0-9_]*(' include/hachi.h | tr -d '(' | sort -u > /tmp/house_hdr.$$
    diff /tmp/house_exp.$$ /tmp/house_hdr.$$; rc=$?
    [ -s /tmp/house_exp.$$ ] || { echo "no exports read from $BUILD/libhachi.so"; rc=1; }
    rm -f /tmp/house_exp.$$ /tmp/house_hdr.$$
    return $rc
}
tools_include_only_the_header() {
    ! grep -n '#include "' tools/*.c tools/*.h | grep -v '"hachi.h"\|"cli.h"'
}
attn_knows_no_model_or_session() {
    ! grep -n '#include "\(model\|session\)\.h"' src/attn.c src/attn.h src/kv.c src/kv.h
}
ring_arithmetic_only_in_kv() {
    ! grep -n 'n_slots\|->ring\b\|valid_from\|[=!]= *HACHI_KV_\|% *HACHI_SPEC' src/*.c | grep -v '^src/kv\.c:'
}
kernels_know_no_model() {
    ! grep -n '#include "\(\.\./\)\?\(model\|session\|forward\|attn\|kv\)\.h"' src/kernels/*.c src/kernels/*.h
}
check house_exports_match_header exports_match_header
check house_tools_include_only_the_header tools_include_only_the_header
check house_attn_knows_no_model_or_session attn_knows_no_model_or_session
check house_ring_arithmetic_only_in_kv ring_arithmetic_only_in_kv
check house_kernels_know_no_model kernels_know_no_model
echo "$pass passed, $fail failed, 0 skipped"
[ $fail -eq 0 ]
