// What entering the worker's jail costs on a clone's critical path (issue 15:
// the H200 A/B found a warm fork ~3 ms per clone slower with the jail on).
// Each round forks a child, as root, with four idle threads (as a worker
// has the driver's), that does what a worker does while pooled, then what
// is left for the moment it is drawn: WorkerJail::Enter (uid drop, seccomp
// load) and the first module image hashed by SHA-256. Before the fix the
// filter was compiled at the draw (compare "Prepare") and libcrypto was
// initialised by a clone's first hash (compare the cold hash). Prints one
// JSON line per phase: min, median and max microseconds (min is the cost on
// an idle machine; this one is often shared).
//
//   build/src/worker/worker_jail_benchmark [ROUNDS] [MODE]    (root; MODE enforce|log|off)
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "base/sha256.h"
#include "worker/module_cache.h"
#include "worker/worker_jail.h"
#include "worker/worker_seccomp.h"
#include "worker/worker_uids.h"

namespace smolvm {
namespace {

double Us(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct Sample {
  double warm_us, prepare_us, enter_us, sha_us, cold_sha_us;
};

// In a child: what a worker does pooled (ModuleCache, WorkerJail::Prepare),
// then drawn (Enter, a module image hashed); then, in a second child that
// skipped the pooled part, the first hash with libcrypto cold (what a
// clone's build paid before ModuleCache warmed it).
bool OneRound(const std::string& jail, uint32_t uid, SeccompMode mode, Sample* out) {
  const std::string image(64 << 10, 'x');
  int p[2];
  if (::pipe(p) < 0) return false;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i)
      threads.emplace_back([&stop] {
        while (!stop.load()) ::usleep(1000);
      });
    auto t0 = std::chrono::steady_clock::now();
    ModuleCache cache("", 0);  // a worker makes its own when it starts
    auto t1 = std::chrono::steady_clock::now();
    auto prepared = WorkerJail::Prepare(jail, mode, -1, 64ull << 20);
    auto t2 = std::chrono::steady_clock::now();
    if (!prepared.ok()) {
      std::fprintf(stderr, "prepare: %s\n", prepared.status().ToString().c_str());
      ::_exit(1);
    }
    auto modules = prepared->Enter(uid);
    auto t3 = std::chrono::steady_clock::now();
    if (!modules.ok()) {
      std::fprintf(stderr, "enter: %s\n", modules.status().ToString().c_str());
      ::_exit(1);
    }
    (void)Sha256(image);
    auto t4 = std::chrono::steady_clock::now();
    Sample s{Us(t0, t1), Us(t1, t2), Us(t2, t3), Us(t3, t4), 0};
    (void)!::write(p[1], &s, sizeof s);
    stop = true;
    for (auto& t : threads) t.join();
    ::_exit(0);
  }
  ::close(p[1]);
  bool ok = ::read(p[0], out, sizeof *out) == sizeof *out;
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (::pipe(p) < 0) return false;
  pid = ::fork();
  if (pid == 0) {
    auto t0 = std::chrono::steady_clock::now();
    (void)Sha256(image);
    double us = Us(t0, std::chrono::steady_clock::now());
    (void)!::write(p[1], &us, sizeof us);
    ::_exit(0);
  }
  ::close(p[1]);
  ok = ok && ::read(p[0], &out->cold_sha_us, sizeof out->cold_sha_us) == sizeof out->cold_sha_us;
  ::close(p[0]);
  ::waitpid(pid, &status, 0);
  return ok;
}

void Print(const char* phase, std::vector<double> v, const char* mode) {
  std::sort(v.begin(), v.end());
  std::printf("{\"bench\": \"worker_jail\", \"phase\": \"%s\", \"seccomp\": \"%s\", \"rounds\": %zu, "
              "\"min_us\": %.1f, \"median_us\": %.1f, \"max_us\": %.1f}\n",
              phase, mode, v.size(), v.front(), v[v.size() / 2], v.back());
}

}  // namespace
}  // namespace smolvm

int main(int argc, char** argv) {
  using namespace smolvm;
  int rounds = argc > 1 ? std::atoi(argv[1]) : 20;
  const char* mode_name = argc > 2 ? argv[2] : "enforce";
  auto mode = ParseSeccompMode(mode_name);
  if (rounds < 1 || !mode.ok()) {
    std::fprintf(stderr, "usage: worker_jail_benchmark [ROUNDS >= 1] [enforce|log|off]\n");
    return 2;
  }
  if (::geteuid() != 0) {
    std::fprintf(stderr, "worker_jail_benchmark: needs root (a worker drops from root to its tenant's uid)\n");
    return 2;
  }
  auto jail = MakeJailDir();
  if (!jail.ok()) {
    std::fprintf(stderr, "%s\n", jail.status().ToString().c_str());
    return 1;
  }
  const uint32_t uid = kDefaultWorkerUidBase + 4000;
  std::vector<double> warm, prepare, enter, sha, cold_sha;
  int rc = 0;
  for (int i = 0; i < rounds; ++i) {
    Sample s;
    if (!OneRound(*jail, uid, *mode, &s)) {
      rc = 1;
      break;
    }
    warm.push_back(s.warm_us);
    prepare.push_back(s.prepare_us);
    enter.push_back(s.enter_us);
    sha.push_back(s.sha_us);
    cold_sha.push_back(s.cold_sha_us);
  }
  std::error_code ec;
  std::filesystem::remove_all(*jail, ec);
  if (rc) return rc;
  Print("pooled: ModuleCache (libcrypto initialised)", warm, mode_name);
  Print("pooled: WorkerJail::Prepare (filter compiled)", prepare, mode_name);
  Print("drawn: WorkerJail::Enter (uid drop, filter load)", enter, mode_name);
  Print("drawn: SHA-256 of a 64 KiB image, libcrypto warm", sha, mode_name);
  Print("drawn: SHA-256 of a 64 KiB image, libcrypto cold (before)", cold_sha, mode_name);
  return 0;
}
