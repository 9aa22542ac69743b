#!/bin/sh
# Prompt reuse of an OpenAI-compatible chat server (hachi serve, llama-server): a 4-turn chat
# sent as 4 requests (each resends the whole conversation, the assistant turns fixed so every
# server gets the same requests), then the last request again with its last user turn edited,
# then with its first user turn edited. Prints, per request, the prompt tokens and the tokens
# the server reports it reused (usage.prompt_tokens_details.cached_tokens; llama-server's
# timings.cache_n where that is absent). Usage: bench/reuse.sh http://127.0.0.1:PORT [API_KEY]
URL=${1:?usage: bench/reuse.sh URL [API_KEY]}
KEY=${2:-none}
U1="Tell me about the old house at the end of the lane, the one with the broken gate and the garden nobody tends."
A1="The house had stood empty for years. Its windows were dark, the gate hung from one hinge, and the roses had grown wild over the path."
U2="Who lived there before it was empty, and why did they leave in such a hurry one winter night?"
A2="An old sailor lived there with his daughter. One night a letter came, and by morning they were gone, the door left open to the snow."
U3="What was in the letter? Tell me slowly, and describe the room where the daughter found it on the table."
A3="The room was small and cold. On the table lay the letter, sealed with red wax, and beside it a candle that had burned down to nothing."
U4="And what did the sailor do when he read it? Did he say anything to her before they went out into the night?"
U4E="And what did the daughter do when she read it? Did she say anything to him before they went out into the storm?"
U1E="Tell me about the new house at the top of the hill, the one with the blue door and the garden everyone admires."
msg() { printf '{"role":"%s","content":"%s"}' "$1" "$2"; }
conv() {  # the messages of a request: user/assistant pairs, then the last user turn
    out=""
    while [ $# -gt 1 ]; do out="$out$(msg user "$1"),$(msg assistant "$2"),"; shift 2; done
    printf '[%s%s]' "$out" "$(msg user "$1")"
}
send() {  # label, messages
    r=$(curl -s "$URL/v1/chat/completions" -H 'Content-Type: application/json' -H "Authorization: Bearer $KEY" \
        -d "{\"messages\":$2,\"max_tokens\":8,\"temperature\":0}")
    p=$(printf '%s' "$r" | grep -o '"prompt_tokens":[0-9]*' | head -n 1 | cut -d: -f2)
    c=$(printf '%s' "$r" | grep -o '"cached_tokens":[0-9]*' | head -n 1 | cut -d: -f2)
    [ -n "$c" ] || c=$(printf '%s' "$r" | grep -o '"cache_n":[0-9]*' | head -n 1 | cut -d: -f2)
    printf '%-22s prompt %5s tokens, reused %5s\n' "$1" "${p:-?}" "${c:-?}"
}
send "turn 1" "$(conv "$U1")"
send "turn 2" "$(conv "$U1" "$A1" "$U2")"
send "turn 3" "$(conv "$U1" "$A1" "$U2" "$A2" "$U3")"
send "turn 4" "$(conv "$U1" "$A1" "$U2" "$A2" "$U3" "$A3" "$U4")"
send "turn 4, last edited" "$(conv "$U1" "$A1" "$U2" "$A2" "$U3" "$A3" "$U4E")"
send "turn 4, first edited" "$(conv "$U1E" "$A1" "$U2" "$A2" "$U3" "$A3" "$U4")"
