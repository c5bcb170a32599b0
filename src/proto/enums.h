// Enumerations that travel on the wire as u32 (ops.h, control_ops.h), with
// their text forms for command lines, logs and the status JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace smolvm::proto {

// Which chunks a fork shares (docs/architecture.md §5): none, the ones marked frozen, or
// the ones whose contents still equal their host-to-device upload.
enum class ShareMode : uint32_t { kOff = 0, kOn = 1, kAuto = 2 };

// A session's part in forks. Hello carries kStandalone or kClone; a
// standalone session becomes kGolden when it first reaches its forkpoint.
enum class SessionRole : uint32_t { kStandalone = 0, kGolden = 1, kClone = 2 };

// Hello's flags (u64). In the request, what the guest asks for; in the
// reply, what the session is.
// kHelloNoDescriptors: no descriptor crosses the connection (a gVisor
// machine's endpoint: gVisor cannot hand its descriptors to a host process).
// Pinned memory is then the guest's own, mirrored in the worker (HostWrite,
// HostLand), and pageable copies travel inline (docs/shim.md).
inline constexpr uint64_t kHelloNoDescriptors = 1;

// "off" | "on" | "auto"; "unknown" for a number off the list.
constexpr std::string_view ShareModeName(ShareMode m) {
  switch (m) {
    case ShareMode::kOff: return "off";
    case ShareMode::kOn: return "on";
    case ShareMode::kAuto: return "auto";
  }
  return "unknown";
}
constexpr std::string_view ShareModeName(uint32_t wire) { return ShareModeName(static_cast<ShareMode>(wire)); }
// nullopt for anything but the three names.
constexpr std::optional<ShareMode> ParseShareMode(std::string_view s) {
  if (s == "off") return ShareMode::kOff;
  if (s == "on") return ShareMode::kOn;
  if (s == "auto") return ShareMode::kAuto;
  return std::nullopt;
}
// The wire's u32, checked: nullopt for a number off the list.
constexpr std::optional<ShareMode> ShareModeOf(uint32_t wire) {
  if (wire > static_cast<uint32_t>(ShareMode::kAuto)) return std::nullopt;
  return static_cast<ShareMode>(wire);
}
constexpr uint32_t Wire(ShareMode m) { return static_cast<uint32_t>(m); }

constexpr std::string_view SessionRoleName(SessionRole r) {
  switch (r) {
    case SessionRole::kStandalone: return "standalone";
    case SessionRole::kGolden: return "golden";
    case SessionRole::kClone: return "clone";
  }
  return "unknown";
}
constexpr std::optional<SessionRole> SessionRoleOf(uint32_t wire) {
  if (wire > static_cast<uint32_t>(SessionRole::kClone)) return std::nullopt;
  return static_cast<SessionRole>(wire);
}
constexpr uint32_t Wire(SessionRole r) { return static_cast<uint32_t>(r); }

}  // namespace smolvm::proto
