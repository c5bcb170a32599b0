// Reclaimer: removes machines in the background (a clone whose lease ended,
// a parked clone that died, a replaced golden, a pool's machines), so that
// release and expiry answer at once. A removal that fails is retried with
// a growing delay and logged; Idle() says when nothing is queued.
//
// Thread safety: all methods from any thread; one worker thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "serve/clone_driver.h"

namespace smolvm::serve {

class Reclaimer {
 public:
  explicit Reclaimer(CloneDriver* driver);
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
  std::string busy_;
  int64_t removed_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace smolvm::serve
