#include "machine/spec.h"

#include <errno.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace smolvm::machine {

Status ValidateName(const std::string& name) {
  if (name.empty() || name.size() > 40)
    return InvalidArgument("machine name '" + name + "' must be 1 to 40 characters");
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_';
    if (!ok)
      return InvalidArgument("machine name '" + name +
                             "' may contain only letters, digits, '-' and '_'");
  }
  return Status::Ok();
}

namespace {

bool UnderPath(const std::string& path, const std::string& dir) {
  return path == dir || path.rfind(dir + "/", 0) == 0;
}

Status CheckGuestPath(const std::string& guest) {
  if (guest.empty() || guest[0] != '/' || guest == "/")
    return InvalidArgument("volume guest path '" + guest + "' must be absolute and not '/'");
  if (guest.find("/../") != std::string::npos || guest.ends_with("/..") ||
      guest.find("/./") != std::string::npos)
    return InvalidArgument("volume guest path '" + guest + "' must not contain '.' or '..'");
  for (const char* d : {"/proc", "/sys", "/dev", "/run/smolvm"})
    if (UnderPath(guest, d))
      return InvalidArgument("volume guest path '" + guest + "' is reserved (" + d + ")");
  for (const char* d : {"/tmp", "/workspace"})
    if (UnderPath(guest, d))
      return InvalidArgument("volume guest path '" + guest + "' is under " + d +
                             ", which is the machine's own bounded disk (mount the volume at a new top-level path)");
  return Status::Ok();
}

}  // namespace

Result<Volume> ParseVolume(const std::string& text) {
  Volume v;
  std::string rest = text;
  if (rest.ends_with(":ro")) {
    v.read_only = true;
    rest.resize(rest.size() - 3);
  } else if (rest.ends_with(":rw")) {
    rest.resize(rest.size() - 3);
  }
  size_t colon = rest.find(':');
  if (colon == std::string::npos || rest.find(':', colon + 1) != std::string::npos)
    return InvalidArgument("volume '" + text + "' must be HOST:GUEST or HOST:GUEST:ro");
  v.host = rest.substr(0, colon);
  v.guest = rest.substr(colon + 1);
  if (v.host.empty() || v.host[0] != '/')
    return InvalidArgument("volume host path '" + v.host + "' must be absolute");
  struct stat st;
  if (::stat(v.host.c_str(), &st) != 0)
    return InvalidArgument("volume host path '" + v.host + "' does not exist");
  RETURN_IF_ERROR(CheckGuestPath(v.guest));
  while (v.guest.size() > 1 && v.guest.back() == '/') v.guest.pop_back();
  return v;
}

Status ValidateEnv(const std::string& kv) {
  size_t eq = kv.find('=');
  if (eq == 0 || eq == std::string::npos)
    return InvalidArgument("environment entry '" + kv + "' must be KEY=VALUE");
  for (size_t i = 0; i < eq; ++i) {
    char c = kv[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return InvalidArgument("environment key in '" + kv + "' is not a valid name");
  }
  return Status::Ok();
}

std::vector<int> UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  return cpus;
}

const char* IsolationName(Isolation i) { return i == Isolation::kGvisor ? "gvisor" : "sandbox"; }

Result<Isolation> ParseIsolation(const std::string& text) {
  if (text == "sandbox") return Isolation::kSandbox;
  if (text == "gvisor") return Isolation::kGvisor;
  return InvalidArgument("--isolation must be sandbox or gvisor (got '" + text + "')");
}

std::vector<std::string> VolumeWriteWarnings(const MachineSpec& spec, uid_t machine_uid) {
  std::vector<std::string> out;
  for (const auto& v : spec.volumes) {
    struct stat st;
    if (v.read_only || ::stat(v.host.c_str(), &st) != 0) continue;
    const bool writable = (st.st_uid == machine_uid && (st.st_mode & S_IWUSR)) ||
                          (st.st_gid == machine_uid && (st.st_mode & S_IWGRP)) || (st.st_mode & S_IWOTH);
    if (writable) continue;
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
    out.push_back("volume " + v.host + ":" + v.guest + " is writable, but " + v.host + " (owner uid " +
                  std::to_string(st.st_uid) + ", mode " + mode + ") does not let the machine's uid " +
                  std::to_string(machine_uid) + " write: the program gets EACCES there (pass --chown-volumes, or 'chown " +
                  std::to_string(machine_uid) + " " + v.host + "')");
  }
  return out;
}

Status ChownWritableVolumes(const MachineSpec& spec, uid_t machine_uid) {
  for (const auto& v : spec.volumes)
    if (!v.read_only && ::chown(v.host.c_str(), machine_uid, machine_uid) != 0)
      return ErrnoStatus("chown " + v.host + " to uid " + std::to_string(machine_uid), errno);
  return Status::Ok();
}

Status ValidateSpec(const MachineSpec& spec) {
  size_t ncpu = UsableCpus().size();
  if (!std::isfinite(spec.cpus) || spec.cpus < 0 || spec.cpus > static_cast<double>(ncpu) ||
      (spec.cpus > 0 && spec.cpus < 0.01)) {
    char cpus[32];
    std::snprintf(cpus, sizeof cpus, "%g", spec.cpus);
    return InvalidArgument(std::string("--cpus ") + cpus + " is out of range: use 0 (no limit) or a number from 0.01 to " +
                           std::to_string(ncpu) + " (this host's usable CPUs)");
  }
  if (spec.mem_mib < 0 || (spec.mem_mib > 0 && spec.mem_mib < 8))
    return InvalidArgument("--mem " + std::to_string(spec.mem_mib) + " is out of range: use 0 (no limit) or at least 8 MiB");
  if (spec.gpu_mem_mib < 0) return InvalidArgument("--gpu-mem must be positive");
  if (spec.gpu_mem_mib > 0 && !spec.cuda) return InvalidArgument("--gpu-mem needs --cuda");
  if (spec.pids < -1 || (spec.pids > 0 && spec.pids < 8) || spec.pids > (int64_t{1} << 22))
    return InvalidArgument("--pids " + std::to_string(spec.pids) +
                           " is out of range: use 0 (no limit) or a number from 8 to 4194304");
  // The image before the command: a pack's command fills an empty one, so a
  // pack that cannot be found is the real problem.
  if (!spec.image.empty()) {
    struct stat st;
    if (spec.image[0] != '/')
      return InvalidArgument("--image '" + spec.image + "' is a relative path: give it absolute (e.g. --image \"$PWD/" +
                             spec.image + "\")");
    if (::stat(spec.image.c_str(), &st) != 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
      return InvalidArgument("--image '" + spec.image + "' must be an absolute path to a directory or a .smolmachine pack");
  }
  if (spec.cmd.empty())
    return InvalidArgument(spec.image.empty() ? "no command given: add '-- CMD [ARGS...]'"
                                              : "no command given: add '-- CMD [ARGS...]' (--image '" + spec.image +
                                                    "' is a directory, not a pack with a command)");
  for (const auto& e : spec.env) RETURN_IF_ERROR(ValidateEnv(e));
  if (spec.disk_mib < 0 || (spec.disk_mib > 0 && spec.disk_mib < 1))
    return InvalidArgument("--disk must be a positive number of MiB");
  if (!spec.workdir.empty() && spec.workdir[0] != '/') return InvalidArgument("--workdir '" + spec.workdir + "' must be absolute");
  return Status::Ok();
}

std::string SpecToJson(const MachineSpec& s) {
  nlohmann::json j;
  j["cpus"] = s.cpus;
  j["mem_mib"] = s.mem_mib;
  j["cuda"] = s.cuda;
  j["gpu_mem_mib"] = s.gpu_mem_mib;
  j["pids"] = s.pids;
  j["net"] = s.net;
  j["env"] = s.env;
  j["image"] = s.image;
  j["cmd"] = s.cmd;
  j["disk_mib"] = s.disk_mib;
  j["workdir"] = s.workdir;
  j["model"] = s.model;
  j["isolation"] = IsolationName(s.isolation);
  j["volumes"] = nlohmann::json::array();
  for (const auto& v : s.volumes)
    j["volumes"].push_back({{"host", v.host}, {"guest", v.guest}, {"ro", v.read_only}});
  return j.dump();
}

Result<MachineSpec> SpecFromJson(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Malformed("stored machine spec is not JSON");
  MachineSpec s;
  s.cpus = j.value("cpus", 0.0);
  s.mem_mib = j.value("mem_mib", int64_t{0});
  s.cuda = j.value("cuda", false);
  s.gpu_mem_mib = j.value("gpu_mem_mib", int64_t{0});
  s.pids = j.value("pids", int64_t{0});  // machines made before --pids: the default
  s.net = j.value("net", false);
  s.env = j.value("env", std::vector<std::string>{});
  s.image = j.value("image", std::string());
  s.cmd = j.value("cmd", std::vector<std::string>{});
  s.disk_mib = j.value("disk_mib", int64_t{0});
  s.workdir = j.value("workdir", std::string());
  s.model = j.value("model", std::string());
  auto isolation = ParseIsolation(j.value("isolation", std::string("sandbox")));
  if (!isolation.ok()) return Malformed("stored machine spec: " + isolation.status().message());
  s.isolation = *isolation;
  if (j.contains("volumes") && j["volumes"].is_array())
    for (const auto& v : j["volumes"])
      s.volumes.push_back({v.value("host", std::string()), v.value("guest", std::string()),
                           v.value("ro", false)});
  return s;
}

}  // namespace smolvm::machine
