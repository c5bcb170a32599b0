// Episodes: the rounds of work of a lease whose learners are kept across
// iterations (docs/serve.md, "Episodes"). The acquire's payloads are episode
// 1; each lease-wide send starts the next. A member's answer to the lease's
// latest episode is its first smolvm.reply() to the payload it was given
// for it, or its smolvm.complete() result when it completed without
// replying; Results waits until every member of the episode answered or
// ended. Ending the lease from the host (End of every member, Complete)
// is an episode too, answered by the members' results.
//
// Plain functions over the model (model.h), called by LeaseManager under
// its lock; no I/O. The link numbers a clone's payloads 1, 2, ... and tags
// each reply with the number of the payload the program took last, so a
// reply answers a member's latest payload when its number is >= `sent`.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/model.h"

namespace smolvm::serve {

// It runs and may be given payloads: not ended from the host, not dropped.
bool TakesPayloads(const LeaseMember& m);
// A payload for episode `episode` is about to leave for m (recorded before
// it leaves: the clone's reply may come before the sender's next step).
void GiveEpisode(LeaseMember& m, int64_t episode);
// The host ended m within `episode` (its next_payload() returns None): its
// complete() answers it.
void EndInEpisode(LeaseMember& m, int64_t episode);
// The clone's reply to payload number `payload` (the link's numbering).
void ApplyReply(LeaseMember& m, uint64_t payload, const nlohmann::json& reply);
// The clone's (or the host's) complete(): answers the episode if nothing did.
void ApplyComplete(LeaseMember& m, const nlohmann::json& result);
// The members of the lease's latest episode, in member order.
std::vector<size_t> EpisodeMembers(const Lease& l);
// Every member of the latest episode answered or ended.
bool EpisodeSettled(const Lease& l);

}  // namespace smolvm::serve
