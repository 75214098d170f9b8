// fairlane_cycle_report: instructions and locked read-modify-writes per
// unit of work, from callgrind dumps taken with --dump-instr=yes.
//
//   fairlane_cycle_report [--top K] [--json FILE] [--budget INSTR,RMW] [--check] [--inlined K] DUMP...
//
// Each dump is one region of a program that names it in the dump's trigger
// (CALLGRIND_DUMP_STATS_AT("cycle n=20000")): the region's name, then
// key=value words. n is the number of units the region ran (cycles, probe
// iterations); "bracketed" marks a region collected only between pairs of
// toggles, which has the per-pair cost of the region named "toggle" taken
// off; rmw=X (and instr=Y) are expectations that --check verifies exactly
// (the probe's known counts), and so is inl=NAME:X (X instructions per unit
// inside the function NAME, inlined or not).
//
// How the count is made. callgrind gives every executed instruction's
// address (relative to its object: the ELF virtual address objdump prints)
// and how many times it ran. The report disassembles each object that ran
// (objdump -d) and sums, over the instructions that are locked
// read-modify-writes, their execution counts. Locked RMWs are, on x86-64:
// every instruction with a lock prefix (cmpxchg16b included, once), every
// xchg with a memory operand (implicitly locked) and every mfence (a store
// plus a full fence costs what an RMW does). Instructions per unit is the
// region's Ir total over n.
//
// --inlined K: the instructions of each operation by function, counting the
// functions the compiler inlined. With link-time inlining the whole
// operation is one or two symbols, so the self cost per symbol says little;
// llvm-symbolizer --inlining gives each instruction's chain of inlined
// functions from the debug information, and each function of the chain is
// charged the instruction (inclusive), the innermost one also as its own
// (self). (Not GNU addr2line -i: binutils 2.40 prints the outer symbol's
// name in place of the innermost inlined function's.) Needs a build with -g
// (the `prof` preset) and llvm-symbolizer (Debian's llvm); objects without
// debug information are named and counted under their symbols.
//
// Exit status: 0; 1 when --check finds a count that differs from its
// expectation, or a dump cannot be read; 2 on a usage error. Without
// llvm-symbolizer, inl= expectations are not checked (a note says so),
// unless FAIRLANE_REQUIRE_SERVERS is set: then they fail.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <unistd.h>

#include "require_servers.hpp"  // tests/common

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace {

// ---- the callgrind dump ------------------------------------------------------

struct Cost {
  std::uint64_t ir = 0;
  std::uint32_t fn = 0;    // function name id
  std::uint32_t file = 0;  // source file id (the inlined file where there is one)
  std::uint64_t line = 0;
};

struct Dump {
  std::string path;
  std::string trigger;                 // the client request's text
  std::uint64_t summary = 0;           // callgrind's own total (Ir)
  std::unordered_map<std::uint32_t, std::string> obs, files, fns;
  // (object id, address) -> cost
  std::map<std::pair<std::uint32_t, std::uint64_t>, Cost> instr;
};

bool parse_number(std::string_view s, std::uint64_t& out) {
  if (s.empty()) return false;
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  std::uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return false;
    v = v * std::uint64_t(base) + std::uint64_t(d);
  }
  out = v;
  return true;
}

// A position with callgrind's subposition compression: "*" is the last
// value, "+N" / "-N" relative to it, anything else absolute.
bool parse_position(std::string_view tok, std::uint64_t& last) {
  if (tok == "*") return true;
  std::uint64_t v = 0;
  if (tok[0] == '+' || tok[0] == '-') {
    if (!parse_number(tok.substr(1), v)) return false;
    last = tok[0] == '+' ? last + v : last - v;
    return true;
  }
  if (!parse_number(tok, v)) return false;
  last = v;
  return true;
}

// "(id) name" defines id; "(id)" refers to it; a bare name (no compression)
// gets an id of its own.
std::uint32_t name_ref(std::string_view rest, std::unordered_map<std::uint32_t, std::string>& table,
                       std::uint32_t& fresh) {
  if (!rest.empty() && rest[0] == '(') {
    const auto close = rest.find(')');
    std::uint64_t id = 0;
    if (close != std::string_view::npos && parse_number(rest.substr(1, close - 1), id)) {
      std::string_view name = rest.substr(close + 1);
      while (!name.empty() && name[0] == ' ') name.remove_prefix(1);
      if (!name.empty()) table[std::uint32_t(id)] = std::string(name);
      return std::uint32_t(id);
    }
  }
  const std::uint32_t id = 0x80000000u + fresh++;
  table[id] = std::string(rest);
  return id;
}

std::vector<std::string_view> split_ws(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

bool read_dump(const std::string& path, Dump& d, std::string& error) {
  std::ifstream in(path);
  if (!in) { error = "cannot open " + path; return false; }
  d.path = path;
  std::string line;
  std::size_t npos = 0;      // positions per cost line
  bool have_instr = false;
  int ir_col = -1;           // which event column is Ir
  std::uint32_t ob = 0, file = 0, fn = 0, fresh = 0;
  std::uint64_t last_pos[2] = {0, 0};
  bool skip_next_cost = false;  // the line after calls= is a call's inclusive cost
  while (std::getline(in, line)) {
    std::string_view l = line;
    if (l.empty() || l[0] == '#') continue;
    const char c0 = l[0];
    const bool cost_line = (c0 >= '0' && c0 <= '9') || c0 == '+' || c0 == '-' || c0 == '*';
    if (cost_line) {
      if (npos == 0 || ir_col < 0) { error = path + ": cost line before positions/events"; return false; }
      const auto toks = split_ws(l);
      if (toks.size() < npos) { error = path + ": short cost line: " + line; return false; }
      // A call's cost line does not move the last position (callgrind's
      // writer compresses against ordinary cost lines only): parsed apart.
      std::uint64_t scratch[2] = {last_pos[0], last_pos[1]};
      std::uint64_t* pos = skip_next_cost ? scratch : last_pos;
      for (std::size_t p = 0; p < npos; ++p)
        if (!parse_position(toks[p], pos[p])) { error = path + ": bad position: " + line; return false; }
      if (skip_next_cost) { skip_next_cost = false; continue; }
      std::uint64_t ir = 0;
      const std::size_t col = npos + std::size_t(ir_col);
      if (col < toks.size() && !parse_number(toks[col], ir)) { error = path + ": bad cost: " + line; return false; }
      if (ir == 0) continue;
      Cost& cst = d.instr[{ob, last_pos[0]}];
      cst.ir += ir;
      cst.fn = fn;
      cst.file = file;
      cst.line = npos > 1 ? last_pos[1] : 0;
      continue;
    }
    const auto eq = l.find('=');
    const auto colon = l.find(':');
    if (eq != std::string_view::npos && (colon == std::string_view::npos || eq < colon)) {
      const std::string_view key = l.substr(0, eq), rest = l.substr(eq + 1);
      if (key == "ob") ob = name_ref(rest, d.obs, fresh);
      else if (key == "fl" || key == "fi" || key == "fe") file = name_ref(rest, d.files, fresh);
      else if (key == "fn") fn = name_ref(rest, d.fns, fresh);
      else if (key == "cob") name_ref(rest, d.obs, fresh);
      else if (key == "cfi" || key == "cfl") name_ref(rest, d.files, fresh);
      else if (key == "cfn") name_ref(rest, d.fns, fresh);
      else if (key == "calls") skip_next_cost = true;
      else if (key == "jump" || key == "jcnd") {
        // Only with --collect-jumps, which count.sh does not use (each is
        // followed by a line of a position alone): not read.
      }
      continue;
    }
    if (colon != std::string_view::npos) {
      const std::string_view key = l.substr(0, colon);
      std::string_view rest = l.substr(colon + 1);
      while (!rest.empty() && rest[0] == ' ') rest.remove_prefix(1);
      if (key == "positions") {
        const auto p = split_ws(rest);
        npos = p.size();
        have_instr = !p.empty() && p[0] == "instr";
      } else if (key == "events") {
        const auto ev = split_ws(rest);
        for (std::size_t i = 0; i < ev.size(); ++i)
          if (ev[i] == "Ir") ir_col = int(i);
      } else if (key == "summary" || key == "totals") {
        const auto v = split_ws(rest);
        if (ir_col >= 0 && std::size_t(ir_col) < v.size()) parse_number(v[std::size_t(ir_col)], d.summary);
      } else if (key == "desc") {
        constexpr std::string_view kTrig = "Trigger: Client Request: ";
        if (rest.rfind(kTrig, 0) == 0) d.trigger = std::string(rest.substr(kTrig.size()));
        else if (rest.rfind("Trigger: ", 0) == 0 && d.trigger.empty()) d.trigger = std::string(rest.substr(9));
      }
    }
  }
  if (npos > 0 && !have_instr) {
    error = path + ": no instruction positions (run callgrind with --dump-instr=yes)";
    return false;
  }
  return true;
}

// ---- disassembly ---------------------------------------------------------------

enum class Rmw { none, lock, xchg, mfence };

struct Insn {
  std::string text;
  Rmw rmw = Rmw::none;
};

// Classifies one line of objdump's AT&T text ("lock cmpxchg %rdx,(%rdi)").
Rmw classify(std::string_view text) {
  static const std::unordered_set<std::string_view> kPrefixes = {
      "lock", "rep", "repz", "repe", "repnz", "repne", "data16", "data32", "addr16", "addr32", "notrack",
      "bnd", "xacquire", "xrelease", "cs", "ds", "es", "fs", "gs", "ss", "rex", "rex.W", "{vex}", "{evex}"};
  const auto toks = split_ws(text);
  std::size_t i = 0;
  bool lock = false;
  for (; i < toks.size() && kPrefixes.count(toks[i]); ++i) lock |= toks[i] == "lock";
  if (lock) return Rmw::lock;
  if (i >= toks.size()) return Rmw::none;
  const std::string_view m = toks[i];
  if (m == "mfence") return Rmw::mfence;
  if (m.rfind("xchg", 0) == 0) {
    // xchg with a memory operand is implicitly locked; register forms
    // (xchg %ax,%ax is a nop; valgrind's client requests use xchg %rbx,%rbx)
    // are not. A memory operand is any operand that is not a register.
    std::string ops;
    for (std::size_t k = i + 1; k < toks.size(); ++k) ops += toks[k];
    std::size_t start = 0;
    while (start <= ops.size()) {
      const auto comma = ops.find(',', start);
      const std::string_view op = std::string_view(ops).substr(start, comma == std::string::npos ? std::string::npos
                                                                                                 : comma - start);
      if (!op.empty() && op[0] != '%') return Rmw::xchg;
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return Rmw::none;
}

// The instructions of `object` at `wanted` addresses.
bool disassemble(const std::string& objdump, const std::string& object, const std::unordered_set<std::uint64_t>& wanted,
                 std::unordered_map<std::uint64_t, Insn>& out, std::string& error) {
  const std::string cmd = objdump + " -d -w --no-show-raw-insn '" + object + "' 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) { error = "cannot run " + cmd; return false; }
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) {
    std::string_view l = buf;
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.remove_suffix(1);
    std::size_t i = 0;
    while (i < l.size() && l[i] == ' ') ++i;
    const auto colon = l.find(':', i);
    if (colon == std::string_view::npos || colon + 1 >= l.size() || l[colon + 1] != '\t') continue;
    std::uint64_t addr = 0;
    std::string hex = "0x" + std::string(l.substr(i, colon - i));
    if (!parse_number(hex, addr)) continue;
    if (!wanted.count(addr)) continue;
    std::string_view text = l.substr(colon + 2);
    const auto hash = text.find('#');  // objdump's "# 1234 <sym>" comments
    if (hash != std::string_view::npos) text = text.substr(0, hash);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
    Insn ins;
    ins.text = std::string(text);
    for (auto& ch : ins.text)
      if (ch == '\t') ch = ' ';
    ins.rmw = classify(ins.text);
    out[addr] = std::move(ins);
  }
  const int rc = pclose(p);
  if (rc != 0 && out.empty()) { error = "objdump failed on " + object; return false; }
  return true;
}

// ---- inlined functions -----------------------------------------------------------

// A function name as llvm-symbolizer --demangle prints it, without its
// parameter list or clone suffixes ("ns::f(int) const (.constprop.0)" and
// GNU's "[clone .cold]" -> "ns::f"), so that its inlined copies, which the
// symbolizer names without parameters, and its out-of-line body count as
// one. The parentheses of an operator() are its name's. A name without a
// scope (a function of internal linkage, which the debug information names
// alone) gets its source file, so that two files' statics stay apart.
std::string function_key(std::string_view name, std::string_view file = {}) {
  std::string_view n = name;
  for (bool more = true; more;) {
    more = false;
    if (n.size() > 1 && n.back() == ']') {
      if (const auto open = n.rfind(" [clone "); open != std::string_view::npos) {
        n = n.substr(0, open);
        more = true;
      }
    } else if (n.size() > 1 && n.back() == ')') {
      if (const auto open = n.rfind(" (."); open != std::string_view::npos &&
                                             n.substr(open).find(' ', 1) == std::string_view::npos) {
        n = n.substr(0, open);
        more = true;
      }
    }
  }
  if (n.size() >= 6 && n.substr(n.size() - 6) == " const") n.remove_suffix(6);
  if (!n.empty() && n.back() == ')') {
    int depth = 0;
    for (std::size_t i = n.size(); i-- > 0;) {
      if (n[i] == ')') ++depth;
      else if (n[i] == '(' && --depth == 0) {
        const std::string_view before = n.substr(0, i);
        const bool call_operator = before.size() >= 8 && before.substr(before.size() - 8) == "operator";
        if (!call_operator) n = before;
        break;
      }
    }
  }
  std::string key(n);
  if (!file.empty() && key.find("::") == std::string::npos) {
    // "dir/file.cpp:12" (perhaps ":12:5", " (discriminator 2)"): file.cpp.
    std::string_view path = file;
    if (const auto slash = path.rfind('/'); slash != std::string_view::npos) path.remove_prefix(slash + 1);
    if (const auto colon = path.find(':'); colon != std::string_view::npos) path = path.substr(0, colon);
    if (!path.empty() && path != "??") key += " (" + std::string(path) + ")";
  }
  return key;
}

// Each address's chain of functions, innermost first (llvm-symbolizer
// --inlining, GNU output: an address line, then a function line and a
// file:line line per frame). False when the symbolizer cannot run or fails,
// or when no address has a source line: the object has no debug information
// (the symbolizer then names symbols only, which is no breakdown).
bool inline_chains(const std::string& symbolizer, const std::string& object, const std::unordered_set<std::uint64_t>& addrs,
                   std::unordered_map<std::uint64_t, std::vector<std::string>>& out, std::string& error) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/fairlane-cycle-addrs.XXXXXX";
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) { error = "cannot make a temporary file in " + tmpl; return false; }
  {
    std::string text;
    for (auto a : addrs) text += fmt::format("0x{:x}\n", a);
    const bool ok = write(fd, text.data(), text.size()) == ssize_t(text.size());
    close(fd);
    if (!ok) { unlink(tmpl.c_str()); error = "cannot write " + tmpl; return false; }
  }
  const std::string cmd = "'" + symbolizer + "' --obj='" + object +
                          "' --inlining --demangle --output-style=GNU -a -f < '" + tmpl + "' 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) { unlink(tmpl.c_str()); error = "cannot run " + cmd; return false; }
  char buf[8192];
  std::uint64_t cur = 0;
  bool have = false, lines = false;
  std::string fn;   // the frame's function line, until its file:line line
  int field = 0;    // 0: a function line next, 1: its file:line
  while (std::fgets(buf, sizeof buf, p)) {
    std::string_view l = buf;
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.remove_suffix(1);
    if (l.empty()) continue;
    // An address line starts each answer (and puts us back in step).
    std::uint64_t a = 0;
    if (l.rfind("0x", 0) == 0 && l.find(' ') == std::string_view::npos && parse_number(l, a)) {
      cur = a;
      have = true;
      field = 0;
      out[cur];
      continue;
    }
    if (!have) continue;
    if (field == 0) {
      fn = std::string(l);
    } else {
      if (l.rfind("??", 0) != 0) lines = true;
      if (fn != "??") out[cur].push_back(function_key(fn, l));
    }
    field ^= 1;
  }
  const int rc = pclose(p);
  unlink(tmpl.c_str());
  if (rc != 0) { error = symbolizer + " failed on " + object; out.clear(); return false; }
  if (!lines) { error = "no debug information (build with -g: the prof preset)"; out.clear(); return false; }
  return true;
}

// ---- the analysis --------------------------------------------------------------

struct Region {
  std::string name;
  std::map<std::string, std::string> kv;
  bool bracketed = false;
  std::uint64_t units = 0;
  std::uint64_t ir = 0, rmw = 0;
  std::uint64_t unresolved_ir = 0;  // instructions in objects that could not be disassembled
  double overhead_per_unit = 0;     // bracketed: the toggle pair taken off
  struct Fn {
    std::string name, object;
    std::uint64_t ir = 0, rmw = 0;
  };
  std::vector<Fn> fns;
  struct Site {
    std::string fn, object, insn, file;
    std::uint64_t line = 0, count = 0, addr = 0;
  };
  std::vector<Site> sites;
  struct Inlined {
    std::string name;
    std::uint64_t incl = 0, self = 0;
  };
  std::vector<Inlined> inlined;  // --inlined: by function, inlined ones included
  std::optional<double> expect_rmw, expect_instr;
  std::map<std::string, double> expect_inl;  // inl=NAME:X

  double ir_per_unit() const { return units ? double(ir) / double(units) - overhead_per_unit : 0; }
  double rmw_per_unit() const { return units ? double(rmw) / double(units) : 0; }
};

std::string basename_of(const std::string& p) {
  const auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::string shorten(std::string s, std::size_t width) {
  if (s.size() <= width) return s;
  return s.substr(0, width - 3) + "...";
}

void parse_trigger(Region& r, const std::string& trigger) {
  const auto words = split_ws(trigger);
  if (words.empty()) { r.name = "(unnamed)"; return; }
  r.name = std::string(words[0]);
  for (std::size_t i = 1; i < words.size(); ++i) {
    const auto eq = words[i].find('=');
    if (eq == std::string_view::npos) {
      if (words[i] == "bracketed") r.bracketed = true;
      continue;
    }
    if (words[i].substr(0, eq) == "inl") {
      const std::string_view v = words[i].substr(eq + 1);
      const auto colon = v.rfind(':');
      if (colon != std::string_view::npos && colon > 0)
        r.expect_inl[std::string(v.substr(0, colon))] = std::strtod(std::string(v.substr(colon + 1)).c_str(), nullptr);
      continue;
    }
    r.kv[std::string(words[i].substr(0, eq))] = std::string(words[i].substr(eq + 1));
  }
  if (auto it = r.kv.find("n"); it != r.kv.end()) r.units = std::strtoull(it->second.c_str(), nullptr, 10);
  if (auto it = r.kv.find("rmw"); it != r.kv.end()) r.expect_rmw = std::strtod(it->second.c_str(), nullptr);
  if (auto it = r.kv.find("instr"); it != r.kv.end()) r.expect_instr = std::strtod(it->second.c_str(), nullptr);
}

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: fairlane_cycle_report [--top K] [--json FILE] [--budget INSTR,RMW] [--check] [--objdump PATH] "
               "[--inlined K] [--symbolizer PATH] DUMP...\n"
               "  DUMP: callgrind.out files written with --dump-instr=yes, one region each\n"
               "  --budget   judge the region 'cycle' against a budget (instructions, locked RMWs per unit)\n"
               "  --check    exit 1 if a region's rmw=/instr=/inl= expectation is not met exactly\n"
               "  --inlined  each operation's K costliest functions, inlined ones included (needs -g and\n"
               "             llvm-symbolizer)\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t top = 12;
  std::string json_path, objdump = "objdump", symbolizer;
  std::size_t inlined_top = 0;
  std::optional<std::pair<double, double>> budget;
  bool check = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--top") top = std::strtoul(val().c_str(), nullptr, 10);
    else if (a == "--json") json_path = val();
    else if (a == "--objdump") objdump = val();
    else if (a == "--symbolizer") symbolizer = val();
    else if (a == "--inlined") inlined_top = std::strtoul(val().c_str(), nullptr, 10);
    else if (a == "--check") check = true;
    else if (a == "--budget") {
      const std::string v = val();
      const auto comma = v.find(',');
      if (comma == std::string::npos) usage();
      budget = std::make_pair(std::strtod(v.c_str(), nullptr), std::strtod(v.c_str() + comma + 1, nullptr));
    } else if (a == "-h" || a == "--help") usage();
    else if (!a.empty() && a[0] == '-') usage();
    else files.emplace_back(a);
  }
  if (files.empty()) usage();

  std::vector<Dump> dumps;
  for (auto& f : files) {
    Dump d;
    std::string e;
    if (!read_dump(f, d, e)) {
      std::fprintf(stderr, "fairlane_cycle_report: %s\n", e.c_str());
      return 1;
    }
    if (d.trigger.empty() || d.trigger == "Program termination") continue;  // not a region
    dumps.push_back(std::move(d));
  }
  if (dumps.empty()) {
    std::fprintf(stderr, "fairlane_cycle_report: no region dumps among the files (CALLGRIND_DUMP_STATS_AT)\n");
    return 1;
  }

  // Disassemble each object once, for the addresses any dump ran there.
  std::map<std::string, std::unordered_set<std::uint64_t>> wanted;
  for (auto& d : dumps)
    for (auto& [key, cost] : d.instr) wanted[d.obs[key.first]].insert(key.second);
  std::map<std::string, std::unordered_map<std::uint64_t, Insn>> code;
  std::map<std::string, std::string> unreadable;
  for (auto& [obj, addrs] : wanted) {
    std::string e;
    auto& m = code[obj];
    if (obj.empty() || obj[0] != '/' || !disassemble(objdump, obj, addrs, m, e))
      unreadable[obj] = e.empty() ? "not a file" : e;
  }
  // Inline chains, where the breakdown or an inl= expectation wants them.
  bool want_chains = inlined_top > 0;
  for (auto& d : dumps) want_chains |= d.trigger.find(" inl=") != std::string::npos;
  std::map<std::string, std::unordered_map<std::uint64_t, std::vector<std::string>>> chains;
  std::map<std::string, std::string> no_chains;  // object -> why
  if (want_chains && symbolizer.empty()) {
    for (const char* name : {"llvm-symbolizer", "llvm-symbolizer-14", "llvm-symbolizer-15", "llvm-symbolizer-16"})
      if (std::system(fmt::format("command -v {} >/dev/null 2>&1", name).c_str()) == 0) {
        symbolizer = name;
        break;
      }
    if (symbolizer.empty())
      std::fprintf(stderr, "fairlane_cycle_report: no llvm-symbolizer (apt-get install llvm): functions are "
                           "counted under their symbols, not by the functions inlined into them\n");
  }
  if (want_chains && !symbolizer.empty())
    for (auto& [obj, addrs] : wanted) {
      std::string e;
      if (obj.empty() || obj[0] != '/' || !inline_chains(symbolizer, obj, addrs, chains[obj], e)) {
        chains.erase(obj);
        no_chains[obj] = e.empty() ? "not a file" : e;
      }
    }

  std::vector<Region> regions;
  for (auto& d : dumps) {
    Region r;
    parse_trigger(r, d.trigger);
    std::map<std::pair<std::string, std::string>, Region::Fn> fns;
    std::map<std::pair<std::string, std::uint64_t>, Region::Site> sites;  // (object, address)
    std::unordered_map<std::string, Region::Inlined> inl;
    for (auto& [key, cost] : d.instr) {
      const std::string& obj = d.obs[key.first];
      const std::string& fn = d.fns[cost.fn];
      r.ir += cost.ir;
      if (want_chains) {
        // Each function of the instruction's chain once (a function inlined
        // into itself, through recursion or a template, is charged once);
        // without debug information, the symbol callgrind names.
        std::vector<std::string> chain;
        if (auto oc = chains.find(obj); oc != chains.end())
          if (auto it = oc->second.find(key.second); it != oc->second.end()) chain = it->second;
        if (chain.empty()) chain.push_back(function_key(fn));
        for (std::size_t k = 0; k < chain.size(); ++k) {
          if (std::find(chain.begin(), chain.begin() + std::ptrdiff_t(k), chain[k]) != chain.begin() + std::ptrdiff_t(k))
            continue;
          auto& e = inl[chain[k]];
          e.name = chain[k];
          e.incl += cost.ir;
          if (k == 0) e.self += cost.ir;
        }
      }
      auto& f = fns[{obj, fn}];
      f.name = fn;
      f.object = obj;
      f.ir += cost.ir;
      const auto& m = code[obj];
      const auto it = m.find(key.second);
      if (it == m.end()) {
        r.unresolved_ir += cost.ir;
        continue;
      }
      if (it->second.rmw == Rmw::none) continue;
      r.rmw += cost.ir;
      f.rmw += cost.ir;
      auto& site = sites[{obj, key.second}];
      site = {fn, obj, it->second.text, d.files[cost.file], cost.line, site.count + cost.ir, key.second};
    }
    for (auto& [k, f] : fns) r.fns.push_back(f);
    for (auto& [k, site] : sites) r.sites.push_back(site);
    for (auto& [k, e] : inl) r.inlined.push_back(e);
    std::sort(r.inlined.begin(), r.inlined.end(),
              [](auto& a, auto& b) { return a.incl != b.incl ? a.incl > b.incl : a.name < b.name; });
    std::sort(r.sites.begin(), r.sites.end(), [](auto& a, auto& b) { return a.count > b.count; });
    if (d.summary != 0 && d.summary != r.ir)
      std::fprintf(stderr, "fairlane_cycle_report: %s: instructions summed %llu, callgrind's summary %llu\n",
                   d.path.c_str(), static_cast<unsigned long long>(r.ir), static_cast<unsigned long long>(d.summary));
    regions.push_back(std::move(r));
  }
  // The toggle pair's own cost comes off the bracketed regions.
  double toggle = 0;
  for (auto& r : regions)
    if (r.name == "toggle" && r.units) toggle = double(r.ir) / double(r.units);
  for (auto& r : regions)
    if (r.bracketed) r.overhead_per_unit = toggle;

  // ---- the table
  const Region* cycle = nullptr;
  for (auto& r : regions)
    if (r.name == "cycle") cycle = &r;
  fmt::print("{:<12} {:>9} {:>14} {:>14}   {}\n", "region", "units", "instr/unit", "locked RMW/unit", "");
  for (auto& r : regions) {
    if (r.name == "toggle") continue;
    std::string note;
    if (r.bracketed) note = fmt::format("(collected around the call only, less {:.1f} for the toggles)", toggle);
    if (r.unresolved_ir) note += fmt::format(" [{:.1f} instr/unit not disassembled]", double(r.unresolved_ir) / double(r.units));
    fmt::print("{:<12} {:>9} {:>14.1f} {:>14.2f}   {}\n", r.name, r.units, r.ir_per_unit(), r.rmw_per_unit(), note);
  }
  double split_ir = 0, split_rmw = 0;
  int split_n = 0;
  for (auto& r : regions)
    if (r.bracketed) { split_ir += r.ir_per_unit(); split_rmw += r.rmw_per_unit(); ++split_n; }
  if (cycle && split_n > 0)
    fmt::print("{:<12} {:>9} {:>14.1f} {:>14.2f}   (sum of the calls; the cycle's rest is the loop itself)\n",
               "  calls", "", split_ir, split_rmw);

  bool budget_met = true;
  if (budget && cycle) {
    const bool ins_ok = cycle->ir_per_unit() <= budget->first, rmw_ok = cycle->rmw_per_unit() <= budget->second;
    budget_met = ins_ok && rmw_ok;
    fmt::print("\nbudget per cycle: instructions {:.0f} <= {:.0f}: {}; locked RMWs {:.2f} <= {:.0f}: {}\n",
               cycle->ir_per_unit(), budget->first, ins_ok ? "met" : "MISSED", cycle->rmw_per_unit(), budget->second,
               rmw_ok ? "met" : "MISSED");
  }

  const Region* main_region = cycle ? cycle : &regions.front();
  {
    auto fns = main_region->fns;
    std::sort(fns.begin(), fns.end(), [](auto& a, auto& b) { return a.ir > b.ir; });
    fmt::print("\ntop functions of '{}' by instructions (self, per unit):\n", main_region->name);
    for (std::size_t i = 0; i < fns.size() && i < top; ++i) {
      const double per = double(fns[i].ir) / double(main_region->units);
      std::string obj = basename_of(fns[i].object);
      fmt::print("  {:>9.1f} {:>5.1f}%  {:>6.2f} RMW  {}  [{}]\n", per, 100.0 * double(fns[i].ir) / double(main_region->ir),
                 double(fns[i].rmw) / double(main_region->units), shorten(fns[i].name, 90), obj);
    }
    std::sort(fns.begin(), fns.end(), [](auto& a, auto& b) { return a.rmw > b.rmw; });
    fmt::print("\ntop functions of '{}' by locked RMWs (per unit):\n", main_region->name);
    for (std::size_t i = 0; i < fns.size() && i < top && fns[i].rmw > 0; ++i)
      fmt::print("  {:>6.2f}  {}  [{}]\n", double(fns[i].rmw) / double(main_region->units),
                 shorten(fns[i].name, 100), basename_of(fns[i].object));
  }
  // Every locked RMW, by the region that isolates its call where there is one.
  bool any_split = false;
  for (auto& r : regions) any_split |= r.bracketed;
  fmt::print("\nlocked RMWs, site by site (per unit){}:\n", any_split ? ", by operation" : "");
  for (auto& r : regions) {
    if (r.name == "toggle" || (any_split && !r.bracketed)) continue;
    if (r.sites.empty()) { fmt::print("  {:<10} none\n", r.name); continue; }
    for (auto& s : r.sites) {
      const double per = double(s.count) / double(r.units);
      if (per < 0.005) continue;
      // Source line where the object has debug information, else the address
      // objdump -d shows.
      std::string where = s.file.empty() || s.file == "???" ? fmt::format("{}+0x{:x}", basename_of(s.object), s.addr)
                                                            : fmt::format("{}:{}", s.file, s.line);
      fmt::print("  {:<10} {:>6.2f}  {:<34} {}  {}\n", r.name, per, shorten(s.insn, 34), shorten(s.fn, 60), where);
    }
  }
  if (inlined_top > 0) {
    fmt::print("\ninstructions by function, inlined ones included (per unit: inclusive = the function's own and what "
               "was inlined into it, not its out-of-line callees; self = its own){}:\n",
               any_split ? ", by operation" : "");
    if (symbolizer.empty())
      fmt::print("  no llvm-symbolizer (apt-get install llvm): counted by symbol, not by inlined function\n");
    for (auto& r : regions) {
      if (r.name == "toggle" || (any_split && !r.bracketed) || r.units == 0) continue;
      if (r.bracketed)
        fmt::print("  {}: {:.1f} a unit (the rows include the {:.1f} of the toggles around the call)\n", r.name,
                   r.ir_per_unit(), r.overhead_per_unit);
      else
        fmt::print("  {}: {:.1f} a unit\n", r.name, r.ir_per_unit());
      for (std::size_t i = 0; i < r.inlined.size() && i < inlined_top; ++i)
        fmt::print("    {:>8.1f} {:>8.1f}  {}\n", double(r.inlined[i].incl) / double(r.units),
                   double(r.inlined[i].self) / double(r.units), shorten(r.inlined[i].name, 96));
    }
    for (auto& [obj, why] : no_chains)
      fmt::print("  no inlined functions for {}: {}; its instructions are under their symbols\n", basename_of(obj), why);
  }
  // The clock is the one thing valgrind changes: it has no vDSO, so
  // clock_gettime is a system call whose kernel side is not counted.
  for (auto& f : main_region->fns)
    if (f.name.rfind("clock_gettime", 0) == 0 || f.name.rfind("__clock_gettime", 0) == 0) {
      fmt::print("\nnote: {} runs {:.1f} instructions per unit here: under valgrind every clock read is a system call "
                 "(its kernel side uncounted); natively the vDSO reads the clock in user space (tens of ns a read), "
                 "which this count does not see\n",
                 f.name, double(f.ir) / double(main_region->units));
      break;
    }
  for (auto& [obj, why] : unreadable) {
    if (wanted[obj].empty()) continue;
    fmt::print("\nnot disassembled: {} ({}): its instructions are counted, its RMWs are not\n", obj, why);
  }

  // ---- expectations
  int bad = 0;
  for (auto& r : regions) {
    if (r.expect_rmw && std::abs(r.rmw_per_unit() - *r.expect_rmw) > 1e-9) {
      std::fprintf(stderr, "check: region %s: %.4f locked RMWs per unit, expected %.4f\n", r.name.c_str(),
                   r.rmw_per_unit(), *r.expect_rmw);
      ++bad;
    }
    if (r.expect_instr && std::abs(r.ir_per_unit() - *r.expect_instr) > 1e-9) {
      std::fprintf(stderr, "check: region %s: %.4f instructions per unit, expected %.4f\n", r.name.c_str(),
                   r.ir_per_unit(), *r.expect_instr);
      ++bad;
    }
    if (!r.expect_inl.empty() && symbolizer.empty()) {
      // Only where every program is required does a missing one fail the check.
      const bool required = fairlane::test::servers_required();
      std::fprintf(stderr, "check: region %s: inl= expectations %s: no llvm-symbolizer\n", r.name.c_str(),
                   required ? "failed" : "not checked");
      bad += required;
      continue;
    }
    for (auto& [name, want] : r.expect_inl) {
      double got = 0;
      for (auto& e : r.inlined)
        if (e.name == name) got = r.units ? double(e.incl) / double(r.units) : 0;
      if (std::abs(got - want) > 1e-9) {
        std::fprintf(stderr, "check: region %s: %.4f instructions per unit in %s, expected %.4f\n", r.name.c_str(), got,
                     name.c_str(), want);
        ++bad;
      }
    }
  }
  if (check) {
    int expectations = 0;
    for (auto& r : regions)
      expectations += r.expect_rmw.has_value() + r.expect_instr.has_value() + (symbolizer.empty() ? 0 : int(r.expect_inl.size()));
    if (expectations == 0) { std::fprintf(stderr, "check: no region carries an expectation\n"); ++bad; }
    else if (bad == 0) std::printf("\ncheck: %d expectation(s) met exactly\n", expectations);
  }

  // ---- JSON
  if (!json_path.empty()) {
    using nlohmann::json;
    json j;
    j["tool"] = "callgrind --dump-instr=yes; locked RMW = lock prefix, xchg with memory, mfence";
    json rs = json::object();
    for (auto& r : regions) {
      json e{{"units", r.units},
             {"instructions", r.ir},
             {"locked_rmw", r.rmw},
             {"instructions_per_unit", r.ir_per_unit()},
             {"locked_rmw_per_unit", r.rmw_per_unit()},
             {"bracketed", r.bracketed},
             {"toggle_overhead_per_unit", r.overhead_per_unit},
             {"unresolved_instructions", r.unresolved_ir}};
      auto fns = r.fns;
      std::sort(fns.begin(), fns.end(), [](auto& a, auto& b) { return a.ir > b.ir; });
      json fj = json::array();
      for (std::size_t i = 0; i < fns.size() && i < 40; ++i)
        fj.push_back({{"function", fns[i].name},
                      {"object", fns[i].object},
                      {"instructions_per_unit", double(fns[i].ir) / double(std::max<std::uint64_t>(r.units, 1))},
                      {"locked_rmw_per_unit", double(fns[i].rmw) / double(std::max<std::uint64_t>(r.units, 1))}});
      e["functions"] = fj;
      json sj = json::array();
      for (auto& s : r.sites)
        sj.push_back({{"function", s.fn},
                      {"object", s.object},
                      {"instruction", s.insn},
                      {"file", s.file},
                      {"line", s.line},
                      {"address", fmt::format("0x{:x}", s.addr)},
                      {"per_unit", double(s.count) / double(std::max<std::uint64_t>(r.units, 1))}});
      e["rmw_sites"] = sj;
      if (!r.inlined.empty()) {
        json ij = json::array();
        for (std::size_t i = 0; i < r.inlined.size() && i < 60; ++i)
          ij.push_back({{"function", r.inlined[i].name},
                        {"inclusive_per_unit", double(r.inlined[i].incl) / double(std::max<std::uint64_t>(r.units, 1))},
                        {"self_per_unit", double(r.inlined[i].self) / double(std::max<std::uint64_t>(r.units, 1))}});
        e["inlined"] = ij;
      }
      rs[r.name] = e;
    }
    j["regions"] = rs;
    if (cycle) {
      j["cycle"] = {{"cycles", cycle->units},
                    {"instructions_per_cycle", cycle->ir_per_unit()},
                    {"locked_rmw_per_cycle", cycle->rmw_per_unit()}};
      if (budget)
        j["cycle"]["budget"] = {{"instructions", budget->first}, {"locked_rmw", budget->second}, {"met", budget_met}};
    }
    std::ofstream out(json_path);
    if (!out) {
      std::fprintf(stderr, "fairlane_cycle_report: cannot write %s\n", json_path.c_str());
      return 1;
    }
    out << j.dump(2) << "\n";
  }
  return bad && check ? 1 : 0;
}
