// valkey://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...]/QUEUE, and choosing a
// backend from a target string.
//
// A password is a secret: no message, str() or describe() ever shows it.
// Every error that repeats the URL repeats redact_url(url).
#include <charconv>
#include <cstdlib>
#include <string>

#include "fairlane/valkey.hpp"

namespace fairlane {
namespace {

constexpr std::string_view kSchemes[] = {"valkey://", "redis://"};
constexpr std::size_t kMaxQueueName = 200;
constexpr std::size_t kMaxNodes = 64;

std::string_view strip_scheme(std::string_view url) noexcept;

Error bad(std::string_view url, std::string why) {
  // An '@' past the first '/', none before it: perhaps a user name or
  // password holding an unescaped '/', which ends the host early. The URL
  // is then read as host, port and queue from pieces of the password, and
  // both the URL as shown and the reason (a port quoted) gave the password
  // away (found by a tester: valkey://bob:s3/cret@host:1/q). All before
  // that '@' is hidden, and the reason quotes nothing.
  const std::string_view rest = strip_scheme(url);
  const std::size_t slash = rest.find('/'), at = rest.rfind('@');
  if (rest.data() != nullptr && slash != std::string_view::npos && at != std::string_view::npos && at > slash &&
      rest.substr(0, slash).find('@') == std::string_view::npos)
    return Error{Errc::invalid_argument, 0,
                 "invalid Valkey URL '" + std::string(url.substr(0, url.size() - rest.size())) + "***" +
                     std::string(rest.substr(at)) +
                     "': it cannot be read as USER:PASSWORD@HOST:PORT/QUEUE (a '/' or '@' in a user name or "
                     "password is written %2F or %40)"};
  return Error{Errc::invalid_argument, 0, "invalid Valkey URL '" + redact_url(url) + "': " + why};
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

std::string_view strip_scheme(std::string_view url) noexcept {
  for (auto s : kSchemes)
    if (url.substr(0, s.size()) == s) return url.substr(s.size());
  return {};
}

int hex(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes, as URLs carry a '@', ':' or '/' inside a user or password.
bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int h = hex(in[i + 1]), l = hex(in[i + 2]);
    if (h < 0 || l < 0) return false;
    out += char(h * 16 + l);
    i += 2;
  }
  return true;
}

// One HOST[:PORT] of the node list.
std::string parse_node(std::string_view hostport, ValkeyEndpoint& e) {
  std::string_view port_text;
  if (!hostport.empty() && hostport.front() == '[') {  // [IPv6]:port
    const std::size_t close = hostport.find(']');
    if (close == std::string_view::npos) return "unclosed '[' in the host";
    e.host = std::string(hostport.substr(1, close - 1));
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return "expected ':PORT' after ']'";
      port_text = after.substr(1);
      if (port_text.empty()) return "empty port";
    }
  } else {
    const std::size_t colon = hostport.rfind(':');
    if (colon != std::string_view::npos) {
      port_text = hostport.substr(colon + 1);
      hostport = hostport.substr(0, colon);
      if (port_text.empty()) return "empty port";
    }
    e.host = std::string(hostport);
  }
  if (e.host.empty()) return "no host";
  for (char c : e.host)
    if (static_cast<unsigned char>(c) <= ' ' || c == '/' || c == '@' || c == ',') return "bad character in the host";
  e.port = 6379;
  if (!port_text.empty()) {
    int p = 0;
    auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), p);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || p < 1 || p > 65535)
      return "port '" + std::string(port_text) + "' is not a number in 1..65535";
    e.port = p;
  }
  return {};
}

}  // namespace

std::string ValkeyEndpoint::address() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool is_valkey_url(std::string_view target) noexcept {
  for (auto s : kSchemes)
    if (target.substr(0, s.size()) == s) return true;
  return false;
}

std::string redact_url(std::string_view url) {
  std::string_view rest = strip_scheme(url);
  if (rest.data() == nullptr) return std::string(url);
  const std::size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  const std::size_t at = authority.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  const std::string_view userinfo = authority.substr(0, at);
  const std::size_t colon = userinfo.find(':');
  if (colon == std::string_view::npos) return std::string(url);  // a user name alone is not a secret
  const std::size_t scheme_len = url.size() - rest.size();
  return std::string(url.substr(0, scheme_len)) + std::string(userinfo.substr(0, colon)) + ":***" +
         std::string(rest.substr(at));
}

Result<ValkeyUrl> ValkeyUrl::parse(std::string_view url) {
  if (!is_valkey_url(url)) return bad(url, "expected valkey://HOST:PORT/QUEUE");
  const std::string_view rest = strip_scheme(url);
  const std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return bad(url, "no queue name (expected valkey://HOST:PORT/QUEUE)");
  std::string_view authority = rest.substr(0, slash), queue = rest.substr(slash + 1);

  ValkeyUrl u;
  // USER[:PASSWORD]@: the last '@' ends it (a password may hold an '@').
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const std::size_t colon = userinfo.find(':');
    const std::string_view user = userinfo.substr(0, colon);
    if (!percent_decode(user, u.user)) return bad(url, "bad %-escape in the user name");
    if (colon != std::string_view::npos) {
      if (!percent_decode(userinfo.substr(colon + 1), u.password)) return bad(url, "bad %-escape in the password");
      if (u.password.empty()) return bad(url, "empty password after ':' (leave out the ':' for none)");
    } else if (u.user.empty()) {
      return bad(url, "empty user name before '@'");
    }
    for (char c : u.user)
      if (static_cast<unsigned char>(c) <= ' ') return bad(url, "the user name may not contain spaces or control characters");
  }
  if (authority.empty()) return bad(url, "no host");
  std::size_t from = 0;
  while (from <= authority.size()) {
    const std::size_t comma = authority.find(',', from);
    const std::string_view one = authority.substr(from, comma == std::string_view::npos ? std::string_view::npos : comma - from);
    ValkeyEndpoint e;
    if (std::string why = parse_node(one, e); !why.empty()) return bad(url, why);
    u.nodes.push_back(std::move(e));
    if (u.nodes.size() > kMaxNodes) return bad(url, "more than 64 nodes");
    if (comma == std::string_view::npos) break;
    from = comma + 1;
  }
  u.host = u.nodes.front().host;
  u.port = u.nodes.front().port;
  if (queue.empty()) return bad(url, "no queue name (expected valkey://HOST:PORT/QUEUE)");
  if (queue.size() > kMaxQueueName) return bad(url, "queue name longer than 200 characters");
  for (char c : queue)
    if (!queue_char_ok(c))
      return bad(url, "the queue name may not contain spaces, control characters or any of {}/*?[]\\");
  u.queue = std::string(queue);
  return u;
}

std::string ValkeyUrl::address() const {
  ValkeyEndpoint e{host, port};
  return e.address();
}

std::string ValkeyUrl::str() const {
  std::string s = "valkey://";
  if (!user.empty()) s += user + "@";
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (i) s += ',';
    s += nodes[i].address();
  }
  if (nodes.empty()) s += address();
  return s + "/" + queue;
}

std::string ValkeyUrl::prefix() const { return "emq:{" + queue + "}:"; }

std::string ValkeyUrl::auth_password() const {
  if (!password.empty()) return password;
  const char* env = std::getenv("FAIRLANE_VALKEY_PASSWORD");
  return env ? std::string(env) : std::string();
}

}  // namespace fairlane
