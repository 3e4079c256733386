#include "kiln/runtime/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <new>

namespace kiln {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

// The handler's table: fixed storage, no allocation, lock-free slots (a slot is claimed with
// a compare-exchange and published by `used`, read by the handler only when set).
constexpr int kSlots = 64;
constexpr std::size_t kMaxPath = 4096;
struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 registered
  char path[kMaxPath];
};
Slot g_slots[kSlots];
std::atomic<bool> g_installed{false};

extern "C" void cleanup_and_reraise(int sig) {
  const int saved = errno;
  // Files first, then folders (a staging folder's files are registered too).
  for (Slot& s : g_slots) if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);
  for (Slot& s : g_slots) if (s.state.load(std::memory_order_acquire) == 2) ::rmdir(s.path);
  errno = saved;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) if (c < '0' || c > '9') return false;
  return true;
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// Removes a temporary folder's files (one level: what the writers put there) and the folder.
void remove_tree(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return;
  if (DIR* d = ::opendir(path.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      ::unlink((path + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(path.c_str());
}

}  // namespace

FileHandle& FileHandle::operator=(FileHandle&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    size_ = o.size_;
    o.fd_ = -1;
  }
  return *this;
}

FileHandle::~FileHandle() {
  if (fd_ >= 0) ::close(fd_);
}

Result<FileHandle> open_regular_file(const std::string& path, StatusCode code) {
  // O_NONBLOCK: opening a FIFO with no writer would otherwise block forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return Status(code, path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Status(code, path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status(code, path + ": is " + kind_of(st.st_mode) + ", not a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return FileHandle(fd, static_cast<std::uint64_t>(st.st_size));
}

Result<std::vector<std::uint8_t>> read_regular_file(const std::string& path, std::uint64_t max_bytes, StatusCode code) {
  auto file = open_regular_file(path, code);
  if (!file.ok()) return file.status();
  const std::uint64_t size = file->size();
  if (size > max_bytes) {
    return Status(code, path + ": is " + std::to_string(size) + " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  std::vector<std::uint8_t> bytes;
  // Read up to the cap + 1 so a file that grew after fstat is noticed, not truncated silently.
  std::size_t capacity = static_cast<std::size_t>(size) + 1;
  bytes.resize(capacity);
  std::size_t done = 0;
  for (;;) {
    const ssize_t r = ::read(file->fd(), bytes.data() + done, capacity - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status(code, path + ": cannot read: " + std::strerror(errno));
    if (r == 0) break;
    done += static_cast<std::size_t>(r);
    if (done == capacity) return Status(code, path + ": changed size while being read");
  }
  if (done != size) return Status(code, path + ": changed size while being read");
  bytes.resize(done);
  return bytes;
}

Status check_output_target(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status(StatusCode::kIoError, "cannot write '" + path + "': " + std::strerror(errno));
  }
  if (S_ISREG(st.st_mode)) return Status::Ok();
  return Status(StatusCode::kUsage, "refusing to replace '" + path + "': it is " + kind_of(st.st_mode) +
                                        " (an output may only replace a regular file)");
}

void install_cleanup_handler() {
  if (g_installed.exchange(true)) return;
  struct sigaction sa {};
  sa.sa_handler = cleanup_and_reraise;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    // A signal the parent set to ignored stays ignored (nohup, background jobs).
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
}

int register_temporary(const std::string& path) {
  if (path.size() >= kMaxPath) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (!g_slots[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot >= 0 && slot < kSlots) g_slots[slot].state.store(0, std::memory_order_release);
}

std::string temporary_name(const std::string& target) { return target + ".tmp." + std::to_string(::getpid()); }

void remove_stale_temporaries(const std::string& target) {
  const std::size_t slash = target.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : target.substr(0, slash));
  const std::string name = slash == std::string::npos ? target : target.substr(slash + 1);
  if (name.empty()) return;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> stale;
  const std::string plain = name + ".tmp.", hidden = "." + name + ".tmp.";
  while (const dirent* e = ::readdir(d)) {
    const std::string entry = e->d_name;
    std::string pid;
    if (entry.rfind(plain, 0) == 0) {
      pid = entry.substr(plain.size());
    } else if (entry.rfind(hidden, 0) == 0) {
      pid = entry.substr(hidden.size());
      pid = pid.substr(0, pid.find('.'));
    } else {
      continue;
    }
    if (!all_digits(pid)) continue;
    const pid_t p = static_cast<pid_t>(std::strtol(pid.c_str(), nullptr, 10));
    if (p > 0 && p != ::getpid() && !process_alive(p)) stale.push_back(dir + "/" + entry);
  }
  ::closedir(d);
  for (const std::string& path : stale) remove_tree(path);
}

}  // namespace kiln
