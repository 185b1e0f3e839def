// Namespace templates: the part of a container run that is the same for
// every run — the base of its mount tree (SplitMountTree::base: root, host
// entries, /etc, /dev, mount points; host detached, / read-only) and an
// empty network namespace with lo down — made once and kept as nsfs bind
// mounts, so each run enters them and copies the mount namespace (a dozen
// mounts) instead of building both (a network namespace costs ~0.7 ms of
// kernel time to make and more to tear down; the tree ~1 ms).
//
//   /run/corral/templates/<key>/mnt   the base's mount namespace
//   /run/corral/templates/<key>/net   its network namespace
//
// <key> is a hash of the base's fingerprint (its steps, the device and
// inode of every host entry it binds, and every host mount at or below
// one), so a changed host file, a mount made or removed under /usr, or a
// different identity in /etc makes a new template instead of reusing a
// stale one. At most kKeptTemplates are kept; making one removes the
// oldest beyond that. Root only: entering a namespace the host's user
// namespace owns needs CAP_SYS_ADMIN there, and so does the bind mount.
//
// What sharing costs, stated: runs share the network namespace, so they
// get no loopback (lo stays down, and the run's seccomp refuses sockets but
// AF_UNIX so no port can be bound that another run would collide with),
// Landlock scoping keeps one run from connecting to another's abstract
// unix sockets, and /proc/net/unix still lists the unix sockets of every
// run in flight. A run that needs lo asks for its own network namespace
// (Request::loopback) and is built per run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/fd.hpp"
#include "corral/mount_tree.hpp"
#include "corral/status.hpp"

namespace corral {

inline constexpr std::string_view kTemplateRoot = "/run/corral/templates";
inline constexpr int kKeptTemplates = 8;

struct NsTemplate {
  UniqueFd mnt;     // O_RDONLY nsfs fds, for setns(2)
  UniqueFd net;
  std::string dir;  // root/<key>
  bool created = false;  // made by this call (not found)
};

// The template for `base` under `root`: opened when one exists and its
// files are nsfs of the right kind, made otherwise (under an flock on
// root/.lock, so concurrent callers make it once). Making one forks a
// helper that unshares a mount and a network namespace, applies `base`, and
// whose namespaces are then bound onto root/<key>/{mnt,net}. Errors name
// the step ("namespace template: ... : mount tree: step 4 ...").
//
// `family` names what the base was built for regardless of the host (the
// spec and identity: the HostScan::skip fingerprint); "" for none. A
// template made for a family removes the family's others: they show a host
// that is gone (a file replaced, a mount made or removed under /usr), and
// each keeps what it binds alive — a filesystem unmounted from the host
// stays busy while a template holds a copy of its mount. <key> is then
// <family hash>-<fingerprint hash>.
Expected<NsTemplate> open_ns_template(const PreparedMountTree& base, const std::string& fingerprint,
                                      std::string_view root = kTemplateRoot, const std::string& family = "");

// <key>, the name of a template's directory under its root: 24 hex digits
// of the fingerprint's SHA-256, or for a family 8 of the family's, '-' and
// 16 of the fingerprint's (the family's templates share the first 9
// characters). is_ns_template_name: whether `name` has one of those forms.
std::string ns_template_name(const std::string& fingerprint, const std::string& family = "");
bool is_ns_template_name(std::string_view name);

// dir/{mnt,net} into `out` (not its dir) when both are live nsfs files of
// the right kind; false otherwise.
bool open_ns_template_at(const std::string& dir, NsTemplate& out);

// The mount/network template directories under `root` (intact or not),
// sorted; root/users (the user namespaces) is not one of them.
Expected<std::vector<std::string>> list_ns_templates(std::string_view root = kTemplateRoot);

// The first template under `root` (in directory order) whose two files are
// live namespaces (nsfs of the right kind), or "". A live one was made on
// this boot (nsfs binds do not survive a reboot) by a helper that made a
// mount namespace and pivot_root'ed in it: the container probe takes that
// as shown.
std::string live_ns_template(std::string_view root = kTemplateRoot);

// ---- user namespaces
// The program's user namespace in template mode, one per id mapping:
// inside uid/gid -> outside uid/gid (one id each), kept as an nsfs bind at
// root/users/<in_uid>-<out_uid>-<in_gid>-<out_gid>. Made by a forked root
// helper that unshares CLONE_NEWUSER; we write its maps and bind
// /proc/<helper>/ns/user. A run's program, still host root, setns(2)es into
// it and switches to the inside ids: no per-run unshare, no maps written
// per run, no handshake with pid 1 to write them. Nothing of a run stays in
// it (keyrings, the only per-user-namespace state a program could fill, are
// denied by seccomp `default`), and runs in flight never share one: each
// holds an outside uid of its own. At most kKeptUserTemplates are kept.
inline constexpr int kKeptUserTemplates = 64;
struct UserNsIds {
  long inside_uid, outside_uid, inside_gid, outside_gid;
};
Expected<UniqueFd> open_userns_template(const UserNsIds& ids, std::string_view root = kTemplateRoot);
// The user namespace templates under root/users, sorted; the first live one
// (in directory order).
Expected<std::vector<std::string>> list_userns_templates(std::string_view root = kTemplateRoot);
std::string live_userns_template(std::string_view root = kTemplateRoot);

// ---- the host stamp: finding a template without scanning the host
// Every run's template key is a hash of the base's full fingerprint, and
// that takes a scan of the host (~70 calls: lstat of each system and /etc
// entry, readdir of /etc, realpath, /dev nodes). The scan's answer only
// changes when a directory it looked in changes (an entry added, removed,
// renamed: the directory's mtime and ctime move) or a mount comes or goes
// (one over an entry changes what a path names without touching a
// directory). So the first run that scans records, in root/.stamp-<key>,
// the template it opened, the scanned directories' identity and times
// (statx) and the host's mount ids (listmount(2), Linux 6.8); a later run
// with the same spec (its HostScan::skip fingerprint, and this binary's
// build id, make <key>) checks those (~8 calls) and opens the template
// directly. Any difference, a missing record, or a kernel without
// listmount: the full scan, as before. Root only, like the templates.
//
// A record is written only when nothing it names changed during the scan
// and every stamped time is over a second older than the scan's start, so
// a change that lands in the same clock tick as a stamped one can never go
// unseen (the "racy" case a timestamp cache must guard against).
struct HostStampStart {
  long long started_ns = 0;         // CLOCK_REALTIME before the scan
  std::optional<std::uint64_t> mounts;  // hash of the mount ids before the scan (none: unavailable)
};
HostStampStart begin_host_stamp();
// The template the record for `skeleton` (SplitMountTree::fingerprint with
// HostScan::skip) names, when the record is there, its stamp matches the
// host now, and the template opens; nullopt otherwise (then scan).
std::optional<NsTemplate> open_stamped_ns_template(const std::string& skeleton, std::string_view root = kTemplateRoot);
// After a full scan found (or made) `t`: record it for `skeleton` with the
// stamp of `scanned_dirs`, unless the host moved since `start`. Best effort
// (a record that cannot be written only costs the next run a scan).
void record_host_stamp(const std::string& skeleton, const std::vector<std::string>& scanned_dirs,
                       const HostStampStart& start, const NsTemplate& t, std::string_view root = kTemplateRoot);
// Every record under `root` removed (remove_ns_templates does it too).
void remove_host_stamps(std::string_view root = kTemplateRoot);

// Unmount and remove every template under `root` (user namespaces too); the count removed.
// Runs that already entered one keep it (a namespace lives while a
// process is in it).
Expected<int> remove_ns_templates(std::string_view root = kTemplateRoot);

}  // namespace corral
