// The namespace templates' host stamp (ns_template.hpp): a record per
// spec that lets a run open its template without scanning the host, and
// the checks that keep it from ever naming a stale one. Parent side.
#include <dirent.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "corral/ns_template.hpp"
#include "corral/sha256.hpp"
#include "corral/syscalls.hpp"

#ifndef SYS_listmount
#define SYS_listmount 458  // Linux 6.8, the same number on every architecture
#endif

namespace corral {
namespace {

// Bump when what a record holds, or how a scan is turned into a template
// key, changes in a way the build id would not show.
constexpr std::string_view kStampFormat = "corral-stamp 1";
constexpr std::string_view kStampPrefix = ".stamp-";
// Records kept under a root (one per spec and binary that ran there).
constexpr std::size_t kKeptStamps = 16;
// A stamped time must be at least this much older than the scan's start.
constexpr long long kRacyNs = 1000000000LL;

// listmount(2)'s request (include/uapi/linux/mount.h, MNT_ID_REQ_SIZE_VER0).
struct MntIdReq {
  std::uint32_t size;
  std::uint32_t spare;
  std::uint64_t mnt_id;
  std::uint64_t param;
};
constexpr std::uint64_t kListRoot = ~std::uint64_t{0};  // LSMT_ROOT: the whole namespace

// FNV-1a over the ids of every mount in our namespace, in the order
// listmount gives them (by id). Mount ids are unique for the boot (6.8+),
// so a mount made or removed since changes the hash. nullopt: no listmount.
std::optional<std::uint64_t> mount_ids_hash() {
  std::uint64_t ids[512];
  std::uint64_t h = 1469598103934665603ULL, count = 0;
  MntIdReq req{sizeof(MntIdReq), 0, kListRoot, 0};
  for (;;) {
    long n = sys::call(SYS_listmount, reinterpret_cast<long>(&req), reinterpret_cast<long>(ids),
                       static_cast<long>(std::size(ids)), 0);
    if (n < 0) return std::nullopt;
    for (long i = 0; i < n; ++i) {
      for (int b = 0; b < 8; ++b) h = (h ^ ((ids[i] >> (8 * b)) & 0xff)) * 1099511628211ULL;
      ++count;
    }
    if (n < static_cast<long>(std::size(ids))) break;
    req.param = ids[n - 1];  // the next batch starts after the last id
  }
  return h ^ count;
}

long long realtime_ns() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// The build id of the object this code is in (NT_GNU_BUILD_ID), hex; ""
// without one. A new build may scan differently: it keeps records of its own.
int find_build_id(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::string*>(data);
  const auto self = reinterpret_cast<ElfW(Addr)>(&find_build_id);
  bool ours = false;
  for (int i = 0; i < info->dlpi_phnum && !ours; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    ElfW(Addr) start = info->dlpi_addr + ph.p_vaddr;
    ours = ph.p_type == PT_LOAD && self >= start && self < start + ph.p_memsz;
  }
  if (!ours) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((note->n_namesz + 3) & ~3u);
      if (desc + note->n_descsz > end) break;
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        static constexpr char kHex[] = "0123456789abcdef";
        for (std::uint32_t k = 0; k < note->n_descsz; ++k) {
          unsigned char c = static_cast<unsigned char>(desc[k]);
          *out += {kHex[c >> 4], kHex[c & 0xf]};
        }
        return 1;
      }
      p = desc + ((note->n_descsz + 3) & ~3u);
    }
  }
  return 1;
}

const std::string& build_id() {
  static const std::string id = [] {
    std::string out;
    dl_iterate_phdr(find_build_id, &out);
    return out;
  }();
  return id;
}

std::string record_path(const std::string& skeleton, std::string_view root) {
  std::string key = std::string(kStampFormat) + "\n" + build_id() + "\n" + skeleton;
  return std::string(root) + "/" + std::string(kStampPrefix) + Sha256::hex_of(key).substr(0, 24);
}

// "dir <dev major>:<minor> <ino> <mtime ns> <ctime ns> <path>" for `path`
// as lstat sees it now; "" when it cannot be stat'ed (*missing: because it
// does not exist; *symlink: it is one).
std::string stamp_line(const std::string& path, long long* newest = nullptr, bool* missing = nullptr,
                       bool* symlink = nullptr) {
  struct statx sx;
  if (::statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW | AT_STATX_SYNC_AS_STAT,
              STATX_TYPE | STATX_INO | STATX_MTIME | STATX_CTIME, &sx) != 0) {
    if (missing) *missing = errno == ENOENT || errno == ENOTDIR;
    return "";
  }
  if (symlink) *symlink = S_ISLNK(sx.stx_mode);
  auto ns = [](const struct statx_timestamp& t) { return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec; };
  if (newest) *newest = std::max(ns(sx.stx_mtime), ns(sx.stx_ctime));
  return "dir " + std::to_string(sx.stx_dev_major) + ":" + std::to_string(sx.stx_dev_minor) + " " +
         std::to_string(sx.stx_ino) + " " + std::to_string(ns(sx.stx_mtime)) + " " +
         std::to_string(ns(sx.stx_ctime)) + " " + path + "\n";
}

std::string mounts_line(std::uint64_t hash) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "mounts %016llx\n", static_cast<unsigned long long>(hash));
  return buf;
}

// The newest `kept` - 1 records under root stay besides `keep`.
void remove_old_records(std::string_view root, const std::string& keep, std::size_t kept = kKeptStamps) {
  std::vector<std::pair<long long, std::string>> aged;
  const std::string r(root);
  DIR* d = ::opendir(r.c_str());
  if (!d) return;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name.substr(0, kStampPrefix.size()) != kStampPrefix) continue;
    std::string path = r + "/" + std::string(name);
    struct stat st;
    if (path != keep && ::lstat(path.c_str(), &st) == 0)
      aged.emplace_back(static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec, path);
  }
  ::closedir(d);
  std::sort(aged.begin(), aged.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (std::size_t i = kept > 0 ? kept - 1 : 0; i < aged.size(); ++i) ::unlink(aged[i].second.c_str());
}

}  // namespace

void remove_host_stamps(std::string_view root) { remove_old_records(root, "", 0); }

HostStampStart begin_host_stamp() {
  HostStampStart s;
  s.started_ns = realtime_ns();
  s.mounts = mount_ids_hash();
  return s;
}

std::optional<NsTemplate> open_stamped_ns_template(const std::string& skeleton, std::string_view root) {
  if (build_id().empty()) return std::nullopt;
  UniqueFd fd(::open(record_path(skeleton, root).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return std::nullopt;
  // Ours alone, as the templates' root is (ensure_root): anything else is not a record.
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)))
    return std::nullopt;
  char buf[8192];
  ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n <= 0 || n == static_cast<ssize_t>(sizeof buf)) return std::nullopt;
  std::string_view text(buf, static_cast<std::size_t>(n));
  fd.reset();

  // Line 1 the format, 2 the template, 3 the mounts, then the directories.
  std::string dir;
  bool mounts_ok = false;
  int line_no = 0, dirs = 0;
  while (!text.empty()) {
    auto nl = text.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;  // a torn record
    std::string_view line = text.substr(0, nl + 1);
    text.remove_prefix(nl + 1);
    ++line_no;
    if (line_no == 1) {
      if (line.substr(0, nl) != kStampFormat) return std::nullopt;
    } else if (line_no == 2) {
      if (line.substr(0, 9) != "template " || !is_ns_template_name(line.substr(9, nl - 9))) return std::nullopt;
      dir = std::string(root) + "/" + std::string(line.substr(9, nl - 9));
    } else if (line_no == 3) {
      auto now = mount_ids_hash();
      if (!now || line != mounts_line(*now)) return std::nullopt;
      mounts_ok = true;
    } else {
      // "dir ... <path>\n": the path is the rest of the line after the fifth field.
      std::size_t at = 0;
      for (int field = 0; field < 5 && at != std::string_view::npos; ++field) at = line.find(' ', at + (field ? 1 : 0));
      if (at == std::string_view::npos) return std::nullopt;
      std::string path(line.substr(at + 1, nl - at - 1));
      if (stamp_line(path) != line) return std::nullopt;
      ++dirs;
    }
  }
  if (!mounts_ok || dirs == 0) return std::nullopt;
  NsTemplate t;
  if (!open_ns_template_at(dir, t)) return std::nullopt;
  t.dir = dir;
  return t;
}

void record_host_stamp(const std::string& skeleton, const std::vector<std::string>& scanned_dirs,
                       const HostStampStart& start, const NsTemplate& t, std::string_view root) {
  if (build_id().empty() || !start.mounts || scanned_dirs.empty()) return;
  auto slash = t.dir.rfind('/');
  if (slash == std::string::npos || t.dir.substr(0, slash) != root || !is_ns_template_name(t.dir.substr(slash + 1))) return;
  std::string text = std::string(kStampFormat) + "\ntemplate " + t.dir.substr(slash + 1) + "\n" + mounts_line(*start.mounts);
  // A directory the scan looked for that does not exist (/etc/ssl on a
  // host without it) has no times: its parent's, stamped too, move when
  // it is made. That holds only when no stamped path is a symlink (a
  // missing entry below one would be made in a directory not stamped).
  bool any_missing = false, any_symlink = false;
  for (const auto& d : scanned_dirs) {
    if (d.find('\n') != std::string::npos) return;
    long long newest = 0;
    bool missing = false, symlink = false;
    std::string line = stamp_line(d, &newest, &missing, &symlink);
    any_symlink = any_symlink || symlink;
    if (line.empty() && missing) {
      any_missing = true;
      continue;
    }
    // Changed during the scan, or so recently that a change in the same
    // clock tick would leave the same times: not recorded.
    if (line.empty() || newest > start.started_ns - kRacyNs) return;
    text += line;
  }
  if (any_missing && any_symlink) return;
  auto now = mount_ids_hash();
  if (!now || *now != *start.mounts) return;
  if (text.size() >= 8192) return;  // more than a record is read as

  const std::string path = record_path(skeleton, root);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return;
  bool ok = sys::write_all(fd.get(), text.data(), text.size()) == 0;
  fd.reset();
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return;
  }
  remove_old_records(root, path);
}

}  // namespace corral
