// Runs in the parent only, after the child ended: everything below the
// workspace is hostile here. Paths are opened beneath the workspace fd with
// openat2 and read through the fd that was checked.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>
#include <variant>

#include "corral/capture.hpp"
#include "corral/glob.hpp"
#include "corral/workspace.hpp"

#include "corral/names.hpp"
#include "workspace_fs.hpp"

namespace corral {
namespace {

using namespace wsfs;

// ---- collection -----------------------------------------------------------

struct Match {
  std::string path;
  unsigned char type;  // d_type seen by the walk; the fd's fstat decides
};

// Walks the tree below root (directory fds opened beneath it, one at a
// time) and returns, per glob, the matching non-directory entries.
std::vector<std::vector<Match>> walk(int root, const std::vector<Glob>& globs, const CollectLimits& caps,
                                     std::vector<Skipped>& skipped) {
  std::vector<std::vector<Match>> matches(globs.size());
  struct Dir {
    std::string path;  // "" for the root, else "a/b"
    std::vector<Glob::State> live;
  };
  std::vector<Dir> to_walk;
  Dir top{"", {}};
  for (const auto& g : globs) top.live.push_back(g.start());
  to_walk.push_back(std::move(top));
  std::uint64_t seen = 0;
  while (!to_walk.empty()) {
    Dir dir = std::move(to_walk.back());
    to_walk.pop_back();
    UniqueFd fd(openat2_fd(root, dir.path.empty() ? "." : dir.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                           0, kResolveHostile));
    // One past the remaining budget: a huge directory is not read into memory.
    const std::uint64_t left = caps.max_walk_entries - seen;
    const std::size_t room = left >= SIZE_MAX ? SIZE_MAX : static_cast<std::size_t>(left + 1);
    auto entries = fd ? list_dir(fd.get(), room) : Expected<std::vector<Entry>>(errno_error("open directory"));
    if (!entries) {
      skipped.push_back({dir.path.empty() ? "." : dir.path, entries.error().message()});
      continue;
    }
    std::vector<Dir> subdirs;
    for (const auto& e : *entries) {
      if (++seen > caps.max_walk_entries) {
        skipped.push_back({dir.path, "walk stopped after " + std::to_string(caps.max_walk_entries) +
                                         " entries; the rest of the tree was not examined"});
        return matches;
      }
      const std::string path = dir.path.empty() ? e.name : dir.path + "/" + e.name;
      const unsigned char type = entry_type(fd.get(), e);
      // home/ and tmp/ hold the run's HOME and TMPDIR: only a glob that
      // names them literally looks inside.
      const bool private_dir = dir.path.empty() && (e.name == "home" || e.name == "tmp");
      Dir sub{path, {}};
      bool deeper = false;
      for (std::size_t g = 0; g < globs.size(); ++g) {
        Glob::State next = (private_dir && globs[g].segments().front() != e.name)
                               ? Glob::State(globs[g].segments().size() + 1, 0)
                               : globs[g].step(dir.live[g], e.name);
        if (type == DT_DIR) deeper = deeper || globs[g].may_descend(next);
        else if (globs[g].matched(next)) matches[g].push_back({path, type});
        sub.live.push_back(std::move(next));
      }
      if (type == DT_DIR && deeper) subdirs.push_back(std::move(sub));
    }
    // Depth first, in name order.
    for (auto it = subdirs.rbegin(); it != subdirs.rend(); ++it) to_walk.push_back(std::move(*it));
  }
  return matches;
}

std::string over(std::string_view limit, std::uint64_t value, std::uint64_t cap) {
  return "over " + std::string(limit) + " (" + std::to_string(value) + " > " + std::to_string(cap) + ")";
}

// Opens one matched path beneath root and reads it through that fd, or
// says why not. `used` is the total collected so far.
std::variant<CollectedFile, std::string> read_artifact(int root, const Match& m, const CollectLimits& caps,
                                                  std::uint64_t used) {
  // Judged by the walk's type first: opening a device node can have side
  // effects (a child that ran as root could mknod one). The fd's fstat
  // below is the authority for whatever passes.
  if (m.type == DT_LNK) return std::string("symlink");
  if (m.type != DT_REG) return std::string("not a regular file (") + dt_name(m.type) + ")";
  // O_NONBLOCK: a FIFO that raced in after the walk must not block the open.
  UniqueFd fd(openat2_fd(root, m.path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0, kResolveHostile));
  if (!fd && errno == ELOOP) return std::string("symlink");
  if (!fd && errno == EXDEV) return std::string("crosses a mount or leaves the workspace");
  if (!fd) return std::string("open: ") + std::strerror(errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return std::string("stat: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return std::string("not a regular file (") + dt_name(IFTODT(st.st_mode)) + ")";
  if (st.st_nlink > 1) return "hard link (st_nlink=" + std::to_string(st.st_nlink) + ")";
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (caps.per_file_bytes && size > *caps.per_file_bytes) return over("artifact_bytes", size, *caps.per_file_bytes);
  if (caps.total_bytes && used + size > *caps.total_bytes)
    return over("artifact_total_bytes", used + size, *caps.total_bytes);
  // Read at most one byte past what the caps allow: a file that grew
  // since fstat is judged by what it really holds. Grow the buffer as
  // data arrives: st_size of a sparse file says nothing about memory.
  std::uint64_t read_cap = UINT64_MAX;
  if (caps.per_file_bytes) read_cap = *caps.per_file_bytes + 1;
  if (caps.total_bytes) read_cap = std::min(read_cap, *caps.total_bytes - used + 1);
  CollectedFile a{m.path, 0, "", ""};
  a.content.resize(static_cast<std::size_t>(std::min<std::uint64_t>({size + 1, read_cap, 1 << 20})));
  std::size_t got = 0;
  for (;;) {
    if (got == a.content.size()) {
      if (got >= read_cap) break;
      a.content.resize(static_cast<std::size_t>(std::min<std::uint64_t>(2 * got + 65536, read_cap)));
    }
    ssize_t n = ::read(fd.get(), a.content.data() + got, a.content.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::string("read: ") + std::strerror(errno);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  a.content.resize(got);
  if (caps.per_file_bytes && got > *caps.per_file_bytes) return over("artifact_bytes", got, *caps.per_file_bytes);
  if (caps.total_bytes && used + got > *caps.total_bytes)
    return over("artifact_total_bytes", used + got, *caps.total_bytes);
  a.bytes = got;
  a.sha256 = Sha256::hex_of(a.content);
  return a;
}

}  // namespace

CollectLimits CollectLimits::from(const Limits& limits) {
  CollectLimits c;
  c.per_file_bytes = limits.get(Limit::artifact_bytes);
  c.total_bytes = limits.get(Limit::artifact_total_bytes);
  c.max_count = limits.get(Limit::artifact_count);
  return c;
}

std::uint64_t Collection::total_bytes() const {
  std::uint64_t sum = 0;
  for (const auto& a : artifacts) sum += a.bytes;
  return sum;
}

Expected<Collection> Workspace::collect(const std::vector<std::string>& globs, const CollectLimits& caps) const {
  if (removed()) return Error(EBADF, "collect: workspace already removed");
  if (released()) return Error(EBADF, "collect: workspace fd released; reacquire() first");
  std::vector<Glob> parsed;
  for (const auto& text : globs) {
    auto g = Glob::parse(text, "collect: glob");
    if (!g) return std::move(g).error();
    parsed.push_back(std::move(*g));
  }
  Collection out;
  auto matches = walk(dir_.get(), parsed, caps, out.skipped);
  std::set<std::string> done;  // a path matched by two globs is collected once
  std::uint64_t used = 0;
  for (std::size_t g = 0; g < parsed.size(); ++g) {
    if (caps.max_count && matches[g].size() > *caps.max_count) {
      out.skipped.push_back({parsed[g].text(), "glob " + quoted(parsed[g].text()) + " matched " +
                                                 std::to_string(matches[g].size()) + " files, over artifact_count " +
                                                 std::to_string(*caps.max_count)});
      continue;
    }
    for (const auto& m : matches[g]) {
      if (!done.insert(m.path).second) continue;
      if (caps.max_count && out.artifacts.size() >= *caps.max_count) {
        out.skipped.push_back({m.path, "over artifact_count (" + std::to_string(*caps.max_count) + " collected)"});
        continue;
      }
      // A name that could not be written on the host as it is (a backslash,
      // a control byte, ill-formed UTF-8) is not an artifact: it is skipped
      // here, so a Result lists no file that copy_to would refuse.
      if (auto problem = relative_name_problem(m.path); !problem.empty()) {
        out.skipped.push_back({m.path, "name " + problem});
        continue;
      }
      auto r = read_artifact(dir_.get(), m, caps, used);
      if (auto* reason = std::get_if<std::string>(&r)) {
        out.skipped.push_back({m.path, std::move(*reason)});
        continue;
      }
      used += std::get<CollectedFile>(r).bytes;
      out.artifacts.push_back(std::move(std::get<CollectedFile>(r)));
    }
  }
  return out;
}

Expected<Copied> Workspace::copy_to(const Collection& collection, const std::string& artifact_root,
                                    std::string_view run_id) {
  std::string who = "copy artifacts to " + quoted(artifact_root);
  if (run_id.empty() || run_id == "." || run_id == ".." || run_id.find('/') != std::string_view::npos ||
      run_id.find('\0') != std::string_view::npos)
    return Error::invalid(who + ": run id " + quoted(run_id) + " must be one plain path segment");
  UniqueFd root(::open(artifact_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return errno_error(who);
  const std::string run(run_id);
  // A directory of this run's own, made now: an existing one (another run's,
  // or planted) is refused, never merged into. Run ids are unique on the
  // host (Supervisor::next_run_id), so EEXIST means someone else's.
  if (::mkdirat(root.get(), run.c_str(), 0755) != 0) {
    if (errno == EEXIST)
      return Error(EEXIST, who + ": " + quoted(run) + " already exists; refusing to write into a directory this run did not make");
    return errno_error(who + ": create " + quoted(run));
  }
  UniqueFd dir(openat2_fd(root.get(), run, O_PATH | O_DIRECTORY | O_CLOEXEC, 0, kResolve));
  if (!dir && errno == ELOOP) return Error(ELOOP, who + ": " + quoted(run) + " is a symlink; refusing to follow it");
  if (!dir) return errno_error(who + ": open " + quoted(run));
  const std::string run_dir = artifact_root + (artifact_root.ends_with('/') ? "" : "/") + run;
  // Each artifact on its own: one that cannot be written (a bad name, a
  // planted symlink, a full disk) is skipped and said so; the others land.
  Copied out;
  for (const auto& a : collection.artifacts) {
    auto copy_one = [&]() -> Status {
      if (auto problem = relative_name_problem(a.name); !problem.empty()) return Error::invalid("name " + problem);
      auto segs = split_segments(a.name);
      auto parent = open_parents(dir.get(), segs, quoted(run_dir), std::nullopt);
      if (!parent) return std::move(parent).error();
      auto fd = create_exclusive(parent->get(), segs.back(), 0644, quoted(run_dir + "/" + a.name));
      if (!fd) return std::move(fd).error();
      if (auto w = write_all(fd->get(), a.content); !w) {
        (void)::unlinkat(parent->get(), segs.back().c_str(), 0);  // no partial file under its name
        return w.error().context(quoted(run_dir + "/" + a.name));
      }
      return {};
    };
    if (auto st = copy_one(); !st) {
      out.paths.emplace_back();
      out.skipped.push_back({a.name, "not copied: " + st.error().message()});
    } else {
      out.paths.push_back(run_dir + "/" + a.name);
    }
  }
  return out;
}

}  // namespace corral
