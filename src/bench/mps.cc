#include "bench/mps.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "bench/child.h"
#include "machine/process.h"

namespace smolvm::bench {
namespace {

namespace fs = std::filesystem;

constexpr int kCommandMs = 10000;
constexpr int kStopWaitMs = 10000;

std::vector<std::string> EnvFor(const std::string& root) {
  return {"CUDA_MPS_PIPE_DIRECTORY=" + root + "/pipe", "CUDA_MPS_LOG_DIRECTORY=" + root + "/log"};
}

// Numbers, one a line (get_server_list, get_client_list).
std::vector<int64_t> Pids(const std::string& text) {
  std::vector<int64_t> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    long long v = std::strtoll(word.c_str(), &end, 10);
    if (end && *end == '\0' && v > 0) out.push_back(v);
  }
  return out;
}

pid_t ReadPidFile(const std::string& path) {
  std::ifstream in(path);
  long long pid = 0;
  if (!(in >> pid) || pid <= 0) return 0;
  return static_cast<pid_t>(pid);
}

// quit through the control pipe, then make sure the daemon is gone. Returns
// how it ended: "quit", or what had to be done instead.
std::string Quit(const std::string& control, const std::string& root, pid_t pid, int64_t start) {
  std::string how = "quit";
  auto q = RunCommand({control}, kCommandMs, CommandInput{"quit\n", EnvFor(root)});
  if (!q.ok() || q->rc != 0) how = "quit failed (" + (q.ok() ? "exit " + std::to_string(q->rc) + ": " + q->err : q.status().message()) + ")";
  if (pid <= 0 || start == 0) return how;
  auto fd = machine::OpenPidfd(pid, start);
  if (!fd.ok()) return how;  // already gone
  if (machine::WaitPidfd(fd->get(), kStopWaitMs)) return how;
  (void)machine::SignalPidfd(fd->get(), SIGKILL);
  machine::WaitPidfd(fd->get(), 5000);
  return how + "; still running after " + std::to_string(kStopWaitMs / 1000) + " s: killed";
}

}  // namespace

Result<std::unique_ptr<MpsDaemon>> MpsDaemon::Start(const std::string& mode, Ledger* ledger) {
  auto control = FindOnPath(kMpsControl);
  if (!control.ok())
    return NotSupported("not supported: --mps needs " + std::string(kMpsControl) +
                        " (it ships with the NVIDIA driver): " + control.status().message());
  std::unique_ptr<MpsDaemon> d(new MpsDaemon());
  d->ledger_ = ledger;
  d->record_.mode = mode;
  d->record_.control = *control;
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && tmp[0] ? tmp : "/tmp") + "/smolvm-mps-XXXXXX";
  if (!::mkdtemp(tmpl.data())) return ErrnoStatus("cannot create a private MPS directory " + tmpl, errno);
  d->root_ = tmpl;  // 0700 from mkdtemp: only this user reaches the pipe
  d->record_.pipe_dir = d->root_ + "/pipe";
  d->record_.log_dir = d->root_ + "/log";
  for (const auto& dir : {d->record_.pipe_dir, d->record_.log_dir})
    if (::mkdir(dir.c_str(), 0700) != 0) {
      Status s = ErrnoStatus("cannot create " + dir, errno);
      std::error_code ec;
      fs::remove_all(d->root_, ec);
      d->stopped_ = true;
      return s;
    }
  // From here the destructor quits the daemon and removes the directory.
  RETURN_IF_ERROR(ledger->AddMps(*control, d->root_));
  auto started = RunCommand({*control, "-d"}, kCommandMs, CommandInput{"", EnvFor(d->root_)});
  if (!started.ok()) return started.status();
  if (started->rc != 0)
    return Internal(std::string(kMpsControl) + " -d exited " + std::to_string(started->rc) + ": " + started->err);
  // -d returns once the daemon is forked; its pid file follows.
  const std::string pid_file = d->record_.pipe_dir + "/" + kMpsPidFile;
  pid_t pid = 0;
  for (int waited = 0; waited < kCommandMs && (pid = ReadPidFile(pid_file)) == 0; waited += 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (pid == 0) return Internal(std::string(kMpsControl) + " -d started no daemon (no pid in " + pid_file + ")");
  d->record_.control_pid = pid;
  d->control_start_ = machine::ProcessStartTime(pid);
  RETURN_IF_ERROR(ledger->SetMpsPid(d->root_, pid, d->control_start_));
  return d;
}

MpsDaemon::~MpsDaemon() {
  if (!stopped_) (void)Stop("");
}

std::vector<std::string> MpsDaemon::ClientEnv() const { return EnvFor(root_); }

void MpsDaemon::Look() {
  auto now = std::chrono::steady_clock::now();
  if (stopped_ || now - last_look_ < std::chrono::seconds(1)) return;
  last_look_ = now;
  auto servers = RunCommand({record_.control}, kCommandMs, CommandInput{"get_server_list\n", EnvFor(root_)});
  if (!servers.ok() || servers->rc != 0) return;
  std::set<int64_t> seen(record_.server_pids.begin(), record_.server_pids.end());
  int clients = 0;
  for (int64_t server : Pids(servers->out)) {
    if (seen.insert(server).second) record_.server_pids.push_back(server);
    auto list = RunCommand({record_.control}, kCommandMs,
                           CommandInput{"get_client_list " + std::to_string(server) + "\n", EnvFor(root_)});
    if (list.ok() && list->rc == 0) clients += static_cast<int>(Pids(list->out).size());
  }
  record_.max_clients = std::max(record_.max_clients, clients);
}

Status MpsDaemon::Stop(const std::string& logs_dir) {
  if (stopped_) return Status::Ok();
  stopped_ = true;
  record_.stopped = Quit(record_.control, root_, static_cast<pid_t>(record_.control_pid), control_start_);
  std::error_code ec;
  if (!logs_dir.empty())
    for (const auto& e : fs::directory_iterator(record_.log_dir, ec))
      if (e.is_regular_file())
        fs::copy_file(e.path(), logs_dir + "/mps-" + e.path().filename().string(), fs::copy_options::overwrite_existing,
                      ec);
  fs::remove_all(root_, ec);
  if (ec) return ErrnoStatus("cannot remove the MPS directory " + root_, ec.value());
  if (ledger_) RETURN_IF_ERROR(ledger_->DropMps(root_));
  if (record_.stopped != "quit") return Internal("the MPS control daemon did not stop on quit: " + record_.stopped);
  return Status::Ok();
}

std::string MpsVerdict(const MpsRecord& r) {
  if (r.mode == "off") return "";
  if (r.server_pids.empty())
    return "!! MPS DID NOT ENGAGE: the bench's MPS control daemon ran no server while the learners trained (they "
           "ran time-sliced; this run does not measure MPS)";
  if (r.max_clients == 0) return "!! MPS DID NOT ENGAGE: an MPS server ran but no learner was seen as its client";
  return "ok";
}

std::string StopMpsLeftover(const std::string& control, const std::string& root, pid_t pid, int64_t start) {
  if (pid <= 0) {  // killed between -d and recording the pid: the daemon's own pid file says
    pid = ReadPidFile(root + "/pipe/" + kMpsPidFile);
    start = pid > 0 ? machine::ProcessStartTime(pid) : 0;
  }
  // Only a directory this bench made (a ledger is ours, but never trust a
  // path enough to remove_all something else).
  if (fs::path(root).filename().string().rfind("smolvm-mps-", 0) != 0) return "not removed: " + root + " is not ours";
  std::string how = Quit(control, root, pid, start);
  std::error_code ec;
  fs::remove_all(root, ec);
  return how;
}

}  // namespace smolvm::bench
