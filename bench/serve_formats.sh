#!/bin/sh
# What serve's constrained sampling and prompt scoring cost on the E2B-shaped Q4_0 file (its
# 262,144-token vocabulary, random weights): greedy decode of 64 tokens without and with
# response_format json_object, and a 517-token prompt prefilled plainly and scored (echo with
# logprobs: every row's logits kept), alternated for 3 rounds; each line is the server's own log
# line (its ms). The file is made by `make bench` (bench/cache/). Usage: bench/serve_formats.sh
set -e
cd "$(dirname "$0")/.."
BIN=${HACHI_BIN:-build/hachi}
M=${HACHI_BENCH_CACHE:-bench/cache}/gemma4-e2b-q4_0-s1.gguf
[ -f "$M" ] || { echo "bench/serve_formats.sh: $M absent (make bench makes it)" >&2; exit 1; }
ERR=$(mktemp)
"$BIN" serve -m "$M" --port 0 -t "${HACHI_BENCH_THREADS:-2}" -c 4096 2>"$ERR" &
PID=$!
trap 'kill $PID 2>/dev/null; rm -f "$ERR"' EXIT
PORT=
for i in $(seq 1 300); do
    PORT=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$ERR")
    [ -n "$PORT" ] && break
    sleep 1
done
[ -n "$PORT" ] || { cat "$ERR" >&2; exit 1; }
P=$(awk 'BEGIN { for (i = 0; i < 86; i++) printf "the cat sat on a mat "; }')
req() {  # label, body: the server's line for it
    curl -s "http://127.0.0.1:$PORT/v1/completions" -d "$2" > /dev/null
    printf '%-24s %s\n' "$1" "$(tail -n 1 "$ERR" | sed 's/.*generated[^,]*, [a-z]*, //')"
}
req "warm-up" '{"prompt":"warm up","max_tokens":4,"temperature":0}' > /dev/null
for r in 1 2 3; do
    req "decode 64" '{"prompt":"Data:","max_tokens":64,"temperature":0,"cache_prompt":false}'
    req "decode 64, json_object" '{"prompt":"Data:","max_tokens":64,"temperature":0,"cache_prompt":false,"response_format":{"type":"json_object"}}'
    req "prompt 517" "{\"prompt\":\"$P\",\"max_tokens\":1,\"temperature\":0,\"cache_prompt\":false}"
    req "prompt 517, scored" "{\"prompt\":\"$P\",\"max_tokens\":1,\"temperature\":0,\"cache_prompt\":false,\"echo\":true,\"logprobs\":1}"
done
