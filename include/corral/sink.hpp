// Where collected outputs land. A Sink receives one artifact at a time, after
// every declared output was stat'ed, capped and read (outputs.hpp), so a
// sink only ever sees artifacts that passed every policy check.
//
// FilesystemSink writes under one root directory and cannot be led out of
// it: each parent is opened with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)
// relative to the previous one, so a symlink planted in the destination (as
// a parent directory or as the file itself) refuses the write instead of
// carrying it elsewhere.
#pragma once

#include <cstdint>
#include <string>

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

class Sink {
 public:
  virtual ~Sink() = default;
  virtual Expected<Landed> deliver(const Artifact& artifact) = 0;
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

  // Creates missing parents (mode 0755 before umask) and writes the file
  // (0644 before umask) through a temporary name in the same directory, then
  // renames it into place, so a failed write never leaves a partial file
  // under the landing name.
  Expected<Landed> deliver(const Artifact& artifact) override;

  const std::string& root() const { return root_; }

 private:
  FilesystemSink(std::string root, UniqueFd fd, Existing existing)
      : root_(std::move(root)), root_fd_(std::move(fd)), existing_(existing) {}

  std::string root_;
  UniqueFd root_fd_;  // O_PATH|O_DIRECTORY, owned by the sink
  Existing existing_;
};

}  // namespace corral
