// On a bare host (`smolvm cuda env`), the preloaded shims win every lookup by
// soname, but a library loaded by absolute path or under a renamed soname
// (torch's __init__ loads nvidia/cu13/lib/libcudart.so.13 and others by
// path; torchvision needs its libcudart.<hash>.so.13) is mapped beside ours.
// Its functions are not what the program's calls reach -- the preloads come
// first in the global lookup scope -- but its code is in the process. Inside
// a --cuda machine our file is bound over every such copy (docs/torch.md).
#pragma once

#include <string>
#include <vector>

namespace smolvm::shim {

// Paths of mapped objects that are copies of a library a shim replaces
// (shim::ReplacedSoname) but are not the shim's own file (same device and
// inode as `shim_dir`/<soname>).
std::vector<std::string> ForeignCudaLibraries(const std::string& shim_dir);

// Once per process, at the session's start: names each such copy on stderr
// (SMOLVM_QUIET_FOREIGN=1 silences it).
void WarnForeignCudaLibraries();

}  // namespace smolvm::shim
