// Integration tests of the container tier, part 2: failures named,
// requests refused, nothing left behind, the CLI, the enforcement map, and
// rootless runs (corral itself as uid 65534 in a forked child).
#include "container_support.hpp"
#include "corral/seccomp.hpp"

using namespace corral;
using namespace container_test;
using corral_test::TempDir;

// ---- failures are named -----------------------------------------------------------

Test(container, a_missing_program_is_spawn_failed_at_execve) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Result res = h.run(boxed({"/no/such/program"}));
  cr_assert_eq(res.outcome, Outcome::spawn_failed);
  cr_assert_eq(res.spawn_stage, "execve");
  cr_assert_eq(res.spawn_errno, ENOENT);
  cr_assert_eq(cli_exit_code(res), 125);
  cr_assert_eq(my_run_cgroups(), 0u);
}

Test(container, a_mount_the_child_cannot_make_is_spawn_failed_naming_the_step) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  // Root can resolve it when preparing; the run's own uid cannot search it.
  TempDir locked;
  mkdir((locked / "inner").c_str(), 0755);
  chmod(locked.path().c_str(), 0700);
  Request r = boxed({"true"});
  r.binds.push_back(MountBind{locked / "inner", "/data", false});
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::spawn_failed, "%s", res.detail.c_str());
  cr_assert_eq(res.spawn_stage, "namespaces");
  cr_assert_eq(res.spawn_errno, EACCES);
  cr_assert(contains(res.detail, "bind /data") && contains(res.detail, "openat2"), "%s", res.detail.c_str());
  cr_assert_eq(my_run_cgroups(), 0u);
  cr_assert_eq(h.leftovers(), 0u);
}

Test(container, bad_requests_are_refused_naming_the_field) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Request missing = boxed({"true"});
  missing.binds.push_back(MountBind{"/no/such/source", "/x", false});
  auto m = h.sup->run(std::move(missing));
  cr_assert(!m.ok());
  cr_assert(contains(m.error().message(), "/no/such/source"), "%s", m.error().message().c_str());

  Request process = boxed({"true"});
  process.tier = Tier::os_process;
  auto p = h.sup->run(std::move(process));
  cr_assert(!p.ok());
  cr_assert(contains(p.error().message(), "need tier container"), "%s", p.error().message().c_str());

  Request writes = boxed({"true"});
  writes.write_paths.push_back("/tmp");
  auto w = h.sup->run(std::move(writes));
  cr_assert(!w.ok());
  cr_assert(contains(w.error().message(), "--bind"), "%s", w.error().message().c_str());
  cr_assert_eq(h.leftovers(), 0u);
  cr_assert_eq(my_run_cgroups(), 0u);
}

Test(container, a_rootfs_replaces_the_host_system_binds) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  TempDir rootfs;
  chmod(rootfs.path().c_str(), 0755);
  mkdir((rootfs / "usr").c_str(), 0755);
  mkdir((rootfs / "data").c_str(), 0755);
  corral_test::write_file(rootfs / "data/marker", "from the rootfs\n");
  chmod((rootfs / "data/marker").c_str(), 0644);
  for (const char* link : {"bin", "lib", "lib64"})
    symlink((std::string("usr/") + link).c_str(), (rootfs / link).c_str());
  Request r = boxed({"sh", "-c", "cat /data/marker; test -e /etc && echo etc-present; ls /"});
  r.rootfs = rootfs.path();
  r.binds.push_back(MountBind{"/usr", "/usr", false});  // the rootfs's empty usr/ gets the host's
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited, "%s: %s", res.detail.c_str(), res.stderr_capture.text.c_str());
  cr_assert(contains(res.stdout_capture.text, "from the rootfs"), "%s", res.stdout_capture.text.c_str());
  cr_assert(!contains(res.stdout_capture.text, "etc-present"), "the generated /etc appeared with a rootfs");
  cr_assert(contains(res.stdout_capture.text, "workspace"), "%s", res.stdout_capture.text.c_str());
}

Test(container, batch_jobs_carry_the_container_fields) {
  auto job = request_from_json(R"({"argv":["true"],"tier":"container","rootfs":"/srv/root",)"
                               R"("ro_binds":["/data:/in"],"binds":["/out"],"user":1000})");
  cr_assert(job.ok(), "%s", job.ok() ? "" : job.error().message().c_str());
  cr_assert_eq(job->tier, Tier::container);
  cr_assert_eq(*job->rootfs, "/srv/root");
  cr_assert_eq(job->binds.size(), 2u);
  // JSON object keys come in sorted order: "binds" before "ro_binds".
  cr_assert(job->binds[0].writable && job->binds[0].target == "/out");
  cr_assert(!job->binds[1].writable && job->binds[1].target == "/in" && job->binds[1].source == "/data");
  cr_assert_eq(*job->user, 1000u);
  auto host_net = request_from_json(R"({"argv":["true"],"tier":"container","net":"host"})");
  cr_assert(!host_net.ok());
  cr_assert(contains(host_net.error().message(), "empty network namespace"), "%s",
            host_net.error().message().c_str());
  auto bad_bind = request_from_json(R"({"argv":["true"],"binds":["relative"]})");
  cr_assert(!bad_bind.ok());
  cr_assert(contains(bad_bind.error().message(), "'relative'"), "%s", bad_bind.error().message().c_str());
  auto bad_user = request_from_json(R"({"argv":["true"],"user":-1})");
  cr_assert(!bad_user.ok());
  cr_assert(contains(bad_user.error().message(), "user"), "%s", bad_user.error().message().c_str());
}

Test(container, bind_specs_parse_and_bad_ones_are_named) {
  auto plain = parse_bind_spec("/data", false);
  cr_assert(plain.ok());
  cr_assert_eq(plain->source, "/data");
  cr_assert_eq(plain->target, "/data");
  cr_assert(!plain->writable);
  auto moved = parse_bind_spec("/srv/a:b:/in", true);
  cr_assert(moved.ok());
  cr_assert_eq(moved->source, "/srv/a:b");
  cr_assert_eq(moved->target, "/in");
  cr_assert(moved->writable);
  auto relative = parse_bind_spec("data", false);
  cr_assert(!relative.ok());
  cr_assert(contains(relative.error().message(), "'data'"), "%s", relative.error().message().c_str());
  auto empty = parse_bind_spec(":/in", false);
  cr_assert(!empty.ok());
  cr_assert(contains(empty.error().message(), "source is empty"), "%s", empty.error().message().c_str());
}

// ---- nothing left behind; the CLI ----------------------------------------------------

Test(container, no_cgroup_no_mount_and_no_workspace_left_after_200_runs) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  // As root the first run may make the namespace template (two nsfs mounts
  // kept under /run/corral/templates for every later run): count after it.
  Request first;
  first.tier = Tier::container;
  first.argv = {"/bin/true"};
  (void)h.run(std::move(first));
  std::size_t mounts = mount_count();
  for (int i = 0; i < 200; ++i) {
    Request r;
    r.tier = Tier::container;
    r.argv = {"/bin/true"};
    r.limits.set(Limit::memory_bytes, 64ull << 20);
    Result res = h.run(std::move(r));
    cr_assert_eq(res.outcome, Outcome::exited, "run %d: %s", i, res.detail.c_str());
  }
  cr_assert_eq(my_run_cgroups(), 0u);
  cr_assert_eq(mount_count(), mounts, "host mounts changed");
  cr_assert_eq(h.leftovers(), 0u);
}

Test(container, untrusted_runs_in_the_container_tier_and_is_refused_below_it) {
  SKIP_UNLESS_CONTAINER();
  cr_assert_eq(cli({"run", "--untrusted", "--tier", "container", "--", "true"}), 0);
  cr_assert_eq(cli({"run", "--untrusted", "--tier", "container", "--", "sh", "-c", "exit 7"}), 7);
  cr_assert_eq(cli({"run", "--untrusted", "--tier", "process", "--", "true"}), 2);
  cr_assert_eq(cli({"run", "--untrusted", "--", "true"}), 2);
  cr_assert_eq(cli({"run", "--tier", "container", "--net", "host", "--", "true"}), 2);
  cr_assert_eq(cli({"run", "--tier", "container", "--ro-bind", "relative", "--", "true"}), 2);
}

Test(container, enforcement_names_what_the_host_gives_the_tier) {
  auto map = enforcement_summary(host(), Tier::container);
  cr_assert_eq(map["namespaces"], host().user_namespaces && host().pivot_root ? "hard" : "unsupported");
  cr_assert_eq(map["memory_bytes"], host().cgroup_memory ? "cgroup" : "unsupported");
  cr_assert_eq(map["process_count"], host().cgroup_pids ? "cgroup" : "unsupported");
  cr_assert_eq(map["reaps_descendants"], "container");
  cr_assert_eq(enforcement_summary(host(), Tier::os_process)["namespaces"], "unsupported");
}

// workspace_bytes binds only where the workspace can be a tmpfs: tiers
// container and process as root (process with CAP_SYS_ADMIN, for its mount
// namespace). Elsewhere it is refused unless acknowledged, and then the
// warning says it was not enforced.
Test(container, workspace_bytes_is_hard_only_for_root_container_and_process_runs) {
  HostFacts facts = host();
  facts.root = true;
  facts.cap_sys_admin = true;
  cr_assert_eq(enforcement_summary(facts, Tier::container)["workspace_bytes"], "hard");
  cr_assert_eq(enforcement_summary(facts, Tier::os_process)["workspace_bytes"], "hard");
  Request r;
  r.argv = {"true"};
  r.limits.set(Limit::workspace_bytes, 1 << 20);
  r.tier = Tier::os_process;
  std::vector<std::string> taken;
  cr_assert(check_enforceable(facts, r, default_limits(), taken).ok());
  for (const auto& w : taken) cr_assert(!contains(w, "workspace_bytes"), "%s", w.c_str());
  HostFacts rootless = facts;
  rootless.root = rootless.cap_sys_admin = false;
  for (Tier t : {Tier::none, Tier::os_process}) {
    r.tier = t;
    if (t == Tier::os_process) facts = rootless;
    cr_assert_eq(enforcement_summary(facts, t)["workspace_bytes"], "unsupported");
    std::vector<std::string> warnings;
    auto st = check_enforceable(facts, r, default_limits(), warnings);
    cr_assert(!st.ok(), "tier %s took workspace_bytes", std::string(to_string(t)).c_str());
    cr_assert(contains(st.error().message(), "workspace_bytes is not enforceable"), "%s", st.error().message().c_str());
    r.acknowledged.insert("workspace_bytes");
    cr_assert(check_enforceable(facts, r, default_limits(), warnings).ok());
    cr_assert(!warnings.empty() && contains(warnings.back(), "is a directory under"), "no warning");
    r.acknowledged.clear();
  }
  facts.root = false;
  cr_assert_eq(enforcement_summary(facts, Tier::container)["workspace_bytes"], "unsupported");
  // Not asked for: no warning in any tier (the default exists only where it binds).
  Request plain;
  plain.argv = {"true"};
  plain.tier = Tier::os_process;
  std::vector<std::string> warnings;
  cr_assert(check_enforceable(facts, plain, default_limits(), warnings).ok());
  for (const auto& w : warnings) cr_assert(!contains(w, "workspace_bytes"), "%s", w.c_str());
}

Test(container, a_host_without_user_namespaces_refuses_the_tier_naming_why) {
  HostFacts facts = host();
  facts.user_namespaces = facts.pivot_root = false;
  facts.container_probe = "unshare(CLONE_NEWUSER|CLONE_NEWNS): Operation not permitted";
  Request r;
  r.tier = Tier::container;
  r.argv = {"true"};
  r.acknowledged.insert("namespaces");  // no acknowledgement runs a container without them
  std::vector<std::string> warnings;
  auto st = check_enforceable(facts, r, default_limits(), warnings);
  cr_assert(!st.ok());
  cr_assert_eq(st.error().code(), ENOTSUP);  // the CLI's exit 2
  cr_assert(contains(st.error().message(), "unshare(CLONE_NEWUSER|CLONE_NEWNS): Operation not permitted"), "%s",
            st.error().message().c_str());
  cr_assert(contains(st.error().message(), "user.max_user_namespaces"), "%s", st.error().message().c_str());
  r.tier = Tier::os_process;
  cr_assert(check_enforceable(facts, r, default_limits(), warnings).ok());
}

// The probe is a real attempt, so a host that refuses the first step shows
// up as that step and its errno. Here the refusal is our own default
// seccomp profile (clone3 is ENOSYS under it), applied in a child that has
// not probed yet.
Test(container, the_probe_names_the_step_a_host_refuses) {
  // probe_host without the container probe: host() would cache that probe's
  // answer in this process, and the child below would inherit it.
  if (!probe_host(/*with_containers=*/false).seccomp) cr_skip_test("no seccomp on this host: nothing to refuse the probe's clone3 with");
  // No templates to stand in for the attempt: an empty template root.
  TempDir no_templates;
  EXPECT_EMPTY(corral_test::in_child(false, [&]() -> std::string {
    auto prog = prepare(SeccompSpec().profile("default"));
    if (!prog) return "seccomp: " + prog.error().message();
    if (int e = apply_seccomp_in_child(*prog)) return std::string("apply: ") + strerror(e);
    HostFacts facts = probe_host(/*with_containers=*/false);
    probe_container_facts(facts, no_templates.path());
    if (facts.user_namespaces || facts.pivot_root) return "the probe passed under a filter that denies clone3";
    if (!contains(facts.container_probe, "clone3(CLONE_NEWUSER|CLONE_NEWNS): Function not implemented"))
      return "probe said: " + facts.container_probe;
    return "";
  }));
}

// ---- rootless: corral itself runs as uid 65534 ---------------------------------------

Test(container, rootless_runs_map_the_callers_own_id) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  TempDir base;
  chown(base.path().c_str(), 65534, 65534);
  std::string helpers = helpers_dir();
  EXPECT_EMPTY(as_nobody([&]() -> std::string {
    HostFacts facts = probe_host();
    if (!facts.user_namespaces || !facts.pivot_root) return "";  // checked as root above; nothing to add
    SupervisorOptions o;
    o.workspace_base = base.path();
    auto sup = Supervisor::create(o);
    if (!sup) return "supervisor: " + sup.error().message();
    Request r = boxed({"/helpers/inside", "observe", "1"});
    r.binds[0].source = helpers;
    auto res = (*sup)->run(std::move(r));
    if (!res) return "refused: " + res.error().message();
    return mismatches(*res, {{"uid", "65534"},
                             {"CapEff", "0000000000000000"},
                             {"CapBnd", "0000000000000000"},
                             {"NoNewPrivs", "1"},
                             {"proc_pids", "2"},  // pid 1 is not the program's to see
                             {"net_devices", "lo"},
                             {"write_usr", "EROFS"},
                             {"unshare_user", "EPERM"}});
  }));
}

Test(container, rootless_memory_ceiling_is_refused_unless_acknowledged) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  TempDir base;
  chown(base.path().c_str(), 65534, 65534);
  std::string skipped;
  std::string failure = as_nobody([&]() -> std::string {
    HostFacts facts = probe_host();
    if (facts.cgroup_memory) return "SKIP: uid 65534 has a delegated memory cgroup here";
    auto map = enforcement_map(facts, Tier::container);
    for (const auto& e : map)
      if (e.name == "memory_bytes" && (e.how != "unsupported" || !contains(e.note, "delegated")))
        return "enforcement says memory_bytes " + e.how + ": " + e.note;
    SupervisorOptions o;
    o.workspace_base = base.path();
    auto sup = Supervisor::create(o);
    if (!sup) return "supervisor: " + sup.error().message();
    Request r;
    r.tier = Tier::container;
    r.argv = {"true"};
    r.limits.set(Limit::memory_bytes, 64ull << 20);
    auto refused = (*sup)->run(r);
    if (refused) return "a memory ceiling nobody enforces was not refused";
    if (!contains(refused.error().message(), "memory_bytes"))
      return "the refusal does not name memory_bytes: " + refused.error().message();
    r.acknowledged.insert("memory_bytes");
    auto ran = (*sup)->run(std::move(r));
    if (!ran) return "acknowledged run refused: " + ran.error().message();
    if (ran->outcome != Outcome::exited) return "acknowledged run: " + ran->detail;
    if (!contains(ran->detail, "memory_bytes=67108864 (acknowledged) is not enforced"))
      return "the detail does not say what was not enforced: " + ran->detail;
    return "";
  });
  if (failure.rfind("SKIP: ", 0) == 0) cr_skip_test("%s", failure.c_str() + 6);
  EXPECT_EMPTY(failure);
}
