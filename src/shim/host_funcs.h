// HostFuncRunner: the guest's thread that runs host functions
// (cudaLaunchHostFunc, cudaStreamAddCallback, graph host nodes) when the
// worker asks for them (HostFuncCall), and answers each with HostFuncDone.
//
// The worker's request is an unsolicited frame on the session's connection.
// Whoever reads the connection routes it here: a CUDA call waiting for its
// reply (Session::ReadReply), or, while callbacks are expected and no call
// is reading, this thread itself. So a callback runs while the program's
// main thread is blocked in cudaStreamSynchronize on that very stream, or
// is not in CUDA at all (waiting on a barrier the callback opens).
//
// The function runs on this thread with no lock of the shim held. CUDA
// calls made from it do not reach the session (Runtime::Get() answers them
// from a runtime whose every call fails with cudaErrorNotPermitted), as
// CUDA forbids them there.
//
// Lifecycle: made by the Session on first use; Stop() joins the thread
// (before a fork: no thread survives fork(2)); a later use starts it again.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "base/unique_fd.h"
#include "proto/messages.h"

namespace smolvm::shim {

class Session;

// True on a host-function thread: Runtime::Get() then answers with the
// runtime that refuses every call.
bool OnHostFunctionThread();

class HostFuncRunner {
 public:
  explicit HostFuncRunner(Session* session);
  ~HostFuncRunner() { Stop(); }
  HostFuncRunner(const HostFuncRunner&) = delete;
  HostFuncRunner& operator=(const HostFuncRunner&) = delete;

  // Starts the thread if it is not running. REQUIRES the session lock.
  void Start();
  // Joins the thread; calls not run yet stay queued for the next Start().
  void Stop();
  bool running() const { return thread_.joinable(); }

  // A call the reader found on the connection.
  void Push(const proto::HostFuncCallRequest& call);
  // `n` more calls will come (a host function or a graph launch enqueued).
  void Expect(uint64_t n);
  // Calls expected and not done yet.
  uint64_t pending() const;
  // The same, and the one running now: while any is, a host function may
  // still write pinned memory before work queued behind it (host_mirror.h).
  uint64_t unfinished() const;

  // A CUDA call wants to read its reply: this thread lets go of the
  // connection (it may be asleep in poll on it). Paired with ReaderDone.
  void ReaderWants();
  void ReaderDone();

 private:
  void Loop();
  void Run(const proto::HostFuncCallRequest& call);

  Session* session_;
  UniqueFd wake_;  // eventfd: a reader wants the connection, or Stop
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<proto::HostFuncCallRequest> calls_;
  uint64_t expected_ = 0;  // calls announced by Expect and not run yet
  uint64_t running_ = 0;   // taken from calls_, HostFuncDone not sent yet
  int readers_ = 0;        // CUDA calls waiting to read
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace smolvm::shim
