// Integration tests of the container tier with real data (issue 20): binds
// whose files land on the host as the directory's owner (idmapped mounts),
// --chdir without a mount, --tmpfs and tmp_bytes, directory inputs, devices
// and the container's PATH. Observed from the host side where it can be:
// owners of written files, the run's device cgroup, the mounts inside.
#include <sys/stat.h>

#include <set>
#include <sstream>

#include "container_support.hpp"
#include "corral/door.hpp"

using namespace corral;
using namespace container_test;
using corral_test::TempDir;

namespace {

Request sh(const std::string& script) {
  Request r;
  r.tier = Tier::container;
  r.argv = {"/bin/sh", "-c", script};
  return r;
}

std::string all_warnings(const Result& r) {
  std::string out;
  for (const auto& w : r.warnings) out += w + "\n";
  return out;
}

std::string text_of(const Result& r) {
  return "outcome " + std::string(to_string(r.outcome)) + " exit " + std::to_string(r.exit_code) + ": " + r.detail +
         "\nstdout: " + r.stdout_capture.text + "\nstderr: " + r.stderr_capture.text + "\nwarnings: " + all_warnings(r);
}

// Mount points (mountinfo's 5th field) of the lines in `text`.
std::multiset<std::string> mount_points(const std::string& text) {
  std::multiset<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string field;
    for (int i = 0; i < 5 && f >> field; ++i) {
    }
    if (!field.empty()) out.insert(field);
  }
  return out;
}

}  // namespace

// ---- writable binds: the directory's owner, never root --------------------------------

Test(container_data, a_file_written_through_a_bind_is_owned_by_the_directorys_owner) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  TempDir dir;
  // Only 4242 may write here: the old bind (run uid 2000xx) got EACCES.
  cr_assert_eq(chown(dir.path().c_str(), 4242, 4243), 0);
  cr_assert_eq(chmod(dir.path().c_str(), 0755), 0);
  Request r = boxed({"/helpers/inside", "write", "/out/result.txt", "hello"});
  r.binds.push_back(MountBind{dir.path(), "/out", true});
  Result res = h.run(std::move(r));
  if (contains(all_warnings(res), "no idmapped mount")) {
    // The fallback, said in the Result: the filesystem cannot idmap.
    cr_skip_test("no idmapped mount here: %s", all_warnings(res).c_str());
  }
  cr_assert_eq(res.outcome, Outcome::exited, "%s", text_of(res).c_str());
  cr_assert_eq(res.exit_code, 0, "%s", text_of(res).c_str());
  struct stat st;
  cr_assert_eq(stat((dir / "result.txt").c_str(), &st), 0, "%s", text_of(res).c_str());
  cr_assert_eq(st.st_uid, 4242u, "host owner %u", st.st_uid);
  cr_assert_eq(st.st_gid, 4243u, "host group %u", st.st_gid);
  cr_assert_eq(corral_test::read_file(dir / "result.txt"), "hello");
}

Test(container_data, owner_names_the_host_owner_of_a_binds_files) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  TempDir dir;
  cr_assert_eq(chown(dir.path().c_str(), 4242, 4242), 0);
  auto b = parse_bind_spec(dir.path() + ":/out:owner=4244:4245", true);
  cr_assert(b.ok(), "%s", b.ok() ? "" : b.error().message().c_str());
  cr_assert_eq(*b->owner_uid, 4244u);
  Request r = boxed({"/helpers/inside", "write", "/out/x", "y"});
  r.binds.push_back(*b);
  Result res = h.run(std::move(r));
  if (contains(all_warnings(res), "no idmapped mount")) cr_skip_test("%s", all_warnings(res).c_str());
  // 4242's 0700 directory seen as 4244's: writing as 4244 needs the owner bits.
  struct stat st;
  if (stat((dir / "x").c_str(), &st) == 0) {
    cr_assert_eq(st.st_uid, 4244u);
    cr_assert_eq(st.st_gid, 4245u);
  } else {
    cr_assert(contains(res.stdout_capture.text + res.stderr_capture.text, "EACCES") ||
                  contains(res.stdout_capture.text + res.stderr_capture.text, "ermission"),
              "%s", text_of(res).c_str());
  }
  for (const char* bad : {"/a:/b:owner=0:0", "/a:/b:owner=0", "/a:/b:owner=5:0", "/a:/b:owner=x"}) {
    auto refused = parse_bind_spec(bad, true);
    cr_assert(!refused.ok(), "%s was accepted", bad);
  }
  cr_assert(!parse_bind_spec("/a:/b:owner=5:5", false).ok(), "owner= on a read-only bind");
}

Test(container_data, a_bind_of_a_root_owned_directory_never_yields_root_owned_files) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  TempDir dir;  // root's, 0777 so the run's uid may write
  cr_assert_eq(chmod(dir.path().c_str(), 0777), 0);
  Request r = boxed({"/helpers/inside", "write", "/out/f", "z"});
  r.binds.push_back(MountBind{dir.path(), "/out", true});
  Result res = h.run(std::move(r));
  cr_assert_eq(res.exit_code, 0, "%s", text_of(res).c_str());
  struct stat st;
  cr_assert_eq(stat((dir / "f").c_str(), &st), 0);
  cr_assert_neq(st.st_uid, 0u, "the sandbox wrote as host root");
  cr_assert_neq(st.st_gid, 0u, "the sandbox wrote as host group root");
  cr_assert_geq(st.st_uid, 200000u, "host owner %u is not one of the run uids", st.st_uid);
  cr_assert(contains(res.detail, "owned by root"), "%s", res.detail.c_str());
}

Test(container_data, a_bind_source_is_not_followed_through_a_symlink_the_door_resolved) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  TempDir dir;
  cr_assert_eq(mkdir((dir / "real").c_str(), 0755), 0);
  cr_assert_eq(symlink("/etc", (dir / "link").c_str()), 0);
  // What the door hands on is resolved: a symlink there now is refused.
  Request r = boxed({"true"});
  MountBind b{dir / "link", "/x", false};
  b.resolved = true;
  r.binds.push_back(b);
  auto refused = h.sup->run(std::move(r));
  cr_assert(!refused.ok(), "a resolved bind source followed a symlink");
  cr_assert(contains(refused.error().message(), "symlink"), "%s", refused.error().message().c_str());
}

// ---- --chdir: a working directory, nothing mounted ---------------------------------------

Test(container_data, chdir_works_in_a_directory_without_mounting_anything) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Result plain = h.run(sh("cat /proc/self/mountinfo"));
  cr_assert_eq(plain.exit_code, 0, "%s", text_of(plain).c_str());
  Request r = sh("pwd; cat /proc/self/mountinfo");
  r.chdir = "/usr/lib";
  Result moved = h.run(std::move(r));
  cr_assert_eq(moved.exit_code, 0, "%s", text_of(moved).c_str());
  std::string out = moved.stdout_capture.text;
  cr_assert_eq(out.substr(0, out.find('\n')), "/usr/lib");
  cr_assert(mount_points(out.substr(out.find('\n') + 1)) == mount_points(plain.stdout_capture.text),
            "mounts differ:\n%s\nvs\n%s", out.c_str(), plain.stdout_capture.text.c_str());
  Request both = sh("true");
  both.chdir = "/usr";
  both.cwd = "/tmp";
  cr_assert(!h.sup->run(std::move(both)).ok(), "cwd and chdir together were accepted");
}

// ---- tmpfs mounts and /tmp's size ----------------------------------------------------------

Test(container_data, a_tmpfs_of_1M_refuses_the_second_mebibyte) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  auto t = parse_tmpfs_spec("/scratch:1M");
  cr_assert(t.ok(), "%s", t.ok() ? "" : t.error().message().c_str());
  cr_assert_eq(*t->bytes, 1u << 20);
  Request r = sh("head -c 2097152 /dev/zero > /scratch/a; echo rc=$?; wc -c < /scratch/a");
  r.tmpfs.push_back(*t);
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", text_of(res).c_str());
  cr_assert(contains(res.stderr_capture.text, "No space left on device"), "%s", text_of(res).c_str());
  cr_assert(!contains(res.stdout_capture.text, "rc=0"), "%s", text_of(res).c_str());
  auto size = std::stoull(res.stdout_capture.text.substr(res.stdout_capture.text.find('\n') + 1));
  cr_assert_leq(size, 1u << 20, "%llu bytes written to a 1 MiB tmpfs", static_cast<unsigned long long>(size));
  cr_assert_geq(size, (1u << 20) - 65536, "only %llu bytes fit", static_cast<unsigned long long>(size));
  for (const char* bad : {"scratch:1M", "/s:1X", "/s:-1", "/s:1", "/s:"}) cr_assert(!parse_tmpfs_spec(bad).ok(), "%s", bad);
}

// Empty files cost a tmpfs inodes (~1 KiB of kernel memory each) and no
// size; the kernel's default allows millions whatever the size. Every
// tmpfs of a container (/tmp, /dev/shm, a --tmpfs, and as root its
// workspace) allows one inode per 4 KiB of its size plus 1024. On the old
// code each 4 MiB tmpfs here took all 20,000 empty files.
Test(container_data, empty_files_in_each_tmpfs_stop_at_its_inode_bound) {
  SKIP_UNLESS_CONTAINER();
  constexpr std::uint64_t kBytes = 4ull << 20;
  constexpr unsigned long kBound = kBytes / 4096 + 1024;
  Harness h;
  std::vector<std::string> dirs = {"/tmp", "/dev/shm", "/scratch"};
  if (geteuid() == 0) dirs.push_back(".");  // rootless, the workspace is a directory of the host's
  Request r = sh(corral_test::empty_files_until_refused(dirs, 20000));
  r.limits.set(Limit::tmp_bytes, kBytes);
  r.limits.set(Limit::shm_bytes, kBytes);
  r.limits.set(Limit::workspace_bytes, kBytes);
  auto scratch = parse_tmpfs_spec("/scratch:4M");
  cr_assert(scratch.ok());
  r.tmpfs.push_back(*scratch);
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", text_of(res).c_str());
  auto made = corral_test::empty_files_made(res.stdout_capture.text);
  for (const auto& dir : dirs) {
    cr_assert(made.count(dir), "%s: %s", dir.c_str(), text_of(res).c_str());
    cr_expect(made[dir] < kBound && made[dir] + 8 > kBound, "%s of %llu bytes took %lu empty files (bound %lu)",
              dir.c_str(), static_cast<unsigned long long>(kBytes), made[dir], kBound);
  }
}

Test(container_data, tmp_bytes_is_the_size_of_tmp_and_shown_in_the_result) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Request r = sh("head -c 2097152 /dev/zero > /tmp/a; echo rc=$?");
  r.limits.set(Limit::tmp_bytes, 1 << 20);
  Result res = h.run(std::move(r));
  cr_assert(contains(res.stderr_capture.text, "No space left on device"), "%s", text_of(res).c_str());
  cr_assert_eq(res.limits.get(Limit::tmp_bytes).value_or(0), 1u << 20);
  Result dflt = h.run(sh("true"));
  cr_assert(dflt.limits.has(Limit::tmp_bytes), "the default tmp_bytes is not in the result");
  cr_assert_eq(dflt.limits.get(Limit::shm_bytes).value_or(0), kContainerShmBytes);
  Request capped = sh("true");
  capped.limits.set(Limit::memory_bytes, 256 << 20);
  if (host().cgroup_memory)
    cr_assert_eq(h.run(std::move(capped)).limits.get(Limit::tmp_bytes).value_or(0), 256u << 20,
                 "tmp_bytes by default is at most memory_bytes");
}

// ---- directory inputs ------------------------------------------------------------------------

Test(container_data, an_input_directory_is_staged_and_a_symlink_out_of_it_skipped) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  TempDir tree;
  cr_assert_eq(mkdir((tree / "sub").c_str(), 0755), 0);
  cr_assert_eq(mkdir((tree / "empty").c_str(), 0755), 0);
  corral_test::write_file(tree / "top.txt", "top");
  corral_test::write_file(tree / "sub/deep.txt", "deep");
  cr_assert_eq(symlink("/etc/passwd", (tree / "escape").c_str()), 0);
  cr_assert_eq(symlink("top.txt", (tree / "inside-link").c_str()), 0);
  Request r = sh("cd /workspace/data && find . | sort && cat sub/deep.txt");
  Input in;
  in.name = "data";
  in.host_path = tree.path();
  r.inputs.push_back(in);
  Result res = h.run(std::move(r));
  cr_assert_eq(res.exit_code, 0, "%s", text_of(res).c_str());
  cr_assert_eq(res.stdout_capture.text, ".\n./empty\n./sub\n./sub/deep.txt\n./top.txt\ndeep", "%s", text_of(res).c_str());
  cr_assert(contains(all_warnings(res), "data/escape (a symlink)"), "%s", all_warnings(res).c_str());
  // The caps of outputs.
  Request over = sh("true");
  over.inputs.push_back(in);
  over.limits.set(Limit::artifact_count, 1);
  Result refused = h.run(std::move(over));  // a run that did not start (spawn_failed, stage inputs)
  cr_assert(refused.outcome == Outcome::spawn_failed && refused.spawn_stage == "inputs",
            "a tree over artifact_count was staged: %s", refused.detail.c_str());
  cr_assert(contains(refused.detail, "artifact_count=1"), "%s", refused.detail.c_str());
}

// ---- PATH ---------------------------------------------------------------------------------

Test(container_data, the_container_path_is_its_own_unless_the_request_sets_it) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  setenv("PATH", "/root/.pyenv/shims:/usr/local/bin:/usr/bin:/bin", 1);
  Result res = h.run(sh("echo \"$PATH\""));
  cr_assert_eq(res.stdout_capture.text, "/usr/local/bin:/usr/bin:/bin\n", "%s", text_of(res).c_str());
  cr_assert_eq(res.env_path, "/usr/local/bin:/usr/bin:/bin");
  Request r = sh("echo \"$PATH\"");
  r.env["PATH"] = "/opt/x:/usr/bin";
  Result set = h.run(std::move(r));
  cr_assert_eq(set.stdout_capture.text, "/opt/x:/usr/bin\n");
  cr_assert_eq(set.env_path, "/opt/x:/usr/bin");
  cr_assert(contains(result_to_json(set), "\"env_path\":\"/opt/x:/usr/bin\""), "%s", result_to_json(set).c_str());
}

// ---- devices --------------------------------------------------------------------------------

Test(container_data, dev_bind_binds_a_device_and_the_device_cgroup_lists_exactly_those) {
  SKIP_UNLESS_CONTAINER();
  if (!host().cgroups.has("devices")) cr_skip_test("no devices cgroup: %s", host().cgroup_summary.c_str());
  // /dev/net/tun only where its mode lets the run's uid open it.
  struct stat tun_st;
  const bool tun = stat("/dev/net/tun", &tun_st) == 0 && (tun_st.st_mode & 06) == 06;
  Harness h;
  Request r = sh("echo x > /dev/null && echo null=ok; " + std::string(tun ? "exec 3<>/dev/net/tun && echo tun=ok; " : "") +
                 "sleep 2");
  r.dev_binds.push_back("/dev/null");
  if (tun) r.dev_binds.push_back("/dev/net/tun");
  std::shared_ptr<Result> result;
  RunCallbacks cb;
  cb.on_result = [&](const Result& res) { result = std::make_shared<Result>(res); };
  auto handle = h.sup->submit(std::move(r), cb);
  cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
  // From the host, while it runs: the run's device list.
  std::string list;
  if (host().cgroups.backend == CgroupVersion::v1) {
    const auto& hier = host().cgroups.v1[static_cast<std::size_t>(host().cgroups.v1_devices)];
    const std::string parent = hier.own_dir + "/corral";
    const std::string mine = "-" + std::to_string(getpid()) + "-";
    for (int i = 0; i < 100 && list.empty() && !result; ++i) {
      (void)h.sup->run_once(0.02);
      DIR* d = opendir(parent.c_str());
      while (dirent* e = d ? readdir(d) : nullptr)
        if (contains(e->d_name, mine)) list = corral_test::read_file(parent + "/" + e->d_name + "/devices.list");
      if (d) closedir(d);
    }
    cr_assert(!list.empty(), "no devices group of the run under %s", parent.c_str());
    cr_assert(!contains(list, "a *:*"), "the run may open every device:\n%s", list.c_str());
    cr_assert(contains(list, "c 1:3 rwm"), "%s", list.c_str());
    if (tun) cr_assert(contains(list, "c 10:200 rwm"), "%s", list.c_str());
    cr_assert(!contains(list, "c 1:11 "), "/dev/kmsg allowed:\n%s", list.c_str());
  }
  cr_assert(h.sup->run_until_idle().ok());
  cr_assert(result);
  cr_assert_eq(result->exit_code, 0, "%s", text_of(*result).c_str());
  cr_assert(contains(result->stdout_capture.text, "null=ok"), "%s", text_of(*result).c_str());
  if (tun) cr_assert(contains(result->stdout_capture.text, "tun=ok"), "%s", text_of(*result).c_str());
  cr_assert_eq(result->enforcement["devices"], "cgroup");
}

Test(container_data, dev_binds_are_character_devices_and_need_the_operators_allowance) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Request file = sh("true");
  file.dev_binds.push_back("/etc/passwd");
  auto refused = h.sup->run(std::move(file));
  cr_assert(!refused.ok(), "a regular file was dev-bound");
  // Batch: a device is a host path like any other.
  auto job = job_from_json(R"({"tier":"container","argv":["true"],"dev_binds":["/dev/null"]})");
  cr_assert(job.ok(), "%s", job.ok() ? "" : job.error().message().c_str());
  DoorPolicy policy;
  auto denied = admit(job->request, job->ask, policy);
  cr_assert(!denied.ok(), "dev_binds admitted without --allow-host-path");
  cr_assert(contains(denied.error().message(), "dev_binds"), "%s", denied.error().message().c_str());
  policy.allow_host_paths = {"/dev/null"};
  cr_assert(admit(job->request, job->ask, policy).ok());
}
