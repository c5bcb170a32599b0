// Episodes over the fake driver (episodes.h, docs/serve.md "Episodes"):
// several payloads per lease with the answers in member order, learners
// dropped, ended and added between episodes, the lease ended from the host,
// errors, tenancy, and a restart in the middle of an episode.
#include <set>

#include "serve/episodes.h"
#include "serve/service_test_fixture.h"

namespace smolvm::serve {
namespace {

using namespace testing;
using nlohmann::json;

// The answers of the lease's latest episode, in member order, once every
// member of it answered or ended: [member, answer] pairs (answer null when
// the member ended without one).
std::vector<std::pair<int, json>> Answers(const json& lease) {
  std::vector<std::pair<int, json>> out;
  int64_t e = lease["episode"].get<int64_t>();
  for (size_t i = 0; i < lease["members"].size(); ++i) {
    const json& m = lease["members"][i];
    if (m["episode"] == e && !m["dropped"].get<bool>())
      out.emplace_back(static_cast<int>(i), m["answered"].get<bool>() ? m["answer"] : json());
  }
  return out;
}

class EpisodesTest : public ServiceTest {
 protected:
  Reply Results(const std::string& id) { return Call(kAlice, "GET", "/v1/leases/" + id + "/results?wait_s=5"); }
  Reply Send(const std::string& id, const json& body) { return Call(kAlice, "POST", "/v1/leases/" + id + "/payloads", body); }
};

TEST_F(EpisodesTest, SeveralPayloadsPerLeaseAnswerInMemberOrder) {
  ASSERT_EQ(MakePool("p", 3, "fake:reply").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 3}, {"payloads", {{{"i", 0}}, {{"i", 1}}, {{"i", 2}}}}});
  ASSERT_EQ(a.status, 201) << a.text;
  EXPECT_EQ(a.body["episode"], 1);
  Reply r = Results(Id(a));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body["state"], "active");  // the learners live on
  auto got = Answers(r.body);
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i].second["echo"]["i"], i) << r.text;
  for (int e = 2; e <= 5; ++e) {
    json ps = json::array();
    for (int i = 0; i < 3; ++i) ps.push_back({{"e", e}, {"i", i}});
    Reply s = Send(Id(a), {{"payloads", ps}});
    ASSERT_EQ(s.status, 200) << s.text;
    EXPECT_EQ(s.body["episode"], e);
    for (const auto& x : s.body["sent"]) EXPECT_TRUE(x["ok"].get<bool>()) << s.text;
    r = Results(Id(a));
    EXPECT_EQ(r.body["episode"], e);
    got = Answers(r.body);
    ASSERT_EQ(got.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i].first, i);
      EXPECT_EQ(got[i].second["echo"]["e"], e) << r.text;
      EXPECT_EQ(got[i].second["echo"]["i"], i) << r.text;
    }
  }
  // One payload for all (repeated), then the lease ended from the host: the
  // last episode's answers are the clones' results.
  ASSERT_EQ(Send(Id(a), {{"payload", {{"all", true}}}}).status, 200);
  got = Answers(Results(Id(a)).body);
  for (const auto& [i, ans] : got) EXPECT_EQ(ans["echo"]["all"], true);
  Reply end = Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/end", json::object());
  ASSERT_EQ(end.status, 200) << end.text;
  EXPECT_EQ(end.body["episode"], 7);
  r = Results(Id(a));
  EXPECT_EQ(r.body["state"], "ended");
  got = Answers(r.body);
  ASSERT_EQ(got.size(), 3u);
  for (const auto& [i, ans] : got) EXPECT_EQ(ans["replies"], 6) << r.text;  // fake:reply completes with its count
  EXPECT_EQ(r.body["members"][0]["replies"].size(), 6u);
}

TEST_F(EpisodesTest, ALearnerDroppedAndOneAddedBetweenIterations) {
  ASSERT_EQ(MakePool("p", 4, "fake:reply").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 3}, {"payloads", {{{"i", 0}}, {{"i", 1}}, {{"i", 2}}}}});
  ASSERT_EQ(a.status, 201);
  ASSERT_EQ(Answers(Results(Id(a)).body).size(), 3u);
  std::string dropped = a.body["members"][1]["machine"];

  // Dropped at once: reclaimed, its clone removed, the pool refills.
  Reply d = Call(kAlice, "DELETE", "/v1/leases/" + Id(a) + "/members/1");
  ASSERT_EQ(d.status, 200) << d.text;
  EXPECT_EQ(d.body["members"][1]["state"], "reclaimed");
  EXPECT_TRUE(d.body["members"][1]["dropped"].get<bool>());
  svc_->reclaimer().WaitIdle();
  auto live = driver_->List();
  ASSERT_TRUE(live.ok());
  for (const auto& m : live.value()) EXPECT_NE(m.name, dropped);
  // The next episode has two learners: payloads one each, in member order.
  EXPECT_EQ(Send(Id(a), {{"payloads", {{{"x", 0}}, {{"x", 1}}, {{"x", 2}}}}}).status, 409);
  ASSERT_EQ(Send(Id(a), {{"payloads", {{{"x", 0}}, {{"x", 2}}}}}).status, 200);
  auto got = Answers(Results(Id(a)).body);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, 0);
  EXPECT_EQ(got[0].second["echo"]["x"], 0);
  EXPECT_EQ(got[1].first, 2);
  EXPECT_EQ(got[1].second["echo"]["x"], 2);

  // One added: it waits, parked, for the next send, which releases it.
  Reply add = Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/members", {{"count", 1}, {"wait_s", 5}});
  ASSERT_EQ(add.status, 200) << add.text;
  ASSERT_EQ(add.body["members"].size(), 4u);
  std::string added = add.body["members"][3]["machine"];
  EXPECT_EQ(add.body["members"][3]["episode"], 0);
  EXPECT_FALSE(driver_->Released(added));
  EXPECT_EQ(Answers(Results(Id(a)).body).size(), 2u);  // not in the episode it did not take part in
  ASSERT_EQ(Send(Id(a), {{"payloads", {{{"y", 0}}, {{"y", 2}}, {{"y", 3}}}}}).status, 200);
  EXPECT_TRUE(driver_->Released(added));
  got = Answers(Results(Id(a)).body);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].first, 3);
  EXPECT_EQ(got[2].second["echo"]["y"], 3);
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["leased"], 3);

  // One added with a payload joins the latest episode at once.
  Reply add2 = Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/members", {{"payload", {{"late", 1}}}, {"wait_s", 5}});
  ASSERT_EQ(add2.status, 200) << add2.text;
  got = Answers(Results(Id(a)).body);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[3].second["echo"]["late"], 1);

  // Ended gracefully: it finishes (fake:reply completes with its count) and
  // takes no part in later episodes.
  Reply e = Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/end", {{"member", 0}});
  ASSERT_EQ(e.status, 200) << e.text;
  ASSERT_TRUE(Eventually([&] { return Call(kAlice, "GET", "/v1/leases/" + Id(a)).body["members"][0]["state"] == "completed"; }));
  EXPECT_EQ(Call(kAlice, "GET", "/v1/leases/" + Id(a)).body["members"][0]["result"]["replies"], 1 + 1 + 1);
  ASSERT_EQ(Send(Id(a), {{"payload", {{"z", 1}}}}).status, 200);
  got = Answers(Results(Id(a)).body);
  std::vector<int> members;
  for (const auto& [i, ans] : got) members.push_back(i);
  EXPECT_EQ(members, (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/end", {{"member", 0}}).status, 409);
  EXPECT_EQ(Send(Id(a), {{"payload", json::object()}, {"member", 1}}).status, 409);  // dropped
}

TEST_F(EpisodesTest, ACloneThatDiesMidEpisodeFailsItsAnswerOthersAnswer) {
  ASSERT_EQ(MakePool("p", 2, "fake:reply").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 2}});
  ASSERT_EQ(a.status, 201);
  ASSERT_EQ(Answers(Results(Id(a)).body).size(), 2u);
  driver_->Kill(a.body["members"][1]["machine"], 9);  // SIGKILL, between episodes
  ASSERT_TRUE(Eventually([&] { return Call(kAlice, "GET", "/v1/leases/" + Id(a)).body["members"][1]["state"] == "failed"; }));
  ASSERT_EQ(Send(Id(a), {{"payload", {{"n", 2}}}}).status, 200);
  auto got = Answers(Results(Id(a)).body);
  ASSERT_EQ(got.size(), 1u);  // the dead one was given no payload
  EXPECT_EQ(got[0].second["echo"]["n"], 2);
}

TEST_F(EpisodesTest, ErrorsAndLimits) {
  ASSERT_EQ(MakePool("p", 2, "fake:reply", {{"max", 2}}).status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 1}});
  ASSERT_EQ(a.status, 201);
  std::string base = "/v1/leases/" + Id(a);
  EXPECT_EQ(Send(Id(a), json::object()).status, 400);
  EXPECT_EQ(Send(Id(a), {{"payload", json::object()}, {"payloads", {json::object()}}}).status, 400);
  EXPECT_EQ(Send(Id(a), {{"payloads", {json::object()}}, {"member", 0}}).status, 400);
  EXPECT_EQ(Send(Id(a), {{"payloads", json::array()}}).status, 400);
  EXPECT_EQ(Send(Id(a), {{"payloads", {1}}}).status, 400);
  EXPECT_EQ(Send(Id(a), {{"payload", json::object()}, {"member", -1}}).status, 400);
  EXPECT_EQ(Send(Id(a), {{"payload", json::object()}, {"colour", 1}}).status, 400);
  EXPECT_EQ(Send(Id(a), {{"payload", {{"x", std::string(1 << 20, 'a')}}}}).status, 413);
  EXPECT_EQ(Call(kAlice, "POST", base + "/end", {{"member", "0"}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", base + "/end", {{"member", 5}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", base + "/members", {{"count", 0}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", base + "/members", {{"count", 1}, {"payloads", {json::object(), json::object()}}}).status, 400);
  EXPECT_EQ(Call(kAlice, "DELETE", base + "/members/7").status, 404);
  EXPECT_EQ(Call(kAlice, "DELETE", base + "/members/x").status, 404);
  // The pool's max is 2: one more fits, then none is ready within wait_s.
  ASSERT_EQ(Call(kAlice, "POST", base + "/members", {{"count", 1}}).status, 200);
  EXPECT_EQ(Call(kAlice, "POST", base + "/members", {{"count", 1}, {"wait_s", 0.05}}).status, 503);
  // Ended from the host: nothing more.
  ASSERT_EQ(Call(kAlice, "POST", base + "/complete", {{"result", {{"by", "host"}}}}).status, 200);
  Reply r = Results(Id(a));
  auto got = Answers(r.body);
  ASSERT_EQ(got.size(), 2u);
  for (const auto& [i, ans] : got) EXPECT_EQ(ans["by"], "host");
  EXPECT_EQ(Send(Id(a), {{"payload", json::object()}}).status, 409);
  EXPECT_EQ(Call(kAlice, "POST", base + "/end", json::object()).status, 409);
  EXPECT_EQ(Call(kAlice, "POST", base + "/members", json::object()).status, 409);
}

TEST_F(EpisodesTest, AddedLearnersCountAgainstTheTenantsQuota) {
  ASSERT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "carol"}, {"uid", 1003}, {"max_leases", 2}}).status, 201);
  ASSERT_EQ(MakePool("p", 3, "fake:reply", json::object(), 1003).status, 201);
  Reply a = Call(1003, "POST", "/v1/pools/p/leases", {{"count", 2}});
  ASSERT_EQ(a.status, 201);
  EXPECT_EQ(Call(1003, "POST", "/v1/leases/" + Id(a) + "/members", {{"count", 1}}).status, 429);
  ASSERT_EQ(Call(1003, "DELETE", "/v1/leases/" + Id(a) + "/members/0").status, 200);
  svc_->reclaimer().WaitIdle();
  EXPECT_EQ(Call(1003, "POST", "/v1/leases/" + Id(a) + "/members", {{"count", 1}}).status, 200);
}

TEST_F(EpisodesTest, AnotherTenantsLeaseIsNotFound) {
  ASSERT_EQ(MakePool("p", 1, "fake:reply").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", json::object());
  ASSERT_EQ(a.status, 201);
  std::string base = "/v1/leases/" + Id(a);
  EXPECT_EQ(Call(kBob, "POST", base + "/payloads", {{"payload", json::object()}}).status, 404);
  EXPECT_EQ(Call(kBob, "POST", base + "/end", json::object()).status, 404);
  EXPECT_EQ(Call(kBob, "POST", base + "/members", json::object()).status, 404);
  EXPECT_EQ(Call(kBob, "DELETE", base + "/members/0").status, 404);
  EXPECT_EQ(Call(kAlice, "GET", base).body["members"][0]["state"], "running");
}

TEST_F(EpisodesTest, ARestartMidEpisodeKeepsTheEpisodeAndItsAnswers) {
  ASSERT_EQ(MakePool("p", 2, "fake:reply").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 2}});
  ASSERT_EQ(a.status, 201);
  ASSERT_EQ(Answers(Results(Id(a)).body).size(), 2u);
  ASSERT_EQ(Send(Id(a), {{"payloads", {{{"k", 0}}, {{"k", 1}}}}}).status, 200);
  Restart();  // the replies to episode 2 may have been read or not: the links replay what was not acked
  Reply r = Results(Id(a));
  EXPECT_EQ(r.body["episode"], 2);
  auto got = Answers(r.body);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].second["echo"]["k"], 0);
  EXPECT_EQ(got[1].second["echo"]["k"], 1);
  ASSERT_EQ(Send(Id(a), {{"payloads", {{{"k", 2}}, {{"k", 3}}}}}).status, 200);
  got = Answers(Results(Id(a)).body);
  EXPECT_EQ(got[1].second["echo"]["k"], 3);
  EXPECT_EQ(Results(Id(a)).body["members"][1]["replies"].size(), 3u);  // none doubled by the replay
}

// The bookkeeping alone: a reply to an older payload does not answer the
// latest; a complete answers what nothing answered; an end is answered by
// the result only.
TEST(EpisodeBookkeeping, RepliesAnswerOnlyTheLatestPayload) {
  LeaseMember m;
  GiveEpisode(m, 1);
  GiveEpisode(m, 2);  // two payloads sent before the clone answered the first
  ApplyReply(m, 1, json{{"for", 1}});
  EXPECT_FALSE(m.answered);
  ApplyReply(m, 2, json{{"for", 2}});
  EXPECT_TRUE(m.answered);
  ApplyReply(m, 2, json{{"again", 2}});
  EXPECT_EQ(m.answer["for"], 2);  // the first reply answers
  ApplyComplete(m, json{{"done", 1}});
  EXPECT_EQ(m.answer["for"], 2);
  EndInEpisode(m, 3);
  ApplyReply(m, 2, json{{"late", 2}});
  EXPECT_FALSE(m.answered);
  ApplyComplete(m, json{{"done", 1}});
  EXPECT_EQ(m.answer["done"], 1);
  LeaseMember waiting;  // added, never given a payload
  ApplyComplete(waiting, json{{"x", 1}});
  EXPECT_FALSE(waiting.answered);
  Lease l;
  l.episode = 3;
  l.members = {m, waiting};
  EXPECT_EQ(EpisodeMembers(l), (std::vector<size_t>{0}));
  EXPECT_TRUE(EpisodeSettled(l));
  l.members[0].answered = false;
  EXPECT_FALSE(EpisodeSettled(l));
  l.members[0].state = "failed";
  EXPECT_TRUE(EpisodeSettled(l));
}

}  // namespace
}  // namespace smolvm::serve
