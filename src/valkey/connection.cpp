// One hiredis connection with reconnect and backoff (see connection.hpp).
#include "connection.hpp"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

namespace fairlane::valkey {

void ReplyDeleter::operator()(redisReply* r) const noexcept {
  if (r) freeReplyObject(r);
}

void ContextDeleter::operator()(redisContext* c) const noexcept {
  if (c) redisFree(c);
}

Args& Args::add_double(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", d);
  own_.emplace_back(buf);
  v_.push_back(own_.back());
  return *this;
}

namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  const auto n = ms.count() < 1 ? 1 : ms.count();
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(n / 1000);
  tv.tv_usec = static_cast<suseconds_t>((n % 1000) * 1000);
  return tv;
}

}  // namespace

Connection::Connection(std::string host, int port, const ValkeyOptions& options, Auth auth)
    : host_(std::move(host)), port_(port), options_(options), auth_(std::move(auth)) {
  const bool v6 = host_.find(':') != std::string::npos;
  address_ = (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
}

Connection::~Connection() = default;

std::string Connection::try_connect(bool& fatal) {
  fatal = false;
  ctx_.reset(redisConnectWithTimeout(host_.c_str(), port_, to_timeval(options_.connect_timeout)));
  if (!ctx_) return "valkey " + address_ + " unreachable: out of memory";
  if (ctx_->err) {
    std::string why = ctx_->errstr;
    ctx_.reset();
    return "valkey " + address_ + " unreachable: " + why;
  }
  // A reply later than the command timeout counts as a dropped connection.
  set_timeout(options_.command_timeout);
  redisEnableKeepAlive(ctx_.get());
  if (!auth_.password.empty()) {
    // AUTH [user] password. The password is in the command only, never in
    // a message: the server's refusal (WRONGPASS ...) does not repeat it.
    Args a;
    a.add("AUTH");
    if (!auth_.user.empty()) a.add(auth_.user);
    a.add(auth_.password);
    std::string io;
    Reply r = send_once(a, io);
    if (!r) return "valkey " + address_ + " unreachable: " + io;
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string why(r->str, r->len);
      ctx_.reset();
      fatal = true;
      return "valkey " + address_ + ": authentication failed for user '" +
             (auth_.user.empty() ? std::string("default") : auth_.user) + "': " + why;
    }
  }
  return {};
}

std::string Connection::connect() {
  std::string why;
  auto pause = options_.reconnect_backoff;
  const int attempts = options_.reconnect_attempts < 1 ? 1 : options_.reconnect_attempts;
  for (int i = 0; i < attempts; ++i) {
    if (i > 0) {
      // Backoff between attempts: a restarting server gets a moment.
      std::this_thread::sleep_for(pause);
      pause *= 2;
    }
    bool fatal = false;
    why = try_connect(fatal);
    if (why.empty() || fatal) return why;
  }
  return why;
}

void Connection::set_timeout(std::chrono::milliseconds t) {
  timeout_ = t;
  if (ctx_) redisSetTimeout(ctx_.get(), to_timeval(t));
}

std::string Connection::io_error_text() const {
  // A socket timeout reaches hiredis as EAGAIN from read(2), which it
  // reports as strerror's "Resource temporarily unavailable": to a person,
  // a server that accepted the connection and said nothing (stopped, or
  // not a Valkey server) is better told so.
  const bool timed_out =
#ifdef REDIS_ERR_TIMEOUT
      ctx_->err == REDIS_ERR_TIMEOUT ||
#endif
      (ctx_->err == REDIS_ERR_IO && (std::strcmp(ctx_->errstr, std::strerror(EAGAIN)) == 0 ||
                                     std::strcmp(ctx_->errstr, std::strerror(EWOULDBLOCK)) == 0));
  if (timed_out) return "no reply within " + std::to_string(timeout_.count()) + " ms";
  return ctx_->errstr[0] ? ctx_->errstr : "connection lost";
}

Reply Connection::send_once(const Args& args, std::string& io_error) {
  io_error.clear();
  if (!ctx_) {
    io_error = "not connected";
    return nullptr;
  }
  const auto& v = args.views();
  argv_.resize(v.size());
  argvlen_.resize(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    argv_[i] = v[i].data();
    argvlen_[i] = v[i].size();
  }
  void* r = redisCommandArgv(ctx_.get(), int(v.size()), argv_.data(), argvlen_.data());
  if (r == nullptr || ctx_->err) {
    io_error = io_error_text();
    if (r) freeReplyObject(r);
    ctx_.reset();  // a context that saw an I/O error is not reusable
    return nullptr;
  }
  return Reply(static_cast<redisReply*>(r));
}

Reply Connection::command(const Args& args) {
  std::string io_error;
  if (ctx_) {
    Reply r = send_once(args, io_error);
    if (r) return r;
  }
  // Dropped (or never made): reconnect with backoff, then resend once.
  if (std::string why = connect(); !why.empty()) throw BackendError(why);
  Reply r = send_once(args, io_error);
  if (!r) throw BackendError("valkey " + address_ + " unreachable: " + io_error);
  return r;
}

std::vector<Reply> Connection::pipeline(const std::vector<Args>& commands) {
  if (!ctx_) {
    if (std::string why = connect(); !why.empty()) throw BackendError(why);
  }
  auto lost = [&](const char* what) -> BackendError {
    std::string why = ctx_ && ctx_->errstr[0] ? io_error_text() : what;
    ctx_.reset();  // a context that saw an I/O error is not reusable
    return BackendError("valkey " + address_ + " unreachable: " + why);
  };
  for (const Args& args : commands) {
    const auto& v = args.views();
    argv_.resize(v.size());
    argvlen_.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      argv_[i] = v[i].data();
      argvlen_[i] = v[i].size();
    }
    if (redisAppendCommandArgv(ctx_.get(), int(v.size()), argv_.data(), argvlen_.data()) != REDIS_OK)
      throw lost("cannot queue a command");
  }
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* r = nullptr;
    if (redisGetReply(ctx_.get(), &r) != REDIS_OK || r == nullptr) throw lost("connection lost");
    replies.emplace_back(static_cast<redisReply*>(r));
  }
  return replies;
}

Reply Connection::blocking_command(const Args& args, std::chrono::milliseconds block) {
  set_timeout(options_.command_timeout + block);
  struct Restore {
    Connection& c;
    ~Restore() { c.set_timeout(c.options_.command_timeout); }
  } restore{*this};
  if (!ctx_) {
    if (std::string why = connect(); !why.empty()) throw BackendError(why);
    set_timeout(options_.command_timeout + block);
  }
  std::string io_error;
  Reply r = send_once(args, io_error);
  if (r) return r;
  if (std::string why = connect(); !why.empty()) throw BackendError(why);
  set_timeout(options_.command_timeout + block);
  r = send_once(args, io_error);
  if (!r) throw BackendError("valkey " + address_ + " unreachable: " + io_error);
  return r;
}

// ---- the queue's route -------------------------------------------------------

std::uint16_t key_slot(std::string_view key) noexcept {
  // The hash tag: the bytes between the first '{' and the next '}', if any.
  if (const std::size_t open = key.find('{'); open != std::string_view::npos) {
    const std::size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  std::uint16_t crc = 0;  // CRC16/XMODEM: poly 0x1021, init 0, as the Cluster spec
  for (unsigned char c : key) {
    crc = std::uint16_t(crc ^ (c << 8));
    for (int i = 0; i < 8; ++i) crc = (crc & 0x8000) ? std::uint16_t((crc << 1) ^ 0x1021) : std::uint16_t(crc << 1);
  }
  return crc & 16383;
}

namespace {

std::string_view rtext(const redisReply* r) noexcept {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)
             ? std::string_view(r->str, r->len)
             : std::string_view();
}

bool starts(std::string_view s, std::string_view p) noexcept { return s.substr(0, p.size()) == p; }

bool is_redirect(const redisReply* r) noexcept {
  if (!r || r->type != REDIS_REPLY_ERROR) return false;
  const std::string_view t = rtext(r);
  // UNBLOCKED: a BLPOP on a master that just became a replica (a failover).
  return starts(t, "MOVED ") || starts(t, "ASK ") || starts(t, "TRYAGAIN") || starts(t, "CLUSTERDOWN") ||
         starts(t, "LOADING") || starts(t, "MASTERDOWN") || starts(t, "UNBLOCKED");
}

// "MOVED 3999 127.0.0.1:6381" / "ASK ...": the address, split.
bool target_of(std::string_view error, std::string& host, int& port) {
  const std::size_t sp = error.rfind(' ');
  if (sp == std::string_view::npos) return false;
  std::string_view addr = error.substr(sp + 1);
  const std::size_t colon = addr.rfind(':');
  if (colon == std::string_view::npos) return false;
  std::string_view h = addr.substr(0, colon), p = addr.substr(colon + 1);
  if (!h.empty() && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || port <= 0) return false;
  host = std::string(h);
  return true;
}

}  // namespace

Client::Client(const ValkeyUrl& url, const ValkeyOptions& options)
    : url_(url), options_(options), auth_{url.user, url.auth_password()}, slot_(key_slot(url.prefix())) {
  known_ = url_.nodes;
  if (known_.empty()) known_.push_back({url_.host, url_.port});
}

Client::~Client() = default;

const std::string& Client::address() const noexcept {
  static const std::string none = "(not connected)";
  return primary_ ? primary_->address() : none;
}

Connection& Client::node(const std::string& host, int port) {
  for (auto& n : nodes_)
    if (n->host() == host && n->port() == port) return *n;
  nodes_.push_back(std::make_unique<Connection>(host, port, options_, auth_));
  return *nodes_.back();
}

std::string Client::discover() {
  std::string why;
  // Every node we know of may answer for the topology: the seeds first, then
  // the nodes a CLUSTER SLOTS named (a seed may be the master that died).
  const std::vector<ValkeyEndpoint> ask = known_;
  for (const ValkeyEndpoint& e : ask) {
    Connection& c = node(e.host, e.port);
    if (!c.connected()) {
      if (std::string w = c.connect(); !w.empty()) {
        why = w;
        if (w.find("authentication failed") != std::string::npos) return w;  // the same on every node
        continue;
      }
    }
    Args a;
    a.add("CLUSTER").add("SLOTS");
    Reply r;
    try {
      r = c.command(a);
    } catch (const BackendError& err) {
      why = err.what();
      continue;
    }
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string_view t = rtext(r.get());
      if (t.find("cluster support disabled") != std::string_view::npos) {
        cluster_ = false;
        primary_ = &c;
        return {};
      }
      if (starts(t, "NOAUTH"))
        return "valkey " + c.address() +
               " needs a password (NOAUTH): give it in the URL (valkey://USER:PASSWORD@HOST:PORT/QUEUE) or in "
               "FAIRLANE_VALKEY_PASSWORD";
      why = "valkey " + c.address() + ": CLUSTER SLOTS: " + std::string(t);
      continue;
    }
    if (r->type != REDIS_REPLY_ARRAY) {
      why = "valkey " + c.address() + ": unexpected CLUSTER SLOTS reply";
      continue;
    }
    cluster_ = true;
    Connection* owner = nullptr;
    for (std::size_t i = 0; i < r->elements; ++i) {
      const redisReply* range = r->element[i];
      if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
      for (std::size_t k = 2; k < range->elements; ++k) {
        const redisReply* n = range->element[k];
        if (n->type != REDIS_REPLY_ARRAY || n->elements < 2 || n->element[1]->type != REDIS_REPLY_INTEGER) continue;
        std::string host(rtext(n->element[0]));
        if (host.empty() || host == "?") host = c.host();  // "unknown endpoint": the node we asked
        const int port = int(n->element[1]->integer);
        bool seen = false;
        for (const auto& e2 : known_) seen = seen || (e2.host == host && e2.port == port);
        if (!seen) known_.push_back({host, port});
        if (k == 2 && range->element[0]->integer <= slot_ && slot_ <= range->element[1]->integer)
          owner = &node(host, port);
      }
    }
    if (!owner) {
      why = "valkey " + c.address() + ": no node serves slot " + std::to_string(slot_) + " of queue '" + url_.queue +
            "' (CLUSTERDOWN)";
      continue;
    }
    if (!owner->connected()) {
      if (std::string w = owner->connect(); !w.empty()) {
        why = w;
        continue;
      }
    }
    primary_ = owner;
    return {};
  }
  return why.empty() ? "valkey: no node to ask" : why;
}

std::string Client::connect() {
  try {
    return discover();
  } catch (const BackendError& e) {
    return e.what();
  }
}

void Client::backoff() {
  ++retries_;
  std::this_thread::sleep_for(pause_);
  pause_ = std::min(pause_ * 2, std::chrono::milliseconds(100));
}

void Client::give_up(std::string_view why) {
  throw BackendError("valkey " + address() + ": " + std::string(why) + " (gave up after " +
                     std::to_string(options_.cluster_retry_budget.count()) + " ms of retries)");
}

bool Client::redirect(std::string_view t, std::string& ask_host, int& ask_port) {
  if (std::chrono::steady_clock::now() > deadline_) give_up(t);
  if (starts(t, "MOVED ")) {
    std::string host;
    int port = 0;
    if (!target_of(t, host, port)) give_up(t);
    ++redirects_;
    Connection& c = node(host, port);
    if (!c.connected())
      if (std::string w = c.connect(); !w.empty()) {
        backoff();
        if (std::string d = discover(); !d.empty()) give_up(d);
        return true;
      }
    cluster_ = true;
    primary_ = &c;
    return true;
  }
  if (starts(t, "ASK ")) {
    if (!target_of(t, ask_host, ask_port)) give_up(t);
    ++redirects_;
    return true;
  }
  // TRYAGAIN (a multi-key command mid-migration), CLUSTERDOWN (a failover
  // under way), LOADING, MASTERDOWN: the same command will run later.
  backoff();
  return true;
}

Reply Client::command(const Args& args) {
  if (!primary_)
    if (std::string why = discover(); !why.empty()) throw BackendError(why);
  deadline_ = std::chrono::steady_clock::now() + options_.cluster_retry_budget;
  pause_ = std::chrono::milliseconds(1);
  std::string ask_host;
  int ask_port = 0;
  for (;;) {
    Reply r;
    if (!ask_host.empty()) {
      // ASK: this one command goes to the importing node, flagged ASKING.
      Connection& c = node(ask_host, ask_port);
      ask_host.clear();
      if (!c.connected())
        if (std::string w = c.connect(); !w.empty()) throw BackendError(w);
      Args asking;
      asking.add("ASKING");
      std::vector<Args> two;
      two.push_back(std::move(asking));
      two.emplace_back();
      for (auto v : args.views()) two.back().add(v);
      std::vector<Reply> rs = c.pipeline(two);
      r = std::move(rs[1]);
    } else {
      try {
        r = primary_->command(args);
      } catch (const BackendError&) {
        // The node stayed away. On a Cluster its slot may have moved (a
        // failover): ask for the topology again, within the budget.
        if (!cluster_ || std::chrono::steady_clock::now() > deadline_) throw;
        backoff();
        if (std::string why = discover(); !why.empty() && std::chrono::steady_clock::now() > deadline_)
          throw BackendError(why);
        continue;
      }
    }
    if (!is_redirect(r.get())) return r;
    redirect(rtext(r.get()), ask_host, ask_port);
  }
}

Reply Client::blocking_command(const Args& args, std::chrono::milliseconds block) {
  if (!primary_)
    if (std::string why = discover(); !why.empty()) throw BackendError(why);
  Reply r;
  try {
    r = primary_->blocking_command(args, block);
  } catch (const BackendError&) {
    if (!cluster_) throw;
    if (std::string why = discover(); !why.empty()) throw BackendError(why);
    return nullptr;
  }
  if (!is_redirect(r.get())) return r;
  deadline_ = std::chrono::steady_clock::now() + options_.cluster_retry_budget;
  pause_ = std::chrono::milliseconds(1);
  std::string ask_host;
  int ask_port = 0;
  redirect(rtext(r.get()), ask_host, ask_port);  // MOVED switches the route; the caller looks again
  return nullptr;
}

std::vector<Reply> Client::pipeline(const std::vector<Args>& commands) {
  if (!primary_)
    if (std::string why = discover(); !why.empty()) throw BackendError(why);
  deadline_ = std::chrono::steady_clock::now() + options_.cluster_retry_budget;
  pause_ = std::chrono::milliseconds(1);
  std::string ask_host;
  int ask_port = 0;
  for (;;) {
    std::vector<Reply> rs;
    if (!ask_host.empty()) {
      Connection& c = node(ask_host, ask_port);
      ask_host.clear();
      if (!c.connected())
        if (std::string w = c.connect(); !w.empty()) throw BackendError(w);
      std::vector<Args> flagged;
      for (const Args& a : commands) {
        flagged.emplace_back().add("ASKING");
        flagged.emplace_back();
        for (auto v : a.views()) flagged.back().add(v);
      }
      std::vector<Reply> all = c.pipeline(flagged);
      for (std::size_t i = 1; i < all.size(); i += 2) rs.push_back(std::move(all[i]));
    } else {
      try {
        rs = primary_->pipeline(commands);
      } catch (const BackendError&) {
        if (!cluster_ || std::chrono::steady_clock::now() > deadline_) throw;
        backoff();
        (void)discover();
        continue;
      }
    }
    const redisReply* first = nullptr;
    for (const Reply& r : rs)
      if (is_redirect(r.get())) {
        first = r.get();
        break;
      }
    if (!first) return rs;
    const std::string t(rtext(first));
    redirect(t, ask_host, ask_port);
  }
}

}  // namespace fairlane::valkey
