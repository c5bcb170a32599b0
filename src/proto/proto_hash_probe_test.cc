// `smolvm --proto-hash` covers the guest table only: a change to a control
// op (here: one more, built into a probe) changes the control hash and
// leaves the guest's hash alone; a change to the guest wire changes it.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "proto/proto_hash.h"

namespace smolvm::proto {
namespace {

struct Hashes {
  std::string proto, control;
};

Hashes Probe(const char* exe) {
  Hashes h;
  FILE* f = ::popen(exe, "r");
  if (!f) return h;
  char a[64] = {}, b[64] = {};
  if (std::fscanf(f, "%63s %63s", a, b) == 2) {
    h.proto = a;
    h.control = b;
  }
  ::pclose(f);
  return h;
}

TEST(ProtoHashProbe, ControlOpChangeLeavesTheGuestHash) {
  Hashes base = Probe(PROBE_BASE);
  Hashes changed = Probe(PROBE_CONTROL_CHANGED_EXE);
  ASSERT_FALSE(base.proto.empty());
  ASSERT_FALSE(changed.proto.empty());
  EXPECT_EQ(base.proto, HashHex(kProtoHash));  // what `smolvm --proto-hash` prints
  EXPECT_NE(changed.control, base.control) << "the control hash must cover the control table";
  EXPECT_EQ(changed.proto, base.proto) << "a control op leaked into the guest's proto hash";
}

TEST(ProtoHashProbe, GuestWireChangeChangesOnlyTheGuestHash) {
  Hashes base = Probe(PROBE_BASE);
  Hashes changed = Probe(PROBE_GUEST_CHANGED_EXE);
  ASSERT_FALSE(changed.proto.empty());
  EXPECT_NE(changed.proto, base.proto);
  EXPECT_EQ(changed.control, base.control);
}

TEST(ProtoHashProbe, TheTablesAreDisjoint) {
  // No control op's name in the guest schema text, and the reverse.
#define SMOLVM_NOT_IN_GUEST(num, name, kind, req, rep) \
  EXPECT_EQ(std::string(kSchemaText).find(" " #name " "), std::string::npos) << #name;
  SMOLVM_CONTROL_OPS(SMOLVM_NOT_IN_GUEST)
#undef SMOLVM_NOT_IN_GUEST
#define SMOLVM_NOT_IN_CONTROL(num, name, kind, req, rep) \
  EXPECT_EQ(std::string(kControlSchemaText).find(" " #name " "), std::string::npos) << #name;
  SMOLVM_OPS(SMOLVM_NOT_IN_CONTROL)
#undef SMOLVM_NOT_IN_CONTROL
}

}  // namespace
}  // namespace smolvm::proto
