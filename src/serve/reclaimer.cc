#include "serve/reclaimer.h"

#include <cstdio>

namespace smolvm::serve {

Reclaimer::Reclaimer(CloneDriver* driver) : driver_(driver), worker_([this] { Run(); }) {}

Reclaimer::~Reclaimer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void Reclaimer::Remove(const std::string& machine) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (machine.empty() || queued_.count(machine) || busy_ == machine) return;
    queued_.insert(machine);
    queue_.push_back(machine);
  }
  cv_.notify_all();
}

bool Reclaimer::Pending(const std::string& machine) const {
  std::lock_guard<std::mutex> l(mu_);
  return queued_.count(machine) || busy_ == machine;
}

size_t Reclaimer::pending() const {
  std::lock_guard<std::mutex> l(mu_);
  return queue_.size() + (busy_.empty() ? 0 : 1);
}

int64_t Reclaimer::removed() const {
  std::lock_guard<std::mutex> l(mu_);
  return removed_;
}

void Reclaimer::WaitIdle() {
  std::unique_lock<std::mutex> l(mu_);
  idle_cv_.wait(l, [&] { return stop_ || (queue_.empty() && busy_.empty()); });
}

void Reclaimer::Run() {
  std::unique_lock<std::mutex> l(mu_);
  int failures = 0;
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    busy_ = queue_.front();
    queue_.pop_front();
    queued_.erase(busy_);
    std::string m = busy_;
    l.unlock();
    Status s = driver_->Remove(m);
    l.lock();
    busy_.clear();
    if (s.ok()) {
      removed_++;
      failures = 0;
    } else {
      std::fprintf(stderr, "serve: removing machine %s failed (retrying): %s\n", m.c_str(), s.message().c_str());
      failures++;
      if (!queued_.count(m)) {
        queued_.insert(m);
        queue_.push_back(m);
      }
      // Back off before the retry without holding up a stop.
      cv_.wait_for(l, std::chrono::milliseconds(std::min(5000, 100 << std::min(failures, 6))), [&] { return stop_; });
    }
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace smolvm::serve
