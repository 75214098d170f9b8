#include "control.hpp"

#include "workload.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

namespace fairlane::bench {

namespace {
std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }
}  // namespace

Control& Control::operator=(Control&& o) noexcept {
  if (this != &o) {
    release();
    base_ = o.base_;
    size_ = o.size_;
    name_ = std::move(o.name_);
    owner_ = o.owner_;
    o.base_ = nullptr;
    o.size_ = 0;
    o.owner_ = false;
  }
  return *this;
}

void Control::release() noexcept {
  if (base_) munmap(base_, size_);
  if (owner_) shm_unlink(name_.c_str());
  base_ = nullptr;
  size_ = 0;
  owner_ = false;
}

Control::~Control() { release(); }

bool Control::create(Control& out, const std::string& name, const Params& params,
                     const std::string& peer, std::string& error) {
  const std::uint32_t workers = params.producers + params.consumers;
  const std::size_t slots_off = round_up(sizeof(ControlHeader), 4096);
  const std::size_t trace_off = round_up(slots_off + sizeof(WorkerSlot) * workers, 4096);
  const std::size_t admit_off = round_up(trace_off + sizeof(TraceRec) * params.trace_cap * params.consumers, 4096);
  // Jobs of one producer claimed while the consumers record: at most every record.
  const std::uint64_t admit_cap = std::min<std::uint64_t>(params.trace_cap * params.consumers, kSeqMask);
  const std::size_t dtrace_off = round_up(admit_off + sizeof(std::uint64_t) * admit_cap * params.producers, 4096);
  const std::size_t bytes = round_up(dtrace_off + sizeof(TraceRec) * params.trace_cap * params.consumers, 4096);

  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) { error = "shm_open " + name + ": " + std::strerror(errno); return false; }
  // Pages are zero and only become resident when a consumer writes its trace.
  if (ftruncate(fd, off_t(bytes)) != 0) {
    error = "ftruncate " + name + ": " + std::strerror(errno);
    close(fd);
    shm_unlink(name.c_str());
    return false;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    error = "mmap " + name + ": " + std::strerror(errno);
    shm_unlink(name.c_str());
    return false;
  }
  out = Control();
  out.base_ = p;
  out.size_ = bytes;
  out.name_ = name;
  out.owner_ = true;

  // The memory is zero-filled: every atomic starts at 0, every histogram must
  // be constructed properly (its min is not 0).
  auto* h = new (p) ControlHeader{};
  h->magic = kControlMagic;
  h->bytes = bytes;
  h->params = params;
  std::strncpy(h->peer, peer.c_str(), sizeof h->peer - 1);
  h->workers = workers;
  h->slots_offset = slots_off;
  h->trace_offset = trace_off;
  h->admit_offset = admit_off;
  h->admit_cap = admit_cap;
  h->drain_trace_offset = dtrace_off;
  for (std::uint32_t i = 0; i < workers; ++i) new (&out.slot(i)) WorkerSlot{};
  return true;
}

std::uint64_t Control::resident_bytes() const noexcept {
  if (!base_) return 0;
  const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
  const std::size_t pages = (size_ + page - 1) / page;
  std::vector<unsigned char> vec(pages);
  if (mincore(base_, size_, vec.data()) != 0) return 0;
  std::uint64_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n * page;
}

bool Control::open(Control& out, const std::string& name, std::string& error) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) { error = "shm_open " + name + ": " + std::strerror(errno); return false; }
  struct stat st {};
  if (fstat(fd, &st) != 0 || std::size_t(st.st_size) < sizeof(ControlHeader)) {
    error = "control block " + name + " is truncated";
    close(fd);
    return false;
  }
  void* p = mmap(nullptr, std::size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) { error = "mmap " + name + ": " + std::strerror(errno); return false; }
  out = Control();
  out.base_ = p;
  out.size_ = std::size_t(st.st_size);
  out.name_ = name;
  out.owner_ = false;
  if (out.header().magic != kControlMagic || out.header().bytes != out.size_) {
    error = "control block " + name + " is not of this build";
    return false;
  }
  return true;
}

}  // namespace fairlane::bench
