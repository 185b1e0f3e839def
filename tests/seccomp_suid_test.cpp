// The default seccomp profile refuses set-user/group-id bits (as systemd's
// RestrictSUIDSGID=): a file a run makes set-id outlives it wherever the
// host reaches it. A writable bind is idmapped, so the host sees the
// directory's owner as the file's owner; nosuid on the sandbox's mount does
// nothing for the host's view. tests/helpers/hostile.c's `set-id` mode
// tries every way a mode is set and prints what became of each try; the
// filter alone, tier process and tier container must all refuse, and keep
// ordinary modes working.
#include <dirent.h>
#include <sys/stat.h>

#include <fcntl.h>

#include "container_support.hpp"
#include "corral/seccomp.hpp"

using namespace corral;
using namespace container_test;
using corral_test::helper;
using corral_test::TempDir;

namespace {

// What `hostile set-id` must print under the default profile. tmpfile-4755
// may also be "unsupported" (a filesystem without O_TMPFILE).
const std::map<std::string, std::string>& refused_and_kept() {
  static const std::map<std::string, std::string> want = {
      // The controls: ordinary modes still work.
      {"chmod-0644", "ok"},
      {"chmod-0755", "ok"},
      {"open-0644", "ok"},
      {"mkdir-0755", "ok"},
      {"open-junk-mode", "ok"},  // no O_CREAT: the mode is not looked at
      // The tries: each refused by the filter.
      {"chmod-4755", "EPERM"},
      {"chmod-2755", "EPERM"},
      {"raw-chmod-6755", "EPERM"},
      {"fchmod-4755", "EPERM"},
      {"fchmodat-4755", "EPERM"},
      {"fchmodat2-2755", "EPERM"},
      {"open-4755", "EPERM"},
      {"raw-open-4755", "EPERM"},
      {"creat-2755", "EPERM"},
      {"mknod-4755", "EPERM"},
      {"mkdir-2755", "EPERM"},
      {"openat2-4755", "ENOSYS"},
  };
  return want;
}

std::string set_id_mismatches(const std::string& out) {
  std::string bad = corral_test::observation_mismatches(out, refused_and_kept());
  auto got = corral_test::kv(out);
  const std::string tmpfile = got.count("tmpfile-4755") ? got["tmpfile-4755"] : "<missing>";
  if (tmpfile != "EPERM" && tmpfile != "unsupported") bad += "\n  tmpfile-4755: expected 'EPERM', got '" + tmpfile + "'";
  return bad.empty() ? "" : bad + "\nstdout:\n" + out;
}

std::string text_of(const Result& r) {
  std::string w;
  for (const auto& x : r.warnings) w += x + "\n";
  return "outcome " + std::string(to_string(r.outcome)) + " exit " + std::to_string(r.exit_code) + ": " + r.detail +
         "\nstdout: " + r.stdout_capture.text + "\nstderr: " + r.stderr_capture.text + "\nwarnings: " + w;
}

// Files below `dir` (the directory included) whose mode has S_ISUID or
// S_ISGID, each with its owner: what the host would run as someone else.
std::string set_id_files(const std::string& dir) {
  std::string out;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (!strcmp(e->d_name, "..")) continue;
    std::string p = dir + "/" + e->d_name;
    struct stat st;
    if (lstat(p.c_str(), &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID)))
      out += p + " mode " + std::to_string(st.st_mode & 07777) + " uid " + std::to_string(st.st_uid) + "\n";
  }
  if (d) closedir(d);
  return out;
}

}  // namespace

// The filter on its own (no tier): installed in a fork that then execs the
// helper, as any caller of apply_seccomp_in_child would.
Test(seccomp_suid, the_default_profile_refuses_set_id_modes_and_keeps_plain_ones) {
  SeccompSpec spec;
  spec.profile("default");
  auto prog = prepare(spec);
  cr_assert(prog.ok(), "prepare: %s", prog.ok() ? "" : prog.error().message().c_str());
  TempDir dir, capture;
  const std::string out_path = capture / "out", bin = helper("hostile");
  auto end = corral_test::run_in_child([&] {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || dup2(out, 1) < 0) return 126;
    if (apply_seccomp_in_child(*prog) != 0) return 125;
    execl(bin.c_str(), "hostile", "set-id", dir.path().c_str(), (char*)nullptr);
    return 127;
  });
  const std::string out = corral_test::read_file(out_path);
  cr_assert(end.exited && end.code == 0, "hostile set-id: exit %d signal %d\n%s", end.code, end.signal, out.c_str());
  std::string bad = set_id_mismatches(out);
  cr_assert(bad.empty(), "%s", bad.c_str());
  cr_assert_str_empty(set_id_files(dir.path()).c_str());
}

// Tier process: the run's uid owns its workspace, where a set-id file would
// outlive it in the host's view (and a --write-path is the same).
Test(seccomp_suid, tier_process_refuses_set_id_modes) {
  Harness h;
  Result r = h.run(corral_test::req(Tier::os_process, {helper("hostile"), "set-id", "."}));
  cr_assert(r.outcome == Outcome::exited && r.exit_code == 0, "%s", text_of(r).c_str());
  std::string bad = set_id_mismatches(r.stdout_capture.text);
  cr_assert(bad.empty(), "%s", bad.c_str());
}

// Tier process with a --write-path on the host: nothing set-id lands there.
Test(seccomp_suid, tier_process_leaves_no_set_id_file_in_a_write_path) {
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  TempDir dir;
  cr_assert_eq(chmod(dir.path().c_str(), 0777), 0);
  Request req = corral_test::req(Tier::os_process, {helper("hostile"), "set-id", dir.path()});
  req.write_paths.push_back(dir.path());
  Result r = h.run(std::move(req));
  cr_assert(r.outcome == Outcome::exited && r.exit_code == 0, "%s", text_of(r).c_str());
  std::string bad = set_id_mismatches(r.stdout_capture.text);
  cr_assert(bad.empty(), "%s", bad.c_str());
  std::string left = set_id_files(dir.path());
  cr_assert(left.empty(), "set-id files on the host:\n%s", left.c_str());
}

Test(seccomp_suid, tier_container_refuses_set_id_modes) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Result r = h.run(boxed({"/helpers/hostile", "set-id", "."}));
  cr_assert(r.outcome == Outcome::exited && r.exit_code == 0, "%s", text_of(r).c_str());
  std::string bad = set_id_mismatches(r.stdout_capture.text);
  cr_assert(bad.empty(), "%s", bad.c_str());
}

// The red team's case: a writable bind of a directory owned by 1000 is
// idmapped, so what the run creates there is 1000's on the host. A set-id
// file there would give any host user euid 1000.
Test(seccomp_suid, a_writable_bind_gets_no_set_id_file_onto_the_host) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  TempDir dir;
  cr_assert_eq(chown(dir.path().c_str(), 1000, 1000), 0);
  cr_assert_eq(chmod(dir.path().c_str(), 0755), 0);
  Request req = boxed({"/helpers/hostile", "set-id", "/out"});
  req.binds.push_back(MountBind{dir.path(), "/out", true});
  Result r = h.run(std::move(req));
  std::string warnings;
  for (const auto& w : r.warnings) warnings += w + "\n";
  if (contains(warnings, "no idmapped mount")) {
    std::printf("skipped: this host cannot idmap the bind: %s", warnings.c_str());
    cr_skip_test("no idmapped mount here: %s", warnings.c_str());
  }
  cr_assert(r.outcome == Outcome::exited && r.exit_code == 0, "%s", text_of(r).c_str());
  // The bind is what the red team said: the plain file is 1000's on the host.
  struct stat st;
  cr_assert_eq(stat((dir / "plain").c_str(), &st), 0, "%s", text_of(r).c_str());
  cr_assert_eq(st.st_uid, 1000u, "host owner %u: not the idmapped bind this test is about", st.st_uid);
  std::string left = set_id_files(dir.path());
  cr_assert(left.empty(), "set-id files on the host:\n%s\n%s", left.c_str(), r.stdout_capture.text.c_str());
  std::string bad = set_id_mismatches(r.stdout_capture.text);
  cr_assert(bad.empty(), "%s", bad.c_str());
}

// What corral says about the filter says this too.
Test(seccomp_suid, the_profile_and_the_claim_say_so) {
  auto def = describe_seccomp_profile("default");
  cr_assert(def.ok());
  corral_test::assert_mentions(*def, {"chmod (mode has S_ISUID or S_ISGID)", "fchmodat2 (mode has S_ISUID or S_ISGID)",
                                      "openat (flags include O_CREAT or O_TMPFILE and mode has S_ISUID or S_ISGID)",
                                      "mknodat (mode has S_ISUID or S_ISGID)", "openat2"});
  for (Tier tier : {Tier::os_process, Tier::container}) {
    auto summary = enforcement_summary(host(), tier);
    bool said = false;
    for (const auto& e : enforcement_map(host(), tier))
      if (e.name == kGuaranteeSeccomp) said = contains(e.note, "set-user/group-id bits refused");
    cr_assert(said || summary[std::string(kGuaranteeSeccomp)] == "unsupported",
              "the seccomp claim does not say set-id bits are refused");
  }
}
