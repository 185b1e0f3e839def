// corral batch's sessions (batch_session.hpp).
#include "batch_session.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "corral/json.hpp"
#include "corral/names.hpp"

namespace corral::cli {

Expected<std::optional<SessionKey>> take_session_field(std::string& line) {
  if (line.find("\"session\"") == std::string::npos) return std::optional<SessionKey>{};
  // The line is written again below without the field, and that would
  // drop a key given twice before job_from_json could refuse it.
  if (Status st = refuse_duplicate_keys(line); !st) return st.error();
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("session")) return std::optional<SessionKey>{};
  const auto& s = j["session"];
  if (!s.is_object()) return Error::invalid("session: expected an object {\"scope\", \"thread\"[, \"agent\"]}");
  SessionKey key;
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (!it.value().is_string()) return Error::invalid("session." + quote_input(it.key()) + ": expected a string");
    if (it.key() == "scope") key.scope = it.value().get<std::string>();
    else if (it.key() == "thread") key.thread = it.value().get<std::string>();
    else if (it.key() == "agent") key.agent = it.value().get<std::string>();
    else return Error::invalid("session: unknown field " + quote_input(it.key()) + " (scope, thread, agent)");
  }
  if (key.scope.empty() || key.thread.empty()) return Error::invalid("session: scope and thread are required");
  j.erase("session");
  line = j.dump();
  return std::optional<SessionKey>(std::move(key));
}

Expected<std::string> BatchSessions::session_for(const SessionKey& key, const Request& job) {
  // Opened by this batch already: its first job's options hold for all.
  if (std::string id = session_id_for(key); opened_.count(id)) return id;
  SessionSpec spec;
  spec.base.tier = Tier::container;
  spec.base.binds = job.binds;
  spec.base.rootfs = job.rootfs;
  spec.base.user = job.user;
  spec.base.cwd = job.cwd;
  for (Limit l : {Limit::memory_bytes, Limit::process_count, Limit::workspace_bytes})
    if (auto v = job.limits.get(l)) spec.base.limits.set(l, *v);
  auto s = acquire_session(key, spec);
  if (!s) return std::move(s).error();
  if (on_keeper_ && s->keeper > 0) on_keeper_(s->keeper);
  opened_.insert(s->id);
  return s->id;
}

void BatchSessions::run_or_queue(const std::string& id, Waiting job) {
  if (busy_.insert(id).second) {
    job.start();
    return;
  }
  waiting_[id].push_back(std::move(job));
  ++queued_;
}

std::vector<BatchSessions::Waiting> BatchSessions::take_waiting() {
  std::vector<Waiting> out;
  for (auto& [id, jobs] : waiting_)
    for (auto& job : jobs) out.push_back(std::move(job));
  waiting_.clear();
  ready_.clear();
  queued_ = 0;
  // Result lines in the order the jobs came.
  std::stable_sort(out.begin(), out.end(), [](const Waiting& a, const Waiting& b) { return a.line < b.line; });
  return out;
}

void BatchSessions::pump() {
  while (!ready_.empty()) {
    std::string id = std::move(ready_.front());
    ready_.pop_front();
    auto it = waiting_.find(id);
    if (it == waiting_.end() || it->second.empty()) {
      busy_.erase(id);
      continue;
    }
    auto next = std::move(it->second.front());
    it->second.pop_front();
    --queued_;
    next.start();
  }
}

int BatchSessions::dispose_opened() {
  int n = 0;
  for (const auto& id : opened_) n += static_cast<bool>(dispose_session(id));
  opened_.clear();
  return n;
}

}  // namespace corral::cli
