// Rendering shared by the inspection commands: jobs, ages, groups, wait
// histograms. Pure functions of their inputs.
//
// Every value here may come from a segment another process scribbled on:
// nothing is used as an index or a length without a bound, and text from
// the segment is made safe for a terminal before it is printed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fairlane/queue.hpp"

namespace fairlane::cli {

// "default" for the default lane, else the id.
std::string group_name(const BrandedId& group);
// An id as text for a terminal: bytes that are not base62 (a scribbled
// segment) become '?'.
std::string id_text(const BrandedId& id);

// pending|leased|scheduled|dead, or throws cli::Failure naming --state.
JobState parse_state(std::string_view text);

// A span of time for people: "850 ms", "12.3 s", "4m05s", "3h12m", "2d04h".
std::string span_ms(std::uint64_t ms);

// Text from the segment (an error message) made safe for one line of a
// terminal: control characters become '?'; at most `max` bytes, "~" marks a cut.
std::string one_line(std::string_view text, std::size_t max = SIZE_MAX);

// Local wall-clock time of a unix ms instant: "11-29 20:33:43".
std::string local_time(std::uint64_t unix_ms);

// CLOCK_REALTIME in ms.
std::uint64_t unix_now_ms() noexcept;

// A segment-clock instant (lease deadline, due time, time of death) on the
// wall clock, given the segment clock and the wall clock read together.
inline std::uint64_t segment_to_unix_ms(std::uint64_t seg_ms, std::uint64_t seg_now_ms, std::uint64_t unix_now) {
  return seg_ms >= seg_now_ms ? unix_now + (seg_ms - seg_now_ms) : unix_now - std::min(unix_now, seg_now_ms - seg_ms);
}

// What `when_ms` means for the job's state, relative to now: "expires in 2.1 s",
// "due in 30 s", "died 5m02s ago", or "" for pending.
std::string job_when(const JobInfo& j, std::uint64_t seg_now_ms);

// One job for scripts: id, group, state, attempt, token (leased) or null,
// retry policy, ages, last error; the payload is job()'s, not jobs()'.
nlohmann::json job_json(const JobInfo& j, std::uint64_t seg_now_ms, std::uint64_t unix_now);

// Bytes for a terminal: printable ASCII as is, everything else as \xNN
// (and a backslash as \\), so any payload prints on one line.
std::string escape_bytes(std::string_view bytes);

// Standard base64 (RFC 4648, with padding).
std::string base64(std::string_view bytes);

// Is it valid UTF-8 (what a JSON string can carry unchanged)?
bool valid_utf8(std::string_view bytes) noexcept;

// The wait histogram for scripts: count, p50/p90/p99 and the 32 bucket counts.
nlohmann::json wait_json(const WaitHistogram& h);

// A quantile of the wait for people ("35 us", "2.1 ms"), "-" when empty.
std::string wait_quantile(const WaitHistogram& h, double q);

}  // namespace fairlane::cli
