#include "serve/link_watcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <optional>
#include <vector>

namespace smolvm::serve {

LinkWatcher::LinkWatcher(Sink sink, Closed closed)
    : sink_(std::move(sink)), closed_(std::move(closed)), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  thread_ = std::thread([this] { Run(); });
}

LinkWatcher::~LinkWatcher() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  Wake();
  thread_.join();
}

void LinkWatcher::Wake() {
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void LinkWatcher::Add(const std::string& machine, std::unique_ptr<CloneLink> link) {
  auto e = std::make_shared<Entry>();
  e->link = std::move(link);
  {
    std::lock_guard<std::mutex> l(mu_);
    links_[machine] = std::move(e);
  }
  Wake();
}

void LinkWatcher::Drop(const std::string& machine) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = links_.find(machine);
    if (it == links_.end()) return;
    e = std::move(it->second);
    links_.erase(it);
  }
  Wake();
  std::lock_guard<std::mutex> l(e->mu);  // waits for a read in progress
  e->link.reset();
}

Status LinkWatcher::Send(const std::string& machine, const std::string& payload_json) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = links_.find(machine);
    if (it == links_.end()) return Unavailable("clone " + machine + " has no link");
    e = it->second;
  }
  std::lock_guard<std::mutex> l(e->mu);
  if (!e->link) return Unavailable("clone " + machine + " has no link");
  return e->link->Send(payload_json);
}

Status LinkWatcher::End(const std::string& machine) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = links_.find(machine);
    if (it == links_.end()) return Unavailable("clone " + machine + " has no link");
    e = it->second;
  }
  std::lock_guard<std::mutex> l(e->mu);
  if (!e->link) return Unavailable("clone " + machine + " has no link");
  return e->link->End();
}

size_t LinkWatcher::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return links_.size();
}

void LinkWatcher::Run() {
  for (;;) {
    std::vector<std::pair<std::string, std::shared_ptr<Entry>>> entries;
    std::vector<struct pollfd> fds;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
      fds.push_back({wake_.get(), POLLIN, 0});
      for (const auto& [m, e] : links_) {
        entries.emplace_back(m, e);
        fds.push_back({e->link ? e->link->fd() : -1, POLLIN, 0});
      }
    }
    int r = ::poll(fds.data(), fds.size(), 1000);
    if (r < 0) continue;
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      (void)!::read(wake_.get(), &v, sizeof v);
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto& [machine, e] = entries[i - 1];
      // Drain what has arrived; each event goes to the sink, then is acked.
      for (;;) {
        std::optional<Result<std::optional<CloneEvent>>> got;
        {
          std::lock_guard<std::mutex> l(e->mu);
          if (!e->link) break;
          got.emplace(e->link->Next(std::chrono::steady_clock::now()));
        }
        auto& ev = *got;
        if (!ev.ok()) {
          {
            std::lock_guard<std::mutex> l(mu_);
            auto it = links_.find(machine);
            if (it != links_.end() && it->second == e) links_.erase(it);
          }
          closed_(machine, ev.status());
          break;
        }
        if (!ev->has_value()) break;
        CloneEvent event = **ev;
        sink_(machine, event);
        std::lock_guard<std::mutex> l(e->mu);
        if (e->link) (void)e->link->Ack(event.seq);
      }
    }
  }
}

}  // namespace smolvm::serve
