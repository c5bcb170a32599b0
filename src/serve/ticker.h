// Ticker: runs a function on its own thread every `period`, and at once
// when woken. serve runs two: the refiller (PoolManager::RefillOnce, woken
// by every lease taken) and the housekeeper (machine checks, link re-opens,
// TTL expiry).
//
// Thread safety: Wake from any thread; the function runs on the ticker's
// thread only, never twice at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace smolvm::serve {

class Ticker {
 public:
  Ticker(std::chrono::milliseconds period, std::function<void()> fn);
  ~Ticker();  // waits for a run in progress
  void Wake();
  // Blocks until a whole run started after this call has finished (tests).
  void RunOnceAndWait();

 private:
  void Loop();

  std::chrono::milliseconds period_;
  std::function<void()> fn_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false, stop_ = false;
  uint64_t started_ = 0, finished_ = 0;
  std::thread thread_;
};

}  // namespace smolvm::serve
