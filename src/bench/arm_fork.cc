// The fork arm: a golden machine runs `smolvm-learner train --fork`, loads,
// warms up and waits at smolvmForkpoint(); N clone machines are forked from
// it (each with the golden's --cpus and its own cpuset), all in one request
// when its supervisor offers it (fork_requests.h); each clone trains as
// learner <clone index>.
//
// On the GPU the golden is a `--cuda` machine: the machine layer starts the
// host daemon on demand with its sockets under $SMOLVM_HOME/cuda/, and the
// daemon logs one `fork: clone ...` line per clone to
// $SMOLVM_HOME/cuda/daemon.log, which the control check reads. On the CPU
// path there is no daemon: the verdict is "n/a (cpu)".
#include <sys/stat.h>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "bench/arm.h"
#include "bench/child.h"
#include "bench/control_check.h"
#include "bench/fork_requests.h"
#include "bench/interrupt.h"
#include "bench/learner_failures.h"
#include "bench/summarize.h"
#include "daemon/daemon.h"
#include "machine/cgroups.h"
#include "machine/cuda_link.h"
#include "machine/errors.h"
#include "machine/machines.h"
#include "machine/pack.h"
#include "machine/paths.h"

namespace smolvm::bench {
namespace {

constexpr const char* kGuestModel = "/bench/model";
constexpr const char* kGuestBin = "/bench/bin";
constexpr const char* kGuestCoord = "/bench/coord";

Result<machine::MachineRecord> Find(const std::string& home, const std::string& name) {
  ASSIGN_OR_RETURN(auto all, machine::ListMachines(home));
  for (auto& r : all)
    if (r.name == name) return r;
  return NotFound("machine '" + name + "' disappeared");
}

// The daemon's work ahead of forks (docs/fork.md) starts when the golden
// waits at its forkpoint: every pooled worker imports its chunks and (in its
// jail) loads its modules and replays its cuDNN setup, about 1 s for a torch
// golden on the H200. A user forks a golden that has waited a while; the
// bench asks once every pooled worker is done (at most 30 s, or the
// deadline), so a clone's time is its fork's, not the golden's warm-up.
// Returns the seconds it waited (NaN without a daemon to ask).
double WaitForPreloads(const std::string& home, double deadline) {
  auto d = machine::FindCudaDaemon(home);
  if (!d.ok()) return NAN;
  const double t0 = NowUnix();
  nlohmann::json j;
  while (NowUnix() < std::min(deadline, t0 + 30) && !Interrupted()) {
    auto st = machine::CudaDaemonStatus(*d);
    j = nlohmann::json::parse(st.ok() ? *st : "", nullptr, false);
    if (j.is_object() && j.value("pooled_workers", 0) > 0 &&
        j.value("preloaded_workers", 0) == j.value("pooled_workers", 0))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  char line[128];
  std::snprintf(line, sizeof line, "pooled workers preloaded: %d of %d after %.2f s",
                j.is_object() ? j.value("preloaded_workers", 0) : 0, j.is_object() ? j.value("pooled_workers", 0) : 0,
                NowUnix() - t0);
  Progress(line);
  return NowUnix() - t0;
}

// The CUDA daemon the machine layer started for --cuda machines.
struct Daemon {
  std::string socket, log;
  pid_t pid = 0;
  size_t log_offset = 0;
};

Result<Daemon> FindDaemon(const std::string& home) {
  const std::string need =
      "not supported: the GPU fork arm needs 'machine create --cuda' to start the CUDA daemon recorded in " + home +
      "/cuda/daemon.json (docs/machines.md, 'CUDA machines')";
  auto found = machine::FindCudaDaemon(home);
  if (!found.ok()) return NotSupported(need + "; " + found.status().message());
  Daemon d;
  d.socket = found->socket;
  d.pid = found->pid;
  d.log = machine::CudaDir(home) + "/daemon.log";
  struct stat sb;
  if (::stat(d.log.c_str(), &sb) != 0) return NotSupported(need + "; no daemon log at " + d.log);
  d.log_offset = static_cast<size_t>(sb.st_size);
  return d;
}

std::string ReadFrom(const std::string& path, size_t offset) {
  std::ifstream in(path);
  in.seekg(static_cast<std::streamoff>(offset));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The daemon's lines for a run go beside the learners' logs however the arm
// ends, a failed fork's most of all (its log lives in $SMOLVM_HOME, which
// the next run's daemon appends to).
struct DaemonLinesCopy {
  const Daemon* daemon = nullptr;
  std::string to;
  ~DaemonLinesCopy() {
    if (daemon != nullptr) std::ofstream(to) << ReadFrom(daemon->log, daemon->log_offset);
  }
};

}  // namespace

Status RunForkArm(const ArmContext& c, ArmOutcome* out) {
  namespace fs = std::filesystem;
  const bool cuda = c.o.device == "cuda";
  const std::string golden = c.id + "-g";
  std::vector<std::string> clones;
  for (int i = 0; i < c.o.n; ++i) clones.push_back(c.id + "-c" + std::to_string(i));

  // The guest writes its events as its own unprivileged host uid.
  if (::chmod(c.coord.c_str(), 0777) != 0) return ErrnoStatus("chmod " + c.coord, errno);
  machine::MachineSpec spec;
  spec.cpus = c.o.cpus;
  spec.cuda = cuda;
  spec.gpu_mem_mib = cuda ? c.o.gpu_mem_mib : 0;
  std::string bin_dir = fs::path(c.learner).parent_path().string();
  spec.volumes = {{bin_dir, kGuestBin, true}, {c.coord, kGuestCoord, false}};
  // SMOLVM_BENCH_FORK_IMAGE=FILE.smolmachine: the golden runs on that pack and
  // loads the model baked into it (scripts/device-pack-bench.sh).
  std::string model = kGuestModel;
  if (const char* image = std::getenv("SMOLVM_BENCH_FORK_IMAGE"); image != nullptr && image[0] != '\0') {
    ASSIGN_OR_RETURN(machine::PackManifest pm, machine::ReadPack(image));
    if (pm.model.empty()) return InvalidArgument(std::string("SMOLVM_BENCH_FORK_IMAGE: ") + image + " has no model");
    spec.image = image;
    model = pm.model;
  } else {
    spec.volumes.push_back({c.model_dir, kGuestModel, true});
  }
  spec.cmd = LearnerArgs(c, std::string(kGuestBin) + "/" + fs::path(c.learner).filename().string(), model,
                         kGuestCoord, "fork");
  spec.cmd.push_back("--fork");
  if (c.o.learner == kLearnerTorch) AddTorchToMachine(c.torch, &spec);

  RETURN_IF_ERROR(c.ledger->AddMachine(golden));
  RETURN_IF_ERROR(machine::CreateMachine(c.home, golden, spec));
  out->t0_unix = NowUnix();
  const double deadline = out->t0_unix + c.o.timeout_s;
  if (cuda) {
    // The daemon this start brings up keeps a warm worker (context made
    // ahead) for the golden and each clone, and no idle ones after the forks:
    // they would count in the arm's GPU memory. The caller's settings win.
    static const bool user_pool = std::getenv("SMOLVM_CUDA_POOL") != nullptr;
    static const bool user_spares = std::getenv("SMOLVM_CUDA_SPARES") != nullptr;
    // The torch learner gets one more: with worker uids on (a root daemon)
    // the daemon keeps one pooled worker out of any jail, and that one
    // preloads no golden's modules or cuDNN state (docs/fork.md), ~1 s of a
    // torch clone's build: each clone gets a jailed one, and the spare idles
    // (its context counts in the peak). Our learner's setup is a module or
    // two, which the last clone loads itself rather than keep a context idle.
    const int extra = c.o.learner == kLearnerTorch ? 2 : 1;
    if (!user_pool) ::setenv("SMOLVM_CUDA_POOL", std::to_string(std::min(c.o.n + extra, kMaxPoolWorkers)).c_str(), 1);
    if (!user_spares) ::setenv("SMOLVM_CUDA_SPARES", "0", 1);
  }
  RETURN_IF_ERROR(machine::StartMachine(c.home, golden, /*forkable=*/true));
  Daemon daemon;
  DaemonLinesCopy daemon_lines_copy;
  if (cuda) {
    ASSIGN_OR_RETURN(daemon, FindDaemon(c.home));
    RETURN_IF_ERROR(c.ledger->AddProcess(daemon.pid, "cuda daemon"));
    daemon_lines_copy = {&daemon, c.logs + "/cuda-daemon.log"};
  }

  // Golden: load and warm up until it waits at its forkpoint.
  machine::MachinePaths gp(c.home, golden);
  double last_print = 0;
  for (;;) {
    if (Interrupted()) return InterruptedStatus();
    ASSIGN_OR_RETURN(machine::MachineRecord g, Find(c.home, golden));
    if (g.state == machine::kStateRunning && g.detail == "at forkpoint") break;
    if (g.state != machine::kStateRunning && g.state != machine::kStateStarting)
      // The machine's log goes when the run ends; run.cc copies it first to
      // the run's own logs, which is where this points.
      return Internal("golden '" + golden + "' " + g.state + " before its forkpoint: " + LearnerErrorLine(gp.log) + " (log: " +
                      c.logs + "/" + golden + ".log)");
    double now = NowUnix();
    if (now >= deadline) {
      out->timed_out = true;
      out->note = "--timeout reached while the golden was loading";
      return Status::Ok();
    }
    if (now - last_print >= 5) {
      char line[96];
      std::snprintf(line, sizeof line, "golden loading (%.1f s)", now - out->t0_unix);
      Progress(line);
      last_print = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  out->golden_load_s = NowUnix() - out->t0_unix;
  char at[96];
  std::snprintf(at, sizeof at, "golden at its forkpoint after %.2f s", out->golden_load_s);
  Progress(at);
  if (cuda) out->preload_wait_s = WaitForPreloads(c.home, deadline);

  // Forks: all N from one request when the supervisor offers it, else one
  // at a time (Ctrl-C and the deadline are checked between them).
  ForkRequestsProbe probe = ProbeForkRequests(gp.ctl_sock, 2000);
  out->fork_requests = ForkRequestsText(probe.mode);
  out->fork_requests_probe = probe.answer;
  Progress("forking with " + out->fork_requests + " (the supervisor's CAPS answer: " + probe.answer + ")");
  auto fork_t0 = std::chrono::steady_clock::now();
  std::vector<machine::ForkResult> forked;
  if (probe.mode == ForkRequests::kOneForAll) {
    for (const auto& name : clones) RETURN_IF_ERROR(c.ledger->AddMachine(name));
    int left_ms = static_cast<int>((deadline - NowUnix()) * 1000);
    // Ctrl-C while the clones are made cancels the request: the supervisor
    // undoes it (no clone left), then the ledger stops the golden.
    Status f = left_ms > 0 ? machine::ForkMachine(
                                 c.home, golden, clones, c.effective_share, left_ms,
                                 [&](const machine::ForkResult& r) { forked.push_back(r); }, [] { return Interrupted(); })
                           : Status(Code::kTimeout, "--timeout reached before forking");
    if (f.code() == machine::kCancelled || (Interrupted() && forked.empty())) return InterruptedStatus();
    if (RefusedForMemory(f)) {
      // All or nothing: no clone was made, and that is this N's answer.
      out->note = ForkRefusedNote(c.o.n, f.message());
      Progress(out->note);
    } else if (!f.ok()) {
      return f;  // a request is all or nothing: no clone to measure
    }
    Progress("forking " + std::to_string(forked.size()) + "/" + std::to_string(c.o.n) + " in one request");
  }
  for (int i = 0; probe.mode == ForkRequests::kPerClone && i < c.o.n; ++i) {
    if (Interrupted()) return InterruptedStatus();
    int left_ms = static_cast<int>((deadline - NowUnix()) * 1000);
    if (left_ms <= 0) {
      out->timed_out = true;
      out->note = "--timeout reached while forking (" + std::to_string(i) + " of " + std::to_string(c.o.n) + ")";
      break;
    }
    RETURN_IF_ERROR(c.ledger->AddMachine(clones[i]));
    Status f = machine::ForkMachine(c.home, golden, {clones[i]}, c.effective_share, left_ms,
                                    [&](const machine::ForkResult& r) { forked.push_back(r); });
    if (!f.ok()) {
      if (i == 0) return f;  // nothing to measure
      // Past the first clone a refusal is a result (e.g. the daemon's
      // admission: "fork needs X MiB, Y MiB free"): the clones made train on.
      out->note = "fork " + std::to_string(i + 1) + " of " + std::to_string(c.o.n) + " failed: " + f.message();
      Progress(out->note);
      break;
    }
    Progress("forking " + std::to_string(i + 1) + "/" + std::to_string(c.o.n));
  }
  out->fork_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - fork_t0).count();

  // Train. The CPU path samples the resident memory of every process in the
  // golden's and the clones' cgroups.
  auto layout = machine::DetectCgroups();
  auto tick = [&] {
    if (cuda || !layout.ok()) return;
    std::vector<pid_t> pids;
    std::map<pid_t, std::string> what;
    auto add = [&](const std::string& name, const std::string& label) {
      for (pid_t p : machine::MachineCgroup(*layout, name).Pids()) {
        pids.push_back(p);
        what[p] = label;
      }
    };
    add(golden, "golden");
    for (size_t i = 0; i < forked.size(); ++i) add(clones[i], "clone " + std::to_string(forked[i].index));
    c.sampler->WatchOnly(pids, [&](pid_t p) { return what[p]; });
  };
  auto running = [&] {
    auto all = machine::ListMachines(c.home);
    if (!all.ok()) return 1;  // keep waiting; the deadline still applies
    int alive = 0;
    for (const auto& r : *all)
      for (size_t i = 0; i < forked.size(); ++i)
        alive += r.name == clones[i] && (r.state == machine::kStateRunning || r.state == machine::kStateForking);
    return alive;
  };
  if (!out->timed_out && !forked.empty()) RETURN_IF_ERROR(WaitForLearners(c, deadline, running, tick, out));

  for (const auto& [lid, p] : out->learners)
    if (p.ready && std::isnan(out->golden_learner_load_s)) out->golden_learner_load_s = p.load_ms / 1e3;
  if (!cuda) {
    for (const auto& r : forked) out->clones.push_back({r.index, 0, 0, NAN, NAN, r.ms});
    out->control_check = "n/a (cpu)";
    return Status::Ok();
  }
  std::string daemon_lines = ReadFrom(daemon.log, daemon.log_offset);  // copied too as the arm returns
  out->clones = ParseForkLines(daemon_lines);
  int64_t most = 0;
  for (const auto& cf : out->clones) most = std::max(most, cf.shared_chunks);
  out->shared_ranges = most;
  // No clone (the request refused for memory): nothing shared or copied to check.
  out->control_check = forked.empty() ? "n/a (no clone)"
                                      : ControlVerdict(c.effective_share, out->clones, static_cast<int>(forked.size()));
  return Status::Ok();
}

}  // namespace smolvm::bench
