#include "bench/memory_sampler.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "backend/nvml_host.h"

namespace smolvm::bench {
namespace {

// Proportional set size (a page shared by k processes counts 1/k to each),
// so the sum over a golden and its copy-on-write clones is the memory they
// really hold; VmRSS where smaps_rollup is missing. -1 when pid is gone.
double ResidentMib(pid_t pid) {
  std::string proc = "/proc/" + std::to_string(pid);
  for (const auto& [file, key] : {std::pair<std::string, const char*>{proc + "/smaps_rollup", "Pss: %lld kB"},
                                  {proc + "/status", "VmRSS: %lld kB"}}) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      long long kb = 0;
      if (std::sscanf(line.c_str(), key, &kb) == 1) return kb / 1024.0;
    }
  }
  return -1;
}

}  // namespace

MemorySampler::Source MemorySampler::Nvml() {
  return [](const std::vector<pid_t>&) {
    MemorySample s;
    auto devices = HostGpuMemoryInUse();
    if (!devices.ok()) return s;
    for (const auto& d : *devices) {
      s.total_mib += d.used_bytes / 1048576.0;
      for (const auto& p : d.processes) s.per_pid_mib[static_cast<pid_t>(p.pid)] += p.used_bytes / 1048576.0;
    }
    return s;
  };
}

MemorySampler::Source MemorySampler::ResidentMemory() {
  return [](const std::vector<pid_t>& watched) {
    MemorySample s;
    for (pid_t p : watched) {
      double mib = ResidentMib(p);
      if (mib < 0) continue;
      s.per_pid_mib[p] = mib;
      s.total_mib += mib;
    }
    return s;
  };
}

MemorySampler::MemorySampler(Source source, int period_ms) : source_(std::move(source)), period_ms_(period_ms) {}

MemorySampler::~MemorySampler() { Stop(); }

void MemorySampler::Start() { thread_ = std::thread([this] { Loop(); }); }

void MemorySampler::Stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  thread_.join();
  SampleOnce();
}

void MemorySampler::Loop() {
  while (!stop_) {
    SampleOnce();
    std::this_thread::sleep_for(std::chrono::milliseconds(period_ms_));
  }
}

void MemorySampler::SampleOnce() {
  std::vector<pid_t> watched;
  {
    std::lock_guard<std::mutex> l(mu_);
    watched.assign(watched_.begin(), watched_.end());
  }
  MemorySample s = source_(watched);
  std::lock_guard<std::mutex> l(mu_);
  peak_total_ = std::max(peak_total_, s.total_mib);
  for (const auto& [pid, mib] : s.per_pid_mib) {
    double& p = peak_[pid];
    p = std::max(p, mib);
  }
}

void MemorySampler::Watch(pid_t pid, const std::string& what) {
  {
    std::lock_guard<std::mutex> l(mu_);
    labels_[pid] = what;
    watched_.insert(pid);
  }
  SampleOnce();  // a process that ends before the next tick still counts
}

void MemorySampler::WatchOnly(const std::vector<pid_t>& pids, const std::function<std::string(pid_t)>& what) {
  {
    std::lock_guard<std::mutex> l(mu_);
    watched_.clear();
    for (pid_t p : pids) {
      if (!labels_.count(p)) labels_[p] = what(p);
      watched_.insert(p);
    }
  }
  SampleOnce();
}

double MemorySampler::PeakTotalMib() const {
  std::lock_guard<std::mutex> l(mu_);
  return peak_total_;
}

std::vector<ProcessPeak> MemorySampler::PeakPerProcess() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<ProcessPeak> out;
  for (const auto& [pid, mib] : peak_) {
    auto it = labels_.find(pid);
    out.push_back({pid, it != labels_.end() ? it->second : "pid " + std::to_string(pid), mib});
  }
  return out;
}

double MemorySampler::PeakOf(pid_t pid) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = peak_.find(pid);
  return it == peak_.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
}

}  // namespace smolvm::bench
