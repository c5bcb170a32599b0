// Inside a --cuda machine, smolvm's shims are what every load of a CUDA
// runtime, driver, cuBLAS(Lt), cuDNN or NVML library gets, however it is
// asked for: LD_PRELOAD puts ours first by soname (a DT_NEEDED or a dlopen by
// bare name), and CoverGuestCudaLibraries binds our shim read-only over every
// guest copy of those libraries, so a dlopen by absolute path (torch's
// __init__ loads nvidia/cu13/lib/libcudart.so.13 and the others that way)
// and a renamed bundled copy (torchvision.libs/libcudart.<hash>.so.13) open
// our file too. The loader then finds the library it already has (same
// device and inode) and maps nothing new. docs/torch.md.
//
// Runs in pid 1 of a new machine, in its private mount namespace, while it
// builds the guest root (sandbox_rootfs.cc); nothing is visible on the host.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace smolvm::machine {

// The soname of the shim that replaces a library file called `name`, or ""
// (shim::ReplacedSoname: libcudart.faf08d9a.so.13 -> libcudart.so.13).
std::string ShimForLibraryFile(std::string_view name);

struct CudaCoverage {
  std::vector<std::string> covered;  // guest paths (relative to the root), in walk order
  size_t entries = 0;                // directory entries looked at
  bool truncated = false;            // stopped at kMaxEntries
};

// The most directory entries one machine start looks at.
inline constexpr size_t kMaxCudaCoverEntries = 500000;

// Binds `shim_dir`/<soname> (a path below `root`, e.g. "run/smolvm/lib")
// read-only over each copy of a replaced library found below the guest
// directories `trees` (recursively; symbolic links to directories are not
// followed) and directly in `dirs`. Paths are relative to `root`, a
// directory of the new root; symbolic links are resolved inside it.
// A file bound twice (a link and its target) is bound once.
Result<CudaCoverage> CoverGuestCudaLibraries(const std::string& root, const std::string& shim_dir,
                                             const std::vector<std::string>& trees,
                                             const std::vector<std::string>& dirs);

// The copies CoverGuestCudaLibraries would bind over below `root` (a host
// directory, as the guest sees it at some mount point), without binding: the
// host path of each file (links followed inside `root`), and the soname of
// the shim that replaces it. A gVisor machine's bundle binds them
// (gvisor_cuda.cc), since runsc, not our pid 1, makes its mounts.
struct CudaLibraryCopy {
  std::string host_path;
  std::string soname;
};
Result<std::vector<CudaLibraryCopy>> FindCudaLibraryCopies(const std::string& root, const std::vector<std::string>& trees,
                                                          const std::vector<std::string>& dirs);

// The system directories a host's or an image's CUDA libraries live in.
std::vector<std::string> CudaSystemLibraryDirs();

struct SandboxConfig;
// BuildRootfs's step for a --cuda machine (cwd: the new root, before
// pivot_root): covers the copies in every volume, and in the whole root
// when it is an image or a pack, else in the host's system library
// directories.
Status CoverMachineCudaLibraries(const SandboxConfig& cfg, bool image_root);

}  // namespace smolvm::machine
