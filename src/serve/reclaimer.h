// Reclaimer: removes machines in the background (a clone whose lease ended,
// a parked clone that died, a replaced golden, a pool's machines), so that
// release and expiry answer at once. A removal that fails is retried with
// a growing delay and logged; Idle() says when nothing is queued.
//
// Several at once (`threads`, 8 by default): a clone's removal takes ~0.5 s
// (its cgroup emptied, its layers unmounted) and its worker's CUDA context
// is freed only then, so one at a time kept a round of 64 leased clones'
// contexts ~32 s on the H100 of 2026-12-08, and the refill's fork, finding
// no room for new contexts meanwhile, failed after 32 s. A driver whose
// removal of a golden meets a clone another thread removed first says so
// (the golden is still there) and is retried.
//
// Thread safety: all methods from any thread; `threads` worker threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "serve/clone_driver.h"

namespace smolvm::serve {

class Reclaimer {
 public:
  static constexpr int kDefaultThreads = 8;
  explicit Reclaimer(CloneDriver* driver, int threads = kDefaultThreads);
  ~Reclaimer();  // stops the worker; what is still queued stays (a restart finds it)

  void Remove(const std::string& machine);
  bool Pending(const std::string& machine) const;
  size_t pending() const;
  int64_t removed() const;
  // Blocks until nothing is queued or being removed (tests, shutdown).
  void WaitIdle();

 private:
  void Run();

  CloneDriver* driver_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::string> queue_;
  std::set<std::string> queued_;
  std::set<std::string> busy_;  // being removed now
  int64_t removed_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace smolvm::serve
