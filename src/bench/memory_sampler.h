// Samples memory at 10 Hz on its own thread and keeps peaks: the whole
// (device, or the sum over the run's processes) and per process.
//
// Sources: on the GPU, NVML's used memory of every device and its compute
// processes; on the CPU path, the resident memory of the processes the arm
// names (PSS, so copy-on-write pages shared by a golden and its clones count
// once). The arm may change the watched pids and labels while the
// sampler runs (thread-safe).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench/results.h"

namespace smolvm::bench {

struct MemorySample {
  double total_mib = 0;
  std::map<pid_t, double> per_pid_mib;
};

class MemorySampler {
 public:
  using Source = std::function<MemorySample(const std::vector<pid_t>& watched)>;
  // NVML (whole device = sum of the used memory of every device).
  static Source Nvml();
  // PSS (else VmRSS) of each watched pid; total = their sum.
  static Source ResidentMemory();

  explicit MemorySampler(Source source, int period_ms = 100);
  ~MemorySampler();
  void Start();
  void Stop();  // idempotent; takes one last sample

  // Labels a pid ("learner 3") and samples at once, so a process that ends
  // between two ticks is still counted; only labelled pids are reported per process
  // (on the GPU every compute process is, labelled "pid N" when unknown).
  void Watch(pid_t pid, const std::string& what);
  // Replaces the watched set with `pids`, labelled by `what(pid)`.
  void WatchOnly(const std::vector<pid_t>& pids, const std::function<std::string(pid_t)>& what);

  double PeakTotalMib() const;
  std::vector<ProcessPeak> PeakPerProcess() const;
  double PeakOf(pid_t pid) const;  // NaN when never seen

 private:
  void Loop();
  void SampleOnce();
  Source source_;
  int period_ms_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<pid_t, std::string> labels_;  // every pid ever watched
  std::set<pid_t> watched_;
  std::map<pid_t, double> peak_;
  double peak_total_ = 0;
};

}  // namespace smolvm::bench
