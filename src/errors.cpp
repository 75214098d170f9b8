// Names of the status enums, for messages and the tool's output, and the
// decimal form of a lease token.
#include <charconv>

#include "fairlane/queue.hpp"
#include "fairlane/result.hpp"

namespace fairlane {

std::string_view to_string(Errc e) noexcept {
  switch (e) {
    case Errc::not_found: return "not_found";
    case Errc::already_exists: return "already_exists";
    case Errc::wrong_layout: return "wrong_layout";
    case Errc::truncated: return "truncated";
    case Errc::not_initialized: return "not_initialized";
    case Errc::corrupt: return "corrupt";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::permission_denied: return "permission_denied";
    case Errc::system: return "system";
    case Errc::busy: return "busy";
    case Errc::unavailable: return "unavailable";
  }
  return "unknown";
}

std::string_view to_string(EnqueueStatus s) noexcept {
  switch (s) {
    case EnqueueStatus::enqueued: return "enqueued";
    case EnqueueStatus::duplicate: return "duplicate";
    case EnqueueStatus::kind_mismatch: return "kind_mismatch";
    case EnqueueStatus::invalid_id: return "invalid_id";
    case EnqueueStatus::invalid_group: return "invalid_group";
    case EnqueueStatus::invalid_argument: return "invalid_argument";
    case EnqueueStatus::payload_too_large: return "payload_too_large";
    case EnqueueStatus::full: return "full";
    case EnqueueStatus::lanes_full: return "lanes_full";
    case EnqueueStatus::mirror_behind: return "mirror_behind";
    case EnqueueStatus::mirror_unavailable: return "mirror_unavailable";
    case EnqueueStatus::not_durable: return "not_durable";
    case EnqueueStatus::read_only: return "read_only";
    case EnqueueStatus::corrupt: return "corrupt";
  }
  return "unknown";
}

std::string_view to_string(ClaimStatus s) noexcept {
  switch (s) {
    case ClaimStatus::claimed: return "claimed";
    case ClaimStatus::empty: return "empty";
    case ClaimStatus::paused: return "paused";
    case ClaimStatus::corrupt: return "corrupt";
    case ClaimStatus::read_only: return "read_only";
  }
  return "unknown";
}

std::string_view to_string(AckStatus s) noexcept {
  switch (s) {
    case AckStatus::ok: return "ok";
    case AckStatus::stale: return "stale";
    case AckStatus::gone: return "gone";
    case AckStatus::corrupt: return "corrupt";
    case AckStatus::read_only: return "read_only";
  }
  return "unknown";
}

std::string_view to_string(FailStatus s) noexcept {
  switch (s) {
    case FailStatus::retrying: return "retrying";
    case FailStatus::dead: return "dead";
    case FailStatus::stale: return "stale";
    case FailStatus::gone: return "gone";
    case FailStatus::corrupt: return "corrupt";
    case FailStatus::read_only: return "read_only";
  }
  return "unknown";
}

std::string_view to_string(LaneStatus s) noexcept {
  switch (s) {
    case LaneStatus::ok: return "ok";
    case LaneStatus::invalid_group: return "invalid_group";
    case LaneStatus::invalid_argument: return "invalid_argument";
    case LaneStatus::lanes_full: return "lanes_full";
    case LaneStatus::read_only: return "read_only";
    case LaneStatus::corrupt: return "corrupt";
  }
  return "unknown";
}

std::string_view to_string(MoveStatus s) noexcept {
  switch (s) {
    case MoveStatus::moved: return "moved";
    case MoveStatus::gone: return "gone";
    case MoveStatus::not_pending: return "not_pending";
    case MoveStatus::invalid_group: return "invalid_group";
    case MoveStatus::lanes_full: return "lanes_full";
    case MoveStatus::full: return "full";
    case MoveStatus::busy: return "busy";
    case MoveStatus::read_only: return "read_only";
    case MoveStatus::corrupt: return "corrupt";
  }
  return "unknown";
}

std::string_view to_string(ProcessState s) noexcept {
  switch (s) {
    case ProcessState::alive: return "alive";
    case ProcessState::stopped: return "stopped";
    case ProcessState::dead: return "dead";
  }
  return "unknown";
}

std::string to_string(Token t) { return std::to_string(t.value); }

std::optional<Token> parse_token(std::string_view text) noexcept {
  std::uint64_t v = 0;
  if (text.empty() || text.size() > 20 || text[0] == '+' || text[0] == '-') return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v == 0) return std::nullopt;
  return Token(v);
}

}  // namespace fairlane
