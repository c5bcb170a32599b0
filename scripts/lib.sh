# The helpers the scripts under scripts/ share. A script sources it after it
# moved to the repository root (or to a tree of links to it, as
# scripts/device-ab.sh makes): cd "$(dirname "$0")/.." && source scripts/lib.sh
#
# Variables the helpers read (set them before the first call):
#   LOG_TAG   prefix of log lines (default: the script's name without .sh)
#   LOG_FILE  a file log lines are appended to as well (default: none)
#   LOG_FD    1 (default) or 2: where log lines are printed
#   BUILD     the build tree (find_build fills it in)
# Sourced with `set -u` on: every variable here has a default.

# log MESSAGE...: one line "[TAG HH:MM:SS +Ns] MESSAGE".
log() {
  local line="[${LOG_TAG:-$(basename "$0" .sh)} $(date +%T) +${SECONDS}s] $*"
  if [[ -n ${LOG_FILE:-} ]]; then
    echo "$line" | tee -a "$LOG_FILE" >&"${LOG_FD:-1}"
  else
    echo "$line" >&"${LOG_FD:-1}"
  fi
}

# summary MESSAGE...: MESSAGE on stdout and appended to $OUT/summary.txt.
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }

# smi_used: GPU 0's memory.used in MiB, or nothing where nvidia-smi is missing
# or fails (callers print ${x:-?} or skip the comparison).
smi_used() {
  command -v nvidia-smi >/dev/null || return 0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1 | tr -d ' '
}

# find_build: BUILD becomes the absolute path of the build tree: $BUILD when
# set, else build/; when that has no smolvm binary, .carry/build (what
# scripts/device-pack.sh makes) if it has one. When build/ is absent it is
# linked to .carry/build, so paths written build/... work as well.
# Returns 1 when the tree it settled on has no smolvm binary (the caller
# decides whether that is fatal).
find_build() {
  local b=${BUILD:-build}
  [[ ! -x $b/smolvm && -x .carry/build/smolvm ]] && b=.carry/build
  [[ -e build || $b != .carry/build ]] || ln -s .carry/build build
  if [[ -d $b ]]; then BUILD=$(cd "$b" && pwd); else BUILD=$PWD/$b; fi
  [[ -x $BUILD/smolvm ]]
}

# on_exit COMMAND: evaluates COMMAND when the script exits, the command
# registered last first (bash runs its EXIT trap on SIGTERM, SIGINT and SIGHUP
# too, so a timeout or ^C cleans up as well). Owns the EXIT trap: a script
# that sources this file registers its cleanup here rather than with trap.
_SMOLVM_ON_EXIT=()
on_exit() {
  ((${#_SMOLVM_ON_EXIT[@]})) || trap _smolvm_run_on_exit EXIT
  _SMOLVM_ON_EXIT=("$1" "${_SMOLVM_ON_EXIT[@]}")
}
_smolvm_run_on_exit() {
  local c
  for c in "${_SMOLVM_ON_EXIT[@]}"; do eval "$c"; done
  _SMOLVM_ON_EXIT=()
}

# make_workdir NAME: W becomes a new directory /tmp/NAME.XXXXXX, removed at exit.
make_workdir() {
  W=$(mktemp -d "/tmp/$1.XXXXXX") || return 1
  on_exit "rm -rf '$W'"
}

# daemon_start SOCKET LOG [ARGS...]: starts `$BUILD/smolvm _cuda-daemon SOCKET
# ARGS...` as a session leader (setsid: its process group holds only what it
# starts), stdout and stderr appended to LOG; DAEMON_PID is its pid. Waits up
# to 20 s for its admin socket (SOCKET.admin, bound after the guest socket);
# returns 1 when it does not come or the daemon exits first. Register
# `on_exit daemon_stop` (or a wrapper of it) so that an early exit stops it.
DAEMON_PID=""
daemon_start() {
  local sock=$1 logf=$2
  shift 2
  rm -f "$sock" "$sock.admin"
  setsid "$BUILD/smolvm" _cuda-daemon "$sock" "$@" >>"$logf" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 200); do
    [[ -S $sock.admin ]] && return 0
    kill -0 "$DAEMON_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# daemon_stop: SIGTERM to the daemon daemon_start started, SIGKILL to its
# process group when it is still alive 10 s later; waits for it. DAEMON_RC is
# its exit status. Does nothing when no daemon of ours runs.
DAEMON_RC=""
daemon_stop() {
  [[ -n $DAEMON_PID ]] || return 0
  if kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID" 2>/dev/null
    for _ in $(seq 100); do
      kill -0 "$DAEMON_PID" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$DAEMON_PID" 2>/dev/null; then
      log "daemon: pid $DAEMON_PID still alive 10 s after SIGTERM; SIGKILL to its process group"
      kill -KILL -- "-$DAEMON_PID" 2>/dev/null
    fi
  fi
  wait "$DAEMON_PID" 2>/dev/null
  DAEMON_RC=$?
  DAEMON_PID=""
}

# nvidia_lib_path BINARY [PYTHON=python3]: when BINARY's libraries do not all
# resolve, puts the toolkit's lib64 folders and the lib folders of PYTHON's
# nvidia wheels on LD_LIBRARY_PATH (the daemon's workers inherit it and find
# NVIDIA's real libraries there; they skip the shim folder by its
# .smolvm-shim marker).
nvidia_lib_path() {
  ldd "$1" 2>/dev/null | grep -q "not found" || return 0
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 \
           $("${2:-python3}" -c 'import nvidia,os;print(" ".join(os.path.join(p,q,"lib") for p in nvidia.__path__ for q in os.listdir(p)))' 2>/dev/null); do
    [[ -d $d ]] && export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
  done
  return 0
}
