#include "bench/learner_failures.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace smolvm::bench {

std::string LearnerErrorLine(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line, last, last_learner;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.rfind("smolvm-learner: ", 0) == 0) last_learner = line;
  }
  return last_learner.empty() ? last : last_learner;
}

std::vector<LearnerError> FindLearnerErrors(const RunOptions& o, const ArmContext& c, const ArmOutcome& a) {
  std::vector<LearnerError> out;
  for (int i = 0; i < o.n; ++i) {
    std::string lid = std::to_string(i);
    auto it = a.learners.find(lid);
    if (it != a.learners.end() && it->second.done) continue;
    std::string log = o.arm == "native" ? c.logs + "/learner_" + lid + ".log" : c.logs + "/" + c.id + "-c" + lid + ".log";
    if (!std::filesystem::exists(log)) continue;
    std::string line = LearnerErrorLine(log);
    out.push_back({lid, line.empty() ? "(its log is empty)" : line, log});
  }
  return out;
}

Status LearnersFailed(const RunResult& r) {
  if (r.timed_out || r.learners_done >= r.learners_expected) return Status::Ok();
  std::string m = std::to_string(r.learners_expected - r.learners_done) + " of " +
                  std::to_string(r.learners_expected) + " learners exited before finishing";
  if (!r.learner_errors.empty()) {
    const LearnerError& e = r.learner_errors[0];
    m += "; learner " + e.lid + ": " + e.line + " (log: " + e.log + ")";
  } else if (!r.note.empty()) {
    m += "; " + r.note;
  }
  return Status(kLearnersFailed, m);
}

std::string OwnCommandLine() {
  std::ifstream in("/proc/self/cmdline");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string raw = ss.str(), out;
  for (char ch : raw) out += ch == '\0' ? ' ' : ch;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace smolvm::bench
