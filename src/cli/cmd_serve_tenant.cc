// `smolvm serve tenant add|ls|rm|token`: the operator's tenant commands,
// through a running serve (uid 0 on its socket).
#include <cstdio>
#include <memory>

#include "cli/serve_commands.h"

namespace smolvm::cli {

void AddServeTenantCommands(CLI::App& serve, int* exit_code) {
  CLI::App* t = serve.add_subcommand("tenant", "the tenants of a running serve (the operator's: root)");
  t->require_subcommand(1);

  struct AddOpts {
    std::string name;
    int64_t uid = -1, max_leases = 0, max_gpu_mib = 0;
    bool token = false;
  };
  auto a = std::make_shared<AddOpts>();
  CLI::App* add = t->add_subcommand("add", "add tenant T reached by uid U on the socket (--token: also a TCP token, printed once)");
  add->add_option("name", a->name, "the tenant")->required();
  add->add_option("--uid", a->uid, "its uid on the Unix socket");
  add->add_option("--max-leases", a->max_leases, "clones it may lease at once (0: no limit)");
  add->add_option("--max-gpu-mib", a->max_gpu_mib, "GPU MiB its machines may hold (0: no limit)");
  add->add_flag("--token", a->token, "also mint a bearer token for TCP");
  add->callback([a, exit_code] {
    nlohmann::json body = {{"name", a->name}, {"max_leases", a->max_leases}, {"max_gpu_mib", a->max_gpu_mib}};
    if (a->uid >= 0) body["uid"] = a->uid;
    if (a->token) body["token"] = true;
    nlohmann::json out;
    *exit_code = ServeRequest("POST", "/v1/tenants", body, &out);
    if (*exit_code != 0) return;
    std::printf("tenant %s added", a->name.c_str());
    if (a->uid >= 0) std::printf(" (uid %lld)", static_cast<long long>(a->uid));
    std::printf("\n");
    if (out.contains("token")) std::printf("token: %s\n", out["token"].get<std::string>().c_str());
  });

  auto json_out = std::make_shared<bool>(false);
  CLI::App* ls = t->add_subcommand("ls", "list the tenants");
  ls->add_flag("--json", *json_out, "the API's JSON");
  ls->callback([json_out, exit_code] {
    nlohmann::json out;
    *exit_code = ServeRequest("GET", "/v1/tenants?limit=1000", nullptr, &out);
    if (*exit_code != 0) return;
    if (*json_out) {
      std::printf("%s\n", out["items"].dump(2).c_str());
      return;
    }
    std::printf("%-20s %-10s %-11s %s\n", "TENANT", "UID", "MAX_LEASES", "MAX_GPU_MIB");
    for (const auto& x : out["items"])
      std::printf("%-20s %-10lld %-11lld %lld\n", x["name"].get<std::string>().c_str(), static_cast<long long>(x["uid"]),
                  static_cast<long long>(x["max_leases"]), static_cast<long long>(x["max_gpu_mib"]));
  });

  auto rm_name = std::make_shared<std::string>();
  CLI::App* rm = t->add_subcommand("rm", "remove a tenant that owns no pool");
  rm->add_option("name", *rm_name)->required();
  rm->callback([rm_name, exit_code] {
    *exit_code = ServeRequest("DELETE", "/v1/tenants/" + UrlComponent(*rm_name), nullptr, nullptr);
    if (*exit_code == 0) std::printf("tenant %s removed\n", rm_name->c_str());
  });

  auto tok_name = std::make_shared<std::string>();
  CLI::App* tok = t->add_subcommand("token", "mint a new bearer token for a tenant (printed once)");
  tok->add_option("name", *tok_name)->required();
  tok->callback([tok_name, exit_code] {
    nlohmann::json out;
    *exit_code = ServeRequest("POST", "/v1/tenants/" + UrlComponent(*tok_name) + "/tokens", nullptr, &out);
    if (*exit_code == 0) std::printf("%s\n", out["token"].get<std::string>().c_str());
  });
}

}  // namespace smolvm::cli
