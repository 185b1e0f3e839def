// corral merge: N shard result streams -> the results one batch would have
// written, checked line by line against the job file (shard.hpp).
//
// Two passes over the result files, which stay mapped: the first indexes
// every result by (shard stream, job line) keeping only offsets, the
// second copies the chosen lines out in job-file order. Memory is a few
// words per job, whatever the results hold.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "corral/fd.hpp"
#include "corral/json.hpp"
#include "corral/shard.hpp"

namespace corral {
namespace {

using nlohmann::json;

// A whole file, read-only mapped (MAP_PRIVATE: a writer changing it under
// us cannot change what was checked into something else mid-merge in a way
// that matters more than a re-run would show).
class Mapped {
 public:
  static Expected<std::unique_ptr<Mapped>> open(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
    if (!fd) return Error::from_errno(errno, "open " + path);
    struct stat st {};
    if (fstat(fd.get(), &st) != 0) return Error::from_errno(errno, "fstat " + path);
    if (!S_ISREG(st.st_mode)) return Error::invalid(path + " is not a regular file");
    auto m = std::make_unique<Mapped>();
    m->size_ = static_cast<std::size_t>(st.st_size);
    if (m->size_ > 0) {
      void* p = mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
      if (p == MAP_FAILED) return Error::from_errno(errno, "mmap " + path);
      m->data_ = static_cast<const char*>(p);
    }
    return m;
  }
  Mapped() = default;
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  ~Mapped() {
    if (data_) munmap(const_cast<char*>(data_), size_);
  }
  std::string_view bytes() const { return {data_ ? data_ : "", size_}; }

 private:
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

// Lines as corral batch's LineReader takes them: split at '\n', a last line
// without one counts, a line longer than the cap (its '\r' included) is
// too long, one '\r' before the '\n' is dropped.
template <class F>
void for_each_line(std::string_view bytes, F&& f) {
  std::size_t pos = 0;
  long no = 0;
  while (pos < bytes.size()) {
    std::size_t nl = bytes.find('\n', pos);
    std::size_t end = nl == std::string_view::npos ? bytes.size() : nl;
    f(++no, pos, bytes.substr(pos, end - pos));
    pos = end + 1;
  }
}

struct Entry {
  std::size_t offset = 0, length = 0;  // of the result line in its file
  long file_line = 0;
  std::optional<std::string> id;
  std::string outcome;
};

struct Stream {
  std::size_t file = 0;
  Shard shard;
  std::map<long, Entry> results;  // by job line
  bool finished = false;
  double finished_at = 0;
  std::size_t end_jobs = 0, max_line_bytes = 0;
  bool wrong_file = false;  // some line names another job file
  std::size_t order = 0;    // appearance: later wins a tie
};

class Merger {
 public:
  Merger(const std::vector<std::string>& files, MergeSummary& s) : files_(files), s_(s) {}

  void problem(std::string what) {
    if (s_.problems.size() < kProblemsNamed) s_.problems.push_back(std::move(what));
    else ++unnamed_;
  }
  void close_problems() {
    if (unnamed_) s_.problems.push_back("... and " + std::to_string(unnamed_) + " more");
  }

  void index(std::size_t file, std::string_view bytes) {
    std::map<unsigned, std::size_t> open;  // shard index -> stream being read in this file
    const std::string& name = files_[file];
    for_each_line(bytes, [&](long no, std::size_t offset, std::string_view line) {
      if (blank_job_line(line)) return;
      std::string at = name + ":" + std::to_string(no);
      // Too deep to write again (json's dump recurses): as unreadable.
      json j = check_json_depth(line) ? json::parse(line, nullptr, false) : json(json::value_t::discarded);
      if (j.is_discarded() || !j.is_object()) {
        // The last line of a file without its newline: a writer killed
        // mid-line. Its stream has no end record either (that is always
        // last), so the shard counts as not finished unless a rerun is given.
        if (offset + line.size() == bytes.size()) {
          s_.notes.push_back(at + ": a cut-off last line (its writer was killed?), ignored");
          return;
        }
        return problem(at + ": not a JSON object");
      }
      bool end = j.contains("shard_end");
      const json& tag = end ? j["shard_end"] : (j.contains("shard") ? j["shard"] : json());
      if (!tag.is_string())
        return problem(at + ": not a shard result (no \"shard\"; was it written by corral batch --shard?)");
      auto shard = parse_shard(tag.get<std::string>(), [](const char*) -> const char* { return nullptr; });
      if (!shard) return problem(at + ": " + shard.error().message());
      if (s_.shards == 0) s_.shards = shard->count, first_ = at;
      if (shard->count != s_.shards)
        return problem(at + ": shard " + shard->name() + " is one of " + std::to_string(shard->count) +
                       " shards, " + first_ + " one of " + std::to_string(s_.shards));
      auto it = open.find(shard->index);
      if (it == open.end()) {
        Stream fresh;
        fresh.file = file;
        fresh.shard = *shard;
        fresh.order = streams_.size();
        streams_.push_back(std::move(fresh));
        it = open.emplace(shard->index, streams_.size() - 1).first;
      }
      Stream& st = streams_[it->second];
      const json& sha = j.contains("jobs_sha256") ? j["jobs_sha256"] : json();
      if (!sha.is_string() || sha.get<std::string>() != s_.jobs_sha256) {
        if (!st.wrong_file)
          problem(at + ": shard " + shard->name() + " ran on another job file (jobs_sha256 " +
                  (sha.is_string() ? sha.get<std::string>() : std::string("missing")) + "; the job file's is " +
                  s_.jobs_sha256 + ")");
        st.wrong_file = true;
      }
      if (end) {
        st.finished = true;
        st.finished_at = j.value("finished_at", 0.0);
        st.end_jobs = j.value("jobs", std::size_t{0});
        st.max_line_bytes = j.value("max_line_bytes", std::size_t{0});
        open.erase(it);  // a later result of this shard in this file is a new run (appended)
        return;
      }
      const json& jl = j.contains("line") ? j["line"] : json();
      if (!jl.is_number_integer() || jl.get<long>() <= 0) return problem(at + ": no \"line\" (the job's line)");
      long job_line = jl.get<long>();
      Entry e;
      e.offset = offset;
      e.length = line.size();
      e.file_line = no;
      if (j.contains("id") && j["id"].is_string()) e.id = j["id"].get<std::string>();
      if (j.contains("outcome") && j["outcome"].is_string()) e.outcome = j["outcome"].get<std::string>();
      auto [pos, fresh] = st.results.emplace(job_line, std::move(e));
      if (!fresh)
        problem(at + ": a second result for job line " + std::to_string(job_line) + " in shard " + shard->name() +
                " (the first at " + name + ":" + std::to_string(pos->second.file_line) + ")");
    });
  }

  // The stream each shard's results come from; problems for shards that
  // have none that finished.
  void choose() {
    chosen_.assign(s_.shards, nullptr);
    for (Stream& st : streams_) {
      if (!st.finished || st.wrong_file) continue;
      Stream*& c = chosen_[st.shard.index];
      if (c && (c->finished_at > st.finished_at)) continue;
      c = &st;
    }
    for (Stream& st : streams_) {
      Stream* c = chosen_[st.shard.index];
      if (c && c != &st)
        s_.notes.push_back("shard " + st.shard.name() + ": " + files_[c->file] + " replaces " + files_[st.file] +
                           (st.finished ? " (a later run)" : " (which did not finish)"));
    }
    for (unsigned i = 0; i < s_.shards; ++i) {
      if (chosen_[i]) continue;
      std::string name = Shard{i, s_.shards}.name();
      std::string partial;
      for (const Stream& st : streams_)
        if (st.shard.index == i && !st.wrong_file)
          partial = files_[st.file] + " has " + std::to_string(st.results.size()) + " results and no end record";
      if (partial.empty())
        problem("shard " + name + " is missing: no results file given has it; run corral batch --shard " + name +
                " on the job file");
      else
        problem("shard " + name + " did not finish (" + partial + ": killed or cancelled?); run it again with " +
                "corral batch --shard " + name);
    }
  }

  // Every job of the file has its result in its shard's chosen stream.
  void check(std::string_view jobs) {
    if (s_.shards == 0) return problem("no shard results given");
    std::size_t cap = 0;
    for (Stream* c : chosen_) {
      if (!c) return;  // already a problem
      if (cap && c->max_line_bytes != cap)
        return problem("the shards ran with different --max-line-bytes caps (" + std::to_string(cap) + ", " +
                       std::to_string(c->max_line_bytes) + "): which lines are jobs differs; run them alike");
      cap = c->max_line_bytes;
    }
    if (cap == 0) cap = std::string_view::npos;
    std::size_t ordinal = 0;
    for_each_line(jobs, [&](long no, std::size_t, std::string_view line) {
      bool too_long = line.size() > cap;
      if (!too_long && blank_job_line(line)) return;
      Shard owner{static_cast<unsigned>(ordinal++ % s_.shards), s_.shards};
      Stream& st = *chosen_[owner.index];
      auto it = st.results.find(no);
      if (it == st.results.end())
        return problem("job line " + std::to_string(no) + " (id " + id_or_none(too_long ? "" : job_id_of(line)) +
                       ") has no result in shard " + owner.name() + " (" + files_[st.file] + ")");
      if (it->second.id && !too_long) {
        std::string want = job_id_of(line);
        if (*it->second.id != want)
          problem(files_[st.file] + ":" + std::to_string(it->second.file_line) + ": the result for job line " +
                  std::to_string(no) + " has id '" + *it->second.id + "', the job file's line has " + id_or_none(want));
      }
      order_.push_back(&it->second);
      owner_.push_back(&st);
    });
    s_.jobs = ordinal;
    std::map<const Stream*, std::size_t> matches;
    for (const Stream* o : owner_) ++matches[o];
    for (Stream* c : chosen_) {
      std::size_t matched = matches[c];
      if (matched != c->results.size())
        problem("shard " + c->shard.name() + " (" + files_[c->file] + ") has " +
                std::to_string(c->results.size() - matched) +
                " results for lines that are not its jobs in the job file");
      if (c->end_jobs != c->results.size())
        problem("shard " + c->shard.name() + " (" + files_[c->file] + "): its end record counts " +
                std::to_string(c->end_jobs) + " results, the file holds " + std::to_string(c->results.size()));
    }
  }

  Status write(const std::vector<std::unique_ptr<Mapped>>& maps, int out_fd) {
    std::string buf;
    auto flush = [&]() -> Status {
      for (std::size_t done = 0; done < buf.size();) {
        ssize_t n = ::write(out_fd, buf.data() + done, buf.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Error::from_errno(errno, "write the merged results");
        done += static_cast<std::size_t>(n);
      }
      buf.clear();
      return {};
    };
    for (std::size_t i = 0; i < order_.size(); ++i) {
      const Entry& e = *order_[i];
      json j = json::parse(maps[owner_[i]->file]->bytes().substr(e.offset, e.length));
      j.erase("shard");
      j.erase("jobs_sha256");
      buf += j.dump(-1, ' ', false, json::error_handler_t::replace);
      buf += '\n';
      ++s_.outcomes[e.outcome.empty() ? "(none)" : e.outcome];
      if (buf.size() >= (1u << 20))
        if (Status st = flush(); !st) return st;
    }
    return flush();
  }

 private:
  static std::string id_or_none(const std::string& id) { return id.empty() ? "none" : "'" + id + "'"; }
  static constexpr std::size_t kProblemsNamed = 50;

  const std::vector<std::string>& files_;
  MergeSummary& s_;
  std::string first_;
  std::vector<Stream> streams_;
  std::vector<Stream*> chosen_;
  std::vector<const Entry*> order_;
  std::vector<const Stream*> owner_;
  std::size_t unnamed_ = 0;
};

}  // namespace

std::string MergeSummary::summary_json() const {
  json o = json::object();
  for (const auto& [name, n] : outcomes) o[name] = n;
  json j{{"jobs", jobs}, {"shards", shards}, {"jobs_sha256", jobs_sha256}, {"outcomes", std::move(o)}};
  return j.dump();
}

Expected<MergeSummary> merge_shards(const std::string& jobs_file, const std::vector<std::string>& result_files,
                                    int out_fd) {
  MergeSummary s;
  auto jobs = Mapped::open(jobs_file);
  if (!jobs) return std::move(jobs).error().context("the job file");
  {
    UniqueFd fd(::open(jobs_file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return Error::from_errno(errno, "open " + jobs_file);
    auto sha = job_file_sha256(fd.get());
    if (!sha) return std::move(sha).error();
    s.jobs_sha256 = *sha;
  }
  std::vector<std::unique_ptr<Mapped>> maps;
  Merger m(result_files, s);
  for (std::size_t i = 0; i < result_files.size(); ++i) {
    auto map = Mapped::open(result_files[i]);
    if (!map) return std::move(map).error();
    m.index(i, (*map)->bytes());
    maps.push_back(std::move(*map));
  }
  if (s.problems.empty()) m.choose();
  if (s.problems.empty()) m.check((*jobs)->bytes());
  m.close_problems();
  if (!s.problems.empty()) return s;
  if (Status st = m.write(maps, out_fd); !st) return st.error();
  return s;
}

}  // namespace corral
