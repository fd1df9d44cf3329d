#!/usr/bin/env bash
# fuzz/cli_hostile.sh MHC - the command line's hostile-input cases of issue 17 (findings 1, 3, 5,
# 6, 8, 11): each must end with the expected exit status and a message naming the flag or file,
# within a time limit (a hang fails). Usage: bash fuzz/cli_hostile.sh build/tools/mhc
set -uo pipefail
mhc="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect STATUS NEEDLE ARGS...: runs `mhc ARGS` (10 s at most), checks its status and that
# stdout+stderr contain NEEDLE.
expect() {
  local want="$1" needle="$2"
  shift 2
  local out status
  out="$(timeout 10 "$mhc" "$@" 2>&1)"
  status=$?
  if [ "$status" != "$want" ] || [[ "$out" != *"$needle"* ]]; then
    echo "FAIL: mhc $* -> status $status (want $want), output lacks '$needle' or differs:"
    echo "$out" | head -5 | sed 's/^/    /'
    failures=$((failures + 1))
  fi
}

# Finding 11: the parser.
expect 2 "--tokens: 1 required" run --tokens
expect 2 "--tokens: 1 required" run --tokens=
expect 2 "--model: 1 required" run --model
expect 2 "not expected: stray" run stray
expect 2 "at most 64 bits" run --seed 18446744073709551616
expect 2 "--bogus" run --bogus 1
expect 2 "A subcommand is required"
expect 2 "PATH (or --write-example-checkpoint DIR) is required" inspect
expect 0 "Usage: mhc run" run -h
expect 0 "Usage: mhc inspect" inspect --help
expect 0 "mhc 0." --version
expect 0 "mhc 0." run --version
expect 0 "T=10 tokens" run --tokens 010 --layers 1 --device cpu   # decimal, not octal
# Finding 3: --tokens overflow and saturation.
expect 2 "not in range" run --tokens 1152921504606846976
expect 2 "at most 64 bits" run --tokens 99999999999999999999
expect 1 "not enough memory" run --tokens 1099511627776 --layers 1 --device cpu

# Checkpoint files: a good one, then damaged copies.
"$mhc" inspect --write-example-checkpoint "$tmp/good" --hidden 8 --layers 1 --mtp 0 >/dev/null || failures=$((failures + 1))
expect 0 "no problems" inspect "$tmp/good"
expect 1 "not enough memory" run --checkpoint "$tmp/good" --tokens 1099511627776 --device cpu
# Finding 1: nesting 100000 deep in the header.
cp -r "$tmp/good" "$tmp/deep"
python3 -c "
import struct
h=('{\"x\":{\"dtype\":\"F32\",\"shape\":'+'['*100000+']'*100000+',\"data_offsets\":[0,0]}}').encode()
open('$tmp/deep/model.safetensors','wb').write(struct.pack('<Q',len(h))+h)"
expect 1 "nest deeper than 64 levels" inspect "$tmp/deep"
# Finding 5: a FIFO as the model file.
cp -r "$tmp/good" "$tmp/fifo"
rm "$tmp/fifo/model.safetensors" && mkfifo "$tmp/fifo/model.safetensors"
expect 1 "not a regular file (a FIFO)" inspect "$tmp/fifo"
expect 1 "not a regular file (a FIFO)" run --checkpoint "$tmp/fifo"
# Finding 6: a huge layer count.
cp -r "$tmp/good" "$tmp/layers"
echo '{"model_type": "deepseek_v4", "hidden_size": 8, "num_hidden_layers": 1048576}' > "$tmp/layers/config.json"
expect 1 "must be in 1..1024" inspect "$tmp/layers"
# Finding 8: a duplicate key in config.json.
cp -r "$tmp/good" "$tmp/dup"
echo '{"model_type": "deepseek_v4", "hidden_size": 8, "hidden_size": 16, "num_hidden_layers": 1}' > "$tmp/dup/config.json"
expect 1 "key 'hidden_size' appears twice" inspect "$tmp/dup"
# Finding 12: no absolute source paths in the error text.
out="$("$mhc" inspect "$tmp/layers" 2>&1)"
case "$out" in *"error: src/io/model_config.cpp:"*) ;; *) echo "FAIL: error location is not relative: $out"; failures=$((failures + 1)) ;; esac

if [ "$failures" -ne 0 ]; then
  echo "cli_hostile: $failures case(s) failed"
  exit 1
fi
echo "cli_hostile: all cases passed"
