#!/usr/bin/env bash
# scripts/lib.sh, the device scripts' shared helpers, on this machine:
#   find_build      build/ first, .carry/build when build/ has no smolvm (linked as build)
#   make_workdir    the directory is gone after a normal exit and after SIGTERM
#   daemon_start/stop  a fake-backend daemon comes up (admin socket), is gone after
#                   daemon_stop, and an exit without daemon_stop still stops it
#   log             "[TAG HH:MM:SS +Ns] message" on stdout and in LOG_FILE
# Usage: tests/scripts_lib_test.sh SMOLVM_BINARY   (CTest passes the built one)
set -uo pipefail
smolvm=${1:?usage: tests/scripts_lib_test.sh SMOLVM_BINARY}
lib=$(cd "$(dirname "$0")/.." && pwd)/scripts/lib.sh
t=$(mktemp -d /tmp/smolvm-lib-test.XXXXXX)
trap 'rm -rf "$t"' EXIT
fails=0
check() {  # NAME CONDITION...
  local name=$1
  shift
  if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fails=$((fails + 1)); fi
}

# find_build: a tree with only .carry/build gets build -> .carry/build.
mkdir -p "$t/repo/.carry/build" && ln -s "$smolvm" "$t/repo/.carry/build/smolvm"
got=$(cd "$t/repo" && source "$lib" && find_build && echo "$BUILD")
check "find_build falls back to .carry/build" [ "$got" = "$t/repo/.carry/build" ]
check "find_build links build to it" [ "$(readlink "$t/repo/build")" = .carry/build ]
mkdir -p "$t/repo2/build" && ln -s "$smolvm" "$t/repo2/build/smolvm" && mkdir -p "$t/repo2/.carry/build"
got=$(cd "$t/repo2" && source "$lib" && find_build && echo "$BUILD")
check "find_build prefers build/" [ "$got" = "$t/repo2/build" ]
(cd "$t" && source "$lib" && BUILD=$t/none find_build)
check "find_build fails without a smolvm binary" [ $? -ne 0 ]

# make_workdir: removed at exit, and when the script is terminated.
w=$(bash -c 'source "$1"; make_workdir lib-test; [[ -d $W ]] && echo "$W"' _ "$lib")
gone=$([[ -n $w && ! -e $w ]] && echo yes)
check "make_workdir makes a directory, removed at exit" [ "$gone" = yes ]
# Its child outlives it (SIGTERM went to the script only): stopped here, and
# kept off this test's output, which CTest reads until the last writer exits.
bash -c 'source "$1"; make_workdir lib-test; sleep 30 >/dev/null 2>&1 & echo "$!" >"$3"; echo "$W" >"$2"; wait' \
  _ "$lib" "$t/w" "$t/child" &
pid=$!
for _ in $(seq 50); do [[ -s $t/w ]] && break; sleep 0.1; done
kill -TERM "$pid"
wait "$pid"
rc=$?
kill "$(cat "$t/child")" 2>/dev/null
check "SIGTERM exits 143" [ "$rc" = 143 ]
check "make_workdir's directory is removed after SIGTERM" [ ! -e "$(cat "$t/w")" ]

# daemon_start / daemon_stop on the fake backend.
out=$(BUILD=$(dirname "$smolvm") bash -c '
  source "$1"
  daemon_start "$2/d.sock" "$2/d.log" --backend fake --pool 0 || { echo "start failed"; exit 1; }
  [[ -S $2/d.sock.admin ]] && echo admin
  pid=$DAEMON_PID
  kill -0 "$pid" && echo alive
  daemon_stop
  kill -0 "$pid" 2>/dev/null || echo stopped
  echo "rc=$DAEMON_RC"
  daemon_stop && echo again-ok' _ "$lib" "$t" 2>&1)
check "daemon_start: admin socket" grep -qx admin <<<"$out"
check "daemon_start: running" grep -qx alive <<<"$out"
check "daemon_stop: gone" grep -qx stopped <<<"$out"
check "daemon_stop: a second call does nothing" grep -qx again-ok <<<"$out"
echo "$out" | sed 's/^/  /'
# An exit that skipped daemon_stop: the on_exit registration stops it.
BUILD=$(dirname "$smolvm") bash -c '
  source "$1"
  on_exit daemon_stop
  daemon_start "$2/e.sock" "$2/e.log" --backend fake --pool 0 && echo "$DAEMON_PID" >"$2/e.pid"
  exit 3' _ "$lib" "$t"
check "exit with a daemon running: exit status kept" [ $? = 3 ]
dpid=$(cat "$t/e.pid" 2>/dev/null)
stopped=$([[ -n $dpid ]] && ! kill -0 "$dpid" 2>/dev/null && echo yes)
check "exit with a daemon running: the daemon is stopped" [ "$stopped" = yes ]

# log: tag, time, seconds; stdout and the file.
line=$(bash -c 'source "$1"; LOG_TAG=tagged LOG_FILE=$2/log.txt; log hello world' _ "$lib" "$t")
check "log prints [TAG HH:MM:SS +Ns] MESSAGE" grep -qE '^\[tagged [0-9]{2}:[0-9]{2}:[0-9]{2} \+[0-9]+s\] hello world$' <<<"$line"
check "log appends to LOG_FILE" [ "$(cat "$t/log.txt")" = "$line" ]

((fails == 0)) && echo "all passed" || echo "$fails failed"
exit $((fails > 0))
