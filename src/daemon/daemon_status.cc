// The status an operator sees (AdminStatus): gathered from the registry,
// the pool and the endpoints into DaemonStatus, then written as JSON.
#include "daemon/daemon_status.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "daemon/daemon.h"
#include "proto/proto_hash.h"
#include "worker/context_size.h"

#ifdef SMOLVM_HAVE_CUDA_BACKEND
#include "backend/nvml_host.h"
#endif

namespace smolvm {
namespace {

constexpr double Mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// The ledger's {"LaunchKernel": n, ...} as a typed map.
std::map<std::string, uint64_t> OpsByName(const nlohmann::json& j) {
  std::map<std::string, uint64_t> out;
  for (const auto& [name, n] : j.items()) out[name] = n.get<uint64_t>();
  return out;
}

nlohmann::json ToJson(const SessionStatus& s) {
  nlohmann::json charged;  // null without a --gpu-mem
  if (s.gpu_mem_charged)
    charged = {{"context_mib", s.gpu_mem_charged->context_mib},
               {"chunks_mib", s.gpu_mem_charged->chunks_mib},
               {"modules_mib", s.gpu_mem_charged->modules_mib},
               {"limits_mib", s.gpu_mem_charged->limits_mib},
               {"workspaces_mib", s.gpu_mem_charged->workspaces_mib},
               {"total_mib", s.gpu_mem_charged->total_mib}};
  return {{"session", s.session},
          {"pid", s.pid},
          {"host_pid", s.host_pid},
          {"machine", s.machine},
          {"worker_pid", s.worker_pid},
          {"role", s.role},
          {"state", s.state},
          {"shared_chunks", s.shared_chunks},
          {"shared_mib", s.shared_mib},
          {"private_chunks", s.private_chunks},
          {"private_mib", s.private_mib},
          {"private_live_mib", s.private_live_mib ? nlohmann::json(*s.private_live_mib) : nlohmann::json()},
          {"allocations", s.allocations},
          {"context_mib", s.context_mib},
          {"modules_mib", s.modules_mib},
          {"limits_mib", s.limits_mib},
          {"workspaces_mib", s.workspaces_mib},
          {"preloaded_workers", s.preloaded_workers},
          {"gpu_mem_charged", charged},
          {"ops", s.ops}};
}

}  // namespace

std::string StderrLogPath() {
  struct stat st;
  if (::fstat(2, &st) != 0 || !S_ISREG(st.st_mode)) return "";
  std::error_code ec;
  std::string path = std::filesystem::read_symlink("/proc/self/fd/2", ec).string();
  return ec || path.empty() || path[0] != '/' ? "" : path;
}

std::string StatusJson(const DaemonStatus& s) {
  nlohmann::json j;
  j["daemon_pid"] = s.daemon_pid;
  j["backend"] = s.backend;
  j["proto_hash"] = s.proto_hash;
  j["control_hash"] = s.control_hash;
  j["sessions"] = nlohmann::json::array();
  for (const auto& x : s.sessions) j["sessions"].push_back(ToJson(x));
  j["ops_total"] = s.ops_total;
  j["context_source"] = s.context_source;
  j["machines"] = nlohmann::json::array();
  for (const auto& m : s.machines) {
    nlohmann::json o = {{"machine", m.machine}, {"cgroups", m.cgroups}};
    if (m.gpu_mem_mib) o["gpu_mem_mib"] = *m.gpu_mem_mib;
    if (m.gpu_used_mib) o["gpu_used_mib"] = *m.gpu_used_mib;
    j["machines"].push_back(o);
  }
  j["pooled_workers"] = s.pooled_workers;
  j["ready_workers"] = s.ready_workers;
  j["preloaded_workers"] = s.preloaded_workers;
  j["descriptors"] = {{"held", s.descriptors.held},
                      {"cap_per_machine", s.descriptors.cap_per_machine},
                      {"cap", s.descriptors.cap},
                      {"rlimit_nofile", s.descriptors.rlimit_nofile},
                      {"by_tenant", s.descriptors.by_tenant}};
  j["refusals"] = s.refusals;
  j["caps"] = s.caps;
  j["pool"] = nlohmann::json::array();
  for (const auto& w : s.pool)
    j["pool"].push_back({{"pid", w.pid}, {"ready", w.ready}, {"preloaded_session", w.preloaded_session}});
  j["worker_start_failures"] = s.worker_start_failures;
  j["last_worker_failure"] = s.last_worker_failure;
  j["log"] = s.log;
  return j.dump();
}

DaemonStatus Daemon::CollectStatus() const {
  DaemonStatus out;
  out.daemon_pid = ::getpid();
  out.backend = options_.backend;
  out.proto_hash = proto::HashHex(proto::kProtoHash);
  out.control_hash = proto::HashHex(proto::kControlHash);
  out.ops_total = OpsByName(ops_.Totals());
  out.worker_start_failures = start_failures_;
  out.last_worker_failure = last_start_failure_;
  out.log = log_path_;
  // Context memory per session: what NVML counts for its worker minus the
  // chunks it owns (a golden owns its shared chunks; a clone's are imports,
  // which NVML does not count in the importer); else the estimate.
  std::map<uint32_t, uint64_t> nvml_used;
  out.context_source = options_.backend == "fake" ? "fixed" : "estimate";
#ifdef SMOLVM_HAVE_CUDA_BACKEND
  if (options_.backend != "fake") {
    if (auto used = HostProcessMemory(); used.ok()) {
      nvml_used = std::move(used).value();
      out.context_source = "nvml";
    }
  }
#endif
  for (const auto& [id, s] : sessions_) {
    // The worker's context and those the guest created (cuCtxCreate).
    const uint64_t created = s.created_contexts * EstimatedContextBytes(options_.backend);
    uint64_t context = EstimatedContextBytes(options_.backend) + created;
    if (auto u = nvml_used.find(static_cast<uint32_t>(s.worker_pid)); u != nvml_used.end()) {
      uint64_t owned = s.private_bytes + (s.role == proto::SessionRole::kGolden ? s.shared_bytes : 0);
      context = u->second > owned ? u->second - owned : 0;
    }
    SessionStatus x;
    if (auto w = workers_.find(s.worker_pid); w != workers_.end() && w->second.budget && w->second.budget_slot >= 0) {
      const uint64_t held = w->second.budget->SlotUsed(static_cast<uint32_t>(w->second.budget_slot));
      const uint64_t ctx = std::min(held, w->second.context_bytes + created);
      // The slot holds the context, then what the worker reported by part;
      // the rest are its chunks.
      const uint64_t modules = std::min(held - ctx, s.module_bytes);
      const uint64_t limits = std::min(held - ctx - modules, s.limit_bytes);
      const uint64_t workspaces = std::min(held - ctx - modules - limits, s.workspace_bytes);
      x.gpu_mem_charged = SessionStatus::Charged{Mib(ctx),    Mib(held - ctx - modules - limits - workspaces),
                                                 Mib(modules), Mib(limits), Mib(workspaces), Mib(held)};
    }
    x.session = id;
    x.pid = s.guest_pid;
    x.host_pid = s.host_pid;
    x.machine = s.machine;
    x.worker_pid = s.worker_pid;
    x.role = proto::SessionRoleName(s.role);
    x.state = s.state;
    x.shared_chunks = s.shared_chunks;
    x.shared_mib = Mib(s.shared_bytes);
    x.private_chunks = s.private_chunks;
    x.private_mib = Mib(s.private_bytes);
    if (s.private_live_bytes != ~0ull) x.private_live_mib = Mib(s.private_live_bytes);
    x.allocations = s.allocations;
    x.context_mib = Mib(context);
    x.modules_mib = Mib(s.module_bytes);
    x.limits_mib = Mib(s.limit_bytes);
    x.workspaces_mib = Mib(s.workspace_bytes);
    x.preloaded_workers = PreloadedWorkers(id);
    x.ops = OpsByName(ops_.Session(id));
    out.sessions.push_back(std::move(x));
  }
  for (const auto& [id, e] : endpoints_) {
    MachineStatus m{e.machine, e.cgroups, std::nullopt, std::nullopt};
    if (e.budget) {
      m.gpu_mem_mib = Mib(e.budget->limit());
      m.gpu_used_mib = Mib(e.budget->used());
    }
    out.machines.push_back(std::move(m));
  }
  if (fd_budget_) {
    out.descriptors.held = fd_budget_->held();
    out.descriptors.cap_per_machine = fd_budget_->per_tenant();
    out.descriptors.cap = fd_budget_->total();
    out.descriptors.by_tenant = fd_budget_->by_tenant();
  }
  struct rlimit lim = {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) out.descriptors.rlimit_nofile = lim.rlim_cur;
  out.refusals = refusals_.by_cap();
  out.caps = {{"--max-conns-per-machine", static_cast<uint64_t>(options_.max_conns_per_machine)},
              {"--max-conns-per-pid", static_cast<uint64_t>(options_.max_conns_per_pid)},
              {"--max-conns", static_cast<uint64_t>(options_.max_conns)},
              {"--max-sessions-per-machine", static_cast<uint64_t>(options_.max_sessions_per_machine)},
              {"--max-workers", static_cast<uint64_t>(options_.max_workers)},
              {"--max-fds-per-machine", fd_budget_ ? fd_budget_->per_tenant() : 0},
              {"--max-fds", fd_budget_ ? fd_budget_->total() : 0},
              {"--module-cache-mib", options_.module_cache_bytes >> 20}};
  for (const auto& [pid, w] : workers_) {
    if (w.session_id != 0) continue;
    ++out.pooled_workers;
    out.ready_workers += w.ready;
    out.preloaded_workers += w.primed != 0 && w.primed_done;
    out.pool.push_back({pid, w.ready, w.primed_done ? w.primed : 0});
  }
  return out;
}

}  // namespace smolvm
