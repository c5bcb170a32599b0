// `smolvm pool create|ls|rm`: pools of a running serve.
#include <cstdio>
#include <memory>

#include "cli/serve_commands.h"

namespace smolvm::cli {

void RegisterPoolCommands(CLI::App& app, int* exit_code) {
  CLI::App* pool = app.add_subcommand("pool", "pools of a running serve: create, ls, rm (docs/serve.md)");
  pool->require_subcommand(1);
  pool->footer("Exit codes: 0 ok, 1 failure, 2 invalid argument, 3 no such pool, 4 exists, 5 refused, "
               "6 serve unavailable or no room, 7 quota exceeded.");

  struct CreateOpts {
    std::string name, pack, share = "off", workdir;
    int64_t min_ready = 0, max = 0, mem = 0, gpu_mem = 0, ttl = 600;
    double cpus = 0;
    bool cuda = false;
    std::vector<std::string> volumes, env, cmd;
  };
  auto o = std::make_shared<CreateOpts>();
  CLI::App* c = pool->add_subcommand("create", "smolvm pool create NAME [opts] -- CMD... (the golden's program; or --pack FILE)");
  c->add_option("name", o->name, "the pool")->required();
  c->add_option("--min-ready", o->min_ready, "parked clones kept ready");
  c->add_option("--max", o->max, "clones at most, ready and leased (0: no bound)");
  c->add_option("--share", o->share, "GPU weights sharing of forks: on, off, auto");
  c->add_option("--cpus", o->cpus, "CPUs per machine");
  c->add_option("--mem", o->mem, "memory MiB per machine");
  c->add_flag("--cuda", o->cuda, "the golden uses CUDA (remoted)");
  c->add_option("--gpu-mem", o->gpu_mem, "GPU MiB cap per machine (with --cuda)");
  c->add_option("--ttl", o->ttl, "a lease's TTL in seconds (heartbeats extend it)");
  c->add_option("--pack", o->pack, "a .smolmachine pack as the golden's root (its command unless one is given)");
  c->add_option("--workdir", o->workdir, "where the golden's program starts");
  c->add_option("-v,--volume", o->volumes, "HOST:GUEST[:ro]")->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_option("-e,--env", o->env, "KEY=VAL")->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_option("cmd", o->cmd, "the golden's program, after --")->expected(-1);
  c->callback([o, exit_code] {
    nlohmann::json golden = {{"cmd", o->cmd}, {"volumes", o->volumes}, {"cuda", o->cuda}};
    nlohmann::json env = nlohmann::json::object();
    for (const auto& kv : o->env) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "smolvm pool create: -e wants KEY=VAL (got '%s')\n", kv.c_str());
        *exit_code = 2;
        return;
      }
      env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    golden["env"] = env;
    if (!o->pack.empty()) golden["pack"] = o->pack;
    if (!o->workdir.empty()) golden["workdir"] = o->workdir;
    nlohmann::json body = {{"name", o->name}, {"golden", golden}, {"min_ready", o->min_ready}, {"max", o->max},
                           {"share", o->share}, {"cpus", o->cpus}, {"mem_mib", o->mem}, {"gpu_mem_mib", o->gpu_mem},
                           {"ttl_s", o->ttl}};
    nlohmann::json out;
    *exit_code = ServeRequest("POST", "/v1/pools", body, &out, 300);
    if (*exit_code == 0)
      std::printf("pool %s created (golden %s, min_ready %lld)\n", o->name.c_str(),
                  out["golden_machine"].get<std::string>().c_str(), static_cast<long long>(o->min_ready));
  });

  auto json_out = std::make_shared<bool>(false);
  CLI::App* ls = pool->add_subcommand("ls", "list pools with their ready, forking and leased clones");
  ls->add_flag("--json", *json_out, "the API's JSON");
  ls->callback([json_out, exit_code] {
    nlohmann::json items = nlohmann::json::array();
    std::string after;
    for (;;) {
      nlohmann::json out;
      *exit_code = ServeRequest("GET", "/v1/pools?limit=1000" + (after.empty() ? "" : "&after=" + UrlComponent(after)), nullptr, &out);
      if (*exit_code != 0) return;
      for (const auto& x : out["items"]) items.push_back(x);
      if (out["next"].is_null()) break;
      after = out["next"];
    }
    if (*json_out) {
      std::printf("%s\n", items.dump(2).c_str());
      return;
    }
    std::printf("%-24s %-12s %-6s %-8s %-7s %-10s %s\n", "POOL", "TENANT", "READY", "FORKING", "LEASED", "MIN_READY", "DETAIL");
    for (const auto& x : items)
      std::printf("%-24s %-12s %-6lld %-8lld %-7lld %-10lld %s\n", x["name"].get<std::string>().c_str(),
                  x["tenant"].get<std::string>().c_str(), static_cast<long long>(x["ready"]),
                  static_cast<long long>(x["forking"]), static_cast<long long>(x["leased"]),
                  static_cast<long long>(x["min_ready"]), x["detail"].get<std::string>().c_str());
  });

  auto rm_name = std::make_shared<std::string>();
  CLI::App* rm = pool->add_subcommand("rm", "delete a pool: its leases end, its machines are removed");
  rm->add_option("name", *rm_name)->required();
  rm->callback([rm_name, exit_code] {
    *exit_code = ServeRequest("DELETE", "/v1/pools/" + UrlComponent(*rm_name), nullptr, nullptr);
    if (*exit_code == 0) std::printf("pool %s deleted\n", rm_name->c_str());
  });
}

}  // namespace smolvm::cli
