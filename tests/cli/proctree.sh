#!/usr/bin/env bash
# No process vramfit starts outlives it. Fake trainers that fork a worker, that daemonize a
# grandchild (setsid and a double fork, leaving the process group), and that ignore SIGTERM,
# run under `vramfit probe` (timeouts, exits leaving processes behind, SIGTERM/SIGINT/SIGHUP
# to vramfit) and `vramfit watch -- CMD` (the same signals, and the command's own exit). Each
# trainer writes the pid of every process it makes to $PIDS; after vramfit has exited none
# of them may be alive (zombies count as gone). Waits poll for what they wait for, with
# generous limits, so a loaded machine makes the test slower, never flaky.
NAME=proctree
source "$(dirname "$0")/lib/harness.sh"
export FAKE_NVML_LIB=${FAKE_NVML_LIB:-${VF_BUILD_DIR:-}/tests/libfake_nvml.so}
source "$(dirname "$0")/lib/nvml.sh"
PIDS=$TMP/pids
export PIDS
printf 'gpu index=0 name="NVIDIA L4" total=24GiB\nproc gpu=0 pid=child used=2GiB\n' >"$TMP/gpu.nvml"
export FAKE_NVML_SCRIPT=$TMP/gpu.nvml

# The trainers. MODE says what each does after making its processes: exit at once, sleep
# (until a timeout or a signal ends it), or fail with an out-of-memory report.
cat >"$TMP/forks.sh" <<'EOF'
#!/bin/sh
# A DataLoader-style worker in the same process group.
sleep 300 &
echo $! >>"$PIDS"
echo $$ >>"$PIDS"
case "$MODE" in
exit) exit 0 ;;
oom) echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2; exit 1 ;;
*) sleep 300 ;;
esac
EOF
cat >"$TMP/daemon.py" <<'EOF'
import os, sys, time
# A grandchild that leaves the process group and loses its parent: setsid, double fork.
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(os.environ["PIDS"], "a") as f:
            f.write("%d\n" % os.getpid())
        time.sleep(300)
    os._exit(0)
with open(os.environ["PIDS"], "a") as f:
    f.write("%d\n" % os.getpid())
# Wait until the grandchild has written its pid, so that the test knows of it.
for _ in range(3000):
    if len(open(os.environ["PIDS"]).read().split()) >= 2:
        break
    time.sleep(0.01)
if os.environ.get("MODE") != "exit":
    time.sleep(300)
EOF
cat >"$TMP/stubborn.sh" <<'EOF'
#!/bin/sh
# Ignores SIGTERM, and so does its worker (an ignored signal stays ignored across exec).
trap '' TERM
sleep 300 &
echo $! >>"$PIDS"
echo $$ >>"$PIDS"
sleep 300
EOF
chmod +x "$TMP/forks.sh" "$TMP/stubborn.sh"

# gone: none of the processes in $PIDS is alive (a zombie is not).
gone() {
  local pid state
  for pid in $(cat "$PIDS" 2>/dev/null); do
    state=$(sed 's/.*) \(.\).*/\1/' "/proc/$pid/stat" 2>/dev/null) || continue
    [ "$state" = Z ] || return 1
  done
  return 0
}

# check_gone WHAT: after vramfit has exited, nothing it started is left. A process still
# there is killed, so that the test never leaves one behind either.
check_gone() {
  if [ "$(wc -w <"$PIDS" 2>/dev/null || echo 0)" -lt "${2:-2}" ]; then
    bad "$1: the trainer wrote $(wc -w <"$PIDS") pids, want ${2:-2}"
  elif gone; then
    ok
  else
    bad "$1: processes outlived vramfit: $(for p in $(cat "$PIDS"); do [ -d /proc/$p ] && echo "$p($(cat /proc/$p/comm))"; done)"
    kill -KILL $(cat "$PIDS") 2>/dev/null
  fi
}

# wait_pids N: until the trainer has written N pids (60 s at most).
wait_pids() {
  for _ in $(seq 600); do
    [ "$(wc -w <"$PIDS" 2>/dev/null || echo 0)" -ge "$1" ] && return 0
    sleep 0.1
  done
  return 1
}

# start_bg ARGS...: vramfit in the background (at most 120 s), pid in $vf.
start_bg() {
  : >"$PIDS"
  timeout 120 "$VRAMFIT" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null &
  vf=$!
}

# stop_bg SIGNAL N: once the trainer has written N pids, sends SIGNAL to vramfit alone and
# leaves its exit status in $rc.
stop_bg() {
  if wait_pids "$2"; then kill -"$1" "$vf"; else bad "the trainer never started: $(cat "$TMP/err")"; fi
  wait "$vf"
  rc=$?
}

# ---- probe: a timeout ends the launch's whole tree ---------------------------------------
for trainer in "$TMP/forks.sh" "python3 $TMP/daemon.py"; do
  : >"$PIDS"
  # shellcheck disable=SC2086
  timeout 120 "$VRAMFIT" probe --min 4 --max 4 --timeout 1 --grace 2 --json -- $trainer {batch} \
    >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
  expect 0 "probe timeout ($trainer)"
  pycheck "probe timeout ($trainer) json" "$TMP/out" "
assert j['trials'][0]['outcome'] == 'timeout', j
print('ok')"
  check_gone "probe timeout ($trainer)"
done

# A trainer that ignores SIGTERM, and its worker, get SIGKILL after the grace period.
: >"$PIDS"
start=$(date +%s)
timeout 120 "$VRAMFIT" probe --min 4 --max 4 --timeout 0.5 --grace 1 --json -- "$TMP/stubborn.sh" \
  >"$TMP/out" 2>"$TMP/err" </dev/null
rc=$?
expect 0 "probe, stubborn trainer"
if [ $(($(date +%s) - start)) -lt 60 ]; then ok; else bad "stubborn trainer: vramfit waited for it"; fi
check_gone "probe, stubborn trainer"

# Launches that exit leave their worker or daemon behind: it is ended before the next launch.
for trainer in "$TMP/forks.sh" "python3 $TMP/daemon.py"; do
  : >"$PIDS"
  # shellcheck disable=SC2086
  MODE=exit timeout 120 "$VRAMFIT" probe --min 2 --max 2 --grace 2 -- $trainer {batch} \
    >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
  expect 0 "probe, exit leaving processes ($trainer)"
  check_gone "probe, exit leaving processes ($trainer)"
done
# An out-of-memory launch is an error path of its own.
: >"$PIDS"
MODE=oom timeout 120 "$VRAMFIT" probe --min 2 --max 2 --grace 2 -- "$TMP/forks.sh" >"$TMP/out" 2>"$TMP/err" </dev/null
rc=$?
expect 1 "probe, out of memory leaving a worker"
check_gone "probe, out of memory leaving a worker"

# ---- probe: signals to vramfit end the running launch's tree, then vramfit dies of them -----
start_bg probe --min 4 --max 4 --grace 2 -- "$TMP/forks.sh" {batch}
stop_bg TERM 2
expect 143 "probe killed by SIGTERM"
has "stopped by signal 15 during the launch at batch 4" "probe says what it stopped" "$TMP/err"
check_gone "probe, SIGTERM"
start_bg probe --min 4 --max 4 --grace 2 -- python3 "$TMP/daemon.py"
stop_bg INT 2
expect 130 "probe interrupted (Ctrl-C)"
check_gone "probe, SIGINT with a daemonized grandchild"
start_bg probe --min 4 --max 4 --grace 1 -- "$TMP/stubborn.sh"
stop_bg HUP 2
expect 129 "probe hung up"
check_gone "probe, SIGHUP with a trainer that ignores SIGTERM"
# The interrupted launch is in the history, as interrupted.
run history --json
pycheck "interrupted launches kept" "$TMP/out" "
outcomes = [r['outcome'] for r in j['runs']]
assert outcomes.count('interrupted') == 3, outcomes
print('ok')"

# ---- watch -- CMD: the same guarantees ---------------------------------------------------
start_bg watch --interval 0.1 --grace 2 -- "$TMP/forks.sh"
stop_bg TERM 2
expect 143 "watch: SIGTERM passed on (the command's code comes back)"
check_gone "watch, SIGTERM"
start_bg watch --interval 0.1 --grace 2 -- python3 "$TMP/daemon.py"
stop_bg INT 2
expect 130 "watch: Ctrl-C passed on"
check_gone "watch, SIGINT with a daemonized grandchild"
start_bg watch --interval 0.1 --grace 1 -- "$TMP/stubborn.sh"
stop_bg HUP 2
expect 137 "watch: SIGTERM ignored, SIGKILL after the grace period"
check_gone "watch, SIGHUP with a trainer that ignores SIGTERM"
# The command exits, leaving its worker or daemon: they go too.
for trainer in "$TMP/forks.sh" "python3 $TMP/daemon.py"; do
  : >"$PIDS"
  # shellcheck disable=SC2086
  MODE=exit timeout 120 "$VRAMFIT" watch --interval 0.1 --grace 2 -- $trainer >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
  expect 0 "watch, exit leaving processes ($trainer)"
  check_gone "watch, exit leaving processes ($trainer)"
done

finish
