// The container tier's filesystem beyond the base tree (container.hpp):
// bind and tmpfs specs, the sizes of /tmp and /dev/shm, and the writable
// binds made as idmapped mounts so that what a run writes there lands on
// the host as the directory's owner.
#include <sys/stat.h>

#include <linux/mount.h>

#include <algorithm>

#include "corral/container.hpp"
#include "corral/host.hpp"
#include "corral/idmap.hpp"
#include "corral/names.hpp"
#include "corral/run_setup.hpp"
#include "corral/tier_limits.hpp"

namespace corral {
namespace {

Expected<std::uint64_t> parse_id(std::string_view text, std::string_view what) {
  if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != std::string_view::npos)
    return Error::invalid(std::string(what) + ": '" + std::string(text) + "' is not a decimal id");
  std::uint64_t v = std::stoull(std::string(text));
  if (v == 0) return Error::invalid(std::string(what) + ": 0 is refused (a run never writes as host root)");
  if (v >= 0xffffffffull) return Error::invalid(std::string(what) + ": " + std::string(text) + " is not an id");
  return v;
}

}  // namespace

Expected<MountBind> parse_bind_spec(std::string_view text, bool writable) {
  std::string what = std::string(writable ? "bind" : "ro-bind") + " " + quote_input(text);
  MountBind b;
  b.writable = writable;
  if (auto at = text.rfind(":owner="); at != std::string_view::npos) {
    if (!writable) return Error::invalid(what + ": owner= is for a writable bind (--bind)");
    std::string_view ids = text.substr(at + 7);
    text = text.substr(0, at);
    auto colon = ids.find(':');
    auto uid = parse_id(ids.substr(0, colon), what + ": owner uid");
    if (!uid) return std::move(uid).error();
    auto gid = colon == std::string_view::npos ? uid : parse_id(ids.substr(colon + 1), what + ": owner gid");
    if (!gid) return std::move(gid).error();
    b.owner_uid = static_cast<uid_t>(*uid);
    b.owner_gid = static_cast<gid_t>(*gid);
  }
  auto split = text.rfind(":/");
  if (split == std::string_view::npos) {
    b.source = b.target = std::string(text);
  } else {
    b.source = std::string(text.substr(0, split));
    b.target = std::string(text.substr(split + 1));
  }
  if (b.source.empty()) return Error::invalid(what + ": the source is empty (expected SRC[:DST])");
  if (b.target.front() != '/')
    return Error::invalid(what + ": the target must be an absolute path (expected SRC[:DST], DST absolute)");
  return b;
}

Expected<TmpfsMount> parse_tmpfs_spec(std::string_view text) {
  std::string what = "tmpfs " + quote_input(text);
  TmpfsMount t;
  auto colon = text.rfind(':');
  t.path = std::string(text.substr(0, colon));
  if (t.path.empty() || t.path.front() != '/') return Error::invalid(what + ": PATH must be absolute (PATH[:SIZE])");
  if (colon != std::string_view::npos) {
    std::string_view size = text.substr(colon + 1);
    std::uint64_t unit = 1;
    if (!size.empty()) {
      switch (size.back()) {
        case 'k': case 'K': unit = 1ull << 10; break;
        case 'm': case 'M': unit = 1ull << 20; break;
        case 'g': case 'G': unit = 1ull << 30; break;
        default: break;
      }
      if (unit != 1) size.remove_suffix(1);
    }
    auto n = parse_limit_value("tmpfs size", size);
    if (!n) return std::move(n).error().context(what);
    if (*n > kMaxLimitValue / unit) return Error(ERANGE, what + ": the size is too large");
    if (*n * unit < 4096) return Error::invalid(what + ": the size must be at least 4096 bytes");
    t.bytes = *n * unit;
  }
  return t;
}

std::uint64_t container_tmp_bytes_default(const Limits& limits) {
  std::uint64_t size = 1ull << 30;
  // /tmp's pages are charged to the run's memory cgroup: more than its
  // memory_bytes ceiling could never be written (tier_limits.hpp).
  if (tier_enforces_memory(Tier::container))
    if (auto mem = limits.get(Limit::memory_bytes)) size = std::min(size, std::max<std::uint64_t>(*mem, 4096));
  return size;
}

// Parent, from prepare_container: the request's binds, tmpfs mounts and
// devices into `tree`, the sizes of /tmp and /dev/shm into run.limits (the
// result shows them whether asked for or not). As root a writable bind is
// an idmapped copy the child attaches: the run's host uid `outside_uid`
// writes there as the source directory's owner (or the bind's owner=),
// never as root; where that cannot be made, the plain bind of before, and a
// warning says so.
Status add_container_mounts(PreparedRun& run, const HostFacts& host, uid_t outside_uid, gid_t outside_gid,
                            MountTreeSpec& tree, ContainerRun& c) {
  const Request& req = run.request;
  if (!run.limits.has(Limit::tmp_bytes)) run.limits.set(Limit::tmp_bytes, container_tmp_bytes_default(run.limits));
  if (!run.limits.has(Limit::shm_bytes)) run.limits.set(Limit::shm_bytes, kContainerShmBytes);
  tree.tmp_bytes(*run.limits.get(Limit::tmp_bytes));
  tree.shm_bytes(*run.limits.get(Limit::shm_bytes));
  for (const auto& t : req.tmpfs) tree.tmpfs(t.path, t.bytes.value_or(*run.limits.get(Limit::tmp_bytes)));
  for (const auto& d : req.dev_binds) tree.dev_bind(d);

  for (const auto& b : req.binds) {
    const std::string what = std::string(b.writable ? "bind" : "ro_bind") + " '" + b.source + "'";
    if (!b.writable) {
      // Read-only: the host's ownership view, bound by the child.
      if (b.resolved) tree.bind_resolved(b.source, b.target, false);
      else tree.ro_bind(b.source, b.target);
      continue;
    }
    auto plain = [&] {
      if (b.resolved) tree.bind_resolved(b.source, b.target, true);
      else tree.bind(b.source, b.target);
    };
    if (!host.root || outside_uid == 0) {
      // Rootless: the run writes as the caller's own id already.
      if (b.owner_uid)
        run.warnings.push_back(what + ": owner=" + std::to_string(*b.owner_uid) +
                               " needs root (an idmapped mount); files land as uid " + std::to_string(outside_uid));
      plain();
      continue;
    }
    auto src = open_bind_source(b.source, b.resolved, what);
    if (!src) return std::move(src).error().context("container");
    const uid_t owner = b.owner_uid.value_or(src->st.st_uid);
    gid_t group = b.owner_gid.value_or(src->st.st_gid);
    if (owner == 0) {
      // Never mapped to host root: the run's own host uid, as before.
      c.notes.push_back(what + " is owned by root: files the program writes there are owned by the run's host uid " +
                        std::to_string(outside_uid) + " (name an owner with :owner=UID:GID)");
      plain();
      continue;
    }
    if (group == 0) group = outside_gid;
    auto fail = [&](const Error& e) {
      run.warnings.push_back(what + ": files land as the run's host uid " + std::to_string(outside_uid) + ", not " +
                             std::to_string(owner) + " (no idmapped mount: " + e.message() + ")");
      plain();
    };
    auto userns = make_idmap_userns(IdmapIds{owner, outside_uid, group, outside_gid});
    if (!userns) {
      fail(userns.error());
      continue;
    }
    auto mnt = open_idmapped_tree(src->fd.get(), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, userns->get());
    if (!mnt) {
      fail(mnt.error());
      continue;
    }
    tree.attach(mnt->get(), src->canonical, b.target, true);
    c.bind_mounts.push_back(std::move(*mnt));
  }
  return {};
}

}  // namespace corral
