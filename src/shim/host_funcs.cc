#include "shim/host_funcs.h"

#include <cuda_runtime_api.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>

#include "shim/session.h"

namespace smolvm::shim {
namespace {

thread_local bool tl_host_function_thread = false;

}  // namespace

bool OnHostFunctionThread() { return tl_host_function_thread; }

HostFuncRunner::HostFuncRunner(Session* session)
    : session_(session), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void HostFuncRunner::Start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard l(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void HostFuncRunner::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard l(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
  thread_.join();
  uint64_t drained;
  (void)!::read(wake_.get(), &drained, sizeof drained);
}

void HostFuncRunner::Push(const proto::HostFuncCallRequest& call) {
  std::lock_guard l(mu_);
  calls_.push_back(call);
  cv_.notify_all();
}

void HostFuncRunner::Expect(uint64_t n) {
  std::lock_guard l(mu_);
  expected_ += n;
  cv_.notify_all();
}

uint64_t HostFuncRunner::pending() const {
  std::lock_guard l(mu_);
  return expected_ + calls_.size();
}

uint64_t HostFuncRunner::unfinished() const {
  std::lock_guard l(mu_);
  return expected_ + calls_.size() + running_;
}

void HostFuncRunner::ReaderWants() {
  {
    std::lock_guard l(mu_);
    ++readers_;
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void HostFuncRunner::ReaderDone() {
  std::lock_guard l(mu_);
  --readers_;
  cv_.notify_all();
}

void HostFuncRunner::Run(const proto::HostFuncCallRequest& call) {
  if (call.kind == 2) {
    // A HostFetch: the worker wants this process's pinned bytes now.
    session_->SendHostFetchData(call.fn, call.user);
    return;
  }
  if (call.kind == 1) {
    auto fn = reinterpret_cast<cudaStreamCallback_t>(call.fn);
    fn(reinterpret_cast<cudaStream_t>(call.stream), static_cast<cudaError_t>(call.status),
       reinterpret_cast<void*>(call.user));
  } else {
    auto fn = reinterpret_cast<cudaHostFn_t>(call.fn);
    fn(reinterpret_cast<void*>(call.user));
  }
}

void HostFuncRunner::Loop() {
  tl_host_function_thread = true;
  bool dead = false;  // the connection failed: run what was routed, read no more
  for (;;) {
    bool have = false;
    proto::HostFuncCallRequest call;
    {
      std::unique_lock l(mu_);
      cv_.wait(l, [&] { return stop_ || !calls_.empty() || (!dead && expected_ > 0 && readers_ == 0); });
      if (stop_) return;
      if (!calls_.empty()) {
        call = calls_.front();
        calls_.pop_front();
        if (expected_ > 0) --expected_;
        ++running_;
        have = true;
      }
    }
    if (have) {
      Run(call);
      session_->SendHostFuncDone(call.call);
      std::lock_guard l(mu_);
      --running_;
      continue;
    }
    // Callbacks are due and no CUDA call is reading: read for them.
    std::unique_lock rl(session_->read_mu(), std::try_to_lock);
    if (!rl.owns_lock()) {
      std::unique_lock l(mu_);
      cv_.wait_for(l, std::chrono::milliseconds(20));
      continue;
    }
    switch (session_->ReadForRunner(wake_.get(), this)) {
      case Session::RunnerRead::kFailed:
        dead = true;
        break;
      case Session::RunnerRead::kStashed: {
        // A reply for a call about to read: leave the connection to it.
        rl.unlock();
        std::unique_lock l(mu_);
        cv_.wait_for(l, std::chrono::milliseconds(20), [&] { return stop_ || !calls_.empty() || readers_ > 0; });
        break;
      }
      default:
        break;
    }
  }
}

}  // namespace smolvm::shim
