#include "worker/worker_host_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

namespace smolvm {
namespace {

std::atomic<uint64_t> g_base{0}, g_bytes{0};

void OnSigbus(int sig, siginfo_t* info, void*) {
  const uint64_t addr = reinterpret_cast<uint64_t>(info->si_addr);
  const uint64_t base = g_base.load(), bytes = g_bytes.load();
  if (addr >= base && addr - base < bytes) {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    void* at = reinterpret_cast<void*>(addr & ~(page - 1));
    if (::mmap(at, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) return;
  }
  // Not ours: die of it as if no handler were there.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void InstallHostRangeGuard(uint64_t base, uint64_t bytes) {
  g_base = base;
  g_bytes = bytes;
  struct sigaction sa = {};
  sa.sa_sigaction = OnSigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace smolvm
