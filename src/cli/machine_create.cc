#include <unistd.h>

#include <memory>

#include "cli/machine_commands.h"
#include "machine/machines.h"
#include "machine/paths.h"

namespace smolvm::cli {

void AddMachineCreate(CLI::App& machine, int* exit_code) {
  struct Opts {
    std::string name, image, workdir, isolation = "sandbox";
    double cpus = 0;
    int64_t mem = 0, gpu_mem = 0, disk = 0, pids = machine::kDefaultPids;
    bool cuda = false, net = false, chown_volumes = false;
    std::vector<std::string> volumes, env, cmd;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* c = machine.add_subcommand("create", "define a machine: smolvm machine create --name N [opts] -- CMD... (a pack's command when none)");
  c->add_option("--name", o->name, "letters, digits, '-', '_'; at most 40")->required();
  c->add_option("--cpus", o->cpus, "CPU quota in CPUs; also a cpuset of that many cores (0, the default: no limit)");
  c->add_option("--mem", o->mem, "memory limit in MiB (0, the default: no limit; else at least 8)");
  c->add_option("--pids", o->pids, "most processes and threads at once (0: no limit)")->capture_default_str();
  c->add_flag("--cuda", o->cuda, "remote CUDA through the host daemon");
  c->add_option("--gpu-mem", o->gpu_mem, "device memory cap in MiB (with --cuda)");
  c->add_flag("--net", o->net, "share the host network (default: loopback only)");
  c->add_option("-v,--volume", o->volumes, "HOST:GUEST[:ro] bind mount")->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_option("-e,--env", o->env, "KEY=VAL in the program's environment")->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_flag("--chown-volumes", o->chown_volumes,
              "hand each writable volume's host directory (itself, not its contents) to the machine's uid, so the "
              "program can write there (changes the host; needs root)");
  c->add_option("--image", o->image, "root: a directory (overlay lower) or a .smolmachine pack, instead of host /usr etc.");
  c->add_option("--disk", o->disk, "MiB that /tmp and /workspace may hold (tmpfs, counted in --mem; default 4096)");
  c->add_option("--workdir", o->workdir, "where the program starts (default: the pack's, else /workspace)");
  c->add_option("--isolation", o->isolation, "sandbox (default: namespaces, cgroups, seccomp) or gvisor (runsc)");
  c->add_option("cmd", o->cmd, "the program and its arguments, after --")->expected(-1);
  c->callback([o, exit_code] {
    machine::MachineSpec spec;
    auto isolation = machine::ParseIsolation(o->isolation);
    if (!isolation.ok()) {
      *exit_code = ReportMachineError(isolation.status());
      return;
    }
    spec.isolation = *isolation;
    spec.cpus = o->cpus;
    spec.mem_mib = o->mem;
    spec.cuda = o->cuda;
    spec.gpu_mem_mib = o->gpu_mem;
    spec.pids = o->pids == 0 ? -1 : o->pids;
    spec.net = o->net;
    spec.env = o->env;
    spec.image = o->image;
    if (!o->image.empty() && o->image[0] == '/' && ::access(o->image.c_str(), F_OK) != 0) {
      *exit_code = ReportMachineError(InvalidArgument("--image '" + o->image + "' does not exist"));
      return;
    }
    spec.disk_mib = o->disk;
    spec.workdir = o->workdir;
    spec.cmd = o->cmd;
    for (const auto& v : o->volumes) {
      auto vol = machine::ParseVolume(v);
      if (!vol.ok()) {
        *exit_code = ReportMachineError(vol.status());
        return;
      }
      spec.volumes.push_back(*vol);
    }
    if (o->chown_volumes && ::geteuid() != 0) {
      *exit_code = ReportMachineError(
          PermissionDenied("'smolvm machine create --chown-volumes' needs root on the host (chown): run it with sudo"));
      return;
    }
    const std::string home = machine::SmolvmHome();
    Status s = machine::CreateMachine(home, o->name, spec);
    if (!s.ok()) {
      *exit_code = ReportMachineError(s);
      return;
    }
    // The program writes a writable volume as the machine's host uid: hand
    // the directories over when asked, else say which ones it cannot write.
    uid_t uid = 0;
    if (auto all = machine::ListMachines(home); all.ok())
      for (const auto& r : *all)
        if (r.name == o->name) uid = static_cast<uid_t>(r.uid_base);
    if (uid != 0 && o->chown_volumes) s = machine::ChownWritableVolumes(spec, uid);
    if (uid != 0 && s.ok() && !o->chown_volumes)
      for (const auto& w : machine::VolumeWriteWarnings(spec, uid)) std::fprintf(stderr, "smolvm: warning: %s\n", w.c_str());
    if (s.ok()) std::printf("created %s\n", o->name.c_str());
    *exit_code = ReportMachineError(s);
  });
}

}  // namespace smolvm::cli
