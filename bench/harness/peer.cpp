#include "peer.hpp"

#include <algorithm>
#include <cstring>

namespace fairlane::bench {

std::string WorkerCtx::info_value(std::string_view key) const {
  std::string_view s = info();
  while (!s.empty()) {
    auto sp = s.find(' ');
    auto item = s.substr(0, sp);
    auto eq = item.find('=');
    if (eq != std::string_view::npos && item.substr(0, eq) == key) return std::string(item.substr(eq + 1));
    if (sp == std::string_view::npos) break;
    s.remove_prefix(sp + 1);
  }
  return {};
}

void WorkerCtx::fail(std::string_view why) noexcept {
  const std::size_t n = std::min(why.size(), sizeof slot_.error - 1);
  std::memcpy(slot_.error, why.data(), n);
  slot_.error[n] = '\0';
  h_.abort.store(1, std::memory_order_relaxed);
}

std::uint64_t WorkerCtx::backlog() const noexcept {
  std::uint64_t in = 0, out = 0;
  for (std::uint32_t i = 0; i < p_.producers; ++i)
    in += ctl_.slot(i).count.load(std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < p_.consumers; ++i)
    out += ctl_.slot(p_.producers + i).count.load(std::memory_order_relaxed);
  return in > out ? in - out : 0;
}

std::vector<std::string> peer_names() {
  return {"fairlane", "mutex-shm", "boost-mq", "moodycamel", "valkey"};
}

std::unique_ptr<Peer> make_peer(std::string_view name, const PeerEnv& env) {
  if (name == "fairlane") return make_fairlane_peer();
  if (name == "mutex-shm") return make_mutex_shm_peer();
  if (name == "boost-mq") return make_boost_mq_peer();
  if (name == "moodycamel") return make_moodycamel_peer();
  if (name == "valkey") return make_valkey_peer(env);
  return nullptr;
}

}  // namespace fairlane::bench
