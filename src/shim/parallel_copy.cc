#include "shim/parallel_copy.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace smolvm::shim {
namespace {

// Below this a single memcpy wins (thread hand-off costs microseconds).
constexpr size_t kParallelMin = 2u << 20;
constexpr int kHelpers = 3;

struct Job {
  char* dst = nullptr;
  const char* src = nullptr;
  size_t n = 0;
};

class CopyPool {
 public:
  CopyPool() {
    for (int i = 0; i < kHelpers; ++i) threads_.emplace_back([this, i] { Run(i); });
  }
  // Never destroyed (detached at exit): copies may run from atexit handlers.
  void Copy(char* dst, const char* src, size_t n) {
    size_t part = (n / (kHelpers + 1) + 4095) & ~size_t{4095};
    {
      std::lock_guard l(mu_);
      for (int i = 0; i < kHelpers; ++i) {
        size_t at = std::min(n, part * static_cast<size_t>(i + 1));
        size_t len = std::min(part, n - at);
        jobs_[i] = Job{dst + at, src + at, len};
      }
      pending_ = kHelpers;
      ++generation_;
    }
    cv_.notify_all();
    std::memcpy(dst, src, std::min(part, n));
    std::unique_lock l(mu_);
    done_.wait(l, [this] { return pending_ == 0; });
  }

 private:
  void Run(int i) {
    uint64_t seen = 0;
    std::unique_lock l(mu_);
    while (true) {
      cv_.wait(l, [&] { return generation_ != seen; });
      seen = generation_;
      Job j = jobs_[i];
      l.unlock();
      if (j.n) std::memcpy(j.dst, j.src, j.n);
      l.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, done_;
  Job jobs_[kHelpers];
  int pending_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::thread> threads_;
};

CopyPool* g_pool = nullptr;

}  // namespace

void ParallelCopy(void* dst, const void* src, size_t n) {
  if (n < kParallelMin) {
    std::memcpy(dst, src, n);
    return;
  }
  if (g_pool == nullptr) g_pool = new CopyPool();
  g_pool->Copy(static_cast<char*>(dst), static_cast<const char*>(src), n);
}

void ParallelCopyResetAfterFork() {
  // The parent's helpers are gone in the child; leak their pool object.
  g_pool = nullptr;
}

}  // namespace smolvm::shim
