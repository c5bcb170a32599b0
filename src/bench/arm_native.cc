// The native arm: N learner processes started by the bench, each held at its
// gate until it is inside its own cgroup (same CPU quota and cpuset rule as a
// clone machine: machine/cgroups.h), then released together.
#include <signal.h>
#include <unistd.h>

#include <cmath>

#include "bench/arm.h"
#include "bench/child.h"
#include "machine/cgroups.h"

namespace smolvm::bench {

Status RunNativeArm(const ArmContext& c, ArmOutcome* out) {
  ASSIGN_OR_RETURN(machine::CgroupLayout layout, machine::DetectCgroups());
  std::vector<std::string> in_use;
  // Our children: reaped on every path (a learner still running when the arm
  // returns is killed here; its cgroup goes with the ledger).
  struct Children {
    std::vector<GatedChild> kids;
    std::vector<bool> exited;
    int Running() {
      int alive = 0;
      for (size_t i = 0; i < kids.size(); ++i) {
        int rc;
        if (!exited[i] && Reaped(kids[i].pid, &rc)) exited[i] = true;
        alive += exited[i] ? 0 : 1;
      }
      return alive;
    }
    ~Children() {
      for (size_t i = 0; i < kids.size(); ++i) {
        int rc;
        if (exited[i] || Reaped(kids[i].pid, &rc)) continue;
        ::kill(kids[i].pid, SIGKILL);
        while (!Reaped(kids[i].pid, &rc)) ::usleep(10000);
      }
    }
  } children;

  int cores = static_cast<int>(std::ceil(c.o.cpus));
  out->t0_unix = NowUnix();
  for (int i = 0; i < c.o.n; ++i) {
    std::string lid = std::to_string(i);
    std::string name = c.id + "-l" + lid;
    machine::MachineCgroup cg(layout, name);
    RETURN_IF_ERROR(c.ledger->AddCgroup(name));
    machine::CgroupLimits limits;
    limits.cpus = c.o.cpus;
    limits.cpuset = machine::PickCpuset(cores, in_use);
    in_use.push_back(limits.cpuset);
    RETURN_IF_ERROR(cg.Create(limits));
    std::vector<std::string> argv = LearnerArgs(c, c.learner, c.model_dir, c.coord, "native");
    argv.insert(argv.end(), {"--lid", lid});
    ASSIGN_OR_RETURN(GatedChild child, SpawnGated(argv, c.logs + "/learner_" + lid + ".log"));
    pid_t pid = child.pid;
    children.kids.push_back(std::move(child));
    children.exited.push_back(false);
    RETURN_IF_ERROR(c.ledger->AddProcess(pid, "learner " + lid));
    RETURN_IF_ERROR(cg.AddProcess(pid));
    out->learner_pids[lid] = pid;
    c.sampler->Watch(pid, "learner " + lid);
  }
  // Released together, after every cgroup exists, so no learner gets a head start.
  for (auto& k : children.kids) RETURN_IF_ERROR(k.Open());
  Progress("started " + std::to_string(c.o.n) + " native learner(s)");

  return WaitForLearners(c, out->t0_unix + c.o.timeout_s, [&] { return children.Running(); }, nullptr, out);
}

}  // namespace smolvm::bench
