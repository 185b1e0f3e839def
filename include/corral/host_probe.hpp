// host_probe: the facts of this host (host.hpp) asked of the kernel:
// capabilities, Landlock ABI, seccomp, io_uring, pidfd, user namespaces
// and pivot_root (a throwaway child), cgroup controllers, where workspaces
// go. Host layer: the run and supervisor layers probe through it, the
// policy layer's enforcement map (enforcement.hpp) reads what it found.
#pragma once

#include <string>
#include <string_view>

#include "corral/host.hpp"
#include "corral/ns_template.hpp"

namespace corral {

// Everything, or everything but the container facts: the container probe
// (a throwaway child that tries a user + mount namespace and pivot_root:
// ~0.3 ms, which a `--tier process` run should not pay) and the cgroup
// probe (the mount table and our own cgroups, read and parsed: only the
// container tier makes a cgroup per run). probe_container_facts() fills
// those fields in later; the answer is kept for the process. Without
// with_workspace the workspace_* fields are left for the caller, who
// knows its base (set_workspace_facts, or a Supervisor's own base). As root, with
// a live namespace template (ns_template.hpp: made on this boot with a
// mount namespace and pivot_root), only a user namespace is tried (~0.1
// ms), and not even that when a user namespace template is live too.
// The probe only makes the refusal early: every step it stands for fails
// closed at spawn time too (spawn_failed, naming the stage).
HostFacts probe_host(bool with_containers = true, bool with_workspace = true);
// The workspace_* fields for an explicit base `given` ("" for the default).
void set_workspace_facts(HostFacts& host, const std::string& given);
// `template_root`: where the namespace templates that can stand in for the
// probe are looked for (tests point it elsewhere).
void probe_container_facts(HostFacts& host, std::string_view template_root = kTemplateRoot);
// For an exec into a live session (session.hpp): the session's sandbox was
// made on this host, which shows what the probe would try (user and mount
// namespaces, pivot_root); the facts are set without a probe. A no-op once
// probed.
void note_live_session(HostFacts& host);

}  // namespace corral
