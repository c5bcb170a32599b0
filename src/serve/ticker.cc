#include "serve/ticker.h"

namespace smolvm::serve {

Ticker::Ticker(std::chrono::milliseconds period, std::function<void()> fn)
    : period_(period), fn_(std::move(fn)), thread_([this] { Loop(); }) {}

Ticker::~Ticker() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Ticker::Wake() {
  {
    std::lock_guard<std::mutex> l(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

void Ticker::RunOnceAndWait() {
  std::unique_lock<std::mutex> l(mu_);
  uint64_t want = started_ + 1;
  woken_ = true;
  cv_.notify_all();
  cv_.wait(l, [&] { return stop_ || finished_ >= want; });
}

void Ticker::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait_for(l, period_, [&] { return stop_ || woken_; });
    if (stop_) return;
    woken_ = false;
    ++started_;
    l.unlock();
    fn_();
    l.lock();
    ++finished_;
    cv_.notify_all();
  }
}

}  // namespace smolvm::serve
