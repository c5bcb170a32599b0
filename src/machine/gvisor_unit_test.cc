// The gVisor backend's pure parts: the bundle, the platform choice, the
// isolation mode in the stored spec (gvisor.h).
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "machine/gvisor.h"
#include "machine/sandbox.h"
#include "machine/spec.h"

namespace smolvm::machine {
namespace {

using nlohmann::json;

BundleInput Input() {
  BundleInput in;
  in.name = "gv";
  in.spec.cmd = {"sleep", "1000"};
  in.spec.volumes = {{"/srv/data", "/data", false}, {"/srv/models", "/models", true}};
  in.spec.disk_mib = 64;
  in.env = {"PATH=/usr/bin", "A=b,c"};
  in.workdir = "/workspace/run";
  in.uid_base = 300000;
  in.root = "/h/machines/gv/gvisor/root";
  in.system_dirs = {"/usr", "/etc"};
  in.run_dir = "/h/machines/gv/run";
  in.guest_lib = "/b/shim/libsmolvm-guest.so";
  return in;
}

json MountAt(const json& config, const std::string& dst) {
  for (const auto& m : config["mounts"])
    if (m["destination"] == dst) return m;
  return nullptr;
}

bool HasOption(const json& mount, const std::string& opt) {
  for (const auto& o : mount["options"])
    if (o == opt) return true;
  return false;
}

TEST(GvisorBundle, TheMachineBecomesTheBundle) {
  json c = json::parse(BundleConfig(Input()));
  EXPECT_EQ(c["process"]["args"], json({"sleep", "1000"}));
  EXPECT_EQ(c["process"]["env"], json({"PATH=/usr/bin", "A=b,c"}));
  EXPECT_EQ(c["process"]["cwd"], "/workspace/run");
  EXPECT_EQ(c["process"]["noNewPrivileges"], true);
  EXPECT_EQ(c["hostname"], "gv");
  EXPECT_EQ(c["root"]["path"], "/h/machines/gv/gvisor/root");
  EXPECT_EQ(c["root"]["readonly"], true);
  // Volumes: a read-only one stays read-only, a writable one is writable.
  json ro = MountAt(c, "/models"), rw = MountAt(c, "/data");
  ASSERT_FALSE(ro.is_null());
  ASSERT_FALSE(rw.is_null());
  EXPECT_EQ(ro["source"], "/srv/models");
  EXPECT_TRUE(HasOption(ro, "ro"));
  EXPECT_FALSE(HasOption(rw, "ro"));
  for (const char* d : {"/usr", "/etc", "/run/smolvm", "/run/smolvm/lib/libsmolvm-guest.so"}) {
    SCOPED_TRACE(d);
    ASSERT_FALSE(MountAt(c, d).is_null());
    EXPECT_TRUE(HasOption(MountAt(c, d), "ro"));
  }
  // The bounded disk.
  for (const char* d : {"/tmp", "/workspace"}) {
    SCOPED_TRACE(d);
    EXPECT_EQ(MountAt(c, d)["type"], "tmpfs");
    EXPECT_TRUE(HasOption(MountAt(c, d), "size=64m"));
  }
  // Root inside is the machine's host uid range.
  EXPECT_EQ(c["linux"]["uidMappings"][0]["hostID"], 300000);
  EXPECT_EQ(c["linux"]["uidMappings"][0]["containerID"], 0);
  EXPECT_EQ(c["linux"]["gidMappings"][0]["hostID"], 300000);
  EXPECT_FALSE(c["linux"].contains("cgroupsPath")) << "runsc runs with --ignore-cgroups in the machine's own";
}

bool HasNamespace(const json& c, const std::string& type) {
  for (const auto& n : c["linux"]["namespaces"])
    if (n["type"] == type) return true;
  return false;
}

TEST(GvisorBundle, NoNetworkUnlessAsked) {
  BundleInput in = Input();
  EXPECT_TRUE(HasNamespace(json::parse(BundleConfig(in)), "network"));
  in.spec.net = true;
  EXPECT_FALSE(HasNamespace(json::parse(BundleConfig(in)), "network"));
  for (const char* t : {"pid", "ipc", "uts", "mount", "user"}) EXPECT_TRUE(HasNamespace(json::parse(BundleConfig(in)), t)) << t;
}

TEST(GvisorBundle, ExecProcessKeepsCommasInValues) {
  json p = json::parse(ProcessConfig({"sh", "-c", "echo $A"}, {"A=b,c"}, "/workspace"));
  EXPECT_EQ(p["env"], json({"A=b,c"}));
  EXPECT_EQ(p["args"], json({"sh", "-c", "echo $A"}));
  EXPECT_EQ(p["user"]["uid"], 0);
}

TEST(GvisorPlatform, KvmOnlyWhereTheProbeSaysItWorks) {
  KvmFacts pvm{.dev_kvm = true, .vmx_or_svm = false, .pvm = true};
  KvmFacts vmx{.dev_kvm = true, .vmx_or_svm = true, .pvm = false};
  KvmFacts none{.dev_kvm = false, .vmx_or_svm = true, .pvm = false};
  KvmFacts pvm_with_flags{.dev_kvm = true, .vmx_or_svm = true, .pvm = true};
  EXPECT_EQ(ChoosePlatform("", pvm).value(), "ptrace");
  EXPECT_EQ(ChoosePlatform("", pvm_with_flags).value(), "ptrace");
  EXPECT_EQ(ChoosePlatform("", none).value(), "ptrace");
  EXPECT_EQ(ChoosePlatform("", vmx).value(), "kvm");
  EXPECT_EQ(ChoosePlatform("ptrace", vmx).value(), "ptrace");
  auto refused = ChoosePlatform("kvm", pvm);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("PVM"), std::string::npos) << refused.status().message();
  EXPECT_FALSE(ChoosePlatform("kvm", KvmFacts{.dev_kvm = true, .vmx_or_svm = false, .pvm = false}).ok());
  EXPECT_FALSE(ChoosePlatform("systrap", vmx).ok());
}

TEST(GvisorSpec, IsolationIsStoredAndSandboxIsTheDefault) {
  MachineSpec s;
  s.cmd = {"true"};
  EXPECT_EQ(SpecFromJson(SpecToJson(s))->isolation, Isolation::kSandbox);
  EXPECT_EQ(SpecFromJson("{\"cmd\":[\"true\"]}")->isolation, Isolation::kSandbox) << "a spec stored before the field";
  s.isolation = Isolation::kGvisor;
  EXPECT_EQ(SpecFromJson(SpecToJson(s))->isolation, Isolation::kGvisor);
  EXPECT_FALSE(SpecFromJson("{\"isolation\":\"vm\"}").ok());
  EXPECT_FALSE(ParseIsolation("firecracker").ok());
  EXPECT_STREQ(IsolationName(ParseIsolation("gvisor").value()), "gvisor");
}

// A --cuda machine under gVisor loads the loader audit that takes covered
// copies for the shims by name (shim/loader_audit.cc); a sandbox machine,
// whose binds keep the shim's identity, and a CPU machine do not.
TEST(GvisorEnvironment, OnlyACudaGvisorMachineLoadsTheLoaderAudit) {
  auto audit = [](Isolation isolation, bool cuda) {
    SandboxConfig cfg;
    cfg.name = "m";
    cfg.spec.isolation = isolation;
    cfg.spec.cuda = cuda;
    std::string found;
    for (const auto& kv : GuestEnvironment(cfg, {}))
      if (kv.rfind("LD_AUDIT=", 0) == 0) found = kv;
    return found;
  };
  EXPECT_EQ(audit(Isolation::kGvisor, true), "LD_AUDIT=/run/smolvm/lib/libsmolvm-audit.so");
  EXPECT_EQ(audit(Isolation::kSandbox, true), "");
  EXPECT_EQ(audit(Isolation::kGvisor, false), "");
}

}  // namespace
}  // namespace smolvm::machine
