#include "bench/ledger.h"

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "bench/mps.h"
#include "machine/cgroups.h"
#include "machine/machines.h"
#include "machine/process.h"

namespace smolvm::bench {

using json = nlohmann::json;

Ledger::Ledger(std::string home) : home_(std::move(home)), path_(home_ + "/bench/ledger.json") {}

Status Ledger::Load() {
  machines_.clear();
  cgroups_.clear();
  processes_.clear();
  mps_.clear();
  std::ifstream in(path_);
  if (!in) return Status::Ok();
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Malformed("the bench ledger " + path_ + " is corrupt; check what it names by hand, then delete it");
  for (const auto& m : j.value("machines", json::array())) machines_.push_back(m.get<std::string>());
  for (const auto& c : j.value("cgroups", json::array())) cgroups_.push_back(c.get<std::string>());
  for (const auto& p : j.value("processes", json::array()))
    processes_.push_back({p.value("pid", int64_t{0}), p.value("start", int64_t{0}), p.value("what", std::string())});
  for (const auto& m : j.value("mps", json::array()))
    mps_.push_back({m.value("control", std::string()), m.value("root", std::string()), m.value("pid", int64_t{0}),
                    m.value("start", int64_t{0})});
  return Status::Ok();
}

Status Ledger::Save() const {
  std::error_code ec;
  std::filesystem::create_directories(home_ + "/bench", ec);
  json j = {{"machines", machines_}, {"cgroups", cgroups_}, {"processes", json::array()}};
  for (const auto& p : processes_) j["processes"].push_back({{"pid", p.pid}, {"start", p.start}, {"what", p.what}});
  j["mps"] = json::array();
  for (const auto& m : mps_)
    j["mps"].push_back({{"control", m.control}, {"root", m.root}, {"pid", m.pid}, {"start", m.start}});
  std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(1) << "\n";
    if (!out) return ErrnoStatus("cannot write " + tmp, errno);
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) return ErrnoStatus("cannot write " + path_, errno);
  return Status::Ok();
}

Status Ledger::AddMachine(const std::string& name) {
  machines_.push_back(name);
  return Save();
}

Status Ledger::AddCgroup(const std::string& name) {
  cgroups_.push_back(name);
  return Save();
}

Status Ledger::AddProcess(pid_t pid, const std::string& what) {
  processes_.push_back({pid, machine::ProcessStartTime(pid), what});
  return Save();
}

Status Ledger::AddMps(const std::string& control, const std::string& root) {
  mps_.push_back({control, root, 0, 0});
  return Save();
}

Status Ledger::SetMpsPid(const std::string& root, pid_t pid, int64_t start) {
  for (auto& m : mps_)
    if (m.root == root) m.pid = pid, m.start = start;
  return Save();
}

Status Ledger::DropMps(const std::string& root) {
  std::erase_if(mps_, [&](const RecordedMps& m) { return m.root == root; });
  return Save();
}

Result<std::vector<std::string>> Ledger::CleanUp(bool keep_mps) {
  std::vector<std::string> done;
  // Processes first: a recorded daemon must stop before its machines' cgroups go.
  for (const auto& p : processes_) {
    if (p.start == 0 || !machine::ProcessAlive(static_cast<pid_t>(p.pid), p.start)) continue;
    auto fd = machine::OpenPidfd(static_cast<pid_t>(p.pid), p.start);
    if (!fd.ok()) continue;
    (void)machine::SignalPidfd(fd->get(), SIGTERM);
    if (!machine::WaitPidfd(fd->get(), 5000)) {
      (void)machine::SignalPidfd(fd->get(), SIGKILL);
      machine::WaitPidfd(fd->get(), 5000);
    }
    done.push_back(p.what + " (pid " + std::to_string(p.pid) + ")");
  }
  // Goldens before clones is fine: --cascade removes a golden's clones first.
  Status first_error;
  for (const auto& m : machines_) {
    Status s = machine::RemoveMachine(home_, m, /*cascade=*/true, /*force=*/true, /*grace_ms=*/2000);
    if (s.ok()) {
      done.push_back("machine " + m);
    } else if (s.code() != static_cast<int32_t>(Code::kNotFound) && first_error.ok()) {
      first_error = s;
    }
  }
  if (!cgroups_.empty()) {
    auto layout = machine::DetectCgroups();
    if (!layout.ok()) return layout.status();
    for (const auto& c : cgroups_) {
      machine::MachineCgroup cg(*layout, c);
      if (!cg.Exists()) continue;
      Status s = cg.Destroy();
      if (s.ok()) done.push_back("cgroup " + c);
      else if (first_error.ok()) first_error = s;
    }
  }
  if (!first_error.ok()) return first_error;
  if (!keep_mps) {
    for (const auto& m : mps_) {
      std::string how = StopMpsLeftover(m.control, m.root, static_cast<pid_t>(m.pid), m.start);
      done.push_back("mps control daemon (" + m.root + "): " + how);
    }
    mps_.clear();
  }
  machines_.clear();
  cgroups_.clear();
  processes_.clear();
  RETURN_IF_ERROR(Save());
  return done;
}

}  // namespace smolvm::bench
