// What both arms share: the learner's flags and the wait for its events.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "bench/arm.h"
#include "bench/interrupt.h"

namespace smolvm::bench {

ArmOutcome::ArmOutcome() : golden_load_s(NAN), golden_learner_load_s(NAN), fork_s(NAN), preload_wait_s(NAN) {}

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void Progress(const std::string& text) {
  std::fprintf(stderr, "bench: %s\n", text.c_str());
  std::fflush(stderr);
}

std::vector<std::string> LearnerArgs(const ArmContext& c, const std::string& learner, const std::string& model,
                                     const std::string& coord, const std::string& arm) {
  std::vector<std::string> a = {learner,   "train",   "--model",  model,
                                "--coord", coord,     "--arm",    arm,
                                "--device", c.o.device, "--method", c.o.method,
                                "--steps", std::to_string(c.o.steps), "--batch", std::to_string(c.o.batch),
                                "--maxseq", std::to_string(c.o.maxseq)};
  if (c.o.load_in_4bit) a.push_back("--load-in-4bit");
  if (c.o.learner == kLearnerTorch) {  // PYTHON SCRIPT --model ... (no subcommand)
    a[0] = c.torch.python;
    a[1] = learner;
  }
  return a;
}

Status WaitForLearners(const ArmContext& c, double deadline_unix, const std::function<int()>& running,
                       const std::function<void()>& tick, ArmOutcome* out) {
  int last_done = -1;
  double last_print = 0;
  for (;;) {
    if (Interrupted()) return InterruptedStatus();
    if (tick) tick();
    if (c.on_poll) c.on_poll();
    int alive = running();
    out->learners = ReadCoordDir(c.coord);
    int done = 0;
    for (const auto& [lid, p] : out->learners) done += p.done ? 1 : 0;
    double now = NowUnix();
    if (done != last_done || now - last_print >= 10) {
      char line[128];
      std::snprintf(line, sizeof line, "learners done %d/%d (%.1f s)", done, c.o.n, now - out->t0_unix);
      Progress(line);
      last_done = done;
      last_print = now;
    }
    if (done >= c.o.n) return Status::Ok();
    if (alive == 0) {
      // Exited without a done event: read once more (a last line may have
      // landed after the poll), then report who is missing.
      out->learners = ReadCoordDir(c.coord);
      std::string why = "learners exited before finishing; see " + c.logs;
      out->note = out->note.empty() ? why : out->note + "; " + why;
      return Status::Ok();
    }
    if (now >= deadline_unix) {
      out->timed_out = true;
      out->note = "--timeout " + std::to_string(static_cast<int>(c.o.timeout_s)) + " s reached";
      Progress(out->note + "; stopping the run");
      return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace smolvm::bench
