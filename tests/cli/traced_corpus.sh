#!/usr/bin/env bash
# The committed traced corpus reproduces: the quickest row of each framework's table
# (bench/traced/<framework>.tsv) traced again gives its allocated bytes within 1%. Needs
# every framework's tracer environment (make trace-env).
NAME=traced_corpus
source "$(dirname "$0")/lib/harness.sh"

tables=("$SRC"/bench/traced/*.tsv)
[ -e "${tables[0]}" ] || bad "no traced corpus in bench/traced"
for table in "${tables[@]}"; do
  [ -e "$table" ] || continue
  # the row with the fewest seconds: id, model, args, allocated bytes
  row=$(tail -n +2 "$table" | sort -t $'\t' -k11,11g | head -n 1)
  IFS=$'\t' read -r id model _ _ _ _ args allocated _ <<<"$row"
  # shellcheck disable=SC2086 # args is the row's option list
  run trace "$model" $args --json
  if [ "$rc" -ne 0 ]; then
    bad "$id: trace exit $rc ($(tail -n 1 "$TMP/err"))"
    continue
  fi
  now=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["traced"]["allocated_bytes"])' "$TMP/out")
  # within 1%: |now - committed| * 100 <= committed
  diff=$((now > allocated ? now - allocated : allocated - now))
  [ $((diff * 100)) -le "$allocated" ] && ok || bad "$id ($model $args): traced $now, committed $allocated"
done

finish
