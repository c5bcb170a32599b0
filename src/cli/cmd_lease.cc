// `smolvm lease acquire|ls|complete|release`: leases of a running serve.
#include <cstdio>
#include <memory>

#include "cli/serve_commands.h"

namespace smolvm::cli {

void RegisterLeaseCommands(CLI::App& app, int* exit_code) {
  CLI::App* lease = app.add_subcommand("lease", "leases of a running serve: acquire, ls, complete, release (docs/serve.md)");
  lease->require_subcommand(1);
  lease->footer("Exit codes: 0 ok, 1 failure, 2 invalid argument, 3 no such pool or lease, 4 conflict or cancelled, "
                "5 refused, 6 no ready clone in time or serve unavailable, 7 quota exceeded.");

  struct AcquireOpts {
    std::string pool, payload = "{}", key;
    int64_t count = 1, ttl = 0;
    double wait = 0;
    bool partial = false;
  };
  auto a = std::make_shared<AcquireOpts>();
  CLI::App* acq = lease->add_subcommand("acquire", "lease COUNT clones of POOL, each released with the payload; prints the lease");
  acq->add_option("pool", a->pool)->required();
  acq->add_option("--count", a->count, "clones (all or nothing unless --partial)");
  acq->add_option("--payload", a->payload, "a JSON object for each clone");
  acq->add_option("--wait", a->wait, "seconds to wait for ready clones");
  acq->add_option("--ttl", a->ttl, "the lease's TTL in seconds (at most the pool's)");
  acq->add_option("--key", a->key, "idempotency key: a repeat returns the same lease");
  acq->add_flag("--partial", a->partial, "take as many as are ready (at least one)");
  acq->callback([a, exit_code] {
    auto payload = nlohmann::json::parse(a->payload, nullptr, false);
    if (payload.is_discarded() || !payload.is_object()) {
      std::fprintf(stderr, "smolvm lease acquire: --payload must be a JSON object\n");
      *exit_code = 2;
      return;
    }
    nlohmann::json body = {{"count", a->count}, {"payload", payload}, {"wait_s", a->wait}, {"all_or_nothing", !a->partial}};
    if (a->ttl > 0) body["ttl_s"] = a->ttl;
    if (!a->key.empty()) body["idempotency_key"] = a->key;
    nlohmann::json out;
    *exit_code = ServeRequest("POST", "/v1/pools/" + UrlComponent(a->pool) + "/leases", body, &out, static_cast<int>(a->wait) + 60);
    if (*exit_code == 0) std::printf("%s\n", out.dump(2).c_str());
  });

  struct LsOpts {
    std::string pool;
    bool json = false;
  };
  auto l = std::make_shared<LsOpts>();
  CLI::App* ls = lease->add_subcommand("ls", "list leases");
  ls->add_option("--pool", l->pool, "only this pool's");
  ls->add_flag("--json", l->json, "the API's JSON");
  ls->callback([l, exit_code] {
    nlohmann::json items = nlohmann::json::array();
    std::string after;
    for (;;) {
      std::string q = "/v1/leases?limit=1000" + (l->pool.empty() ? "" : "&pool=" + UrlComponent(l->pool)) + (after.empty() ? "" : "&after=" + UrlComponent(after));
      nlohmann::json out;
      *exit_code = ServeRequest("GET", q, nullptr, &out);
      if (*exit_code != 0) return;
      for (const auto& x : out["items"]) items.push_back(x);
      if (out["next"].is_null()) break;
      after = out["next"];
    }
    if (l->json) {
      std::printf("%s\n", items.dump(2).c_str());
      return;
    }
    std::printf("%-20s %-12s %-20s %-8s %-6s %s\n", "LEASE", "TENANT", "POOL", "STATE", "COUNT", "MEMBERS");
    for (const auto& x : items) {
      std::string members;
      for (const auto& m : x["members"]) members += (members.empty() ? "" : ",") + m["state"].get<std::string>();
      std::printf("%-20s %-12s %-20s %-8s %-6lld %s\n", x["id"].get<std::string>().c_str(),
                  x["tenant"].get<std::string>().c_str(), x["pool"].get<std::string>().c_str(),
                  x["state"].get<std::string>().c_str(), static_cast<long long>(x["count"]), members.c_str());
    }
  });

  struct CompleteOpts {
    std::string id, result = "{}";
    int exit = 0;
  };
  auto c = std::make_shared<CompleteOpts>();
  CLI::App* comp = lease->add_subcommand("complete", "end a lease's running members from the host with a result");
  comp->add_option("id", c->id)->required();
  comp->add_option("--result", c->result, "a JSON value");
  comp->add_option("--exit-code", c->exit, "recorded as the members' exit code");
  comp->callback([c, exit_code] {
    auto result = nlohmann::json::parse(c->result, nullptr, false);
    if (result.is_discarded()) {
      std::fprintf(stderr, "smolvm lease complete: --result must be JSON\n");
      *exit_code = 2;
      return;
    }
    nlohmann::json out;
    *exit_code = ServeRequest("POST", "/v1/leases/" + UrlComponent(c->id) + "/complete", {{"result", result}, {"exit_code", c->exit}}, &out);
    if (*exit_code == 0) std::printf("lease %s completed\n", c->id.c_str());
  });

  auto rel = std::make_shared<std::string>();
  CLI::App* r = lease->add_subcommand("release", "release a lease: its clones are removed");
  r->add_option("id", *rel)->required();
  r->callback([rel, exit_code] {
    *exit_code = ServeRequest("DELETE", "/v1/leases/" + UrlComponent(*rel), nullptr, nullptr);
    if (*exit_code == 0) std::printf("lease %s released\n", rel->c_str());
  });
}

}  // namespace smolvm::cli
