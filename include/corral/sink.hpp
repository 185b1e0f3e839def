// Where collected outputs land. A Sink receives one artifact at a time
// (outputs.hpp): each is written as it is read, and landed (commit) only
// after every declared output was stat'ed, capped and read, so a sink only
// ever lands artifacts that passed every policy check.
//
// FilesystemSink writes under one root directory and cannot be led out of
// it: each parent is opened with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)
// relative to the previous one, so a symlink planted in the destination (as
// a parent directory or as the file itself) refuses the write instead of
// carrying it elsewhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "corral/fd.hpp"
#include "corral/status.hpp"

namespace corral {

// One output on its way to a sink. `name` is the landing name, a relative
// path already validated by the transfer (the sink validates it again).
struct Artifact {
  std::string name;
  std::string media_type;  // as declared by the route, never sniffed
  std::string bytes;
  std::string sha256;      // lowercase hex of bytes
};

// Where an artifact landed.
struct Landed {
  std::string name;      // the landing name
  std::string location;  // sink-specific: a path for FilesystemSink
  std::uint64_t bytes = 0;
};

// One artifact on its way in, a chunk at a time (the transfer streams a
// file of any size through a fixed buffer: outputs.hpp). Nothing shows
// under the landing name before commit(); a writer destroyed uncommitted
// leaves nothing behind.
class SinkWriter {
 public:
  virtual ~SinkWriter() = default;
  virtual Status write(std::string_view bytes) = 0;
  // Every byte was given: what the writer holds open may be closed (a
  // transfer holds up to max_files writers until it commits them).
  virtual Status finish() = 0;
  // Lands the bytes under the name begin() was given.
  virtual Expected<Landed> commit(const std::string& sha256) = 0;
};

class Sink {
 public:
  virtual ~Sink() = default;
  virtual Expected<Landed> deliver(const Artifact& artifact) = 0;
  // A writer for artifact `name`. The default gathers the bytes in memory
  // and calls deliver() at commit (enough for a sink of small artifacts);
  // FilesystemSink streams them into a file instead.
  virtual Expected<std::unique_ptr<SinkWriter>> begin(const std::string& name, const std::string& media_type);
};

class FilesystemSink final : public Sink {
 public:
  // What to do when the landing name already exists at the destination.
  //   refuse   an error naming the file; nothing is replaced (the default:
  //            a fresh artifact root per run never needs to replace, and an
  //            existing entry there is a surprise worth reporting)
  //   replace  the entry is replaced atomically by rename(2), which replaces
  //            a planted symlink itself, never its target; a directory is
  //            never replaced
  enum class Existing { refuse, replace };

  // Opens `root` (which must be an existing directory; symlinks in the
  // root's own path are the operator's choice and are followed once here).
  // The sink keeps the directory fd: renaming the root away later does not
  // redirect writes.
  static Expected<FilesystemSink> open(const std::string& root, Existing existing = Existing::refuse);

  // Writes the file (0644 before umask) under a temporary name in the
  // root, then creates missing parents (mode 0755 before umask) and renames
  // it into place, so a failed write never leaves a partial file under the
  // landing name. deliver() is begin(), one write() and commit().
  Expected<Landed> deliver(const Artifact& artifact) override;
  // The same a chunk at a time: only the temporary file grows, corral's
  // memory does not. The temporary file is removed when the writer is
  // dropped uncommitted.
  Expected<std::unique_ptr<SinkWriter>> begin(const std::string& name, const std::string& media_type) override;

  const std::string& root() const { return root_; }

 private:
  class Writer;
  FilesystemSink(std::string root, UniqueFd fd, Existing existing)
      : root_(std::move(root)), root_fd_(std::move(fd)), existing_(existing) {}

  std::string root_;
  UniqueFd root_fd_;  // O_PATH|O_DIRECTORY, owned by the sink
  Existing existing_;
};

}  // namespace corral
