#include "serve/episodes.h"

namespace smolvm::serve {

bool TakesPayloads(const LeaseMember& m) { return m.state == "running" && !m.ending && !m.dropped; }

void GiveEpisode(LeaseMember& m, int64_t episode) {
  m.episode = episode;
  m.sent++;
  m.answered = false;
  m.answer = nullptr;
}

void EndInEpisode(LeaseMember& m, int64_t episode) {
  m.episode = episode;
  m.ending = true;
  m.sent++;  // counted as a payload: no reply (tagged with a real payload's number) answers the end
  m.answered = false;
  m.answer = nullptr;
}

void ApplyReply(LeaseMember& m, uint64_t payload, const nlohmann::json& reply) {
  // An older payload's reply (sent before the clone took the latest) does
  // not answer the latest, nor an end (EndInEpisode counts it).
  if (m.answered || m.sent == 0 || payload < m.sent) return;
  m.answered = true;
  m.answer = reply;
}

void ApplyComplete(LeaseMember& m, const nlohmann::json& result) {
  if (m.answered || m.episode == 0) return;
  m.answered = true;
  m.answer = result;
}

std::vector<size_t> EpisodeMembers(const Lease& l) {
  std::vector<size_t> out;
  for (size_t i = 0; i < l.members.size(); ++i)
    if (l.members[i].episode == l.episode && !l.members[i].dropped) out.push_back(i);
  return out;
}

bool EpisodeSettled(const Lease& l) {
  for (size_t i : EpisodeMembers(l))
    if (!l.members[i].answered && l.members[i].state == "running") return false;
  return true;
}

}  // namespace smolvm::serve
