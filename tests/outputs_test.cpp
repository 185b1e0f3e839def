#include "corral/outputs.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <map>

#include "support.hpp"

using namespace corral;
using corral_test::contains;
using corral_test::assert_mentions;

namespace {

// A workspace seen from outside, as a table. Every call is logged, so the
// tests can check which phase touched what.
struct FakeFile {
  std::string bytes;
  bool size_known = true;
  std::size_t grows_by = 0;  // extra bytes that appear between stat and read
  bool refused = false;      // the source will not give it (a hard link): EPERM
};

class FakeSource final : public OutputSource {
 public:
  std::map<std::string, FakeFile> files;
  std::vector<std::string> log;  // "list:..", "stat:..", "read:.."
  std::vector<std::string>* shared_log = nullptr;
  std::string fail_on;           // an operation:name that fails with EIO
  std::vector<std::string> extra_matches;  // names list() adds whatever the glob

  Expected<std::vector<std::string>> list(std::string_view glob) override {
    note("list:" + std::string(glob));
    if (fail_on == "list:" + std::string(glob)) return Error(EIO, "list failed");
    std::vector<std::string> out;
    std::string pattern(glob);
    for (const auto& [name, file] : files)
      if (fnmatch(pattern.c_str(), name.c_str(), FNM_PATHNAME) == 0) out.push_back(name);
    out.insert(out.end(), extra_matches.begin(), extra_matches.end());
    return out;
  }
  Expected<std::optional<std::uint64_t>> stat(std::string_view name) override {
    note("stat:" + std::string(name));
    if (fail_on == "stat:" + std::string(name)) return Error(EIO, "stat failed");
    auto it = files.find(std::string(name));
    if (it == files.end()) return Error(ENOENT, "no such file");
    if (it->second.refused) return Error(EPERM, "'" + it->second.bytes + "' is a hard link");
    if (!it->second.size_known) return std::optional<std::uint64_t>{};
    return std::optional<std::uint64_t>{it->second.bytes.size()};
  }
  Expected<std::unique_ptr<OutputReader>> open(std::string_view name) override {
    note("read:" + std::string(name));
    last_at_most = 0;
    auto it = files.find(std::string(name));
    if (it == files.end()) return Error(ENOENT, "no such file");
    return std::unique_ptr<OutputReader>(
        std::make_unique<Reader>(it->second.bytes + std::string(it->second.grows_by, 'g'), last_at_most));
  }
  // The file's bytes; last_at_most is how far into the file the transfer
  // asked to read (the offset plus the buffer it gave).
  class Reader final : public OutputReader {
   public:
    Reader(std::string bytes, std::uint64_t& furthest) : bytes_(std::move(bytes)), furthest_(furthest) {}
    Expected<std::size_t> read(std::span<char> buf) override {
      furthest_ = std::max<std::uint64_t>(furthest_, at_ + buf.size());
      std::size_t n = std::min(buf.size(), bytes_.size() - at_);
      std::copy_n(bytes_.data() + at_, n, buf.data());
      at_ += n;
      return n;
    }

   private:
    std::string bytes_;
    std::size_t at_ = 0;
    std::uint64_t& furthest_;
  };
  std::uint64_t last_at_most = 0;

 private:
  void note(std::string what) {
    if (shared_log) shared_log->push_back(what);
    log.push_back(std::move(what));
  }
};

class RecordingSink final : public Sink {
 public:
  std::vector<Artifact> got;
  std::vector<std::string>* shared_log = nullptr;
  std::size_t fail_at = SIZE_MAX;  // index of the delivery that fails

  Expected<Landed> deliver(const Artifact& artifact) override {
    if (shared_log) shared_log->push_back("deliver:" + artifact.name);
    if (got.size() == fail_at) return Error(ENOSPC, "sink: disk full");
    got.push_back(artifact);
    return Landed{artifact.name, "mem:" + artifact.name, artifact.bytes.size()};
  }
};

DeclaredOutput out(std::string path, bool required = false, std::string name = "",
                   Disposition disposition = Disposition::land) {
  return DeclaredOutput{std::move(path), "text/plain", required, std::move(name), disposition};
}

void assert_failed(const TransferResult& r, TransferErrorKind kind,
                   std::initializer_list<std::string_view> words) {
  cr_assert(!r.ok(), "transfer succeeded");
  cr_assert_eq(r.error().kind, kind, "kind %s, message: %s",
               std::string(to_string(r.error().kind)).c_str(), r.error().message().c_str());
  for (auto word : words)
    cr_assert(contains(r.error().message(), word), "'%.*s' not in: %s", (int)word.size(),
              word.data(), r.error().message().c_str());
}

void assert_invalid(std::string_view name, std::string_view reason) {
  Status s = validate_relative_name(name, "output");
  cr_assert(!s.ok(), "accepted '%.*s'", (int)name.size(), name.data());
  cr_assert(contains(s.error().message(), "output '"), "%s", s.error().message().c_str());
  cr_assert(contains(s.error().message(), reason), "'%.*s' not in: %s", (int)reason.size(),
            reason.data(), s.error().message().c_str());
}

TransferLimits caps(std::uint64_t per_file, std::uint64_t total, std::uint64_t files) {
  return TransferLimits{per_file, total, files};
}

}  // namespace

// ---- names

Test(outputs, lexical_checks_refuse_each_bad_form_by_name) {
  assert_invalid("", "is empty");
  assert_invalid("/etc/passwd", "'/etc/passwd' is absolute");
  assert_invalid("a/../b", "'a/../b' has a '..' segment");
  assert_invalid("..", "has a '..' segment");
  assert_invalid("./a", "has a '.' segment");
  assert_invalid("a//b", "has an empty segment");
  assert_invalid("a/", "has an empty segment");
  assert_invalid("a\\b", "contains a backslash");
  assert_invalid(std::string_view("a\0b", 3), "'a\\x00b' contains a NUL byte");
  assert_invalid("a\nb", "'a\\x0ab' contains a control character");
  assert_invalid("caf\xe9", "is not valid UTF-8");
  assert_invalid(std::string(256, 'x'), "longer than 255 bytes");
  for (const char* good : {"a", "a/b.txt", "r\xc3\xa9sum\xc3\xa9.pdf", ".hidden", "a..b", "x/.y"})
    cr_assert(validate_relative_name(good, "output").ok(), "refused '%s'", good);
}

Test(outputs, collisions_by_identity_case_and_normalization) {
  auto refused = [](std::vector<std::string> names, std::string_view how) {
    Status s = check_collisions(names);
    cr_assert(!s.ok(), "accepted %s / %s", names[0].c_str(), names[1].c_str());
    cr_assert(contains(s.error().message(), how), "%s", s.error().message().c_str());
    cr_assert(contains(s.error().message(), names[0]) && contains(s.error().message(), names[1]),
              "%s", s.error().message().c_str());
  };
  refused({"out.txt", "out.txt"}, "are identical");
  refused({"Report.txt", "report.TXT"}, "differ only by case");
  // U+00E9 (NFC) and e + U+0301 (NFD).
  refused({"caf\xc3\xa9.txt", "cafe\xcc\x81.txt"}, "differ only by Unicode normalization form");
  // Case and form at once: CAFE + U+0301 vs café (NFC).
  refused({"CAFE\xcc\x81.txt", "caf\xc3\xa9.txt"}, "one file at the destination");
  // Greek final sigma folds like sigma.
  refused({"\xce\xa3.txt", "\xcf\x82.txt"}, "differ only by case");
  refused({"a", "A/b"}, "is a file and also a parent directory of 'A/b'");
  cr_assert(check_collisions({"a.txt", "b.txt", "a.txt.bak", "dir/a.txt", "ab"}).ok());
  auto key = collision_key("\xff");
  cr_assert(!key.ok());
}

// ---- transfer: the happy path

Test(outputs, delivers_in_declaration_order_and_consumes_in_memory) {
  FakeSource src;
  src.files = {{"report.json", {"{}"}}, {"log.txt", {"hello"}}, {"score", {"42"}}};
  RecordingSink sink;
  auto r = transfer({out("report.json", true), out("log.txt", false, "logs/run.txt"),
                     out("score", true, "", Disposition::consume)},
                    TransferLimits{}, src, &sink);
  cr_assert(r.ok(), "%s", r.error().message().c_str());
  cr_assert_eq(r->size(), 3u);
  cr_assert_eq(sink.got.size(), 2u);
  cr_assert(sink.got[0].name == "report.json");
  cr_assert(sink.got[1].name == "logs/run.txt" && sink.got[1].bytes == "hello");
  cr_assert(sink.got[1].sha256 == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
  const Delivered& consumed = (*r)[2];
  cr_assert(consumed.disposition == Disposition::consume && consumed.content == "42");
  cr_assert(!consumed.landed.has_value());
  cr_assert((*r)[1].landed.has_value() && (*r)[1].landed->location == "mem:logs/run.txt");
  cr_assert((*r)[1].source_path == "log.txt" && (*r)[1].bytes == 5);
}

Test(outputs, phases_run_in_order_stat_all_then_read_all_then_deliver) {
  std::vector<std::string> log;
  FakeSource src;
  src.shared_log = &log;
  src.files = {{"a", {"1"}}, {"b", {"22"}}};
  RecordingSink sink;
  sink.shared_log = &log;
  auto r = transfer({out("a"), out("b")}, TransferLimits{}, src, &sink);
  cr_assert(r.ok(), "%s", r.error().message().c_str());
  std::vector<std::string> expected{"stat:a", "stat:b", "read:a", "read:b", "deliver:a", "deliver:b"};
  cr_assert(log == expected);
  cr_assert_eq(src.last_at_most, 3u, "read asks one byte more than stat saw");
}

// ---- phase 1: the declaration alone, before the source is touched

Test(outputs, a_landing_output_without_a_sink_is_refused_first) {
  FakeSource src;
  src.files = {{"a", {"1"}}};
  assert_failed(transfer({out("a", true, "", Disposition::consume), out("b")}, TransferLimits{}, src,
                         nullptr),
                TransferErrorKind::no_sink, {"output 'b' lands, and no sink was given"});
  cr_assert(src.log.empty());
  auto consume_only = transfer({out("a", true, "", Disposition::consume)}, TransferLimits{}, src, nullptr);
  cr_assert(consume_only.ok(), "%s", consume_only.error().message().c_str());
}

Test(outputs, invalid_names_and_collisions_are_refused_before_the_source_is_touched) {
  FakeSource src;
  RecordingSink sink;
  assert_failed(transfer({out("ok"), out("../escape")}, TransferLimits{}, src, &sink),
                TransferErrorKind::invalid_name, {"output '../escape' has a '..' segment"});
  assert_failed(transfer({out("ok", false, "/abs")}, TransferLimits{}, src, &sink),
                TransferErrorKind::invalid_name, {"output 'ok': landing name '/abs' is absolute"});
  assert_failed(transfer({out("a", false, "R.txt"), out("b", false, "r.TXT")}, TransferLimits{}, src,
                         &sink),
                TransferErrorKind::name_collision, {"'R.txt' and 'r.TXT' differ only by case"});
  assert_failed(transfer({out("a", false, "caf\xc3\xa9"), out("b", false, "cafe\xcc\x81")},
                         TransferLimits{}, src, &sink),
                TransferErrorKind::name_collision, {"normalization form"});
  cr_assert(src.log.empty(), "the source was touched: %s", src.log.front().c_str());
  cr_assert(sink.got.empty());
}

// ---- phase 2: stat and cap

Test(outputs, required_missing_is_an_error_and_optional_missing_is_skipped) {
  FakeSource src;
  src.files = {{"a", {"1"}}};
  RecordingSink sink;
  auto skipped = transfer({out("a", true), out("maybe")}, TransferLimits{}, src, &sink);
  cr_assert(skipped.ok(), "%s", skipped.error().message().c_str());
  cr_assert_eq(skipped->size(), 1u);
  assert_failed(transfer({out("a", true), out("needed", true)}, TransferLimits{}, src, &sink),
                TransferErrorKind::required_missing, {"output 'needed' is required and does not exist"});
  assert_failed(transfer({out("*.json", true)}, TransferLimits{}, src, &sink),
                TransferErrorKind::required_missing, {"output '*.json' is required and matched nothing"});
}

Test(outputs, a_file_of_unknown_size_is_skipped_alone_unless_required) {
  FakeSource src;
  src.files = {{"fifo", {"", false}}, {"good.txt", {"good"}}};
  RecordingSink sink;
  auto r = transfer({out("fifo"), out("good.txt")}, TransferLimits{}, src, &sink);
  cr_assert(r.ok(), "one file of unknown size refused the transfer: %s", r.error().message().c_str());
  cr_assert(r->size() == 1 && (*r)[0].name == "good.txt");
  cr_assert(sink.got.size() == 1 && sink.got[0].name == "good.txt");
  cr_assert_eq(r.skipped().size(), 1u);
  cr_assert_str_eq(r.skipped()[0].source_path.c_str(), "fifo");
  assert_mentions(r.skipped()[0].note, {"output 'fifo': the size of 'fifo' cannot be known", "; not delivered"});
  // A literal output the route requires is not the run's to drop.
  assert_failed(transfer({out("fifo", true), out("good.txt")}, TransferLimits{}, src, &sink),
                TransferErrorKind::size_unknown, {"output 'fifo'", "cannot be known"});
}

Test(outputs, a_file_the_source_refuses_is_skipped_alone_unless_required) {
  FakeSource src;
  src.files = {{"good.txt", {"good"}}, {"link.txt", {"link.txt", true, 0, true}}};
  RecordingSink sink;
  auto r = transfer({out("*.txt")}, TransferLimits{}, src, &sink);
  cr_assert(r.ok(), "one refused match refused the transfer: %s", r.error().message().c_str());
  cr_assert(r->size() == 1 && (*r)[0].name == "good.txt");
  cr_assert(r.skipped().size() == 1 && r.skipped()[0].source_path == "link.txt");
  assert_mentions(r.skipped()[0].note, {"output '*.txt': 'link.txt' is a hard link; not delivered"});
  assert_failed(transfer({out("link.txt", true)}, TransferLimits{}, src, &sink), TransferErrorKind::required_missing,
                {"output 'link.txt' is required and cannot be delivered: 'link.txt' is a hard link"});
  // A required glob whose only match is refused has delivered nothing.
  assert_failed(transfer({out("l*.txt", true)}, TransferLimits{}, src, &sink), TransferErrorKind::required_missing,
                {"output 'l*.txt' is required and matched nothing deliverable"});
}

Test(outputs, each_cap_is_named_with_the_file) {
  FakeSource src;
  src.files = {{"a", {std::string(10, 'a')}}, {"b", {std::string(10, 'b')}}, {"c", {std::string(10, 'c')}}};
  RecordingSink sink;
  assert_failed(transfer({out("a"), out("b")}, caps(9, 100, 10), src, &sink),
                TransferErrorKind::cap_exceeded, {"output 'a'", "10 bytes", "max_bytes_per_file (9)"});
  assert_failed(transfer({out("a"), out("b"), out("c")}, caps(10, 25, 10), src, &sink),
                TransferErrorKind::cap_exceeded, {"output 'c'", "total to 30", "max_total_bytes (25)"});
  assert_failed(transfer({out("a"), out("b"), out("c")}, caps(10, 100, 2), src, &sink),
                TransferErrorKind::cap_exceeded, {"output 'c'", "max_files (2)"});
  // A glob over the count cap collects nothing, and says so.
  assert_failed(transfer({out("*")}, caps(10, 100, 2), src, &sink), TransferErrorKind::cap_exceeded,
                {"output '*': 3 file(s)", "max_files (2)", "nothing is collected"});
  cr_assert(sink.got.empty());
}

Test(outputs, a_cap_breach_on_the_third_output_delivers_nothing) {
  std::vector<std::string> log;
  FakeSource src;
  src.shared_log = &log;
  src.files = {{"a", {"1"}}, {"b", {"2"}}, {"c", {std::string(100, 'c')}}};
  RecordingSink sink;
  sink.shared_log = &log;
  assert_failed(transfer({out("a"), out("b"), out("c")}, caps(50, 1000, 10), src, &sink),
                TransferErrorKind::cap_exceeded, {"output 'c'", "max_bytes_per_file (50)"});
  cr_assert(sink.got.empty());
  std::vector<std::string> expected{"stat:a", "stat:b", "stat:c"};
  cr_assert(log == expected, "something was read or delivered before the refusal");
}

// ---- phase 3: read, sizes checked again

Test(outputs, a_file_that_changed_after_stat_is_skipped_alone_unless_required) {
  FakeSource src;
  src.files = {{"a", {"1234", true, 3}}, {"b", {"bb"}}};
  RecordingSink sink;
  auto r = transfer({out("a"), out("b")}, caps(100, 100, 10), src, &sink);
  cr_assert(r.ok(), "one changed file refused the transfer: %s", r.error().message().c_str());
  cr_assert(r->size() == 1 && (*r)[0].name == "b");
  cr_assert(sink.got.size() == 1 && sink.got[0].bytes == "bb");
  cr_assert_eq(r.skipped().size(), 1u);
  assert_mentions(r.skipped()[0].note, {"output 'a': 'a' changed size between stat (4 bytes)", "; not delivered"});
  sink.got.clear();
  auto grew = transfer({out("*")}, caps(4, 100, 10), src, &sink);
  cr_assert(grew.ok(), "%s", grew.error().message().c_str());
  cr_assert(grew->size() == 1 && (*grew)[0].name == "b");
  assert_mentions(grew.skipped()[0].note, {"output '*': 'a' grew past max_bytes_per_file (4) while being read"});
  auto alone = transfer({out("a")}, caps(4, 100, 10), src, &sink);
  cr_assert(alone.ok() && alone->empty() && alone.skipped().size() == 1);
  cr_assert_eq(src.last_at_most, 5u, "the read was not bounded by the stat size");
  // Required: refused, nothing delivered.
  sink.got.clear();
  assert_failed(transfer({out("b"), out("a", true)}, caps(100, 100, 10), src, &sink),
                TransferErrorKind::size_changed, {"output 'a'", "changed size between stat (4 bytes)"});
  assert_failed(transfer({out("b"), out("a", true)}, caps(4, 100, 10), src, &sink), TransferErrorKind::cap_exceeded,
                {"output 'a'", "grew past max_bytes_per_file (4)"});
  assert_failed(transfer({out("a*", true)}, caps(100, 100, 10), src, &sink), TransferErrorKind::required_missing,
                {"output 'a*' is required and matched nothing deliverable"});
  cr_assert(sink.got.empty());
}

Test(outputs, source_failures_are_typed) {
  FakeSource src;
  src.files = {{"a", {"1"}}};
  RecordingSink sink;
  src.fail_on = "stat:a";
  assert_failed(transfer({out("a")}, TransferLimits{}, src, &sink), TransferErrorKind::source_failed,
                {"output 'a': stat 'a': stat failed"});
  src.fail_on = "list:*";
  assert_failed(transfer({out("*")}, TransferLimits{}, src, &sink), TransferErrorKind::source_failed,
                {"output '*': list"});
}

// ---- globs

Test(outputs, globs_expand_land_under_a_directory_and_are_checked) {
  FakeSource src;
  src.files = {{"results/a.json", {"1"}}, {"results/b.json", {"2"}}, {"other/a.json", {"3"}},
               {"notes.txt", {"n"}}};
  RecordingSink sink;
  auto r = transfer({out("results/*.json", true, "reports")}, TransferLimits{}, src, &sink);
  cr_assert(r.ok(), "%s", r.error().message().c_str());
  cr_assert_eq(sink.got.size(), 2u);
  cr_assert(sink.got[0].name == "reports/a.json" && sink.got[1].name == "reports/b.json");

  // Two directories' a.json land on one name: the first listed lands, the
  // second is skipped with a note naming both.
  RecordingSink sink2;
  auto flat = transfer({out("*/a.json", false, "flat")}, TransferLimits{}, src, &sink2);
  cr_assert(flat.ok(), "%s", flat.error().message().c_str());
  cr_assert(sink2.got.size() == 1 && sink2.got[0].bytes == "3", "other/a.json lands as flat/a.json");
  cr_assert_eq(flat.skipped().size(), 1u);
  cr_assert_str_eq(flat.skipped()[0].source_path.c_str(), "results/a.json");
  assert_mentions(flat.skipped()[0].note, {"output '*/a.json': match 'results/a.json'",
                                           "'flat/a.json' and 'flat/a.json' are identical", "not delivered"});
  // A literal and a glob reaching the same file: delivered once, as the literal.
  RecordingSink sink3;
  auto twice = transfer({out("notes.txt"), out("*.txt")}, TransferLimits{}, src, &sink3);
  cr_assert(twice.ok(), "%s", twice.error().message().c_str());
  cr_assert(sink3.got.size() == 1 && sink3.got[0].name == "notes.txt");
  cr_assert(twice.skipped().empty(), "the very file under the very name is no collision to note");
  // The source's matches are validated too: never stat'd, read or delivered.
  FakeSource hostile;
  hostile.files = {{"ok.txt", {"ok"}}};
  hostile.extra_matches = {"../../etc/passwd"};
  RecordingSink sink4;
  auto escaped = transfer({out("*.txt")}, TransferLimits{}, hostile, &sink4);
  cr_assert(escaped.ok(), "%s", escaped.error().message().c_str());
  cr_assert(sink4.got.size() == 1 && sink4.got[0].name == "ok.txt");
  for (const auto& op : hostile.log) cr_assert(!contains(op, "passwd"), "the source was asked for %s", op.c_str());
  cr_assert_eq(escaped.skipped().size(), 1u);
  assert_mentions(escaped.skipped()[0].note, {"output '*.txt': match '../../etc/passwd' has a '..' segment"});
  // A glob is refused where the declaration says globs are not allowed.
  Status no_globs = validate_declaration({out("*.txt")}, false);
  cr_assert(!no_globs.ok() && contains(no_globs.error().message(), "files_list"));
}

// Names the run chose cost only their own file, as with corral run's
// --output: two matches differing only by case (or by normalization form),
// a match landing on a declared literal's name, a match that would need a
// declared file to be a directory. Each made the whole transfer refuse.
Test(outputs, a_glob_match_that_collides_is_skipped_and_the_rest_delivered) {
  FakeSource src;
  src.files = {{"A.txt", {"upper"}},       {"a.txt", {"lower"}},     {"b.txt", {"b"}},
               {"caf\xc3\xa9.txt", {"nfc"}}, {"cafe\xcc\x81.txt", {"nfd"}}, {"data", {"literal"}},
               {"keep/x", {"file"}},       {"keep.txt", {"k"}}};
  src.extra_matches = {"a\\b.txt"};
  RecordingSink sink;
  // The literal is declared last and still wins over the glob's b.txt.
  auto r = transfer({out("*.txt"), out("data", false, "B.TXT"), out("keep/x", false, "keep.txt/x")},
                    TransferLimits{}, src, &sink);
  cr_assert(r.ok(), "%s", r.error().message().c_str());
  std::string landed;
  for (const auto& a : sink.got) landed += a.name + " ";
  // The fake lists in byte order (the NFD spelling sorts first); the
  // literals land after the glob, in declaration order.
  cr_assert_str_eq(landed.c_str(), "A.txt cafe\xcc\x81.txt B.TXT keep.txt/x ");
  std::string notes;
  for (const auto& s : r.skipped()) notes += s.note + "\n";
  assert_mentions(notes, {"'A.txt' and 'a.txt' differ only by case", "'B.TXT' and 'b.txt' differ only by case",
                          "normalization form", "'a\\b.txt' contains a backslash",
                          "'keep.txt' is a file and also a parent directory of 'keep.txt/x'"});
  cr_assert_eq(r.skipped().size(), 5u, "%s", notes.c_str());
  for (const auto& s : r.skipped()) cr_assert(contains(s.note, "; not delivered"), "%s", s.note.c_str());

  // A required glob whose every match was skipped has delivered nothing: refused.
  FakeSource bad;
  bad.extra_matches = {"a\\b.json"};
  RecordingSink none;
  assert_failed(transfer({out("*.json", true)}, TransferLimits{}, bad, &none), TransferErrorKind::required_missing,
                {"output '*.json' is required and matched nothing deliverable (every match was skipped)"});
  // Skipped matches do not count against max_files.
  FakeSource many;
  many.files = {{"x.log", {"1"}}, {"X.log", {"2"}}, {"Y.log", {"3"}}};
  RecordingSink two;
  auto capped = transfer({out("*.log")}, caps(10, 100, 2), many, &two);
  cr_assert(capped.ok(), "%s", capped.error().message().c_str());
  cr_assert_eq(two.got.size(), 2u);
}

// ---- phase 4: only the sink's own failure, and it says what was delivered

Test(outputs, a_sink_failure_reports_what_was_delivered_before_it) {
  FakeSource src;
  src.files = {{"a", {"1"}}, {"b", {"2"}}, {"c", {"3"}}};
  RecordingSink sink;
  sink.fail_at = 1;
  auto r = transfer({out("a"), out("b"), out("c")}, TransferLimits{}, src, &sink);
  assert_failed(r, TransferErrorKind::delivery_failed,
                {"output 'b': deliver 'b': sink: disk full", "delivered before it: 'a'"});
  cr_assert_eq(r.error().error.code(), ENOSPC);
  cr_assert_eq(r.error().delivered_before.size(), 1u);
  cr_assert(r.error().delivered_before[0].name == "a");
}

Test(outputs, vocabulary_round_trips) {
  cr_assert_eq(*parse_disposition("consume"), Disposition::consume);
  auto bad = parse_disposition("keep");
  cr_assert(!bad.ok() && contains(bad.error().message(), "disposition 'keep'"));
  cr_assert(to_string(TransferErrorKind::cap_exceeded) == "cap_exceeded");
  cr_assert(to_string(TransferErrorKind::delivery_failed) == "delivery_failed");
  cr_assert(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  cr_assert(out("a/[ab].txt").is_glob() && !out("a/b.txt").is_glob());
}
