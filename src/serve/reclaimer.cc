#include "serve/reclaimer.h"

#include <algorithm>
#include <cstdio>

namespace smolvm::serve {

Reclaimer::Reclaimer(CloneDriver* driver, int threads) : driver_(driver) {
  for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { Run(); });
}

Reclaimer::~Reclaimer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void Reclaimer::Remove(const std::string& machine) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (machine.empty() || queued_.count(machine) || busy_.count(machine)) return;
    queued_.insert(machine);
    queue_.push_back(machine);
  }
  cv_.notify_all();  // not one: a thread backing off a failure waits on cv_ too
}

bool Reclaimer::Pending(const std::string& machine) const {
  std::lock_guard<std::mutex> l(mu_);
  return queued_.count(machine) || busy_.count(machine);
}

size_t Reclaimer::pending() const {
  std::lock_guard<std::mutex> l(mu_);
  return queue_.size() + busy_.size();
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
  int failures = 0;  // this thread's, in a row
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    std::string m = queue_.front();
    queue_.pop_front();
    queued_.erase(m);
    busy_.insert(m);
    l.unlock();
    Status s = driver_->Remove(m);
    l.lock();
    if (s.ok()) {
      removed_++;
      failures = 0;
    } else {
      std::fprintf(stderr, "serve: removing machine %s failed (retrying): %s\n", m.c_str(), s.message().c_str());
      failures++;
      // Back off before the retry (still busy with it, so no other thread
      // takes it at once), without holding up a stop.
      cv_.wait_for(l, std::chrono::milliseconds(std::min(5000, 100 << std::min(failures, 6))), [&] { return stop_; });
      if (!queued_.count(m)) {
        queued_.insert(m);
        queue_.push_back(m);
      }
    }
    busy_.erase(m);
    if (queue_.empty() && busy_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace smolvm::serve
