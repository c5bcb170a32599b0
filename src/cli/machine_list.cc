#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/machine_commands.h"
#include "machine/machines.h"
#include "machine/paths.h"

namespace smolvm::cli {

void AddMachineList(CLI::App& machine, int* exit_code) {
  auto json = std::make_shared<bool>(false);
  CLI::App* c = machine.add_subcommand("list", "list machines and their state");
  c->add_flag("--json", *json, "one JSON array");
  c->callback([json, exit_code] {
    auto all = machine::ListMachines(machine::SmolvmHome());
    if (!all.ok()) {
      *exit_code = ReportMachineError(all.status());
      return;
    }
    if (*json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& r : *all) {
        nlohmann::json j = {{"name", r.name},          {"state", r.state},
                            {"golden", r.golden},      {"fork_index", r.fork_index},
                            {"forkable", r.forkable},  {"cpus", r.spec.cpus},
                            {"cpuset", r.cpuset},      {"mem_mib", r.spec.mem_mib},
                            {"cuda", r.spec.cuda},     {"pid", r.init_pid},
                            {"isolation", machine::IsolationName(r.spec.isolation)},
                            {"exit_code", r.exit_code}, {"detail", r.detail},
                            {"cmd", r.spec.cmd},       {"created_at", r.created_at}};
        out.push_back(j);
      }
      std::printf("%s\n", out.dump(2).c_str());
      return;
    }
    // Columns as wide as their longest name (machine names go up to 40).
    int name_w = 24, golden_w = 16;
    for (const auto& r : *all) {
      name_w = std::max(name_w, static_cast<int>(r.name.size()));
      golden_w = std::max(golden_w, static_cast<int>(r.golden.size()));
    }
    std::printf("%-*s %-9s %-*s %5s %5s %7s %8s  %s\n", name_w, "NAME", "STATE", golden_w, "GOLDEN", "INDEX", "CPUS",
                "MEM", "PID", "DETAIL");
    for (const auto& r : *all) {
      std::string idx = r.fork_index >= 0 ? std::to_string(r.fork_index) : "-";
      std::string cpus = r.spec.cpus > 0 ? CLI::detail::to_string(r.spec.cpus) : "-";
      std::string mem = r.spec.mem_mib > 0 ? std::to_string(r.spec.mem_mib) + "M" : "-";
      std::string pid = r.init_pid > 0 ? std::to_string(r.init_pid) : "-";
      std::string detail = r.detail;
      if (r.exit_code >= 0 && detail.empty()) detail = "exit " + std::to_string(r.exit_code);
      std::printf("%-*s %-9s %-*s %5s %5s %7s %8s  %s\n", name_w, r.name.c_str(), r.state.c_str(), golden_w,
                  r.golden.empty() ? "-" : r.golden.c_str(), idx.c_str(), cpus.c_str(), mem.c_str(), pid.c_str(),
                  detail.c_str());
    }
  });
}

}  // namespace smolvm::cli
