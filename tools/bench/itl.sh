#!/usr/bin/env bash
# Inter-token latency of running requests while long prompts arrive (run on the GPU machine).
# Llama-3.1-8B shapes: 16 requests decoding (32-token prompts, 384 new tokens) and 4 prompts of
# 3,000 tokens (16 new) in one --prompts-file; --max-decode-slowdown 0 (off) against 1.5, twice;
# and the 16 short requests alone (their decode-only step).
set -uo pipefail
B=${1:?usage: tools/bench/itl.sh BINARY (Llama-3.1-8B shapes; results under $OUT)}
OUT=${OUT:-/tmp/itl}; mkdir -p "$OUT"
python3 - <<'PY'
import json, random
r = random.Random(11)
with open("/tmp/mixed.jsonl", "w") as f, open("/tmp/short.jsonl", "w") as g:
    for i in range(20):
        long = i % 5 == 4
        line = json.dumps({"prompt_ids": [r.randrange(3, 128000) for _ in range(3000 if long else 32)],
                           "max_tokens": 16 if long else 384})
        f.write(line + "\n")
        if not long: g.write(line + "\n")
PY
start=$(date +%s)
run() {  # name, prompts file, extra flags
  $B --random-weights 1 --backend cuda --temperature 0 --ignore-eos --output-format json --prompts-file $2 ${@:3} > $OUT/$1.json 2> $OUT/$1.err
  python3 -c "
import json; j=json.load(open('$OUT/$1.json')); t=j['timings']
print('%-12s itl p50 %.2f p99 %.2f max %.2f ms; decode %.3f ms/step; ttft mean %.1f p99 %.1f ms; wall %.2f s' % ('$1', t['itl_ms_p50'], t['itl_ms_p99'], t['itl_ms_max'], t['decode_ms_per_step'], t['ttft_ms_mean'], t['ttft_ms_p99'], t['wall_s']))
" || tail -3 $OUT/$1.err
}
run short /tmp/short.jsonl
run off /tmp/mixed.jsonl --max-decode-slowdown 0
run capped /tmp/mixed.jsonl --max-decode-slowdown 1.5
run off2 /tmp/mixed.jsonl --max-decode-slowdown 0
run capped2 /tmp/mixed.jsonl --max-decode-slowdown 1.5
python3 -c "
import json; a=json.load(open('$OUT/off.json')); b=json.load(open('$OUT/capped.json'))
print('identical outputs', sum(x['output_ids']==y['output_ids'] for x,y in zip(a['requests'],b['requests'])), 'of', len(a['requests']))"
echo "took $(( $(date +%s) - start )) s"
