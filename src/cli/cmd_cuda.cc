// `smolvm cuda daemon|status|fork|release|shutdown`: the host CUDA daemon and
// its admin socket; `smolvm cuda env`: the variables that route a bare host
// process to it.
//
// Exit codes: 0 ok, 1 the daemon or host failed, 2 invalid argument (also
// every command-line error), 3 no such daemon, process or session, 6 timed out.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "machine/cuda_link.h"
#include "machine/errors.h"
#include "machine/paths.h"
#include "machine/process.h"
#include "proto/enums.h"
#include "proto/frame.h"
#include "shim/preload.h"
#include "transport/read_reply.h"
#include "transport/unix_channel.h"

namespace smolvm::cli {
namespace {

// --socket, else $SMOLVM_CUDA_SOCKET, else the daemon that --cuda machines
// started under $SMOLVM_HOME.
std::string Fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string DaemonSocket(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("SMOLVM_CUDA_SOCKET");
  if (env && env[0]) return env;
  auto d = machine::FindCudaDaemon(machine::SmolvmHome());
  return d.ok() ? d->socket : "";
}

constexpr const char* kNoSocket =
    "no daemon socket (use --socket, set SMOLVM_CUDA_SOCKET, or start a --cuda machine)";

// Sends one admin request and decodes its reply.
template <typename Req, typename Rep>
Status AdminCall(const std::string& socket, const Req& req, Rep* rep) {
  ASSIGN_OR_RETURN(UniqueFd fd, ConnectUnix(socket + ".admin"));
  UnixChannel ch(std::move(fd));
  std::string out;
  proto::AppendRequest(&out, req, 1);
  RETURN_IF_ERROR(ch.Write(out));
  return ReadReplyFrame(ch, rep);
}

// Stops the daemon on `socket` (one started by hand): asks it for its pid,
// then SIGTERM, SIGKILL after grace_s.
Status StopDaemonAt(const std::string& socket, int grace_s, pid_t* pid) {
  proto::AdminStatusReply rep;
  Status st = AdminCall(socket, proto::AdminStatusRequest{}, &rep);
  if (!st.ok()) return NotFound("no CUDA daemon answers at " + socket + ".admin: " + st.message());
  auto j = nlohmann::json::parse(rep.json, nullptr, false);
  *pid = j.is_discarded() ? 0 : j.value("daemon_pid", 0);
  if (*pid <= 0) return Internal("the daemon at " + socket + " did not say its pid");
  ASSIGN_OR_RETURN(UniqueFd pidfd, machine::OpenPidfd(*pid, machine::ProcessStartTime(*pid)));
  RETURN_IF_ERROR(machine::SignalPidfd(pidfd.get(), SIGTERM));
  if (machine::WaitPidfd(pidfd.get(), grace_s * 1000)) return Status::Ok();
  (void)machine::SignalPidfd(pidfd.get(), SIGKILL);
  if (!machine::WaitPidfd(pidfd.get(), 5000)) return Timeout("the CUDA daemon (pid " + std::to_string(*pid) + ") did not stop");
  return Status::Ok();
}

// --socket or $SMOLVM_CUDA_SOCKET names a daemon (started by hand or not);
// else the one --cuda machines started under $SMOLVM_HOME.
int Shutdown(const std::string& socket_flag, int grace_s) {
  std::string socket = socket_flag;
  if (socket.empty())
    if (const char* env = std::getenv("SMOLVM_CUDA_SOCKET"); env && env[0]) socket = env;
  if (!socket.empty()) {
    pid_t pid = 0;
    smolvm::Status st = StopDaemonAt(socket, grace_s, &pid);
    if (!st.ok()) {
      std::fprintf(stderr, "smolvm cuda shutdown: %s\n", st.message().c_str());
      return machine::ExitCodeFor(st);
    }
    std::printf("stopped the CUDA daemon on %s (pid %d)\n", socket.c_str(), pid);
    return 0;
  }
  std::string home = machine::SmolvmHome();
  auto d = machine::FindCudaDaemon(home);
  if (!d.ok()) {
    std::printf("no CUDA daemon runs for %s (a daemon started by hand: pass --socket or set SMOLVM_CUDA_SOCKET)\n",
                home.c_str());
    return 0;
  }
  smolvm::Status st = machine::StopCudaDaemon(home, grace_s * 1000);
  if (!st.ok()) {
    std::fprintf(stderr, "smolvm cuda shutdown: %s\n", st.ToString().c_str());
    return machine::ExitCodeFor(st);
  }
  std::printf("stopped the CUDA daemon (pid %d)\n", d->pid);
  return 0;
}

// `--ops`: the guest ops each session's worker served, and the daemon's totals.
void PrintOps(const nlohmann::json& j) {
  auto line = [](const std::string& who, const nlohmann::json& ops) {
    std::printf("%s:", who.c_str());
    if (!ops.is_object() || ops.empty()) std::printf(" -");
    for (const auto& [name, n] : ops.items()) std::printf(" %s=%llu", name.c_str(), n.get<unsigned long long>());
    std::printf("\n");
  };
  for (const auto& s : j.value("sessions", nlohmann::json::array()))
    line("ops session " + std::to_string(s.value("session", 0ull)) + " pid " + std::to_string(s.value("pid", 0u)),
         s.value("ops", nlohmann::json::object()));
  line("ops total", j.value("ops_total", nlohmann::json::object()));
}

int ShowStatus(const std::string& socket_flag, bool json, bool ops) {
  std::string socket = DaemonSocket(socket_flag);
  if (socket.empty()) {
    std::fprintf(stderr, "smolvm cuda status: %s\n", kNoSocket);
    return 3;
  }
  // Nothing listening there is "no such daemon" (3); a daemon that answers
  // wrong is a failure of the daemon (1).
  auto conn = ConnectUnix(socket + ".admin");
  if (!conn.ok()) {
    std::fprintf(stderr, "smolvm cuda status: no CUDA daemon answers at %s.admin: %s\n", socket.c_str(),
                 conn.status().message().c_str());
    return 3;
  }
  conn->Reset();
  proto::AdminStatusReply rep;
  smolvm::Status st = AdminCall(socket, proto::AdminStatusRequest{}, &rep);
  if (!st.ok()) {
    std::fprintf(stderr, "smolvm cuda status: the daemon at %s.admin did not answer: %s\n", socket.c_str(),
                 st.ToString().c_str());
    return 1;
  }
  if (json) {
    std::printf("%s\n", rep.json.c_str());
    return 0;
  }
  auto j = nlohmann::json::parse(rep.json, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "smolvm cuda status: the daemon answered malformed JSON\n");
    return 1;
  }
  std::printf("daemon pid %d, backend %s, proto %s, %zu pooled worker(s) (%zu ready, %zu preloaded), context %s\n",
              j.value("daemon_pid", 0), j.value("backend", "?").c_str(), j.value("proto_hash", "?").c_str(),
              j.value("pooled_workers", size_t{0}), j.value("ready_workers", size_t{0}),
              j.value("preloaded_workers", size_t{0}), j.value("context_source", "?").c_str());
  if (int failed = j.value("worker_start_failures", 0); failed > 0) {
    std::string log = j.value("log", "");
    std::printf("workers failing to start: %d in a row, the last %s; it serves no one until one starts (see %s)\n",
                failed, j.value("last_worker_failure", "?").c_str(),
                log.empty() ? "the daemon's stderr" : ("its log, " + log).c_str());
  }
  std::printf("%-8s %-8s %-8s %-11s %-10s %7s %10s %8s %11s %11s  %s\n", "SESSION", "PID", "WORKER", "ROLE", "STATE",
              "SHARED", "SHARED_MIB", "PRIVATE", "PRIVATE_MIB", "CONTEXT_MIB", "MACHINE");
  for (const auto& s : j["sessions"])
    std::printf("%-8llu %-8u %-8d %-11s %-10s %7llu %10.1f %8llu %11.1f %11.1f  %s\n", s.value("session", 0ull),
                s.value("pid", 0u), s.value("worker_pid", 0), s.value("role", "?").c_str(),
                s.value("state", "?").c_str(), s.value("shared_chunks", 0ull), s.value("shared_mib", 0.0),
                s.value("private_chunks", 0ull), s.value("private_mib", 0.0), s.value("context_mib", 0.0),
                s.value("machine", "").empty() ? "-" : s.value("machine", "").c_str());
  // What each session holds on the device by part: its private chunks, and
  // what its worker counts of the context column (modules, raised limits,
  // library handles); the rest of that column is the bare context and what
  // no part names.
  for (const auto& s : j["sessions"]) {
    // At a golden's forkpoint: how much of what each clone copies is in use.
    auto live = s.value("private_live_mib", nlohmann::json());
    std::string in_use = live.is_number() ? " (" + Fixed1(live.get<double>()) + " MiB in use)" : "";
    std::printf("session %llu parts: private chunks %.1f%s, modules %.1f, limits %.1f, workspaces %.1f MiB of "
                "context %.1f MiB (%s)\n",
                s.value("session", 0ull), s.value("private_mib", 0.0), in_use.c_str(), s.value("modules_mib", 0.0),
                s.value("limits_mib", 0.0), s.value("workspaces_mib", 0.0), s.value("context_mib", 0.0),
                j.value("context_source", "?").c_str());
  }
  for (const auto& s : j["sessions"])
    if (auto c = s.value("gpu_mem_charged", nlohmann::json()); c.is_object())
      std::printf("session %llu: %.1f MiB of its machine's --gpu-mem (context %.1f, chunks %.1f, modules %.1f, "
                  "limits %.1f, workspaces %.1f)\n",
                  s.value("session", 0ull), c.value("total_mib", 0.0), c.value("context_mib", 0.0),
                  c.value("chunks_mib", 0.0), c.value("modules_mib", 0.0), c.value("limits_mib", 0.0),
                  c.value("workspaces_mib", 0.0));
  if (ops) PrintOps(j);
  for (const auto& m : j.value("machines", nlohmann::json::array())) {
    std::printf("machine %s: endpoint attached", m.value("machine", "?").c_str());
    if (m.contains("gpu_mem_mib"))
      std::printf(", gpu-mem %.0f MiB, %.1f MiB in use", m.value("gpu_mem_mib", 0.0), m.value("gpu_used_mib", 0.0));
    std::printf("\n");
  }
  // The caps against hostile guests (docs/threat-model.md): what the
  // daemon holds under them and how often each refused.
  if (auto d = j.value("descriptors", nlohmann::json()); d.is_object()) {
    std::printf("descriptors: %zu chunk descriptors held (cap %zu per machine, %zu in all; RLIMIT_NOFILE %llu)",
                d.value("held", size_t{0}), d.value("cap_per_machine", size_t{0}), d.value("cap", size_t{0}),
                d.value("rlimit_nofile", 0ull));
    const nlohmann::json by_tenant = d.value("by_tenant", nlohmann::json::object());
    for (const auto& [tenant, n] : by_tenant.items())
      std::printf("; %s %zu", tenant.c_str(), n.get<size_t>());
    std::printf("\n");
  }
  if (auto r = j.value("refusals", nlohmann::json()); r.is_object()) {
    std::printf("refusals by cap:");
    if (r.empty()) std::printf(" none");
    for (const auto& [cap, n] : r.items()) std::printf(" %s %llu", cap.c_str(), n.get<unsigned long long>());
    std::printf("\n");
  }
  return 0;
}

// True when the daemon lists a session of `pid` (false when it cannot say).
bool HasSessionOfPid(const std::string& socket, uint32_t pid) {
  proto::AdminStatusReply rep;
  if (!AdminCall(socket, proto::AdminStatusRequest{}, &rep).ok()) return false;
  auto j = nlohmann::json::parse(rep.json, nullptr, false);
  if (j.is_discarded() || !j.contains("sessions")) return false;
  for (const auto& s : j["sessions"])  // `--pid` names a host pid on the daemon's own socket
    if (s.value("host_pid", 0u) == pid && s.value("machine", "").empty()) return true;
  return false;
}

struct ForkArgs {
  std::string socket;
  uint32_t pid = 0;
  uint64_t session = 0;
  uint32_t count = 1;
  std::string share;
  double wait_s = 10;
  bool json = false;
};

// The default share mode: --share wins; else SMOLVM_CUDA_FORK_SHARE_WEIGHTS=0|1
// (the seed's switch); else on.
std::string DefaultShare(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("SMOLVM_CUDA_FORK_SHARE_WEIGHTS");
  if (env && std::string(env) == "0") return "off";
  return "on";
}

int Fork(const ForkArgs& a) {
  std::string socket = DaemonSocket(a.socket);
  if (socket.empty()) {
    std::fprintf(stderr, "smolvm cuda fork: %s\n", kNoSocket);
    return 3;
  }
  // The daemon waits --wait seconds for a golden that has not connected yet;
  // a pid that is neither a process here nor a session fails now.
  if (a.pid && ::kill(static_cast<pid_t>(a.pid), 0) != 0 && errno == ESRCH && !HasSessionOfPid(socket, a.pid)) {
    std::fprintf(stderr,
                 "smolvm cuda fork: no CUDA session of pid %u, and no such process on this host (see 'smolvm cuda "
                 "status')\n",
                 a.pid);
    return 3;
  }
  const auto share = proto::ParseShareMode(DefaultShare(a.share));
  if (!share) {
    smolvm::Status bad = InvalidArgument("--share must be on, off or auto");
    std::fprintf(stderr, "smolvm cuda fork: %s\n", bad.ToString().c_str());
    return machine::ExitCodeFor(bad);
  }
  proto::AdminForkRequest req;
  req.session = a.session;
  req.pid = a.pid;
  req.count = a.count;
  req.share = proto::Wire(*share);
  req.wait_ms = static_cast<uint32_t>(a.wait_s * 1000);
  proto::AdminForkReply rep;
  smolvm::Status st = AdminCall(socket, req, &rep);
  if (!st.ok()) {
    std::fprintf(stderr, "smolvm cuda fork: %s\n", st.ToString().c_str());
    return machine::ExitCodeFor(st);
  }
  auto lines = nlohmann::json::parse(rep.json, nullptr, false);
  if (lines.is_discarded() || !lines.is_array()) {
    std::fprintf(stderr, "smolvm cuda fork: the daemon answered malformed JSON\n");
    return 1;
  }
  for (const auto& l : lines) {
    if (a.json) {
      std::printf("%s\n", l.dump().c_str());
      continue;
    }
    std::printf("fork: clone %d of %u shared=%llu private=%llu shared_mib=%.1f private_mib=%.1f ms=%.1f\n",
                l.value("clone", -1), l.value("golden_pid", 0u), l.value("shared", 0ull), l.value("private", 0ull),
                l.value("shared_mib", 0.0), l.value("private_mib", 0.0), l.value("ms", 0.0));
  }
  return 0;
}

int Release(const std::string& socket_flag, uint32_t pid, uint64_t session) {
  std::string socket = DaemonSocket(socket_flag);
  if (socket.empty()) {
    std::fprintf(stderr, "smolvm cuda release: %s\n", kNoSocket);
    return 3;
  }
  proto::AdminReleaseReply rep;
  smolvm::Status st = AdminCall(socket, proto::AdminReleaseRequest{session, pid}, &rep);
  if (!st.ok()) {
    std::fprintf(stderr, "smolvm cuda release: %s\n", st.ToString().c_str());
    return machine::ExitCodeFor(st);
  }
  return 0;
}

// Shell lines routing a bare host process through the shims: SMOLVM_CUDA_SOCKET
// and LD_PRELOAD of every shim by absolute path (docs/torch.md). --start
// starts the daemon of $SMOLVM_HOME when none runs. Exit 3: no daemon; 1: a
// shim library is missing or the daemon could not start (the family's codes).
int Env(const std::string& socket_flag, bool start) {
  std::string socket = DaemonSocket(socket_flag);
  if (socket.empty() && start) {
    auto d = machine::EnsureCudaDaemon(machine::SmolvmHome());
    if (!d.ok()) {
      std::fprintf(stderr, "smolvm cuda env: cannot start the CUDA daemon: %s\n", d.status().ToString().c_str());
      return 1;
    }
    socket = d->socket;
  }
  if (socket.empty()) {
    std::fprintf(stderr,
                 "smolvm cuda env: no daemon socket (use --socket, set SMOLVM_CUDA_SOCKET, start a --cuda machine, or "
                 "pass --start)\n");
    return 3;
  }
  std::string dir = machine::ShimDir();
  for (const char* so : shim::kPreloadSonames) {
    std::string path = dir + "/" + so;
    if (::access(path.c_str(), R_OK) != 0) {
      std::fprintf(stderr, "smolvm cuda env: %s is missing (build the shims: cmake --build build)\n", path.c_str());
      return 1;
    }
  }
  std::string preload = shim::PreloadList(dir);
  const char* old = std::getenv("LD_PRELOAD");
  if (old != nullptr && old[0] != '\0') preload += std::string(":") + old;
  std::printf("export SMOLVM_CUDA_SOCKET='%s'\nexport LD_PRELOAD='%s'\n", socket.c_str(), preload.c_str());
  return 0;
}

}  // namespace

void RegisterCudaCommands(CLI::App& app, int* exit_code) {
  auto* cuda = app.add_subcommand("cuda", "run and talk to the host CUDA daemon");
  cuda->require_subcommand(1);
  cuda->footer("Exit codes: 0 ok, 1 the daemon or host failed, 2 invalid argument, 3 no such daemon, process or "
               "session, 6 timed out.");
  AddCudaDaemonCommand(*cuda, "daemon", "run the host CUDA daemon on SOCKET (one per GPU host)", exit_code);
  auto* status = cuda->add_subcommand("status", "sessions, roles and memory as the daemon sees them");
  auto socket = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  status->add_option("--socket", *socket,
                     "daemon socket (default: $SMOLVM_CUDA_SOCKET, else the daemon of $SMOLVM_HOME's machines)");
  status->add_flag("--json", *json, "print JSON");
  auto ops = std::make_shared<bool>(false);
  status->add_flag("--ops", *ops,
                   "also the guest ops each session's worker served (launches, GEMMs, cuDNN executes, VMM calls ...) "
                   "and the totals since the daemon started");
  status->callback([socket, json, ops, exit_code] { *exit_code = ShowStatus(*socket, *json, *ops); });

  auto* fork = cuda->add_subcommand("fork", "fork a process waiting at its smolvmForkpoint()");
  auto fa = std::make_shared<ForkArgs>();
  auto* by_pid = fork->add_option("--pid", fa->pid, "the golden's process id");
  auto* by_session = fork->add_option("--session", fa->session, "the golden's session id");
  by_pid->excludes(by_session);
  auto* count = fork->add_option("--count", fa->count, "clones to make")->capture_default_str();
  fork->add_option("--wait", fa->wait_s, "seconds to wait for the forkpoint")->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  fork->add_option("--share", fa->share, "on: share memory marked frozen; off: copy everything; auto: heuristic")
      ->check(CLI::IsMember({"on", "off", "auto"}));
  fork->add_option("--socket", fa->socket, "daemon socket (default: $SMOLVM_CUDA_SOCKET)");
  fork->add_flag("--json", fa->json, "one JSON object per clone");
  fork->callback([fa, exit_code] { *exit_code = Fork(*fa); });
  // One of --pid / --session is needed (CLI11 has no "one of" rule).
  fork->parse_complete_callback([by_pid, by_session, count, fa] {
    if (by_pid->count() == 0 && by_session->count() == 0)
      throw CLI::ValidationError("name the golden with --pid PID or --session ID");
    if (count->count() > 0 && fa->count < 1) throw CLI::ValidationError("--count must be at least 1");
  });

  auto* release = cuda->add_subcommand("release", "let a golden's smolvmForkpoint() return");
  auto rpid = std::make_shared<uint32_t>(0);
  auto rsession = std::make_shared<uint64_t>(0);
  auto rsocket = std::make_shared<std::string>();
  auto* rel_pid = release->add_option("--pid", *rpid, "the golden's process id");
  auto* rel_session = release->add_option("--session", *rsession, "the golden's session id");
  rel_pid->excludes(rel_session);
  release->parse_complete_callback([rel_pid, rel_session] {
    if (rel_pid->count() == 0 && rel_session->count() == 0)
      throw CLI::ValidationError("name the golden with --pid PID or --session ID");
  });
  release->add_option("--socket", *rsocket, "daemon socket (default: $SMOLVM_CUDA_SOCKET)");
  release->callback([rpid, rsession, rsocket, exit_code] { *exit_code = Release(*rsocket, *rpid, *rsession); });

  auto* env = cuda->add_subcommand(
      "env", "print the variables that run a host process's CUDA through the shims: eval \"$(smolvm cuda env)\"");
  auto esocket = std::make_shared<std::string>();
  auto estart = std::make_shared<bool>(false);
  env->add_option("--socket", *esocket, "daemon socket (default: $SMOLVM_CUDA_SOCKET, else the daemon of $SMOLVM_HOME)");
  env->add_flag("--start", *estart, "start the daemon of $SMOLVM_HOME if none runs");
  env->callback([esocket, estart, exit_code] { *exit_code = Env(*esocket, *estart); });

  auto* shutdown = cuda->add_subcommand(
      "shutdown",
      "stop the daemon on --socket / $SMOLVM_CUDA_SOCKET, else the one --cuda machines started under $SMOLVM_HOME "
      "(its sessions end)");
  auto grace = std::make_shared<int>(10);
  auto ssocket = std::make_shared<std::string>();
  shutdown->add_option("--grace", *grace, "seconds before SIGKILL")->check(CLI::Range(0, 3600))->capture_default_str();
  shutdown->add_option("--socket", *ssocket, "daemon socket (default: $SMOLVM_CUDA_SOCKET)");
  shutdown->callback([grace, ssocket, exit_code] { *exit_code = Shutdown(*ssocket, *grace); });
}

}  // namespace smolvm::cli
