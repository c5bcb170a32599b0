// EndClonesOfGolden: what a golden's end means for its clones' records. They
// live in the golden's pid namespace, so they ended with it: each clone's
// cgroup is destroyed and its lease socket unlinked; a clone that was
// stopping is stopped, one that was running or forking failed ("its golden
// ... stopped"). Records of other states are left as they are.
#pragma once

#include <string>

#include "machine/cgroups.h"
#include "machine/store.h"

namespace smolvm::machine {

void EndClonesOfGolden(Store& store, const CgroupLayout& layout, const std::string& home, const std::string& golden);

}  // namespace smolvm::machine
