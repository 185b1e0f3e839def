#include "corral/sink.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "corral/outputs.hpp"

namespace corral {
namespace {

// Every lookup below the root: stays beneath the dirfd, follows no symlink
// (magic links included), so nothing planted in the destination redirects
// a write. openat2 is Linux 5.6; glibc 2.36 has no wrapper.
constexpr std::uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;

// Runs in the parent (the sink is never used between clone and exec).
int openat2_fd(int dirfd, const std::string& path, std::uint64_t flags, std::uint64_t mode) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.mode = mode;
  how.resolve = kResolve;
  for (;;) {
    long fd = ::syscall(SYS_openat2, dirfd, path.c_str(), &how, sizeof how);
    if (fd >= 0) return static_cast<int>(fd);
    if (errno != EINTR && errno != EAGAIN) return -1;
  }
}

std::string why_refused(int err) {
  // ELOOP and EXDEV are how openat2 says a symlink or an escape was refused.
  if (err == ELOOP) return " (a symlink is in the way; the sink follows none)";
  if (err == EXDEV) return " (it would leave the sink's root)";
  return "";
}

Error sink_error(int err, const std::string& step) {
  return Error(err, "sink: " + step + ": " + std::strerror(err) + why_refused(err));
}

// Opens (creating when missing) the directory `name` in `dirfd`.
Expected<UniqueFd> open_or_make_dir(int dirfd, const std::string& name, const std::string& shown) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = openat2_fd(dirfd, name, O_PATH | O_DIRECTORY, 0);
    if (fd >= 0) return UniqueFd(fd);
    if (errno != ENOENT) return sink_error(errno, "open directory '" + shown + "'");
    // mkdirat does not follow a symlink at the last component: a planted
    // link there yields EEXIST, and the next openat2 refuses it with ELOOP.
    if (::mkdirat(dirfd, name.c_str(), 0755) != 0 && errno != EEXIST)
      return sink_error(errno, "create directory '" + shown + "'");
  }
  return sink_error(ENOENT, "open directory '" + shown + "'");
}

Status write_all(int fd, std::string_view bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::from_errno(errno, "write");
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

// Beside the landing names of a run's outputs, which the program chose: a
// random part per process, so no output can be named after a temporary
// file still waiting in the root for its commit.
std::string temporary_name() {
  static std::atomic<unsigned> counter{0};
  static const unsigned long long nonce = [] {
    unsigned long long v = 0;
    if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) v = static_cast<unsigned long long>(::getpid());
    return v;
  }();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", nonce);
  return ".corral-partial-" + std::to_string(::getpid()) + "-" + hex + "-" + std::to_string(counter++);
}

}  // namespace

Expected<FilesystemSink> FilesystemSink::open(const std::string& root, Existing existing) {
  if (root.empty()) return Error::invalid("sink: root is empty");
  int fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Error::from_errno(errno, "sink: open root '" + root + "'");
  return FilesystemSink(root, UniqueFd(fd), existing);
}

namespace {

// Gathers the bytes for a sink that only has deliver().
class MemoryWriter final : public SinkWriter {
 public:
  MemoryWriter(Sink& sink, std::string name, std::string media_type) : sink_(sink) {
    artifact_.name = std::move(name);
    artifact_.media_type = std::move(media_type);
  }
  Status write(std::string_view bytes) override {
    artifact_.bytes.append(bytes);
    return {};
  }
  Status finish() override { return {}; }
  Expected<Landed> commit(const std::string& sha256) override {
    artifact_.sha256 = sha256;
    return sink_.deliver(artifact_);
  }

 private:
  Sink& sink_;
  Artifact artifact_;
};

}  // namespace

Expected<std::unique_ptr<SinkWriter>> Sink::begin(const std::string& name, const std::string& media_type) {
  return std::unique_ptr<SinkWriter>(std::make_unique<MemoryWriter>(*this, name, media_type));
}

// A temporary file in the sink's root, renamed to its landing name at
// commit. Parent side; the root fd is the sink's (it outlives the writer).
class FilesystemSink::Writer final : public SinkWriter {
 public:
  Writer(const FilesystemSink& sink, std::string name, std::string temp, UniqueFd fd)
      : sink_(sink), name_(std::move(name)), temp_(std::move(temp)), fd_(std::move(fd)) {}
  ~Writer() override {
    if (!temp_.empty()) ::unlinkat(sink_.root_fd_.get(), temp_.c_str(), 0);
  }

  Status write(std::string_view bytes) override {
    if (!fd_) return Error(EBADF, "sink: '" + name_ + "': written after finish()");
    if (Status st = write_all(fd_.get(), bytes); !st) return st.error().context("sink: '" + name_ + "'");
    bytes_ += bytes.size();
    return {};
  }

  Status finish() override {
    if (!fd_) return {};
    // No fsync: the rename keeps a failed write from showing under the
    // landing name; durability across a power loss is not what the sink
    // promises, and an fsync per artifact would cost the supervisor
    // milliseconds each.
    if (::close(fd_.release()) != 0) return sink_error(errno, "write '" + name_ + "'");
    return {};
  }

  Expected<Landed> commit(const std::string&) override {
    if (Status st = finish(); !st) return st.error();
    // Walk the parents one segment at a time, each relative to the last.
    const std::string& name = name_;
    auto slash = name.rfind('/');
    std::string leaf = slash == std::string::npos ? name : name.substr(slash + 1);
    UniqueFd parent;
    const int root = sink_.root_fd_.get();
    int dirfd = root;
    std::size_t start = 0;
    while (slash != std::string::npos && start <= slash) {
      std::size_t end = name.find('/', start);
      auto dir = open_or_make_dir(dirfd, name.substr(start, end - start), name.substr(0, end));
      if (!dir) return std::move(dir).error();
      parent = std::move(*dir);
      dirfd = parent.get();
      start = end + 1;
    }
    // RENAME_NOREPLACE: an existing entry (a planted symlink too) is refused.
    // Plain rename replaces the entry itself; rename(2) never follows a
    // symlink at the destination, and refuses to put a file over a directory.
    unsigned flags = sink_.existing_ == Existing::refuse ? RENAME_NOREPLACE : 0;
    if (::renameat2(root, temp_.c_str(), dirfd, leaf.c_str(), flags) != 0) {
      int err = errno;
      if (err == EEXIST)
        return Error(EEXIST, "sink: '" + name + "' already exists under '" + sink_.root_ +
                                 "' and the sink does not replace");
      return sink_error(err, "land '" + name + "'");
    }
    temp_.clear();  // landed: nothing to remove
    return Landed{name, sink_.root_ + "/" + name, bytes_};
  }

 private:
  const FilesystemSink& sink_;
  std::string name_;
  std::string temp_;  // in the root; empty once landed
  UniqueFd fd_;       // open until finish()
  std::uint64_t bytes_ = 0;
};

Expected<std::unique_ptr<SinkWriter>> FilesystemSink::begin(const std::string& name, const std::string&) {
  // The transfer validated the name; the sink checks again so it is safe on
  // its own (RESOLVE_BENEATH would catch `..` anyway, but with a worse message).
  if (Status s = validate_relative_name(name, "sink: landing name"); !s) return s.error();
  // The temporary file sits in the root, its parents are made at commit:
  // a transfer refused before it commits leaves no directory behind.
  std::string temp = temporary_name();
  int fd = openat2_fd(root_fd_.get(), temp, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return sink_error(errno, "create '" + name + "'");
  return std::unique_ptr<SinkWriter>(std::make_unique<Writer>(*this, name, std::move(temp), UniqueFd(fd)));
}

Expected<Landed> FilesystemSink::deliver(const Artifact& artifact) {
  auto writer = begin(artifact.name, artifact.media_type);
  if (!writer) return std::move(writer).error();
  if (Status st = (*writer)->write(artifact.bytes); !st) return st.error();
  return (*writer)->commit(artifact.sha256);
}

}  // namespace corral
