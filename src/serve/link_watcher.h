// LinkWatcher: holds the CloneLinks of leased clones and reads their events
// on one thread (poll over every link's fd), handing each to the sink and
// acknowledging it once the sink returned (the sink persists first, so an
// event is never lost across a restart; it may be seen twice, seq tells).
// Send/End go to a clone's link from any thread (one lock per link).
//
// Thread safety: all methods from any thread; the sink is called from the
// watcher thread only, never with a LinkWatcher lock held.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/unique_fd.h"
#include "serve/clone_driver.h"

namespace smolvm::serve {

class LinkWatcher {
 public:
  // sink(machine, event); a link that closes reports kUnavailable as
  // closed(machine, status).
  using Sink = std::function<void(const std::string& machine, const CloneEvent& event)>;
  using Closed = std::function<void(const std::string& machine, const Status& why)>;
  LinkWatcher(Sink sink, Closed closed);
  ~LinkWatcher();

  void Add(const std::string& machine, std::unique_ptr<CloneLink> link);
  void Drop(const std::string& machine);  // closes the link (the clone goes on)
  Status Send(const std::string& machine, const std::string& payload_json);
  Status End(const std::string& machine);
  size_t size() const;

 private:
  struct Entry {
    std::mutex mu;
    std::unique_ptr<CloneLink> link;
  };
  void Run();
  void Wake();

  Sink sink_;
  Closed closed_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> links_;
  UniqueFd wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace smolvm::serve
