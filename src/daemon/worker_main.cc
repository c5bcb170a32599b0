// The `_cuda-worker` process (WorkerMain): brings a Worker up as the
// daemon's user, serves the daemon's orders while pooled, then enters its
// jail (worker_jail.h, worker_seccomp.h) before it rebuilds a clone or
// adopts a guest, and serves that one session.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/backend_factory.h"
#include "daemon/control.h"
#include "daemon/machine_budget.h"
#include "daemon/worker.h"
#include "daemon/worker_jail.h"
#include "daemon/worker_seccomp.h"
#include "proto/frame.h"
#include "transport/unix_channel.h"

namespace smolvm {

namespace {

// Drops to the tenant's uid and loads the seccomp filter: after this the
// worker reads guest bytes. False (the worker must end) when it cannot.
bool EnterJail(Worker& worker, WorkerJail& jail, uint32_t uid) {
  auto modules = jail.Enter(uid);
  if (modules.ok() && !modules->empty()) worker.set_module_cache_dir(*modules);
  if (!modules.ok()) {
    std::fprintf(stderr, "smolvm worker %d: cannot enter its jail (uid %u): %s\n", ::getpid(), uid,
                 modules.status().ToString().c_str());
    return false;
  }
  return true;
}

}  // namespace

int WorkerMain(int control_fd, const WorkerOptions& options) {
  // The daemon supervises us; if it dies, so do we (and our GPU memory goes).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) return 1;
  auto mode = ParseSeccompMode(options.seccomp);
  if (!mode.ok()) {
    std::fprintf(stderr, "smolvm worker: %s\n", mode.status().ToString().c_str());
    return 1;
  }
  // Opened while the worker may still open anything; the supervisor writes it.
  int learn_fd = -1;
  if (*mode == SeccompMode::kLearn) {
    learn_fd = ::open(options.seccomp_learn.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (learn_fd < 0) {
      std::fprintf(stderr, "smolvm worker: seccomp learn file %s: %s\n", options.seccomp_learn.c_str(), strerror(errno));
      return 1;
    }
  }
  // Before the driver starts: it reads CUDA_CACHE_PATH once.
  auto jail = WorkerJail::Prepare(options.jail_dir, *mode, learn_fd, options.host_bytes + (64ull << 20));
  if (!jail.ok()) {
    std::fprintf(stderr, "smolvm worker: %s\n", jail.status().ToString().c_str());
    return 1;
  }
  WorkerOptions opts = options;
  if (const char* nr = std::getenv("SMOLVM_WORKER_TEST_SYSCALL")) opts.test_syscall = std::atol(nr);
  UnixChannel control{UniqueFd(control_fd)};
  auto backend = MakeBackend(options.backend);
  if (!backend.ok()) {
    std::fprintf(stderr, "smolvm worker: %s\n", backend.status().ToString().c_str());
    return 1;
  }
  // Pass-through until the daemon hands over a machine's budget.
  auto budgeted = std::make_unique<BudgetedBackend>(std::move(backend).value());
  BudgetedBackend* budget_slot = budgeted.get();
  Worker worker(std::move(budgeted), opts);
  Status st = worker.Start();
  if (!st.ok()) {
    std::fprintf(stderr, "smolvm worker %d: start failed: %s\n", ::getpid(), st.ToString().c_str());
    return 2;
  }
  uint64_t free0 = 0, total = 0;
  (void)worker.backend().MemGetInfo(&free0, &total);
  std::string out;
  proto::AppendRequest(&out, proto::WorkerReadyRequest{static_cast<uint32_t>(::getpid()), 0}, 0);
  if (!control.Write(out).ok()) return 3;

  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  // Pooled: preload orders until a clone build or an adoption.
  bool built_clone = false;
  bool jailed = false;
  while (true) {
    st = ReadControlTakingBudget(control, budget_slot, &h, &payload, &fds);
    if (!st.ok()) return 0;  // the daemon let us go unused
    proto::Decoder cdec(payload);
    if (h.op == static_cast<uint16_t>(proto::Op::kForkPreload) && !built_clone) {
      proto::ForkPreloadRequest pre;
      if (!proto::Decode(cdec, &pre)) return 4;
      auto chunk_fds = ReceiveChunkFds(control, pre.num_chunks);
      if (!chunk_fds.ok()) return 4;
      proto::PreloadDoneRequest done = worker.Preload(pre, *chunk_fds);
      if (done.result != 0)
        std::fprintf(stderr, "smolvm worker %d: preload for session %llu failed: %s\n", ::getpid(),
                     static_cast<unsigned long long>(pre.golden), done.message.c_str());
      out.clear();
      proto::AppendRequest(&out, done, 0);
      if (!control.Write(out).ok()) return 3;
      continue;
    }
    if (h.op == static_cast<uint16_t>(proto::Op::kPreloadDrop) && !built_clone) {
      worker.DropPreload();
      continue;
    }
    if (h.op == static_cast<uint16_t>(proto::Op::kCloneBuild) && !built_clone) {
      // A fork: become a copy of the golden, then wait for the clone's guest.
      proto::CloneBuildRequest build;
      if (!proto::Decode(cdec, &build)) return 4;
      if (!EnterJail(worker, *jail, build.uid)) return 6;
      jailed = true;
      auto chunk_fds = ReceiveChunkFds(control, build.num_chunks);
      Result<proto::CloneBuiltRequest> built =
          chunk_fds.ok() ? worker.BuildClone(build, *chunk_fds) : Result<proto::CloneBuiltRequest>(chunk_fds.status());
      proto::CloneBuiltRequest reply;
      if (built.ok()) {
        reply = *built;
      } else {
        reply.result = built.status().code() ? built.status().code() : static_cast<int32_t>(Code::kInternal);
        reply.message = built.status().message();
      }
      out.clear();
      proto::AppendRequest(&out, reply, 0);
      if (!control.Write(out).ok() || !built.ok()) return 5;
      built_clone = true;
      continue;
    }
    break;
  }
  // Serving an unrelated session: hold no other session's chunks.
  if (!built_clone) worker.DropPreload();
  proto::WorkerAdoptRequest adopt;
  proto::Decoder dec(payload);
  if (h.op != static_cast<uint16_t>(proto::Op::kWorkerAdopt) || !proto::Decode(dec, &adopt) ||
      fds.size() != 1) {
    std::fprintf(stderr, "smolvm worker %d: bad adopt message from the daemon\n", ::getpid());
    return 4;
  }
  if (!jailed && !EnterJail(worker, *jail, adopt.uid)) return 6;
  auto guest = std::make_unique<UnixChannel>(std::move(fds[0]));
  st = worker.Serve(std::move(guest), adopt, &control);
  if (!st.ok())
    std::fprintf(stderr, "smolvm worker %d: session %llu ended: %s\n", ::getpid(),
                 static_cast<unsigned long long>(adopt.session_id), st.ToString().c_str());
  return 0;
}

}  // namespace smolvm
