// Prints "<proto hash> <control hash>" as this build of the tables has them.
// Built three ways (CMakeLists.txt): as the tables are; with one more control
// op (PROBE_CONTROL_CHANGED); with a salted guest wire (PROBE_GUEST_CHANGED).
// proto_hash_probe_test compares the three.
#include <cstdio>

#ifdef PROBE_CONTROL_CHANGED
#define SMOLVM_CONTROL_OPS_EXTRA(X) X(399, ProbeExtra, ASYNC, (F(u64, probe)), ())
#endif
#ifdef PROBE_GUEST_CHANGED
#define SMOLVM_WIRE_SALT "probe"
#endif

#include "proto/proto_hash.h"

int main() {
  std::printf("%s %s\n", smolvm::proto::HashHex(smolvm::proto::kProtoHash).c_str(),
              smolvm::proto::HashHex(smolvm::proto::kControlHash).c_str());
  return 0;
}
