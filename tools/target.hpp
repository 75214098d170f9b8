// The queue a command works on: a segment by name, or a Valkey queue by
// valkey://HOST:PORT/QUEUE, both reached through the one Backend interface.
//
// A segment is also kept as a Queue, for what only a segment has (its
// configuration, recovery, mirror and corruption records). Tools that only
// look (inspect, stats, watch, jobs, dead list, job) open it as an observer:
// they are not processes of the queue and do not show up in its process list.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "fairlane/backend.hpp"
#include "fairlane/queue.hpp"
#include "fairlane/valkey.hpp"

namespace fairlane::cli {

// look: reads only (a segment is attached as an observer). write: changes
// an existing queue. create: enqueue, the one command that may make a Valkey
// queue (its meta) that none of whose keys exists yet, as EchoMQ clients do;
// every other command answers that such a queue does not exist and writes
// nothing. (Segments are made by `create` only.)
enum class Access { look, write, create };

// What follow_name found: the target as it was, the segment at its name
// opened again, or no segment to open at the name.
enum class Followed { same, reopened, gone };

class Target {
 public:
  // How it is shown: a segment name, or the valkey:// URL as typed without
  // its password (shown_target, args.hpp).
  const std::string& label() const noexcept { return label_; }
  Backend& backend() noexcept { return *backend_; }
  Backend* operator->() noexcept { return backend_.get(); }
  BackendCapabilities capabilities() const { return backend_->capabilities(); }

  bool is_segment() const noexcept { return queue_ != nullptr; }
  // The segment as a Queue; null for a Valkey queue.
  Queue* queue() noexcept { return queue_; }
  const Queue* queue() const noexcept { return queue_; }
  ValkeyBackend* valkey() noexcept { return valkey_; }

  // What a segment was created with; for a Valkey queue, what it records
  // (job kind, payload limit, node) with every capacity 0.
  QueueConfig config() const;

  friend Target open_target(const std::string& label, Access access, bool force_valkey);
  friend Followed follow_name(std::optional<Target>& t, const std::string& label, std::string& why);
  friend Target segment_target(const std::string& label, Queue q);

 private:
  std::string label_;
  std::unique_ptr<Backend> backend_;
  Queue* queue_ = nullptr;
  ValkeyBackend* valkey_ = nullptr;
};

// Checks the target's form (a segment name or a valid URL) before anything
// is opened; returns it unchanged.
std::string parse_target(std::string_view text);

// Opens it, or throws cli::Failure with the library's message.
// force_valkey: a Valkey queue that is a segment's mirror is written anyway
// (ValkeyOptions::force; `destroy URL --force`).
Target open_target(const std::string& label, Access access, bool force_valkey = false);

// For the tools that keep a segment open between looks (stats --listen
// before each scrape, watch before each frame). The segment they mapped
// may stop being the one at its name: destroyed (observers do not count as
// attached, so destroy goes ahead; the mapping stays readable, frozen), or
// destroyed and created again. Reading it then shows a queue nobody uses.
// So: a segment target that is no longer at its name (Queue::still_named,
// one stat) is let go of (its mapping with it) and the name is opened
// again, as an observer. `t` is empty while there is no segment to open;
// `why` then says why in a few words, without the name (with the
// library's reason when the name exists but cannot be opened, as while it
// is being created). A Valkey target is left as it is. Throws nothing of
// its own.
Followed follow_name(std::optional<Target>& t, const std::string& label, std::string& why);

// For commands that apply to a segment only (create, fsck, mirror, restore):
// a URL is refused with one line saying so; otherwise parse_segment's checks.
std::string parse_segment_target(std::string_view text, std::string_view command);

// Runs a command body; a Valkey server that is away or answers with an error
// (BackendError) is exit 2 with its message.
template <class F>
int guarded(F&& body);

// The one line for a write refused as read_only (a mirror's keyspace seen
// through valkey://).
[[noreturn]] void fail_read_only(const Target& t);

}  // namespace fairlane::cli

#include "cli_error.hpp"

namespace fairlane::cli {

template <class F>
int guarded(F&& body) {
  try {
    return body();
  } catch (const BackendError& e) {
    fail(e.what());
  } catch (const ResultError& e) {
    fail(e.what());
  }
}

}  // namespace fairlane::cli
