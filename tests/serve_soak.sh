#!/bin/sh
# Load for hachi serve (tests/test_serve.c's serve_soak): CLIENTS curl loops at once, each sending
# ROUNDS rounds of six requests: a chat answer, a streamed chat answer, a completion with a stop
# sequence, a streamed completion the client abandons after 0.3 s, malformed JSON, a health check.
# Prints one line per request: "KIND ok" or "KIND FAIL status: body" (the abandoned stream is ok
# whatever curl saw: the server's side is what the test checks, by answering afterwards).
# usage: serve_soak.sh PORT KEY CLIENTS ROUNDS TMPDIR
port=$1 key=$2 clients=$3 rounds=$4 dir=$5
url=http://127.0.0.1:$port
one() {  # kind want_status want_text curl-args...
    kind=$1 want=$2 text=$3; shift 3
    body=$dir/soak.$client.$kind
    code=$(curl -s -o "$body" -w '%{http_code}' -H 'Content-Type: application/json' \
        -H "Authorization: Bearer $key" "$@")
    if [ "$code" = "$want" ] && grep -q -- "$text" "$body"; then echo "$kind ok"
    else echo "$kind FAIL $code: $(head -c 300 "$body")"; fi
    rm -f "$body"
}
loop() {  # client
    client=$1 i=0
    while [ $i -lt "$rounds" ]; do
        n=$(( (i * 7 + $1 * 3) % 24 + 4 ))
        one chat 200 '"finish_reason"' "$url/v1/chat/completions" \
            -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story number $i of client $1.\"}],\"max_tokens\":$n}"
        one chatstream 200 'data: \[DONE\]' -N "$url/v1/chat/completions" \
            -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time $i\"}],\"max_tokens\":$n,\"stream\":true}"
        one stop 200 '"completion_tokens"' "$url/v1/completions" \
            -d "{\"prompt\":\"The little dog $1 $i\",\"max_tokens\":$n,\"stop\":[\"the\",\".\"],\"temperature\":0.8,\"seed\":$i}"
        curl -s -o /dev/null -N --max-time 0.3 -H 'Content-Type: application/json' -H "Authorization: Bearer $key" \
            "$url/v1/completions" -d '{"prompt":"A long walk","max_tokens":60,"stream":true}'
        echo "abandoned ok"
        one malformed 400 'malformed JSON' "$url/v1/chat/completions" -d '{"messages":[{"role":'
        one health 200 '"status":"ok"' "$url/health"
        i=$((i + 1))
    done
}
c=0
while [ $c -lt "$clients" ]; do loop $c > "$dir/soak.out.$c" & c=$((c + 1)); done
wait
cat "$dir"/soak.out.*
rm -f "$dir"/soak.out.*
