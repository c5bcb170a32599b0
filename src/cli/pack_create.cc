#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "cli/pack_commands.h"
#include "machine/errors.h"
#include "machine/machines.h"
#include "machine/pack.h"
#include "machine/pack_mount.h"
#include "machine/paths.h"
#include "version.h"

namespace smolvm::cli {
namespace {

struct Opts {
  std::string from, machine, model, out, workdir, fs = "erofs";
  std::vector<std::string> env, cmd;
};

// --machine NAME: the running machine's /workspace (read through its pid 1's
// root), over its image (directory, or its pack's mounted tree) unless
// --from is given; its command, env and workdir unless given.
Status FromMachine(const Opts& o, machine::PackCreateOptions* p) {
  std::string home = machine::SmolvmHome();
  ASSIGN_OR_RETURN(auto all, machine::ListMachines(home));
  const machine::MachineRecord* rec = nullptr;
  for (const auto& r : all)
    if (r.name == o.machine) rec = &r;
  if (rec == nullptr) return NotFound("machine '" + o.machine + "' does not exist (see 'smolvm machine list')");
  if (rec->state != machine::kStateRunning)
    return machine::WrongState("machine '" + o.machine + "' is " + rec->state +
                               ": its /workspace exists only while it runs (start it, then pack it)");
  if (o.from.empty() && !rec->spec.image.empty()) {
    if (machine::IsPackFile(rec->spec.image)) {
      ASSIGN_OR_RETURN(auto m, machine::ReadPack(rec->spec.image));
      p->from = machine::PackMountPoint(home, m.image_sha256);
    } else {
      p->from = rec->spec.image;
    }
  }
  if (p->model.empty() && p->from != o.from) p->model_inside = rec->spec.model;
  p->exclude.push_back("workspace");
  p->extra_sources.push_back("/proc/" + std::to_string(rec->init_pid) + "/root/workspace");
  if (p->command.empty()) p->command = rec->spec.cmd;
  if (p->env.empty()) p->env = rec->spec.env;
  if (o.workdir.empty()) p->workdir = machine::Workdir(rec->spec);
  return Status::Ok();
}

}  // namespace

void AddPackCreate(CLI::App& pack, int* exit_code) {
  auto o = std::make_shared<Opts>();
  CLI::App* c = pack.add_subcommand(
      "create", "make a .smolmachine: smolvm pack create --from DIR|--machine NAME [--model DIR] -o FILE [-- CMD...]");
  c->add_option("--from", o->from, "directory whose contents become the machine's root");
  c->add_option("--machine", o->machine, "a running machine: its /workspace (and its image) become the pack");
  c->add_option("--model", o->model, "model directory, baked in at /<its name> ($SMOLVM_MODEL inside)");
  c->add_option("-o,--out", o->out, "output file (FILE.smolmachine)")->required();
  c->add_option("-e,--env", o->env, "KEY=VAL default environment")->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_option("--workdir", o->workdir, "where the program starts (default /workspace)");
  c->add_option("--fs", o->fs, "image filesystem: erofs (default; format 2) or squashfs (lz4; format 1)")
      ->check(CLI::IsMember({"erofs", "squashfs"}));
  c->add_option("cmd", o->cmd, "the default command, after --")->expected(-1);
  c->callback([o, exit_code] {
    if (o->from.empty() && o->machine.empty()) {
      *exit_code = ReportPackError(InvalidArgument("give --from DIR or --machine NAME"));
      return;
    }
    machine::PackCreateOptions p;
    p.from = o->from;
    p.model = o->model;
    p.out = o->out;
    p.command = o->cmd;
    p.env = o->env;
    p.workdir = o->workdir.empty() ? "/workspace" : o->workdir;
    p.created_by = std::string("smolvm ") + SMOLVM_VERSION;
    p.image_type = o->fs;
    if (const char* tool = std::getenv("SMOLVM_MKSQUASHFS"); tool != nullptr && tool[0] != '\0') p.mksquashfs = tool;
    if (const char* tool = std::getenv("SMOLVM_MKFS_EROFS"); tool != nullptr && tool[0] != '\0') p.mkfs_erofs = tool;
    if (!o->machine.empty()) {
      Status s = FromMachine(*o, &p);
      if (!s.ok()) {
        *exit_code = ReportPackError(s);
        return;
      }
    }
    auto t0 = std::chrono::steady_clock::now();
    auto m = machine::CreatePack(p);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (m.ok()) {
      struct stat st;
      long long size = ::stat(o->out.c_str(), &st) == 0 ? static_cast<long long>(st.st_size) : -1;
      std::printf("created %s: %lld bytes, image sha256 %s, %.2f s\n", o->out.c_str(), size, m->image_sha256.c_str(), s);
    }
    *exit_code = ReportPackError(m.status());
  });
}

}  // namespace smolvm::cli
