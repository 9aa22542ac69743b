#!/bin/sh
# The headline benchmark (`make bench`): decode speed of a synthetic
# E2B-shaped Q4_0 Gemma 4 at depths 128, 2048, 8192 and 32768 on 2 threads (then
# a page-sparse row, budget 1024, at 128 and 32768, and the time to first token of a
# 2048-token prompt), against
# the machine's measured read bandwidth. The model (random weights, real shape,
# ~3 GB) is generated once into bench/cache/ ($HACHI_BENCH_CACHE overrides) and
# reused; nothing is downloaded. Depth 128 is filled by a real prefill, 2048 and
# 8192 by writing plausible K/V rows (--fill auto: real up to 512): a real fill
# to 8192 takes minutes on a 2-core machine (E2B prefills at ~40-50 tok/s here),
# and dense attention time does not depend on the K/V values. The prefill rate is
# still measured (512 real tokens). Results: the tables on
# stdout, JSON in bench/last.json, bench/last-sparse.json and bench/last-ttft.json.
# Extra arguments are passed to `hachi bench` (e.g. -r 5, --fill real).
set -e
cd "$(dirname "$0")/.."
BIN=${HACHI_BIN:-build/hachi}
THREADS=${HACHI_BENCH_THREADS:-2}
[ -x "$BIN" ] || { echo "bench/headline.sh: $BIN not built (run make)" >&2; exit 1; }
"$BIN" bench --synth e2b --type q4_0 --seed 1 --depth 128,2048,8192,32768 -t "$THREADS" \
    --fill auto --json bench/last.json "$@"
# the page-sparse row: the same model and depths 128 / 32768 with a budget of 1024 keys
echo
"$BIN" bench --synth e2b --type q4_0 --seed 1 --depth 128,32768 -t "$THREADS" --sparse 1024 \
    --fill fast --no-prefill --no-verify --no-profile --json bench/last-sparse.json "$@"
# time to first token: a real prefill of 2048 tokens and where its time goes
echo
exec "$BIN" bench --synth e2b --type q4_0 --seed 1 -t "$THREADS" --ttft 2048 --json bench/last-ttft.json "$@"
