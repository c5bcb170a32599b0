// A machine as an OCI bundle for runsc (gvisor.h).
#include <nlohmann/json.hpp>

#include "machine/gvisor.h"

namespace smolvm::machine {
namespace {

using nlohmann::json;

json Bind(const std::string& src, const std::string& dst, bool read_only) {
  json opts = json::array({"rbind", "nosuid", "nodev"});
  if (read_only) opts.push_back("ro");
  return {{"destination", dst}, {"type", "bind"}, {"source", src}, {"options", opts}};
}

json Tmpfs(const std::string& dst, const std::string& mode, const std::string& size) {
  return {{"destination", dst}, {"type", "tmpfs"}, {"source", "tmpfs"},
          {"options", json::array({"nosuid", "nodev", "mode=" + mode, "size=" + size})}};
}

// Docker's default set without CAP_NET_RAW: what a container's root may do
// inside gVisor's kernel. They act on the sentry's objects, never the host's.
const char* const kCapabilities[] = {"CAP_CHOWN",  "CAP_DAC_OVERRIDE", "CAP_FSETID",    "CAP_FOWNER",
                                     "CAP_MKNOD",  "CAP_SETGID",       "CAP_SETUID",    "CAP_SETFCAP",
                                     "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL",
                                     "CAP_AUDIT_WRITE"};

json Process(const std::vector<std::string>& args, const std::vector<std::string>& env, const std::string& cwd) {
  json caps = json::array();
  for (const char* c : kCapabilities) caps.push_back(c);
  return {{"terminal", false},
          {"user", {{"uid", 0}, {"gid", 0}}},
          {"args", args},
          {"env", env},
          {"cwd", cwd},
          {"capabilities", {{"bounding", caps}, {"effective", caps}, {"permitted", caps}}},
          {"noNewPrivileges", true}};
}

}  // namespace

std::string ProcessConfig(const std::vector<std::string>& args, const std::vector<std::string>& env,
                          const std::string& cwd) {
  return Process(args, env, cwd).dump(2) + "\n";
}

std::string BundleConfig(const BundleInput& in) {
  json process = Process(in.spec.cmd, in.env, in.workdir);
  const std::string disk = std::to_string(DiskMib(in.spec)) + "m";
  json mounts = json::array();
  mounts.push_back({{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}});
  mounts.push_back(Tmpfs("/dev", "755", "1m"));
  mounts.push_back({{"destination", "/sys"}, {"type", "sysfs"}, {"source", "sysfs"},
                    {"options", json::array({"nosuid", "noexec", "nodev", "ro"})}});
  for (const auto& d : in.system_dirs) mounts.push_back(Bind(d, d, true));
  // /tmp and /workspace: gVisor's own tmpfs (the sentry's memory, charged to
  // the machine's memory cgroup), each bounded by --disk.
  mounts.push_back(Tmpfs("/tmp", "1777", disk));
  mounts.push_back(Tmpfs("/workspace", "755", disk));
  mounts.push_back(Tmpfs("/run", "755", "1m"));
  mounts.push_back(Bind(in.run_dir, "/run/smolvm", true));
  if (!in.guest_lib.empty()) mounts.push_back(Bind(in.guest_lib, "/run/smolvm/lib/libsmolvm-guest.so", true));
  if (!in.python_dir.empty()) mounts.push_back(Bind(in.python_dir, "/run/smolvm/python", true));
  for (const auto& v : in.spec.volumes) mounts.push_back(Bind(v.host, v.guest, v.read_only));
  for (const auto& b : in.cuda) mounts.push_back(Bind(b.src, b.dst, b.read_only));

  json ns = json::array({{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}}, {{"type", "user"}}});
  if (!in.spec.net) ns.push_back({{"type", "network"}});
  json ids = json::array({{{"containerID", 0}, {"hostID", in.uid_base}, {"size", 65536}}});
  json linux_cfg = {{"namespaces", ns}, {"uidMappings", ids}, {"gidMappings", ids}};
  json config = {{"ociVersion", "1.0.2"},
                 {"process", process},
                 {"root", {{"path", in.root}, {"readonly", true}}},
                 {"hostname", in.name},
                 {"mounts", mounts},
                 {"linux", linux_cfg}};
  return config.dump(2) + "\n";
}

}  // namespace smolvm::machine
