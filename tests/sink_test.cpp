#include "corral/sink.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "corral/outputs.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::TempDir;

namespace {

Artifact artifact(std::string name, std::string bytes) {
  std::string hash = sha256_hex(bytes);
  return Artifact{std::move(name), "text/plain", std::move(bytes), std::move(hash)};
}

FilesystemSink open_sink(const std::string& root,
                         FilesystemSink::Existing existing = FilesystemSink::Existing::refuse) {
  auto sink = FilesystemSink::open(root, existing);
  cr_assert(sink.ok(), "%s", sink.error().message().c_str());
  return std::move(sink).value();
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_symlink(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// Names in `dir` that start with the sink's temporary prefix.
int partial_files(const std::string& dir) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(".corral-partial-", 0) == 0) ++n;
    closedir(d);
  }
  return n;
}

void assert_refused(const Expected<Landed>& r, std::initializer_list<std::string_view> words) {
  cr_assert(!r.ok(), "the sink delivered");
  for (auto word : words)
    cr_assert(r.error().message().find(word) != std::string::npos, "'%.*s' not in: %s",
              (int)word.size(), word.data(), r.error().message().c_str());
}

}  // namespace

Test(sink, delivers_into_nested_directories) {
  TempDir root;
  auto sink = open_sink(root.path());
  auto landed = sink.deliver(artifact("reports/2024/run.json", "{\"ok\":true}"));
  cr_assert(landed.ok(), "%s", landed.error().message().c_str());
  cr_assert(landed->location == root / "reports/2024/run.json");
  cr_assert_eq(landed->bytes, 11u);
  cr_assert(corral_test::read_file(root / "reports/2024/run.json") == "{\"ok\":true}");
  // A second file in an existing directory, and no temporary left behind.
  cr_assert(sink.deliver(artifact("reports/2024/b.txt", "b")).ok());
  cr_assert_eq(partial_files(root / "reports/2024"), 0);
}

Test(sink, a_symlinked_parent_cannot_carry_a_write_out) {
  TempDir root, outside;
  cr_assert_eq(symlink(outside.path().c_str(), (root / "evil").c_str()), 0);
  auto sink = open_sink(root.path());
  assert_refused(sink.deliver(artifact("evil/x.txt", "pwned")),
                 {"sink: open directory 'evil'", "symlink"});
  cr_assert(!exists(outside / "x.txt"), "the write went through the symlink");
  // Deeper: a real directory, then a link.
  cr_assert_eq(mkdir((root / "a").c_str(), 0755), 0);
  cr_assert_eq(symlink(outside.path().c_str(), (root / "a/b").c_str()), 0);
  assert_refused(sink.deliver(artifact("a/b/c/d.txt", "pwned")), {"'a/b'", "symlink"});
  cr_assert(!exists(outside / "c"), "a directory was created through the symlink");
}

Test(sink, a_planted_file_symlink_is_never_followed) {
  TempDir root, outside;
  corral_test::write_file(outside / "target", "original");
  cr_assert_eq(symlink((outside / "target").c_str(), (root / "out.txt").c_str()), 0);
  cr_assert_eq(symlink((outside / "absent").c_str(), (root / "dangling.txt").c_str()), 0);

  auto refusing = open_sink(root.path());
  assert_refused(refusing.deliver(artifact("out.txt", "pwned")), {"'out.txt' already exists"});
  assert_refused(refusing.deliver(artifact("dangling.txt", "pwned")), {"'dangling.txt' already exists"});
  cr_assert(corral_test::read_file(outside / "target") == "original");
  cr_assert(!exists(outside / "absent"), "a dangling symlink was followed");

  // Replacing replaces the link itself, never its target.
  auto replacing = open_sink(root.path(), FilesystemSink::Existing::replace);
  cr_assert(replacing.deliver(artifact("out.txt", "new")).ok());
  cr_assert(!is_symlink(root / "out.txt"));
  cr_assert(corral_test::read_file(root / "out.txt") == "new");
  cr_assert(corral_test::read_file(outside / "target") == "original");
  cr_assert_eq(partial_files(root.path()), 0);
}

Test(sink, existing_files_are_refused_or_replaced_as_configured) {
  TempDir root;
  auto refusing = open_sink(root.path());
  cr_assert(refusing.deliver(artifact("a.txt", "one")).ok());
  assert_refused(refusing.deliver(artifact("a.txt", "two")), {"'a.txt' already exists", root.path()});
  cr_assert(corral_test::read_file(root / "a.txt") == "one");
  cr_assert_eq(partial_files(root.path()), 0, "a refused delivery left a temporary file");

  auto replacing = open_sink(root.path(), FilesystemSink::Existing::replace);
  cr_assert(replacing.deliver(artifact("a.txt", "two")).ok());
  cr_assert(corral_test::read_file(root / "a.txt") == "two");
  // A directory is never replaced by a file.
  cr_assert_eq(mkdir((root / "dir").c_str(), 0755), 0);
  assert_refused(replacing.deliver(artifact("dir", "x")), {"sink: land 'dir'"});
  cr_assert_eq(partial_files(root.path()), 0);
}

Test(sink, refuses_bad_names_itself) {
  TempDir root;
  auto sink = open_sink(root.path());
  assert_refused(sink.deliver(artifact("../escape.txt", "x")),
                 {"sink: landing name '../escape.txt' has a '..' segment"});
  assert_refused(sink.deliver(artifact("/tmp/abs.txt", "x")), {"is absolute"});
  assert_refused(sink.deliver(artifact("", "x")), {"is empty"});
}

Test(sink, the_root_is_pinned_when_the_sink_opens) {
  TempDir parent;
  std::string root = parent / "root", moved = parent / "moved";
  cr_assert_eq(mkdir(root.c_str(), 0755), 0);
  auto sink = open_sink(root);
  cr_assert_eq(rename(root.c_str(), moved.c_str()), 0);
  cr_assert_eq(symlink("/tmp", root.c_str()), 0);  // the old name now points elsewhere
  cr_assert(sink.deliver(artifact("pinned.txt", "x")).ok());
  cr_assert(exists(moved + "/pinned.txt"));
  cr_assert(!exists("/tmp/pinned.txt") || !is_symlink(root));
}

Test(sink, opening_a_missing_root_names_it) {
  auto sink = FilesystemSink::open("/nonexistent/corral-sink-root");
  cr_assert(!sink.ok());
  cr_assert(sink.error().message().find("sink: open root '/nonexistent/corral-sink-root'") !=
                std::string::npos,
            "%s", sink.error().message().c_str());
  cr_assert_eq(sink.error().code(), ENOENT);
  cr_assert(!FilesystemSink::open("").ok());
}

// A transfer through a FilesystemSink whose root holds a planted link: the
// sink's refusal comes in phase 4 (only the sink sees its own directory),
// so it is a delivery failure, and the error says what had landed.
Test(sink, a_transfer_through_a_poisoned_root_reports_what_landed) {
  TempDir root, outside;
  cr_assert_eq(symlink(outside.path().c_str(), (root / "logs").c_str()), 0);
  struct Source final : OutputSource {
    Expected<std::vector<std::string>> list(std::string_view) override { return std::vector<std::string>{}; }
    Expected<std::optional<std::uint64_t>> stat(std::string_view) override {
      return std::optional<std::uint64_t>{2};
    }
    struct Ok final : OutputReader {
      std::string_view left = "ok";
      Expected<std::size_t> read(std::span<char> buf) override {
        std::size_t n = std::min(buf.size(), left.size());
        left.copy(buf.data(), n);
        left.remove_prefix(n);
        return n;
      }
    };
    Expected<std::unique_ptr<OutputReader>> open(std::string_view) override {
      return std::unique_ptr<OutputReader>(std::make_unique<Ok>());
    }
  } source;
  auto sink = open_sink(root.path());
  auto r = transfer({DeclaredOutput{"a.txt", "text/plain", true, "", Disposition::land},
                     DeclaredOutput{"b.txt", "text/plain", true, "logs/b.txt", Disposition::land}},
                    TransferLimits{}, source, &sink);
  cr_assert(!r.ok());
  cr_assert_eq(r.error().kind, TransferErrorKind::delivery_failed);
  cr_assert(r.error().message().find("delivered before it: 'a.txt'") != std::string::npos, "%s",
            r.error().message().c_str());
  cr_assert(!exists(outside / "b.txt"));
}

// A writer streams into a temporary file in the root: dropped before its
// commit it leaves nothing, committed it lands whole under its name (its
// parents made only then).
Test(sink, a_streamed_artifact_lands_only_at_commit_and_leaves_nothing_when_dropped) {
  TempDir root;
  auto sink = open_sink(root.path());
  {
    auto dropped = sink.begin("gone/a.txt", "text/plain");
    cr_assert(dropped.ok(), "%s", dropped.error().message().c_str());
    cr_assert((*dropped)->write("half").ok());
  }
  cr_assert(std::filesystem::is_empty(root.path()), "a dropped writer left something in the root");
  auto w = sink.begin("d/e/b.txt", "text/plain");
  cr_assert(w.ok(), "%s", w.error().message().c_str());
  for (int i = 0; i < 3; ++i) cr_assert((*w)->write("abc").ok());
  cr_assert(!exists(root / "d"), "a parent was made before the commit");
  cr_assert((*w)->finish().ok());
  auto landed = (*w)->commit("");
  cr_assert(landed.ok(), "%s", landed.error().message().c_str());
  cr_assert_eq(landed->bytes, 9u);
  cr_assert_eq(corral_test::read_file(root / "d/e/b.txt"), "abcabcabc");
  std::size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(root.path())) entries += e.path().filename() == "d" ? 0 : 1;
  cr_assert_eq(entries, 0u, "a temporary file was left in the root");
}
