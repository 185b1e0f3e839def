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
// <key> is a hash of the base's fingerprint (its steps and the device and
// inode of every host entry it binds), so a changed host file or a
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
Expected<NsTemplate> open_ns_template(const PreparedMountTree& base, const std::string& fingerprint,
                                      std::string_view root = kTemplateRoot);

// The template directories under `root` (intact or not), sorted.
Expected<std::vector<std::string>> list_ns_templates(std::string_view root = kTemplateRoot);

// The first template under `root` whose two files are live namespaces
// (nsfs of the right kind), or "". A live one was made on this boot (nsfs
// binds do not survive a reboot) by a helper that made a mount namespace
// and pivot_root'ed in it: the container probe takes that as shown.
std::string live_ns_template(std::string_view root = kTemplateRoot);

// Unmount and remove every template under `root`; the count removed.
// Runs that already entered one keep it (a namespace lives while a
// process is in it).
Expected<int> remove_ns_templates(std::string_view root = kTemplateRoot);

}  // namespace corral
