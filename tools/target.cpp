// The queue a command works on (see target.hpp).
#include "target.hpp"

#include <fmt/format.h>

#include "args.hpp"
#include "cli_error.hpp"

namespace fairlane::cli {

QueueConfig Target::config() const {
  if (queue_ != nullptr) return queue_->config();
  QueueConfig c;
  c.job_kind = backend_->job_kind();
  if (valkey_ != nullptr) {
    c.payload_bytes = valkey_->max_payload();
    c.node = valkey_->node();
  }
  return c;
}

std::string parse_target(std::string_view text) {
  if (is_valkey_url(text)) {
    auto u = ValkeyUrl::parse(text);
    if (!u) fail(u.error().message);
    return std::string(text);
  }
  return parse_segment(text);
}

std::string parse_segment_target(std::string_view text, std::string_view command) {
  if (is_valkey_url(text))
    fail(fmt::format("{} does not apply to a Valkey queue ('{}'): it works on a shared-memory segment", command,
                     shown_target(text)));
  return parse_segment(text);
}

// A segment's target, for open_target and follow_name: `label` as typed.
Target segment_target(const std::string& label, Queue q) {
  Target t;
  t.label_ = shown_target(label);
  t.backend_ = segment_backend(std::move(q));
  t.queue_ = t.backend_->segment();
  return t;
}

Target open_target(const std::string& label, Access access, bool force_valkey) {
  Target t;
  t.label_ = shown_target(label);
  if (is_valkey_url(label)) {
    ValkeyOptions vo;
    vo.force = force_valkey;
    vo.create = access == Access::create;
    auto r = ValkeyBackend::open(label, vo);
    if (!r) fail(r.error().message);
    t.valkey_ = r->get();
    t.backend_ = std::move(r).value();
    return t;
  }
  auto r = Queue::open(label, access == Access::look ? Queue::Attach::observer : Queue::Attach::member);
  if (!r) {
    const std::string& m = r.error().message;
    // The process table is full: say which creation flag sizes it.
    if (m.find("process record") != std::string::npos && m.find("--processes") == std::string::npos)
      fail(fmt::format("{}; recreate it with a larger --processes (fairlane create {} --processes N)", m, label));
    fail(m);
  }
  return segment_target(label, std::move(r).value());
}

Followed follow_name(std::optional<Target>& t, const std::string& label, std::string& why) {
  if (t) {
    const Queue* q = t->queue();
    if (q == nullptr || q->still_named()) return Followed::same;
    t.reset();  // unmapped now: a destroyed segment's memory is not kept for nobody
  }
  auto r = Queue::open(label, Queue::Attach::observer);
  if (!r) {
    why = r.error().code == Errc::not_found
              ? std::string("destroyed since it was opened, and none of that name exists now")
              : "destroyed since it was opened, and its name cannot be opened: " + r.error().message;
    return Followed::gone;
  }
  t.emplace(segment_target(label, std::move(r).value()));
  return Followed::reopened;
}

void fail_read_only(const Target& t) {
  fail(fmt::format("'{}' is read-only: it is the Valkey copy of a mirrored segment, which owns it "
                   "(write through that segment)",
                   t.label()));
}

}  // namespace fairlane::cli
