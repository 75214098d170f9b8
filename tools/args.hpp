// Validation of command-line arguments: ids, groups, numbers, segment names.
//
// Every function either returns a checked value or throws cli::Failure with
// a one-line message naming the argument and saying what is wrong with it.
// Commands validate all their arguments before touching a segment, so a bad
// argument never changes anything.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "fairlane/ids.hpp"
#include "fairlane/queue.hpp"

namespace fairlane::cli {

// Why an id failed to parse, in words ("wrong length (expected 14 characters)").
std::string describe(IdError why);

// A branded id; `what` names it in the message ("job id", "group").
BrandedId parse_id(std::string_view text, std::string_view what);

// A group argument: "default" is the lane of jobs enqueued without a group.
struct GroupArg {
  BrandedId id;          // kDefaultGroup for "default"
  bool is_default = false;
};
GroupArg parse_group(std::string_view text);

// A namespace: three letters A-Z.
std::string parse_kind(std::string_view text);

// A decimal integer in [min, max]; `what` names it ("--jobs", "ATTEMPT").
std::uint64_t parse_u64(std::string_view text, std::string_view what, std::uint64_t min = 0,
                        std::uint64_t max = UINT64_MAX);
std::uint32_t parse_u32(std::string_view text, std::string_view what, std::uint32_t min = 0,
                        std::uint32_t max = UINT32_MAX);

// A file mode in octal ("0600", "640"), at most 0777.
std::uint32_t parse_mode(std::string_view text);

// A mirror's --durability (async or sync) and --on-full (refuse or drop).
Durability parse_durability(std::string_view text);
MirrorFull parse_on_full(std::string_view text);

// A duration in seconds, decimals allowed ("8", "2.5"), in [min, max].
std::chrono::milliseconds parse_seconds(std::string_view text, std::string_view what, double min,
                                        double max);

// A segment name: non-empty, no '/', printable.
std::string parse_segment(std::string_view text);

// A target (or any URL) as the tool shows it: a segment name as it is; a
// URL as typed but without its password: valkey://USER:PASSWORD@HOST:PORT/Q
// is shown valkey://USER@HOST:PORT/Q, and valkey://:PASSWORD@HOST:PORT/Q
// (the default user) valkey://HOST:PORT/Q, as ValkeyBackend::describe()
// does. Every output that names a target (text, JSON, Prometheus labels,
// watch, messages) uses this; the typed text is only for opening it. A URL
// that does not parse loses everything up to its last '@' that follows a
// ':' (a '/' typed in a password must not let the rest of it show).
std::string shown_target(std::string_view text);

// Opens an existing segment, or throws with the library's message.
Queue open_queue(const std::string& segment);

}  // namespace fairlane::cli
