// `machine lease-send` / `machine lease-wait`: an operator's hands on a
// clone's lease link (machine/lease_link.h), one call each, e.g.
//   smolvm machine fork --golden g --name c --park
//   smolvm machine lease-send --name c payload.json    # releases the parked clone
//   smolvm machine lease-wait --name c --ack           # its replies, one JSON line each
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/machine_commands.h"
#include "machine/lease_link.h"
#include "machine/paths.h"

namespace smolvm::cli {
namespace {

Result<std::string> ReadPayload(const std::string& file) {
  std::ostringstream ss;
  if (file == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(file, std::ios::binary);
    if (!in) return InvalidArgument("cannot read '" + file + "'");
    ss << in.rdbuf();
  }
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// One message as a JSON line.
std::string Line(const machine::CloneMessage& m) {
  nlohmann::json j;
  j["seq"] = m.seq;
  switch (m.kind) {
    case machine::CloneMessage::kReply:
    case machine::CloneMessage::kComplete:
      j["kind"] = m.kind == machine::CloneMessage::kReply ? "reply" : "complete";
      j["payload"] = m.payload;
      j["result"] = nlohmann::json::parse(m.json, nullptr, false);
      break;
    case machine::CloneMessage::kExit:
      j["kind"] = "exit";
      j["wait_status"] = m.wait_status;
      break;
    case machine::CloneMessage::kFault:
      j["kind"] = "fault";
      j["error"] = nlohmann::json::parse(m.json, nullptr, false).value("error", "");
      break;
  }
  return j.dump();
}

}  // namespace

void AddMachineLease(CLI::App& machine, int* exit_code) {
  struct SendOpts {
    std::string name, file;
    bool end = false;
  };
  auto s = std::make_shared<SendOpts>();
  CLI::App* send = machine.add_subcommand(
      "lease-send", "send a clone a lease payload (a JSON object; the first releases a parked clone)");
  send->add_option("--name", s->name, "the clone")->required();
  send->add_option("file", s->file, "the payload's JSON file ('-': stdin)");
  send->add_flag("--end", s->end, "end the lease instead: the clone's next_payload() gets no more");
  send->callback([s, exit_code] {
    if (s->end == !s->file.empty()) {
      *exit_code = ReportMachineError(InvalidArgument("give a payload FILE, or --end"));
      return;
    }
    auto link = machine::LeaseLink::Open(machine::SmolvmHome(), s->name);
    if (!link.ok()) {
      *exit_code = ReportMachineError(link.status());
      return;
    }
    Status st;
    if (s->end) {
      st = link->End();
    } else {
      auto payload = ReadPayload(s->file);
      st = payload.ok() ? link->Send(*payload) : payload.status();
    }
    if (st.ok()) std::printf("%s %s\n", s->end ? "ended the lease of" : "sent a payload to", s->name.c_str());
    *exit_code = ReportMachineError(st);
  });

  struct WaitOpts {
    std::string name;
    double timeout = 10;
    int count = 0;
    bool ack = false;
  };
  auto w = std::make_shared<WaitOpts>();
  CLI::App* wait = machine.add_subcommand(
      "lease-wait", "print what a clone sent on its lease link, one JSON line per message, until its exit");
  wait->add_option("--name", w->name, "the clone")->required();
  wait->add_option("--timeout", w->timeout, "stop after this many seconds without a message (default 10)");
  wait->add_option("--count", w->count, "stop after N messages");
  wait->add_flag("--ack", w->ack, "acknowledge what was printed: the supervisor forgets it (after the exit: the clone)");
  wait->callback([w, exit_code] {
    auto link = machine::LeaseLink::Open(machine::SmolvmHome(), w->name);
    if (!link.ok()) {
      *exit_code = ReportMachineError(link.status());
      return;
    }
    int got = 0;
    for (;;) {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(w->timeout * 1000));
      auto m = link->Next(deadline);
      if (!m.ok()) {
        *exit_code = ReportMachineError(m.status());
        return;
      }
      if (!m->has_value()) break;
      std::printf("%s\n", Line(**m).c_str());
      std::fflush(stdout);
      ++got;
      if (w->ack) {
        Status a = link->Ack((*m)->seq);
        if (!a.ok()) {
          *exit_code = ReportMachineError(a);
          return;
        }
      }
      if ((*m)->kind == machine::CloneMessage::kExit || (w->count > 0 && got >= w->count)) break;
    }
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", w->timeout);
    *exit_code = got > 0 ? 0 : ReportMachineError(Timeout("no message from '" + w->name + "' in " + secs + " s"));
  });
}

}  // namespace smolvm::cli
