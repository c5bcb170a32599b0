// Test helpers: start `smolvm _cuda-daemon` on a temp socket (recording its
// PID) and talk to it over the raw wire, as a guest or as an operator.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "proto/frame.h"
#include "proto/proto_hash.h"
#include "transport/read_reply.h"
#include "transport/unix_channel.h"

namespace smolvm::testing {

// The whole file, or "" when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// How many times `needle` occurs in `hay` (overlaps counted).
inline size_t Count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// Runs a shell command line; returns (its exit status, 255 when it did not
// exit; its stdout and stderr).
inline std::pair<int, std::string> RunCommand(const std::string& cmd) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {255, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 255, out};
}

// How to start a DaemonProcess: its flags, and what to do on its socket's
// path before it starts (e.g. plant files beside it).
struct DaemonArgs {
  std::string backend = "fake";
  int pool = 1;
  int spares = -1;  // < 0: the daemon's default (its pool)
  std::vector<std::string> extra = {};  // more flags
  std::function<void(const std::string& socket)> before_start = nullptr;
};

// A daemon process with the fake backend, stopped (SIGTERM, then reaped) on
// destruction.
class DaemonProcess {
 public:
  // spares < 0: the daemon's default (its pool).
  explicit DaemonProcess(std::string backend = "fake", int pool = 1, int spares = -1)
      : DaemonProcess(DaemonArgs{std::move(backend), pool, spares, {}, nullptr}) {}
  explicit DaemonProcess(const DaemonArgs& a) {
    char tmpl[] = "/tmp/smolvm-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    socket_ = dir_ + "/cuda.sock";
    log_ = dir_ + "/daemon.log";
    if (a.before_start) a.before_start(socket_);
    std::vector<std::string> args = {"smolvm", "_cuda-daemon", socket_, "--backend", a.backend, "--pool",
                                     std::to_string(a.pool)};
    if (a.spares >= 0) args.insert(args.end(), {"--spares", std::to_string(a.spares)});
    args.insert(args.end(), a.extra.begin(), a.extra.end());
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    const pid_t test_pid = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      // A test killed mid-way (ctest's timeout, a hang ended by hand) never
      // runs the destructor: the daemon (and its workers) go with it.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != test_pid) ::_exit(126);
      FILE* f = std::freopen(log_.c_str(), "w", stderr);
      (void)f;
      ::execv(SMOLVM_BINARY, argv.data());
      ::_exit(127);
    }
    // Wait until it answers on its socket (or died).
    for (int i = 0; i < 500 && !std::filesystem::exists(socket_ + ".admin"); ++i) {
      if (::waitpid(pid_, &exit_status_, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~DaemonProcess() {
    Stop();
    std::filesystem::remove_all(dir_);
  }
  // SIGTERM and reap; returns the exit status.
  int Stop() {
    if (pid_ <= 0) return exit_status_;
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, &exit_status_, 0);
    pid_ = -1;
    return exit_status_;
  }
  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  const std::string& dir() const { return dir_; }
  std::string Log() const {
    FILE* f = std::fopen(log_.c_str(), "r");
    if (!f) return "";
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    std::fclose(f);
    return s;
  }

 private:
  std::string dir_, socket_, log_;
  pid_t pid_ = -1;
  int exit_status_ = 0;
};

struct CallResult {
  Status transport;          // the channel or decoding failed
  proto::ReplyHead head;     // result, deferred, message
  bool ok() const { return transport.ok() && head.result == 0; }
};

// A guest session over the raw wire.
class RawClient {
 public:
  Status Connect(const std::string& socket, uint64_t hash = proto::kProtoHash, uint32_t role = 0,
                 const std::string& token = "", uint32_t pid = static_cast<uint32_t>(::getpid())) {
    ASSIGN_OR_RETURN(UniqueFd fd, ConnectUnix(socket));
    return Adopt(std::move(fd), pid, hash, role, token);
  }
  // As Connect, over a connection made already (e.g. by another process,
  // whose pid the daemon then sees).
  Status Adopt(UniqueFd fd, uint32_t pid, uint64_t hash = proto::kProtoHash, uint32_t role = 0,
               const std::string& token = "") {
    ch_ = std::make_unique<UnixChannel>(std::move(fd));
    proto::HelloRequest hello;
    hello.proto_hash = hash;
    hello.role = role;
    hello.token = token;
    hello.pid = pid;
    CallResult r = Call(hello, &hello_);
    if (!r.transport.ok()) return r.transport;
    if (r.head.result != 0) return Status(r.head.result, r.head.message);
    return Status::Ok();
  }
  template <typename Req, typename Rep>
  CallResult Call(const Req& req, Rep* rep, std::span<const int> fds = {}) {
    CallResult r;
    std::string out = std::move(queue_);
    queue_.clear();
    if (!fds.empty() && !out.empty()) {
      r.transport = ch_->Write(out);
      out.clear();
      if (!r.transport.ok()) return r;
    }
    proto::AppendRequest(&out, req, ++seq_, static_cast<uint32_t>(fds.size()));
    r.transport = ch_->Write(out, fds);
    if (!r.transport.ok()) return r;
    proto::FrameHeader h;
    std::string payload;
    std::vector<UniqueFd> in_fds;
    for (;;) {
      r.transport = ch_->ReadFrame(&h, &payload, &in_fds);
      if (!r.transport.ok()) return r;
      // What the worker's device printed rides ahead of a reply (op 133).
      if ((h.flags & proto::kFlagReply) || h.op != proto::DeviceOutputRequest::kNumber) break;
      proto::DeviceOutputRequest text;
      proto::Decoder dec(payload);
      if (!proto::Decode(dec, &text)) {
        r.transport = Malformed("a DeviceOutput that does not decode");
        return r;
      }
      device_output_[text.fd == 2 ? 1 : 0].append(text.text);
    }
    reply_payload_ = std::move(payload);
    if (h.seq != seq_) r.transport = Internal("reply out of order");
    else r.transport = proto::DecodeReply(reply_payload_, &r.head, rep);
    return r;
  }
  // Queues an ASYNC op; it goes out with the next Call.
  template <typename Req>
  void Queue(const Req& req) {
    proto::AppendRequest(&queue_, req, ++seq_);
  }
  UnixChannel& channel() { return *ch_; }
  // What DeviceOutput frames brought so far, for fd 1 and fd 2.
  const std::string& device_stdout() const { return device_output_[0]; }
  const std::string& device_stderr() const { return device_output_[1]; }
  const proto::HelloReply& hello() const { return hello_; }
  // Hangs up: the session ends.
  void Close() { ch_.reset(); }

 private:
  std::unique_ptr<UnixChannel> ch_;
  proto::HelloReply hello_;
  std::string queue_;
  std::string reply_payload_;  // backs bytes fields of the last reply
  std::string device_output_[2];
  uint32_t seq_ = 0;
};

// Reads one admin reply from `ch`: its result as a Status, its fields in *rep.
template <typename Rep>
Status ReadAdminReply(UnixChannel& ch, Rep* rep) {
  return ReadReplyFrame(ch, rep);
}

// One admin request and its reply; `fd` >= 0 rides with the request.
template <typename Req, typename Rep>
Status AdminRoundTrip(UnixChannel& ch, const Req& req, Rep* rep, int fd = -1) {
  std::string out;
  proto::AppendRequest(&out, req, 7, fd >= 0 ? 1 : 0);
  RETURN_IF_ERROR(fd >= 0 ? ch.Write(out, std::span<const int>(&fd, 1)) : ch.Write(out));
  return ReadAdminReply(ch, rep);
}

// Every directory the daemon could keep modules in, beside its socket.
inline std::vector<std::string> ModuleDirs(const DaemonProcess& d) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(d.dir()))
    if (e.is_directory() && e.path().filename().string().rfind("cuda.sock.modules", 0) == 0)
      out.push_back(e.path().string());
  return out;
}

// Where images are stored: the daemon's directory, and with workers dropped
// to tenant uids, each tenant's <jail>/u<uid>/modules (the log names the jail).
inline std::vector<std::string> CachedModuleDirs(const DaemonProcess& d) {
  std::vector<std::string> out = ModuleDirs(d);
  std::string log = d.Log();
  size_t at = log.find(", jail ");
  if (at == std::string::npos) return out;
  std::string jail = log.substr(at + 7, log.find_first_of(" \n", at + 7) - (at + 7));
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(jail, ec))
    if (e.path().filename().string().rfind('u', 0) == 0 && std::filesystem::is_directory(e.path() / "modules"))
      out.push_back((e.path() / "modules").string());
  return out;
}

}  // namespace smolvm::testing
