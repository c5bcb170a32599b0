// argv and envp for exec*: pointers into the caller's strings, which must
// outlive the exec call (sandbox.cc, gvisor_runsc.cc).
#pragma once

#include <string>
#include <vector>

namespace smolvm::machine {

// Each string's characters, then the terminating null pointer exec* wants.
inline std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace smolvm::machine
