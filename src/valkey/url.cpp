// valkey://HOST:PORT/QUEUE, and choosing a backend from a target string.
#include <charconv>
#include <string>

#include "fairlane/valkey.hpp"

namespace fairlane {
namespace {

constexpr std::string_view kSchemes[] = {"valkey://", "redis://"};
constexpr std::size_t kMaxQueueName = 200;

Error bad(std::string_view url, std::string why) {
  return Error{Errc::invalid_argument, 0, "invalid Valkey URL '" + std::string(url) + "': " + why};
}

// Characters that would break the keyspace ({} is the hash tag, / the URL)
// or a SCAN pattern (glob metacharacters).
bool queue_char_ok(char c) noexcept {
  const auto u = static_cast<unsigned char>(c);
  if (u <= ' ' || u >= 0x7f) return false;
  switch (c) {
    case '{': case '}': case '/': case '*': case '?': case '[': case ']': case '\\': return false;
    default: return true;
  }
}

}  // namespace

bool is_valkey_url(std::string_view target) noexcept {
  for (auto s : kSchemes)
    if (target.substr(0, s.size()) == s) return true;
  return false;
}

Result<ValkeyUrl> ValkeyUrl::parse(std::string_view url) {
  std::string_view rest;
  for (auto s : kSchemes)
    if (url.substr(0, s.size()) == s) rest = url.substr(s.size());
  if (!is_valkey_url(url)) return bad(url, "expected valkey://HOST:PORT/QUEUE");
  const std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return bad(url, "no queue name (expected valkey://HOST:PORT/QUEUE)");
  std::string_view hostport = rest.substr(0, slash), queue = rest.substr(slash + 1);

  ValkeyUrl u;
  std::string_view port_text;
  if (!hostport.empty() && hostport.front() == '[') {  // [IPv6]:port
    const std::size_t close = hostport.find(']');
    if (close == std::string_view::npos) return bad(url, "unclosed '[' in the host");
    u.host = std::string(hostport.substr(1, close - 1));
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad(url, "expected ':PORT' after ']'");
      port_text = after.substr(1);
      if (port_text.empty()) return bad(url, "empty port");
    }
  } else {
    const std::size_t colon = hostport.rfind(':');
    if (colon != std::string_view::npos) {
      port_text = hostport.substr(colon + 1);
      hostport = hostport.substr(0, colon);
      if (port_text.empty()) return bad(url, "empty port");
    }
    u.host = std::string(hostport);
  }
  if (u.host.empty()) return bad(url, "no host");
  for (char c : u.host)
    if (static_cast<unsigned char>(c) <= ' ' || c == '/' || c == '@') return bad(url, "bad character in the host");
  if (!port_text.empty()) {
    int p = 0;
    auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), p);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || p < 1 || p > 65535)
      return bad(url, "port '" + std::string(port_text) + "' is not a number in 1..65535");
    u.port = p;
  }
  if (queue.empty()) return bad(url, "no queue name (expected valkey://HOST:PORT/QUEUE)");
  if (queue.size() > kMaxQueueName) return bad(url, "queue name longer than 200 characters");
  for (char c : queue)
    if (!queue_char_ok(c))
      return bad(url, "the queue name may not contain spaces, control characters or any of {}/*?[]\\");
  u.queue = std::string(queue);
  return u;
}

std::string ValkeyUrl::address() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string ValkeyUrl::str() const { return "valkey://" + address() + "/" + queue; }

std::string ValkeyUrl::prefix() const { return "emq:{" + queue + "}:"; }

Result<std::unique_ptr<Backend>> open_backend(std::string_view target) {
  if (is_valkey_url(target)) return open_valkey(target);
  auto q = Queue::open(target);
  if (!q) return q.error();
  return segment_backend(std::move(q).value());
}

}  // namespace fairlane
