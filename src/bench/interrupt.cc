#include "bench/interrupt.h"

#include <signal.h>

#include <atomic>

namespace smolvm::bench {
namespace {

// The one process-wide flag a signal handler may touch.
std::atomic<bool> g_interrupted{false};

void OnSignal(int) { g_interrupted.store(true); }

}  // namespace

void InstallInterruptHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: sleeps and reads return early
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
}

bool Interrupted() { return g_interrupted.load(); }

}  // namespace smolvm::bench
