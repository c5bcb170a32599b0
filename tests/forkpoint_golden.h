// A golden session's forkpoint loop for daemon tests (fork_test.cc,
// fork_release_test.cc, hostile_test.cc): on its own thread it waits at the
// forkpoint and queues each order the daemon gives, for the test to act on
// as the forked child would.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "daemon_client.h"
#include "proto/messages.h"

namespace smolvm::testing {

class Golden {
 public:
  explicit Golden(RawClient* c) : c_(c) {
    thread_ = std::thread([this] {
      while (true) {
        proto::ForkpointWaitReply r;
        CallResult res = c_->Call(proto::ForkpointWaitRequest{}, &r);
        std::lock_guard<std::mutex> l(mu_);
        orders_.push_back(res.ok() ? r : proto::ForkpointWaitReply{-2, ""});
        cv_.notify_all();
        if (!res.ok() || r.clone_index < 0) return;
      }
    });
  }
  ~Golden() {
    if (thread_.joinable()) thread_.join();
  }
  // The next order ({-2, ""}: the call failed; {-3, ""}: none within `wait`).
  proto::ForkpointWaitReply Next(std::chrono::milliseconds wait = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, wait, [this] { return !orders_.empty(); });
    if (orders_.empty()) return {-3, ""};
    auto r = orders_.front();
    orders_.pop_front();
    return r;
  }
  void Join() { thread_.join(); }

 private:
  RawClient* c_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<proto::ForkpointWaitReply> orders_;
};

}  // namespace smolvm::testing
