// `fairlane destroy SEG [--force]`: remove a segment, or every key of a
// Valkey queue.
//
// A segment is removed only when it is ours and not in use:
//  - a file that is not a fairlane segment is refused, nothing removed;
//  - a segment with live (or stopped) processes attached is refused, naming
//    them, unless --force: they would go on working on an unlinked copy
//    while new processes create a fresh segment under the same name;
//  - our own broken segments (another layout version, a creator that died
//    before it finished, a truncated file, a corrupt header) are removed.
// destroy looks as an observer, so it does not count itself as attached.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "cli_error.hpp"
#include "commands.hpp"
#include "fairlane/detail/layout.hpp"
#include "fairlane/queue.hpp"
#include "fairlane/valkey.hpp"
#include "format.hpp"
#include "target.hpp"

namespace fairlane::cli {

namespace {

void emit(bool as_json, const std::string& text, const nlohmann::json& j) {
  if (as_json) {
    print_json(j);
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
  }
}

// What the first bytes of /dev/shm/NAME say about who made it.
enum class Maker { fairlane, unfinished, other, unreadable };

Maker who_made(const std::string& segment) {
  const std::string path = "/dev/shm/" + segment;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Maker::unreadable;
  unsigned char head[8] = {};
  ssize_t got = 0;
  while (got < static_cast<ssize_t>(sizeof head)) {
    const ssize_t n = ::read(fd, head + got, sizeof head - static_cast<std::size_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += n;
  }
  ::close(fd);
  // An empty file (a creator that died before its first write), or one
  // that holds the mark a creator writes before it sizes the file and
  // replaces with the magic last (layout.hpp, kMagicMaking). A file of any
  // other first bytes, zero ones too, is nobody's we know of: a sized file
  // of zeros is no fairlane creator's (the mark comes first; before
  // 2026-12-08 it was taken for one, and another program's segment that
  // began with zeros could be removed).
  if (got == 0) return Maker::unfinished;
  std::uint64_t first = 0;
  std::memcpy(&first, head, sizeof first);
  if (got == 8 && first == detail::kMagicMaking) return Maker::unfinished;
  // The magic is "FFAIRLN" and a layout digit; any layout's segment is ours.
  std::uint64_t magic = detail::kMagic;
  unsigned char ours[8];
  std::memcpy(ours, &magic, sizeof ours);
  if (got >= 7 && std::memcmp(head, ours, 7) == 0) return Maker::fairlane;
  return Maker::other;
}

std::string describe_process(const ProcessInfo& p) {
  return fmt::format("pid {}{} {}", p.pid, p.name.empty() ? std::string() : " (" + p.name + ")", to_string(p.state));
}

int destroy_valkey(const DestroyArgs& a, const std::string& url) {
  return guarded([&] {
    // --force: a segment's mirror is removed too (it is read-only otherwise).
    Target t = open_target(url, Access::write, a.force);
    const std::uint64_t keys = t.valkey()->remove_queue();
    const std::string shown = shown_target(url);
    emit(a.json, fmt::format("destroyed {}: {} key{} removed", shown, grouped(keys), keys == 1 ? "" : "s"),
         {{"queue", shown}, {"status", "destroyed"}, {"keys", keys}});
    return kExitOk;
  });
}

}  // namespace

int run_destroy(const DestroyArgs& a) {
  const std::string target = parse_target(a.segment);
  if (is_valkey_url(target)) return destroy_valkey(a, target);
  const std::string& seg = target;

  std::string what = "segment";
  {
    auto q = Queue::open(seg, Queue::Attach::observer);
    if (q) {
      std::vector<std::string> live;
      for (const ProcessInfo& p : q->processes())
        if (p.state != ProcessState::dead) live.push_back(describe_process(p));
      if (!live.empty() && !a.force) {
        std::string who;
        for (std::size_t i = 0; i < live.size() && i < 8; ++i) who += (i ? ", " : "") + live[i];
        if (live.size() > 8) who += fmt::format(" and {} more", live.size() - 8);
        fail(fmt::format("segment '{}' is in use by {} process{}: {}; nothing removed (stop them, or pass --force "
                         "to remove it under them)",
                         seg, live.size(), live.size() == 1 ? "" : "es", who));
      }
    } else {
      const Error& e = q.error();
      switch (e.code) {
        case Errc::wrong_layout:
        case Errc::truncated:
        case Errc::not_initialized:
        case Errc::corrupt:
          break;  // broken: removed below, if it is ours
        case Errc::not_found:
        case Errc::permission_denied:
          fail(e.message);
        default:
          // Ours but not to be opened now (say, a full or scribbled process
          // table): who is attached cannot be told, so only --force removes it.
          if (!a.force || who_made(seg) != Maker::fairlane)
            fail(fmt::format("{}; nothing removed (--force removes it without knowing who is attached)", e.message));
      }
      switch (who_made(seg)) {
        case Maker::fairlane: what = "broken segment"; break;
        case Maker::unfinished: what = "unfinished segment"; break;
        case Maker::other:
          fail(fmt::format("'{}' in /dev/shm is not a fairlane segment (no fairlane magic in its first bytes); "
                           "nothing removed", seg));
        case Maker::unreadable:
          fail(fmt::format("cannot tell whether '{}' is a fairlane segment: {}; nothing removed", seg, e.message));
      }
    }
  }  // unmapped before the name goes
  Status st = Queue::remove(seg);
  if (!st) fail(st.error().message);
  emit(a.json, what == "segment" ? fmt::format("destroyed {}", seg) : fmt::format("destroyed {} ({})", seg, what),
       {{"segment", seg}, {"status", "destroyed"}, {"was", what}});
  return kExitOk;
}

}  // namespace fairlane::cli
