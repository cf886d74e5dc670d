#!/usr/bin/env bash
# vramfit watch against the scripted fake NVML: plain lines off a terminal, CSV/JSONL logs,
# a leak found with a forecast within 10% of the truth, no leak on steps that level off,
# under-use, memory headroom (with the project's last plan), a watched command's exit code
# and signals, --pid, and the ncurses view under tmux. Every run has a timeout, so a hang
# fails the test instead of blocking it.
#
# Run by CTest with VRAMFIT, VF_TEST_TMP and FAKE_NVML_LIB set.
NAME=watch
source "$(dirname "$0")/lib/harness.sh"
source "$(dirname "$0")/lib/nvml.sh"
unset NO_COLOR # the view's colours are checked; runs off a terminal have none anyway
# The views run on a tmux server of their own (-L), which a session of its own keeps up
# between them: with none left the server exits, and a session started while it does fails
# ("server exited unexpectedly").
tm() { tmux -L "vfwatch$$" -f /dev/null "$@"; }
trap 'rm -rf "$TMP"; tm kill-server 2>/dev/null' EXIT
cat >"$TMP/two.nvml" <<'EOF'
gpu index=0 name="NVIDIA A100-SXM4-80GB" uuid=GPU-a total=80GiB util=90 power=300W limit=400W base=1GiB
gpu index=1 name="NVIDIA L4" uuid=GPU-b total=23034MiB util=40
proc gpu=0 pid=1 used=2GiB
EOF

# --- plain lines off a terminal: one per GPU per sample, no escape codes
under "$TMP/two.nvml" watch --interval 0.05 --count 3
expect 0 "plain watch"
if [ "$(grep -c '^\[.*GPU [01] ' "$TMP/out")" = 6 ]; then ok; else bad "plain: want 6 lines: $(cat "$TMP/out")"; fi
has "GPU 0 NVIDIA A100-SXM4-80GB  3.00 GiB / 80.00 GiB  util 90%  300 W/400 W" "plain line"
if grep -q $'\033' "$TMP/out"; then bad "escape codes off a terminal"; else ok; fi

# --- logs: CSV appends under one header; JSONL has the contract fields per GPU per sample
under "$TMP/two.nvml" watch --interval 0.05 --count 2 --log "$TMP/w.csv"
under "$TMP/two.nvml" watch --interval 0.05 --count 2 --log "$TMP/w.csv"
expect 0 "csv log"
if [ "$(wc -l <"$TMP/w.csv")" = 9 ] && [ "$(grep -c '^time,' "$TMP/w.csv")" = 1 ]; then ok; else
  bad "csv: want header + 8 j: $(cat "$TMP/w.csv")"; fi
has ",0,NVIDIA A100-SXM4-80GB,GPU-a,85899345920,3221225472," "csv row" "$TMP/w.csv"
has ",1:" "csv processes" "$TMP/w.csv"
under "$TMP/two.nvml" watch --interval 0.05 --count 2 --log "$TMP/w.jsonl"
pycheck "jsonl rows" "$TMP/w.jsonl" "
assert len(j) == 4, len(j)
for r in j:
    assert {'index','name','uuid','total_bytes','used_bytes','free_bytes','utilization_gpu','processes','time','elapsed_s','warnings'} <= set(r)
assert [r['index'] for r in j] == [0, 1, 0, 1]
assert j[0]['processes'][0]['pid'] == 1 and j[0]['processes'][0]['trend'] == 'warmup'
print('ok')"
under "$TMP/two.nvml" watch --count 1 --log "$TMP/w.txt"
expect 2 "log extension"
has ".csv or .jsonl" "log extension message" "$TMP/err"
under "$TMP/two.nvml" watch --count 1 --log "$TMP/no/such/dir/w.csv"
expect 2 "unwritable log"

# --- a leak and a staircase, run side by side to keep the test short
cat >"$TMP/leak.nvml" <<'EOF'
gpu index=0 name="NVIDIA L4" total=16GiB util=95 power=60W limit=72W
proc gpu=0 pid=child used=lin:0:1GiB,1:1.25GiB
EOF
cat >"$TMP/steps.nvml" <<'EOF'
gpu index=0 name="NVIDIA L4" total=16GiB util=95 power=60W limit=72W
proc gpu=0 pid=child used=step:0:1GiB,0.1:2GiB,0.2:3GiB,0.3:3.5GiB,0.8:4.5GiB,1.4:5GiB
EOF
FAKE_NVML_SCRIPT=$TMP/leak.nvml timeout 20 "$VRAMFIT" watch --interval 0.05 --warmup 0.3 \
  --window 1 --log "$TMP/leak.jsonl" -- sleep 2.5 >"$TMP/leak.out" 2>&1 </dev/null &
leak_pid=$!
FAKE_NVML_SCRIPT=$TMP/steps.nvml timeout 20 "$VRAMFIT" watch --interval 0.05 --warmup 0.5 \
  --window 1.2 --log "$TMP/steps.jsonl" -- sleep 3 >"$TMP/steps.out" 2>&1 </dev/null &
steps_pid=$!
wait $leak_pid
rc=$?
expect 0 "leak run"
has "memory keeps growing after warm-up (+1" "leak warning on screen" "$TMP/leak.out"
has "out of memory in ~" "forecast on screen" "$TMP/leak.out"
# The truth: 16 GiB less the process's 1 GiB + 256 MiB/s since the start, at 256 MiB/s.
pycheck "leak forecast within 10%" "$TMP/leak.jsonl" "
rate = 256 * 2**20
grow = [(r, p) for r in j for p in r['processes'] if p.get('trend') == 'growing']
assert grow, 'no growing trend logged'
assert any('memory keeps growing' in w for r in j for w in r['warnings'])
for r, p in grow:
    truth = (16 * 2**30 - (2**30 + rate * r['elapsed_s'])) / rate
    err = abs(p['seconds_to_full'] - truth) / truth
    assert err < 0.10, (p['seconds_to_full'], truth)
    assert abs(p['growth_bytes_per_s'] - rate) / rate < 0.10, p['growth_bytes_per_s']
first = grow[0][0]['elapsed_s']
assert first < 1.2, first
print('ok')"
wait $steps_pid
rc=$?
expect 0 "staircase run"
hasnt "keeps growing" "steps then plateau" "$TMP/steps.out"
pycheck "staircase judged steady" "$TMP/steps.jsonl" "
states = [p.get('trend') for r in j for p in r['processes']]
assert 'growing' not in states and states[-1] == 'steady', states[-8:]
print('ok')"

# --- under-use: low utilization and power while a watched process holds memory
cat >"$TMP/idle.nvml" <<'EOF'
gpu index=0 name="NVIDIA L4" total=16GiB util=4 power=9W limit=72W
proc gpu=0 pid=1 used=6GiB
EOF
under "$TMP/idle.nvml" watch --interval 0.05 --window 0.4 --count 14
expect 0 "idle run"
has "warning: GPU 0 under-used for the last 0 s: utilization 4%, power 12% of its limit" "under-use warning"

# --- memory headroom: the watched processes hold under half of the GPU after warm-up
# (the guides' "only 14% of the memory": raise the batch); more than half is not headroom.
printf 'gpu index=0 name="NVIDIA L4" total=16GiB util=95 power=60W limit=72W\nproc gpu=0 pid=child used=step:0:1GiB,0.1:2GiB\n' \
  >"$TMP/room.nvml"
printf 'gpu index=0 name="NVIDIA L4" total=16GiB util=95 power=60W limit=72W\nproc gpu=0 pid=child used=step:0:1GiB,0.1:9GiB\n' \
  >"$TMP/full.nvml"
under "$TMP/room.nvml" watch --interval 0.05 --warmup 0.3 --window 0.4 --log "$TMP/room.jsonl" -- sleep 1.2
expect 0 "headroom run"
has "warning: GPU 0 memory headroom: the watched processes held at most 2.00 GiB (12% of 16.00 GiB) for the last 0 s after warm-up; the batch could grow at least 7.2x before they hold 90% of it ('vramfit probe' finds how far)" \
  "headroom on the plain lines"
if [ "$(grep -c "memory headroom" "$TMP/out")" = 1 ]; then ok; else bad "headroom said more than once: $(cat "$TMP/out")"; fi
pycheck "headroom in the log" "$TMP/room.jsonl" "
said = [r['elapsed_s'] for r in j for w in r['warnings'] if 'memory headroom' in w]
assert len(said) == 1 and said[0] >= 0.7, said   # after warm-up and a whole window
print('ok')"
under "$TMP/full.nvml" watch --interval 0.05 --warmup 0.3 --window 0.4 -- sleep 1.2
expect 0 "no headroom run"
hasnt "memory headroom" "over half of the GPU is no headroom"
# With a plan made for this project, the line says what it recommends.
mkdir -p "$TMP/proj/.git"
(cd "$TMP/proj" && "$VRAMFIT" plan gpt2 --seq 1024 --amp bf16 --gpu 16GiB >/dev/null 2>&1)
(cd "$TMP/proj" && under "$TMP/room.nvml" watch --interval 0.05 --warmup 0.3 --window 0.4 -- sleep 1.2)
grep -Eq "memory headroom: .*; the last plan made for this project \(gpt2 on 16GiB, [0-9: -]+\) recommends batch [0-9]+ at a peak of [0-9.]+ GiB$" \
  "$TMP/out" && ok || bad "headroom with the plan: $(grep headroom "$TMP/out")"

# --- a watched command: its exit code, its signal, a missing command
under "$TMP/two.nvml" watch --interval 0.05 -- sh -c 'exit 7'
expect 7 "exit code passed on"
under "$TMP/two.nvml" watch --interval 0.05 -- sh -c 'kill -TERM $$'
expect 143 "killed command: 128 + SIGTERM"
under "$TMP/two.nvml" watch -- vramfit-no-such-command
expect 3 "command not found"
has "command not found: vramfit-no-such-command" "command not found message" "$TMP/err"
under "$TMP/two.nvml" watch --count 2 --interval 0.05 -- sh -c 'sleep 0.5; exit 5'
expect 5 "--count stops sampling, the command still runs to its end"
if [ "$(grep -c '^\[' "$TMP/out")" = 4 ]; then ok; else bad "--count 2: $(cat "$TMP/out")"; fi

# A signal sent to vramfit alone reaches the command; its code comes back.
FAKE_NVML_SCRIPT=$TMP/two.nvml timeout 20 "$VRAMFIT" watch --interval 0.1 -- sleep 30 \
  >"$TMP/sig.out" 2>&1 </dev/null &
wpid=$!
sleep 0.5
kill -TERM $wpid
wait $wpid
rc=$?
expect 143 "SIGTERM passed on to the command"

# --- the command's tree only: its GPU, its processes
cat >"$TMP/tree.nvml" <<'EOF'
gpu index=0 name="NVIDIA A100-SXM4-80GB" total=80GiB
gpu index=1 name="NVIDIA L4" total=16GiB
proc gpu=0 pid=1 used=9GiB
proc gpu=1 pid=child used=3GiB
EOF
under "$TMP/tree.nvml" watch --interval 0.05 -- sleep 0.4
expect 0 "tree run"
has "GPU 1 NVIDIA L4  3.00 GiB / 16.00 GiB  util 0%  50 W/300 W  40C  | " "tree GPU line"
if grep -q 'GPU 0 ' <(tail -n 2 "$TMP/out"); then bad "GPU 0 shown after the tree used GPU 1"; else ok; fi

# --- --pid: stops when the process ends; other processes are not judged
sleep 0.6 &
spid=$!
printf 'gpu index=0 total=16GiB\nproc gpu=0 pid=%s used=1GiB\nproc gpu=0 pid=1 used=2GiB\n' $spid >"$TMP/pid.nvml"
under "$TMP/pid.nvml" watch --interval 0.05 --pid $spid
expect 0 "--pid run"
has "| $spid sleep 1.00 GiB" "--pid process listed"
hasnt "| 1 " "other process not listed"
wait $spid
under "$TMP/pid.nvml" watch --pid $spid
expect 2 "--pid of a finished process"

# --- no driver, bad flags
VRAMFIT_NVML=$TMP/none.so under "$TMP/two.nvml" watch --count 1
expect 3 "no driver"
under "$TMP/two.nvml" watch --interval 0
expect 2 "--interval 0"
under "$TMP/two.nvml" watch --grace x -- true
expect 2 "--grace x"
under "$TMP/two.nvml" watch sleep 1
expect 2 "command without --"
has "after '--'" "command without -- message" "$TMP/err"
under "$TMP/two.nvml" watch --pid 1 -- true
expect 2 "--pid and a command"

# --- the ncurses view under tmux: bars, history, process, keys; NO_COLOR has no colours
tui() { # tui ENV [ARGS]: runs the view in a fresh tmux session; its exit code lands in $TMP/tui.rc
  rm -f "$TMP/tui.rc"
  tm new-session -d -s "vfwatch$$" -x 110 -y 40 \
    "env $1 VRAMFIT_NVML=$FAKE FAKE_NVML_SCRIPT=$TMP/two.nvml timeout --foreground 15 $VRAMFIT watch --interval 0.1 ${2:-}; echo \$? >$TMP/tui.rc"
}
wait_for() { # wait_for TEXT: up to 5 s for TEXT on the screen
  for _ in $(seq 50); do
    tm capture-pane -t "vfwatch$$" -p -e >"$TMP/screen" 2>/dev/null
    grep -qF -- "$1" "$TMP/screen" && return 0
    sleep 0.1
  done
  return 1
}
if command -v tmux >/dev/null; then
  tm new-session -d -s keep "sleep 120"
  tui "-u NO_COLOR TERM=xterm-256color"
  if wait_for "memory history"; then ok; else bad "view: $(cat "$TMP/screen")"; fi
  has "NVIDIA A100-SXM4-80GB" "view shows GPU 0" "$TMP/screen"
  # On a loaded machine the process row and its trend can come a frame after the history's
  # heading (make check runs the tests side by side): wait for them too.
  if wait_for "warming up"; then ok; else bad "view lists the process and its trend: $(cat "$TMP/screen")"; fi
  if grep -q $'\033\[3[0-7]m\|\033\[38;5' "$TMP/screen"; then ok; else bad "view without colour"; fi
  tm send-keys -t "vfwatch$$" Right
  if wait_for "NVIDIA L4"; then ok; else bad "Right switches GPU: $(cat "$TMP/screen")"; fi
  tm send-keys -t "vfwatch$$" q
  for _ in $(seq 50); do [ -s "$TMP/tui.rc" ] && break; sleep 0.1; done
  if [ "$(cat "$TMP/tui.rc" 2>/dev/null)" = 0 ]; then ok; else bad "q quits with 0"; fi
  tm kill-session -t "vfwatch$$" 2>/dev/null
  tui "TERM=xterm-256color NO_COLOR=1"
  wait_for "memory history" || bad "NO_COLOR view"
  if grep -q $'\033\[3[0-7]m\|\033\[38;5' "$TMP/screen"; then bad "colour despite NO_COLOR"; else ok; fi
  tm send-keys -t "vfwatch$$" q
  tm kill-session -t "vfwatch$$" 2>/dev/null
  # Memory headroom in the view: 2 GiB of 80 held after a short warm-up.
  tui "TERM=xterm-256color NO_COLOR=1" "--warmup 0.2 --window 0.3"
  if wait_for "! GPU 0 memory headroom: the watched processes held at most 2.00 GiB (2% of 80.00 GiB)"; then ok; else
    bad "headroom in the view: $(cat "$TMP/screen")"; fi
  tm send-keys -t "vfwatch$$" q
  tm kill-session -t "vfwatch$$" 2>/dev/null
else
  bad "tmux missing (a test prerequisite, in the Makefile's APT_PACKAGES): the terminal view is not tested"
fi

finish
