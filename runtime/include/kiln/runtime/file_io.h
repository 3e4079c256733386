// Files the user names are hostile, and outputs must never be half-written.
//
// Reading: open_regular_file() opens with O_NONBLOCK (a FIFO never blocks the open), checks
// with fstat that the path is a regular file (not a directory, FIFO, socket or device such
// as /dev/zero), and only then reads, never more than the caller's cap. Bundles, `.npy`
// inputs and self-test files all come through here.
//
// Writing: outputs go to a temporary next to the target and are renamed into place. The
// temporaries carry the writer's PID in their name (`TARGET.tmp.PID`, `.TARGET.tmp.PID.XXXXXX`)
// so that the next writer can remove those of dead processes (remove_stale_temporaries), and
// they are registered with a SIGINT/SIGTERM handler that unlinks them before the process
// dies (install_cleanup_handler). SIGKILL cannot be caught: its temporaries are the stale
// ones the next write removes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/runtime/status.h"

namespace kiln {

/// An open regular file: close() it (or let FileHandle's destructor do it).
class FileHandle {
 public:
  FileHandle() = default;
  FileHandle(int fd, std::uint64_t size) : fd_(fd), size_(size) {}
  FileHandle(FileHandle&& o) noexcept : fd_(o.fd_), size_(o.size_) { o.fd_ = -1; }
  FileHandle& operator=(FileHandle&& o) noexcept;
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  ~FileHandle();
  int fd() const { return fd_; }
  /// Gives up ownership: returns the descriptor, which the caller now closes.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  /// The size fstat reported at open.
  std::uint64_t size() const { return size_; }

 private:
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

/// Opens `path` for reading if it is a regular file. Errors carry `code` and name the path
/// and the problem: "x.npy: cannot open: No such file or directory", "/dev/zero: is a
/// character device, not a regular file", "d: is a directory, not a regular file".
Result<FileHandle> open_regular_file(const std::string& path, StatusCode code);

/// Reads the whole regular file at `path`; a file larger than `max_bytes` is refused
/// ("PATH: is N bytes, more than the limit of M") before anything is read. Errors as
/// open_regular_file, with `code`.
Result<std::vector<std::uint8_t>> read_regular_file(const std::string& path, std::uint64_t max_bytes,
                                                    StatusCode code);

/// kUsage when `path` exists and is not a regular file (a FIFO, a device, a directory, a
/// socket, or a symbolic link, even to a regular file): an output never replaces one. Ok
/// when it is absent or a regular file.
Status check_output_target(const std::string& path);

/// Installs (once) the SIGINT/SIGTERM/SIGHUP handler that unlinks registered temporaries
/// (files first, then folders) and then re-raises the signal with its default action. A
/// signal that is ignored stays ignored. For programs such as `kiln` (its main() calls it):
/// the writers in this library only register their temporaries and never install handlers
/// themselves, so an embedding program's own signal handling is left alone.
void install_cleanup_handler();

/// Registers a temporary for the handler; returns a slot for unregister_temporary, or -1
/// when the table (64 entries) is full (the file is then only removed by the next write's
/// stale cleanup). Paths longer than 4095 bytes are not registered.
int register_temporary(const std::string& path);
void unregister_temporary(int slot);

/// The temporary a writer of `target` uses: "TARGET.tmp.PID".
std::string temporary_name(const std::string& target);

/// Removes, in `target`'s folder, the temporaries of `target` left by dead processes:
/// "NAME.tmp.PID" and ".NAME.tmp.PID.*" (files or folders) whose PID is not a live
/// process. Best effort: errors are ignored.
void remove_stale_temporaries(const std::string& target);

}  // namespace kiln
