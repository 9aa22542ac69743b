#!/bin/sh
# Runs the test binary of each build that exists (release, ASan/UBSan, aarch64
# under qemu) and prints one closing line summing them: `N passed, N failed`.
# The release run has every test at full size; the instrumented (ASan) and emulated
# (qemu) runs have HACHI_TEST_QUICK set: the model-quality tests shrink their inputs
# (or skip, reported as skips), the memory and ISA paths stay covered.
total_p=0; total_f=0; total_s=0; status=0
run() {  # label, command...
    label=$1; shift
    echo "== $label"
    t0=$(date +%s)
    out=$("$@" 2>&1); rc=$?
    echo "  $label: $(( $(date +%s) - t0 )) s"
    printf '%s\n' "$out" | grep -v '^ok '
    printf '%s\n' "$out" | grep '^ok .* s$' | sort -k3 -g -r | head -n 5 | sed 's/^ok  */  slowest: /'
    line=$(printf '%s\n' "$out" | tail -n 1)
    p=$(echo "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1/p')
    f=$(echo "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\2/p')
    s=$(echo "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\3/p')
    if [ -z "$p" ]; then echo "$label: test binary crashed or printed no summary (rc=$rc)"; p=0; f=1; s=0; fi
    [ "$rc" -ne 0 ] && status=1
    total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + s))
}
run release env HACHI_BIN=build/hachi build/test_hachi
run asan env HACHI_TEST_QUICK=1 HACHI_BIN=build-asan/hachi ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build-asan/test_hachi
run house sh tests/house.sh build
run install sh tests/install.sh build
# Under qemu the tests that drive the CLI (its flags, files and output are the release and ASan
# runs' to check; every CLI process under emulation pays a model load) are skipped, reported so,
# and three whose subject is no ISA's (the pool under oversubscription, the sampled-draft
# statistics, the centroid head's cluster logic) and which are slow emulated.
AARCH64_SKIP=cli_,tokenizer_cli,passkey_prompt_format,bench_,synth_errors,prompt_cache_bad_files,convert_cli,mtp_cli
AARCH64_SKIP=$AARCH64_SKIP,threads_pool_many_runs,mtp_micro_sampled_distribution,mtp_centroid_head
if [ -x build-aarch64/test_hachi ] && command -v qemu-aarch64 >/dev/null 2>&1; then
    run aarch64 env HACHI_TEST_QUICK=1 HACHI_TEST_SKIP=$AARCH64_SKIP HACHI_BIN="qemu-aarch64 -L /usr/aarch64-linux-gnu build-aarch64/hachi" \
        qemu-aarch64 -L /usr/aarch64-linux-gnu build-aarch64/test_hachi "${HACHI_AARCH64_TESTS:-}"
fi
echo "$total_p passed, $total_f failed, $total_s skipped"
[ "$total_f" -eq 0 ] && [ $status -eq 0 ]
