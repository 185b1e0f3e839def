// corral batch [options] [FILE]
//
// One supervisor, N runs in flight, one JSON Result line per job as it
// finishes. The jobs' input is watched through the supervisor's ring
// (Supervisor::watch_fd), read one chunk at a time when it is readable and
// taken a line at a time only when a run slot is free, so a slow or endless
// producer never blocks the loop and corral never reads further ahead than
// it runs.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cli.hpp"
#include "corral/audit.hpp"
#include "corral/door.hpp"
#include "corral/enforcement.hpp"
#include "corral/fd.hpp"
#include "corral/json.hpp"
#include "corral/request_fields.hpp"
#include "corral/run_setup.hpp"
#include "corral/shard.hpp"
#include "corral/supervisor.hpp"
#include "batch_options.hpp"
#include "batch_pace.hpp"
#include "batch_session.hpp"
#include "line_reader.hpp"
#include "options.hpp"
#include "output.hpp"

namespace corral::cli {
namespace {

// What is known of a job that gets no run: the values of the secrets it
// names, and (with --audit) its audit record as far as it was read.
struct Refusal {
  std::vector<std::string> secrets;
  std::optional<AuditRecord> record;
  bool audited = false;  // its audit line is written already (by the supervisor)
};

class Batch {
 public:
  // cpu_parallel: jobs with a cpu_seconds limit in flight at most.
  // audit: where a job that gets no run is recorded (--audit FILE; the
  // supervisor records the runs); null: nowhere.
  Batch(Supervisor& sup, int in_fd, std::size_t max_line_bytes, std::size_t parallel, std::size_t cpu_parallel,
        bool progress, const BatchOptions& options, std::shared_ptr<AuditSink> audit)
      : sup_(sup),
        audit_(std::move(audit)),
        sessions_([&sup](pid_t keeper) { sup.spare_child(keeper); }),
        in_(in_fd, max_line_bytes), parallel_(parallel), cpu_(cpu_parallel),
        shard_(options.shard), progress_(progress), options_(options), t0_(std::chrono::steady_clock::now()) {
    total_ = shard_.of(count_jobs(in_fd));
  }

  void stop(int sig) {
    if (stopping_) {
      // A second signal: the results still queued are given up.
      if (sig) again_ = sig;
      return;
    }
    stopping_ = true;
    signal_ = sig;
    sup_.cancel_all();
    unwatch();
  }

  int run() {
    for (;;) {
      feed();
      if (!stopping_) sessions_.pump();  // the next job of each session whose last one ended
      settle_output();
      if (sup_.in_flight() == 0 &&
          (stopping_ || (in_.exhausted() && sessions_.queued() == 0 && !cpu_.turns_waiting())))
        break;
      auto more = sup_.run_once(progress_ ? 0.1 : -1);
      if (!more) {
        say("batch: %s", more.error().message().c_str());
        failed_loop_ = true;
        break;
      }
      settle_output();
      draw(false);
    }
    unwatch();
    end_shard();
    if (!options_.keep_sessions) sessions_.dispose_opened();
    // The results still queued, and those of the jobs that will not start
    // now: written before exit (a second SIGINT/SIGTERM stops the wait;
    // what is left is then lost and named on stderr).
    if (!broken_) out_.flush(&again_);
    if (auto held = cpu_.take()) {
      refused(held->id, held->line, "cancelled before it started");
      if (!broken_) out_.flush(&again_);
    }
    for (const auto& turn : cpu_.take_turns()) refused(turn.id, turn.line, "cancelled before it started");
    // Session jobs waiting for their session's previous job: none will start.
    for (const auto& job : sessions_.take_waiting()) refused(job.job_id, job.line, "cancelled before it started");
    if (!broken_) out_.flush(&again_);
    settle_output();
    for (const Queued& q : queued_) lost(q.id, q.line);
    queued_.clear();
    if (lost_ > kLostNamed) say("batch: %zu results in all were not written", lost_);
    draw(true);
    if (!progress_) summary();
    err_.flush(&again_);
    if (signal_) return 128 + signal_;
    if (end_queued_ && out_.written() < end_queued_) {
      ++lost_;
      say("batch: shard %s: its end record was not written (merge will take it as unfinished)",
          options_.shard->name().c_str());
    }
    return (failed_loop_ || lost_ > 0 || input_error_) ? 1 : 0;
  }

 private:
  // Start jobs while there is room; ask the ring to wake us for more input.
  void feed() {
    std::string line;
    // Session jobs whose turn came while the CPUs were taken go first.
    while (!stopping_ && sup_.in_flight() < parallel_) {
      auto turn = cpu_.release_turn();
      if (!turn) break;
      submit(std::move(turn->request), turn->id, turn->line, turn->session);
    }
    // No new job while the results queue is over its high water: the
    // intake waits for the reader, the runs in flight do not.
    while (!stopping_ && sup_.in_flight() < parallel_ && !out_.over()) {
      if (cpu_.holding()) {
        // A CPU-limited job waits for a CPU-limited one to finish.
        auto held = cpu_.release();
        if (!held) break;
        submit(std::move(held->request), held->id, held->line);
        continue;
      }
      LineReader::Line got = in_.next(line);
      if (got == LineReader::Line::too_long) {
        ++line_no_;
        if (!shard_.mine()) continue;
        ++jobs_seen_;
        refused("", line_no_,
                "line " + std::to_string(line_no_) + " is longer than the --max-line-bytes cap of " +
                    std::to_string(in_.max_line_bytes()) + " bytes; skipped");
        continue;
      }
      if (got == LineReader::Line::ok) {
        ++line_no_;
        if (!blank(line) && shard_.mine()) start(line);
        continue;
      }
      if (in_.eof()) break;
      if (!watching_) {
        watching_ = true;
        auto st = sup_.watch_fd(in_.fd(), [this] {
          watching_ = false;
          readable();
        });
        if (!st) {
          say("batch: %s", st.error().message().c_str());
          watching_ = false;
          input_error_ = true;
          stopping_ = true;
        }
      }
      break;
    }
  }

  // A shard that read its whole file and wrote every result says so last;
  // merge takes a stream without this line as not finished.
  void end_shard() {
    if (!options_.shard || stopping_ || input_error_ || failed_loop_ || broken_ || lost_ > 0 || !in_.exhausted())
      return;
    out_.write(shard_end_record(*options_.shard, options_.jobs_sha256, jobs_seen_, in_.max_line_bytes()) + "\n");
    end_queued_ = out_.written() + out_.queued();
  }

  void readable() {
    if (in_.fill() == LineReader::Got::error) {
      say("batch: reading jobs: %s", std::strerror(errno));
      input_error_ = true;
    }
    if (in_.eof() && !total_) total_ = jobs_seen_ + count_rest();
  }

  // Jobs still in the buffer at EOF (not yet taken), for the progress total.
  std::size_t count_rest() {
    std::size_t n = 0;
    LineReader copy = in_;
    std::string line;
    for (LineReader::Line got; (got = copy.next(line)) != LineReader::Line::none;)
      n += got == LineReader::Line::too_long || !blank(line);
    return n;
  }

  void start(const std::string& text) {
    ++jobs_seen_;
    long at = line_no_;
    std::string line = text;
    auto session_key = take_session_field(line);
    if (!session_key) return refused_line(line, at, session_key.error().message());
    auto job = job_from_json(line);
    if (!job) return refused_line(line, at, job.error().message());
    if (options_.untrusted) job->ask.provenance = Provenance::untrusted;
    if (*session_key) job->ask.session_scope = (*session_key)->scope;
    // The values of the secrets the job names (its own, its route's):
    // masked in all that is echoed of it (its id, a refusal's reason).
    Refusal asked;
    if (!job->request.secrets.empty() || !job->ask.route.empty())
      asked.secrets = secret_values(secrets_named(job->request, job->ask, options_.policy));
    const std::string id = scrub_secrets(job->request.id, asked.secrets);
    if (audit_) asked.record = audit_refusal("", &job->request, &job->ask);
    auto req = admit(std::move(job->request), job->ask, options_.policy);
    if (!req) return refused(id, at, req.error().message(), std::move(asked));
    if (*session_key) {
      // In a warm session: opened with this job's container options on
      // first use; its jobs one at a time, in the order they came.
      if (req->tier != Tier::container)
        return refused(id, at, "session: a session job is tier container", std::move(asked));
      auto sid = sessions_.session_for(**session_key, *req);
      if (!sid) return refused(id, at, sid.error().message(), std::move(asked));
      Request r = session_exec_request(*sid, std::move(*req));
      r.binds.clear();  // the session's, given when it was opened
      r.rootfs.reset();
      r.cwd.reset();
      r.loopback = false;
      sessions_.run_or_queue(*sid, {[this, r = std::move(r), id, at, sid = *sid]() mutable { submit(std::move(r), id, at, sid); },
                                    id, at});
      return;
    }
    if (cpu_.must_wait(*req)) {
      cpu_.hold({std::move(*req), id, at});  // feed() starts it when a CPU is free
      return;
    }
    submit(std::move(*req), id, at);
  }

  // A line that is no job (not JSON, an unknown field, a bad value): named
  // and masked by what can be read of it.
  void refused_line(const std::string& line, long at, const std::string& why) {
    Refusal asked;
    std::optional<Job> read = job_as_read(line);
    if (read) {
      if (options_.untrusted) read->ask.provenance = Provenance::untrusted;
      asked.secrets = secret_values(secrets_named(read->request, read->ask, options_.policy));
    }
    if (audit_) asked.record = read ? audit_refusal("", &read->request, &read->ask) : audit_refusal("");
    const std::string id = scrub_secrets(job_id_of(line), asked.secrets);
    refused(id, at, why, std::move(asked));
  }

  // `id`: the job's, its secrets masked. `session`: the warm session the
  // job runs in (its next job starts when this one ends).
  void submit(Request req, const std::string& id, long at, const std::string& session = "") {
    const bool cpu = CpuQueue::limited(req);
    if (!session.empty() && cpu_.must_wait(req)) {
      // A session's next job does not jump the CPU limit (its session stays busy).
      cpu_.hold_turn({std::move(req), id, at, session});
      return;
    }
    // A refusal from the supervisor is masked as a run's messages are; its
    // audit line is the supervisor's (with this line number).
    Refusal asked;
    if (!req.secrets.empty()) asked.secrets = secret_values(req.secrets);
    asked.audited = true;
    RunCallbacks cb;
    cb.audit_line = at;
    cb.on_result = [this, at, cpu, session](const Result& r) {
      if (cpu) cpu_.finished();
      if (r.outcome != Outcome::exited || r.exit_code != 0) ++failed_;
      ++outcomes_[static_cast<std::size_t>(r.outcome)];
      emit_result(r, at);
      if (!session.empty()) sessions_.finished(session);
    };
    auto handle = sup_.submit(std::move(req), std::move(cb));
    if (!handle) {
      refused(id, at, handle.error().message(), std::move(asked));
      if (!session.empty()) sessions_.finished(session);
      return;
    }
    if (cpu) cpu_.started();
    handle->detach();  // the result comes through on_result
  }

  // A job that gets no run: its error line and its audit line, the reason
  // with the job's secrets masked (`id` is masked already).
  void refused(const std::string& id, long line, const std::string& why, Refusal asked = {}) {
    ++errors_;
    ++failed_;
    const std::string reason = scrub_secrets(why, asked.secrets);
    emit(error_to_json(id, line, reason), id, line);
    if (!audit_ || asked.audited) return;
    AuditRecord record = asked.record ? std::move(*asked.record) : audit_refusal("");
    record.id = id;
    record.error = reason;
    record.line = line;
    if (Status st = audit_->record(std::move(record), asked.secrets); !st)
      say("batch: the audit line of line %ld was not written: %s", line, st.error().message().c_str());
  }

  // One result line, queued for a ring write: a reader that stalls holds up
  // the queue, never the loop (other runs' deadlines keep their timing).
  // Lines are whole in the queue and written in order, so a reader never
  // sees half a line unless corral dies mid-write.
  void emit(std::string line, const std::string& id, long at) {
    if (options_.shard) line = tag_shard_result(line, *options_.shard, options_.jobs_sha256);
    line += '\n';
    if (out_.error() != 0) {
      lost(id, at);
      return;
    }
    out_.write(line);
    queued_.push_back(Queued{out_.written() + out_.queued(), id, at});
  }

  // A Result's line made a part at a time as the ring writes it (ResultJson:
  // its streams are escaped then, not held escaped whole).
  void emit_result(const Result& r, long at) {
    std::function<std::string(std::string_view)> tag;
    if (options_.shard) tag = [this](std::string_view s) { return tag_shard_result(s, *options_.shard, options_.jobs_sha256); };
    auto made = std::make_shared<ResultJson>(r, at, /*borrow=*/false, tag);
    if (out_.error() != 0) return lost(r.id, at);
    const std::uint64_t size = made->size() + 1;
    out_.write_made(size, [made, newline = true]() mutable {
      std::string part = made->next();
      if (part.empty() && std::exchange(newline, false)) return std::string("\n");
      return part;
    });
    queued_.push_back(Queued{out_.written() + out_.queued(), r.id, at});
  }

  // After a loop turn: results fully written are counted; a failed write
  // loses the results still queued (named by job id) and stops the batch.
  void settle_output() {
    while (!queued_.empty() && queued_.front().end <= out_.written()) {
      queued_.pop_front();
      ++written_;
    }
    if (out_.error() == 0 || broken_) return;
    broken_ = true;
    say("batch: writing results: %s; cancelling the rest", std::strerror(out_.error()));
    for (const Queued& q : queued_) lost(q.id, q.line);
    queued_.clear();
    stop(0);
  }

  void lost(const std::string& id, long line) {
    ++lost_;
    if (lost_ <= kLostNamed)
      say("batch: the result of job %s (line %ld) was not written", id.empty() ? "(no id)" : id.c_str(), line);
  }

  void unwatch() {
    if (watching_) sup_.unwatch_fd(in_.fd());
    watching_ = false;
  }

  // The progress bar, redrawn in place at most ten times a second:
  // "corral: batch [#####.....] 120/500 24% 35.2 jobs/s ETA 11s, 16 in
  // flight, 3 failed" (no bar, % or ETA while the total is unknown).
  void draw(bool final) {
    if (!progress_) return;
    auto now = std::chrono::steady_clock::now();
    if (!final && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    double elapsed = std::chrono::duration<double>(now - t0_).count();
    double rate = elapsed > 0 ? static_cast<double>(written_) / elapsed : 0.0;
    char done[160];
    if (total_ && *total_ > 0) {
      constexpr int kWidth = 20;
      std::size_t total = *total_;
      int filled = static_cast<int>(std::min<std::size_t>(written_, total) * kWidth / total);
      std::string bar = std::string(static_cast<std::size_t>(filled), '#') + std::string(kWidth - filled, '.');
      char eta[32] = "";
      if (!final && rate > 0 && written_ < total)
        std::snprintf(eta, sizeof eta, " ETA %.0fs", static_cast<double>(total - written_) / rate);
      std::snprintf(done, sizeof done, "[%s] %zu/%zu %zu%% %.1f jobs/s%s", bar.c_str(), written_, total,
                    std::min<std::size_t>(written_, total) * 100 / total, rate, eta);
    } else {
      std::snprintf(done, sizeof done, "%zu done %.1f jobs/s", written_, rate);
    }
    char line[256];
    std::snprintf(line, sizeof line, "\r\033[Kcorral: batch %s, %zu in flight, %zu failed, %.1fs%s", done,
                  sup_.in_flight(), failed_, elapsed, final ? "\n" : "");
    // A frame is skipped while the last one is still being written.
    if (final || err_.queued() == 0) err_.write(line);
  }

  // Not a terminal: one line at the end, for a log or a CI step.
  void summary() {
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    std::size_t jobs = errors_;
    for (std::size_t n : outcomes_) jobs += n;
    char head[128];
    std::snprintf(head, sizeof head, "corral: batch: %zu jobs in %.1f s (%.1f jobs/s)", jobs, elapsed,
                  elapsed > 0 ? static_cast<double>(jobs) / elapsed : 0.0);
    std::string line = head;
    const char* sep = ": ";
    for (std::size_t i = 0; i < outcomes_.size(); ++i) {
      if (outcomes_[i] == 0) continue;
      line += sep + std::string(to_string(static_cast<Outcome>(i))) + " " + std::to_string(outcomes_[i]);
      sep = ", ";
    }
    if (errors_ > 0) line += sep + std::string("error ") + std::to_string(errors_);
    err_.write(line + "\n");
  }

  static constexpr std::size_t kLostNamed = 20;  // lost results named one by one
  // Result lines queued beyond this stop the intake of new jobs.
  static constexpr std::size_t kResultsHighWater = 32u << 20;
  struct Queued {
    std::uint64_t end;  // out_.written() once this line is out
    std::string id;
    long line;
  };

  Supervisor& sup_;
  std::shared_ptr<AuditSink> audit_;
  RingWriter out_{sup_, 1, kResultsHighWater};
  RingWriter err_{sup_, 2, 1u << 20};
  std::deque<Queued> queued_;
  BatchSessions sessions_;
  LineReader in_;
  std::size_t parallel_;
  CpuQueue cpu_;     // CPU-limited jobs: at most cpu_parallel in flight
  ShardSkip shard_;  // --shard: only this slice of the file
  std::array<std::size_t, 7> outcomes_{};  // results by Outcome
  std::size_t errors_ = 0;                 // lines refused (outcome "error")
  bool progress_;
  const BatchOptions& options_;
  std::chrono::steady_clock::time_point t0_, last_draw_{};
  std::optional<std::size_t> total_;
  long line_no_ = 0;
  std::uint64_t end_queued_ = 0;  // out_.written() once the shard's end record is out
  std::size_t jobs_seen_ = 0, written_ = 0, failed_ = 0, lost_ = 0;
  bool watching_ = false, stopping_ = false, broken_ = false;
  bool failed_loop_ = false, input_error_ = false;
  int signal_ = 0;
  int again_ = 0;  // a signal after the one that stopped the batch
};

}  // namespace

int batch_main(int argc, char** argv) {
  BatchOptions o;
  if (int rc = parse_batch_options(argc, argv, o); rc >= 0) return rc;
  if (!o.routes.empty()) {
    auto router = load_router(o.routes, probe_host());
    if (!router) return say("%s", router.error().message().c_str()), 2;
    o.policy.routes = std::move(*router);
    o.policy.routes_file = o.routes;
  }
  int in_fd = 0;
  UniqueFd file;
  if (!o.file.empty() && o.file != "-") {
    file.reset(::open(o.file.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
    if (!file) return say("batch: open %s: %s", o.file.c_str(), std::strerror(errno)), 2;
    in_fd = file.get();
  }
  if (o.shard) {
    auto sha = job_file_sha256(in_fd);
    if (!sha) return say("batch: %s: %s", o.file.c_str(), sha.error().message().c_str()), 2;
    o.jobs_sha256 = *sha;
  }
  signal(SIGPIPE, SIG_IGN);  // a closed reader is a write error, handled
  SupervisorOptions sopts;
  if (const char* base = std::getenv("CORRAL_WORKSPACE_BASE")) sopts.workspace_base = base;
  // Every child of the batch is a job's or a session keeper it opened
  // (spared through BatchSessions): what a job left, a setsid escapee of
  // tier none, dies at the latest when the batch ends.
  sopts.owns_every_child = true;
  if (!o.audit.empty()) {
    auto audit = FileAuditSink::open(o.audit);
    if (!audit) return say("%s", audit.error().message().c_str()), 2;
    sopts.audit = std::make_shared<FileAuditSink>(std::move(*audit));
  }
  auto sup = Supervisor::create(sopts);
  if (!sup) return say("%s", sup.error().message().c_str()), 1;
  Supervisor& s = **sup;

  std::size_t parallel = o.parallel ? o.parallel : default_parallel();
  if (parallel > s.capacity()) {
    say("batch: --parallel %zu is more than the fd limit allows; running %zu at a time", parallel, s.capacity());
    parallel = s.capacity();
  }
  if (parallel == 0) return say("batch: the fd limit leaves no room for a run"), 1;

  // Explicit --parallel: as given for every job. Default: CPU-limited jobs
  // at most one per CPU (see default_parallel).
  std::size_t cpu_parallel = o.parallel ? parallel : std::min(parallel, usable_cpus());
  Batch batch(s, in_fd, o.max_line_bytes, parallel, cpu_parallel, isatty(2) == 1, o, sopts.audit);
  auto st = s.watch_signals({SIGINT, SIGTERM, SIGHUP}, [&batch](int sig) { batch.stop(sig); });
  if (!st) return say("%s", st.error().message().c_str()), 1;
  return batch.run();
}

}  // namespace corral::cli
