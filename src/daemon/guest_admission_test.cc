#include "daemon/guest_admission.h"

#include <gtest/gtest.h>

namespace smolvm {
namespace {

TEST(GuestAdmission, PendingConnectionsAreCappedPerMachineAndOnTheSharedSocketPerUidAndPid) {
  GuestAdmission a(AdmissionCaps{.conns_per_machine = 16, .conns_per_pid = 8, .conns = 128});
  EXPECT_TRUE(a.AdmitConnection("machine 'a'", "machine 'a'", false, 1, {15, 15, 100}).ok());
  Status st = a.AdmitConnection("machine 'a'", "machine 'a'", false, 1, {16, 16, 100});
  EXPECT_EQ(st.message(), "too many connections on machine 'a' (cap 16, --max-conns-per-machine)");
  // On a machine's own endpoint every connection has the machine's uid: no per-pid cap.
  EXPECT_TRUE(a.AdmitConnection("machine 'a'", "machine 'a'", false, 1, {10, 10, 100}).ok());
  const std::string uid = TenantName("", 1000);
  EXPECT_EQ(uid, "uid 1000 on the daemon's socket");
  st = a.AdmitConnection("the daemon's socket", uid, true, 42, {16, 3, 100});
  EXPECT_EQ(st.message(), "too many connections from uid 1000 on the daemon's socket (cap 16, --max-conns-per-machine)");
  st = a.AdmitConnection("the daemon's socket", uid, true, 42, {8, 8, 100});
  EXPECT_EQ(st.message(), "too many connections from host pid 42 on the daemon's socket (cap 8, --max-conns-per-pid)");
  st = a.AdmitConnection("the daemon's socket", uid, true, 42, {1, 1, 128});
  EXPECT_EQ(st.message(), "too many connections on the smolvm daemon (cap 128, --max-conns)");
}

TEST(GuestAdmission, SessionsAreCappedPerTenant) {
  GuestAdmission a(AdmissionCaps{.sessions_per_machine = 2, .workers = 100});
  EXPECT_TRUE(a.AdmitSession("machine 'a'", {1, 1, 0}).ok());
  EXPECT_EQ(a.AdmitSession("machine 'a'", {2, 2, 0}).message(),
            "too many CUDA sessions on machine 'a' (cap 2, --max-sessions-per-machine)");
  EXPECT_EQ(a.AdmitSession(TenantName("", 7), {2, 2, 0}).message(),
            "too many CUDA sessions of uid 7 on the daemon's socket (cap 2, --max-sessions-per-machine)");
  EXPECT_EQ(a.AdmitSession("machine 'b'", {0, 100, 1}).message(),
            "too many CUDA workers on the smolvm daemon (cap 100, --max-workers)");
}

// Issue 29: two machines at the per-machine session cap took every worker.
// With the defaults (320 workers, 160 sessions per machine), a third
// machine still finds workers.
TEST(GuestAdmission, TwoTenantsAtTheirCapLeaveWorkersForAThird) {
  GuestAdmission a(AdmissionCaps{});
  size_t held_a = 0, held_b = 0, held_c = 0;
  auto committed = [&] { return held_a + held_b + held_c; };
  while (a.AdmitSession("machine 'a'", {held_a, committed(), size_t{held_b > 0} + size_t{held_c > 0}}).ok()) ++held_a;
  while (a.AdmitSession("machine 'b'", {held_b, committed(), size_t{held_a > 0} + size_t{held_c > 0}}).ok()) ++held_b;
  EXPECT_EQ(held_a, 160u);  // alone: its session cap (and half the workers)
  EXPECT_LT(held_b, 160u);
  while (a.AdmitSession("machine 'c'", {held_c, committed(), size_t{held_a > 0} + size_t{held_b > 0}}).ok()) ++held_c;
  EXPECT_GE(held_c, 40u) << "a third machine found " << held_c << " workers";
  EXPECT_LE(committed(), 320u);
  Status st = a.AdmitSession("machine 'b'", {held_b, committed(), 2});
  EXPECT_FALSE(st.ok());
}

// `cuda status` counts refusals by the flag of the cap that made them.
TEST(GuestAdmission, RefusalsAreTalliedByTheirCapsFlag) {
  GuestAdmission a(AdmissionCaps{.conns_per_machine = 1, .workers = 4});
  RefusalTally t;
  t.Count(a.AdmitConnection("machine 'a'", "machine 'a'", false, 9, {1, 0, 1}));
  t.Count(a.AdmitConnection("machine 'a'", "machine 'a'", false, 9, {1, 0, 1}));
  t.Count(Unavailable("machine 'a' holds 3 CUDA worker(s), its fair share of --max-workers 6 beside 0 other tenant(s)"));
  t.Count("--gpu-mem");
  EXPECT_EQ(t.by_cap(), (std::map<std::string, uint64_t>{
                            {"--max-conns-per-machine", 2}, {"fair share", 1}, {"--gpu-mem", 1}}));
}

}  // namespace
}  // namespace smolvm
