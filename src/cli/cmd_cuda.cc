// `smolvm cuda status`: the daemon's view of its sessions (admin socket).
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "proto/frame.h"
#include "transport/unix_channel.h"

namespace smolvm::cli {
namespace {

std::string DaemonSocket(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("SMOLVM_CUDA_SOCKET");
  return env ? env : "";
}

// Sends one admin request and decodes its reply.
template <typename Req, typename Rep>
Status AdminCall(const std::string& socket, const Req& req, Rep* rep) {
  ASSIGN_OR_RETURN(UniqueFd fd, ConnectUnix(socket + ".admin"));
  UnixChannel ch(std::move(fd));
  std::string out;
  proto::AppendRequest(&out, req, 1);
  RETURN_IF_ERROR(ch.Write(out));
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  RETURN_IF_ERROR(ch.ReadFrame(&h, &payload, &fds));
  proto::ReplyHead head;
  RETURN_IF_ERROR(proto::DecodeReply(payload, &head, rep));
  if (head.result != 0) return Status(head.result, head.message);
  return Status::Ok();
}

int Status(const std::string& socket_flag, bool json) {
  std::string socket = DaemonSocket(socket_flag);
  if (socket.empty()) {
    std::fprintf(stderr, "smolvm cuda status: no daemon socket (use --socket or set SMOLVM_CUDA_SOCKET)\n");
    return 2;
  }
  proto::AdminStatusReply rep;
  smolvm::Status st = AdminCall(socket, proto::AdminStatusRequest{}, &rep);
  if (!st.ok()) {
    std::fprintf(stderr, "smolvm cuda status: cannot reach the daemon at %s.admin: %s\n", socket.c_str(),
                 st.ToString().c_str());
    return 1;
  }
  if (json) {
    std::printf("%s\n", rep.json.c_str());
    return 0;
  }
  auto j = nlohmann::json::parse(rep.json, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "smolvm cuda status: the daemon answered malformed JSON\n");
    return 1;
  }
  std::printf("daemon pid %d, backend %s, proto %s, %zu pooled worker(s)\n", j.value("daemon_pid", 0),
              j.value("backend", "?").c_str(), j.value("proto_hash", "?").c_str(),
              j.value("pooled_workers", size_t{0}));
  std::printf("%-8s %-8s %-8s %-11s %-9s %7s %10s\n", "SESSION", "PID", "WORKER", "ROLE", "STATE", "CHUNKS",
              "MIB");
  for (const auto& s : j["sessions"])
    std::printf("%-8llu %-8u %-8d %-11s %-9s %7llu %10.1f\n", s.value("session", 0ull), s.value("pid", 0u),
                s.value("worker_pid", 0), s.value("role", "?").c_str(), s.value("state", "?").c_str(),
                s.value("chunks", 0ull), s.value("chunk_mib", 0.0));
  return 0;
}

}  // namespace

void RegisterCudaCommands(CLI::App& app, int* exit_code) {
  auto* cuda = app.add_subcommand("cuda", "talk to the host CUDA daemon");
  cuda->require_subcommand(1);
  auto* status = cuda->add_subcommand("status", "sessions, roles and memory as the daemon sees them");
  auto socket = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  status->add_option("--socket", *socket, "daemon socket (default: $SMOLVM_CUDA_SOCKET)");
  status->add_flag("--json", *json, "print JSON");
  status->callback([socket, json, exit_code] { *exit_code = Status(*socket, *json); });
}

}  // namespace smolvm::cli
