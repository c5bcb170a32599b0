#include "machine/golden_end.h"

#include <unistd.h>

#include "machine/paths.h"

namespace smolvm::machine {

void EndClonesOfGolden(Store& store, const CgroupLayout& layout, const std::string& home, const std::string& golden) {
  auto clones = store.Clones(golden);
  if (!clones.ok()) return;
  for (const auto& cl : *clones) {
    MachineCgroup(layout, cl.name).Destroy().ok();
    ::unlink(MachinePaths(home, cl.name).lease_sock.c_str());
    (void)store.Update(cl.name, [&](MachineRecord& r) {
      if (r.state == kStateRunning || r.state == kStateStopping || r.state == kStateForking) {
        r.state = r.state == kStateStopping ? kStateStopped : kStateFailed;
        if (r.state == kStateFailed) r.detail = "its golden '" + golden + "' stopped";
        r.init_pid = 0;
      }
      return Status::Ok();
    });
  }
}

}  // namespace smolvm::machine
