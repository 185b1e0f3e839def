#include "corral/outputs.hpp"

#include "corral/capture.hpp"
#include "corral/names.hpp"
#include "corral/sha256.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <set>

namespace corral {
namespace {

// utf8proc_map with `options`, or nullopt for invalid UTF-8.
std::optional<std::string> utf8_map(std::string_view text, int options) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &out,
                                    static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0) return std::nullopt;
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

std::string_view basename_of(std::string_view path) {
  auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

TransferError failure(TransferErrorKind kind, int code, std::string message) {
  return TransferError{kind, Error(code, std::move(message)), {}};
}

std::string output_label(const DeclaredOutput& output) { return "output " + quote_input(output.path); }

// How two names with one collision key meet at the destination.
std::string how_they_meet(const std::string& first, const std::string& name) {
  if (first == name) return "are identical";
  if (utf8_map(first, UTF8PROC_STABLE | UTF8PROC_COMPOSE) == utf8_map(name, UTF8PROC_STABLE | UTF8PROC_COMPOSE))
    return "differ only by Unicode normalization form (NFC/NFD)";
  return "differ only by case";
}

// The landing names taken so far, by collision key: a name claims its
// file at the destination, and with it every parent directory of it.
class LandingNames {
 public:
  // Takes `name`, or says (without taking it) why it is one file at the
  // destination with a name taken before, or would need a file and a
  // directory at one path. `name` must be valid UTF-8 (the lexical rules).
  Status claim(const std::string& name) {
    auto key = collision_key(name);
    if (!key) return std::move(key).error();
    if (auto same = by_key_.find(*key); same != by_key_.end())
      return Error(EEXIST, "landing names " + quote_input(same->second) + " and " + quote_input(name) + " " +
                               how_they_meet(same->second, name) + ": they are one file at the destination");
    for (auto slash = key->find('/'); slash != std::string::npos; slash = key->find('/', slash + 1))
      if (auto parent = by_key_.find(key->substr(0, slash)); parent != by_key_.end())
        return Error(EEXIST, "landing name " + quote_input(parent->second) +
                                 " is a file and also a parent directory of " + quote_input(name));
    // A taken name below this one: keys under "<key>/" sort together.
    if (auto below = by_key_.lower_bound(*key + "/");
        below != by_key_.end() && below->first.compare(0, key->size() + 1, *key + "/") == 0)
      return Error(EEXIST, "landing name " + quote_input(name) + " is a file and also a parent directory of " +
                               quote_input(below->second));
    by_key_.emplace(std::move(*key), name);
    return {};
  }

 private:
  std::map<std::string, std::string> by_key_;  // collision key -> the name as given
};

// Phase-1 checks shared by validate_declaration() and transfer().
std::optional<TransferError> check_declaration(const std::vector<DeclaredOutput>& outputs,
                                               bool globs_allowed) {
  std::vector<std::string> literal_names;
  for (const auto& output : outputs) {
    std::string label = output_label(output);
    if (Status s = validate_relative_name(output.path, "output"); !s)
      return failure(TransferErrorKind::invalid_name, EINVAL, s.error().message());
    if (output.is_glob() && !globs_allowed)
      return failure(TransferErrorKind::invalid_name, EINVAL,
                     label + " is a glob, and the tier cannot list files (files_list)");
    if (!output.name.empty()) {
      if (Status s = validate_relative_name(output.name, label + ": landing name"); !s)
        return failure(TransferErrorKind::invalid_name, EINVAL, s.error().message());
      if (output.name.find_first_of("*?[") != std::string::npos)
        return failure(TransferErrorKind::invalid_name, EINVAL,
                       label + ": landing name " + quote_input(output.name) + " contains a glob character");
    }
    if (!output.is_glob()) literal_names.push_back(output.landing_name());
  }
  if (Status s = check_collisions(literal_names); !s)
    return failure(TransferErrorKind::name_collision, EEXIST, s.error().message());
  return std::nullopt;
}

// One file found in phase 2.
struct Planned {
  const DeclaredOutput* output;
  std::string source_path;
  std::string landing;
  std::uint64_t size = 0;
  // Filled in phase 3: the digest, the sink's writer holding the bytes
  // (land), or the bytes themselves (consume, when the caller keeps them).
  std::string sha256;
  std::unique_ptr<SinkWriter> writer;
  std::string content;
  bool skipped = false;  // phase 3 found it gone, refused or changed
};

// The read buffer: a transfer holds this much of a file at a time.
constexpr std::size_t kChunk = 64 * 1024;

class Transfer {
 public:
  // The declared literal landing names are taken first (phase 1 found them
  // distinct): a glob's match never displaces a file the route names.
  Transfer(const std::vector<DeclaredOutput>& outputs, const TransferLimits& limits, OutputSource& source)
      : limits_(limits), source_(source) {
    for (const auto& output : outputs)
      if (!output.is_glob()) {
        (void)taken_.claim(output.landing_name());
        source_of_.emplace(output.landing_name(), output.path);
      }
  }

  // Phase 2 for one output: find its files, stat and cap them.
  std::optional<TransferError> plan(const DeclaredOutput& output) {
    std::string label = output_label(output);
    std::vector<std::pair<std::string, std::string>> files;  // {source path, landing name}
    if (output.is_glob()) {
      auto listed = source_.list(output.path);
      if (!listed)
        return failure(TransferErrorKind::source_failed, listed.error().code(),
                       label + ": list: " + listed.error().message());
      // Per file, as corral run's --output: a name the run chose that no
      // destination may hold, or that would be one file there with an
      // output already planned, costs only that file.
      for (auto& match : *listed) {
        if (Status s = validate_relative_name(match, label + ": match"); !s) {
          skip(match, s.error().message());
          continue;
        }
        std::string landing = output.name.empty() ? match : output.name + "/" + std::string(basename_of(match));
        // The very file under the very name, asked for twice (`a.txt` and
        // `*.txt`): delivered once, no note.
        if (auto same = source_of_.find(landing); same != source_of_.end() && same->second == match) continue;
        if (Status s = taken_.claim(landing); !s) {
          skip(match, label + ": match " + quote_input(match) + ": " + s.error().message());
          continue;
        }
        source_of_.emplace(landing, match);
        files.emplace_back(std::move(match), std::move(landing));
      }
      if (files.empty()) {
        if (output.required)
          return failure(TransferErrorKind::required_missing, ENOENT,
                         label + " is required and matched nothing" +
                             (listed->empty() ? "" : " deliverable (every match was skipped)"));
        return std::nullopt;
      }
    } else {
      files.emplace_back(output.path, output.landing_name());
    }

    if (planned_.size() + files.size() > limits_.max_files)
      return failure(TransferErrorKind::cap_exceeded, EFBIG,
                     label + ": " + std::to_string(files.size()) + " file(s) after " +
                         std::to_string(planned_.size()) + " others exceed max_files (" +
                         std::to_string(limits_.max_files) + "); nothing is collected");

    for (auto& [file, landing] : files) {
      auto size = source_.stat(file);
      if (!size) {
        int code = size.error().code();
        if (code == ENOENT && !output.is_glob()) {
          if (output.required)
            return failure(TransferErrorKind::required_missing, ENOENT,
                           label + " is required and does not exist");
          continue;  // optional and absent: skipped
        }
        // A file the source will not give (a hard link), or a match gone
        // since the listing, costs only that file.
        if (code == EPERM || code == ENOENT) {
          if (auto refused =
                  skip_file(output, TransferErrorKind::required_missing, code, size.error().message(), file))
            return refused;
          continue;
        }
        return failure(TransferErrorKind::source_failed, code,
                       label + ": stat " + quote_input(file) + ": " + size.error().message());
      }
      if (!size->has_value()) {
        if (auto refused = skip_file(output, TransferErrorKind::size_unknown, EINVAL,
                                     "the size of " + quote_input(file) +
                                         " cannot be known before reading it (not a regular file?)",
                                     file))
          return refused;
        continue;
      }
      std::uint64_t bytes = **size;
      if (bytes > limits_.max_bytes_per_file)
        return failure(TransferErrorKind::cap_exceeded, EFBIG,
                       label + ": " + quote_input(file) + " has " + std::to_string(bytes) +
                           " bytes, over max_bytes_per_file (" +
                           std::to_string(limits_.max_bytes_per_file) + ")");
      if (bytes > limits_.max_total_bytes - std::min(total_, limits_.max_total_bytes))
        return failure(TransferErrorKind::cap_exceeded, EFBIG,
                       label + ": " + quote_input(file) + " (" + std::to_string(bytes) +
                           " bytes) brings the total to " + std::to_string(total_ + bytes) +
                           ", over max_total_bytes (" + std::to_string(limits_.max_total_bytes) +
                           ")");
      total_ += bytes;
      planned_.push_back(Planned{&output, std::move(file), std::move(landing), bytes, {}, {}, {}, false});
    }
    return still_required(output);
  }

  std::vector<SkippedOutput> take_skipped() { return std::move(skipped_); }

  // Phase 3: read everything, sizes checked again, each file streamed
  // through one buffer into its digest and its sink writer (nothing lands
  // before phase 4). A file that is gone, refused or changed since its stat
  // is skipped on its own (an output the route requires refuses the
  // transfer instead), its writer dropped with what it held.
  std::optional<TransferError> read_all(const std::vector<DeclaredOutput>& outputs, Sink* sink, Consumed consumed) {
    std::vector<char> buf(kChunk);
    for (auto& p : planned_) {
      std::string label = output_label(*p.output);
      auto refuse_or_skip = [&](const Error& e, const std::string& what) -> std::optional<TransferError> {
        int code = e.code();
        if (code != EPERM && code != ENOENT)
          return failure(TransferErrorKind::source_failed, code,
                         label + ": " + what + " " + quote_input(p.source_path) + ": " + e.message());
        return skip_planned(p, TransferErrorKind::required_missing, code,
                            what + " " + quote_input(p.source_path) + ": " + e.message());
      };
      auto reader = source_.open(p.source_path);
      if (!reader) {
        if (auto refused = refuse_or_skip(reader.error(), "read")) return refused;
        continue;
      }
      const bool lands = p.output->disposition == Disposition::land;
      std::unique_ptr<SinkWriter> writer;
      if (lands) {
        auto begun = sink->begin(p.landing, p.output->media_type);
        if (!begun) return sink_failed(p, begun.error());
        writer = std::move(*begun);
      }
      const bool keep = !lands && consumed == Consumed::content;
      Sha256 digest;
      std::uint64_t got = 0;
      std::optional<Error> read_error;
      // One byte more than the stat said, to see a file that grew.
      while (got <= p.size) {
        std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), p.size + 1 - got));
        auto n = (*reader)->read(std::span<char>(buf.data(), want));
        if (!n) {
          read_error = n.error();
          break;
        }
        if (*n == 0) break;
        std::string_view chunk(buf.data(), *n);
        got += *n;
        digest.update(chunk);
        if (writer)
          if (Status st = writer->write(chunk); !st) return sink_failed(p, st.error());
        if (keep) p.content.append(chunk);
      }
      if (read_error) {
        if (auto refused = refuse_or_skip(*read_error, "read")) return refused;
        continue;
      }
      if (got > p.size && got > limits_.max_bytes_per_file) {
        if (auto refused = skip_planned(p, TransferErrorKind::cap_exceeded, EFBIG,
                                        quote_input(p.source_path) +
                                            " grew past max_bytes_per_file (" +
                                            std::to_string(limits_.max_bytes_per_file) + ") while being read"))
          return refused;
        continue;
      }
      if (got != p.size) {
        if (auto refused = skip_planned(
                p, TransferErrorKind::size_changed, EAGAIN,
                quote_input(p.source_path) + " changed size between stat (" +
                    std::to_string(p.size) + " bytes) and read (" +
                    (got > p.size ? "more than " + std::to_string(p.size) : std::to_string(got)) + " bytes)"))
          return refused;
        continue;
      }
      if (writer)
        if (Status st = writer->finish(); !st) return sink_failed(p, st.error());
      p.sha256 = digest.hex_digest();
      p.writer = std::move(writer);
    }
    std::erase_if(planned_, [](const Planned& p) { return p.skipped; });
    for (const auto& output : outputs)
      if (auto missing = still_required(output)) return missing;
    return std::nullopt;
  }

  // Phase 4: land in order. Only the sink's own failure can stop it.
  TransferResult deliver_all() {
    std::vector<Delivered> delivered;
    for (auto& p : planned_) {
      Delivered d;
      d.name = p.landing;
      d.source_path = p.source_path;
      d.media_type = p.output->media_type;
      d.disposition = p.output->disposition;
      d.bytes = p.size;
      d.sha256 = p.sha256;
      if (p.output->disposition == Disposition::consume) {
        d.content = std::move(p.content);
      } else {
        auto landed = p.writer->commit(d.sha256);
        p.writer.reset();
        if (!landed) {
          TransferError error = failure(TransferErrorKind::delivery_failed, landed.error().code(),
                                        output_label(*p.output) + ": deliver " + quote_input(p.landing) + ": " +
                                            landed.error().message() + " (delivered before it: " +
                                            names_of(delivered) + ")");
          error.delivered_before = std::move(delivered);
          return error;
        }
        d.landed = std::move(*landed);
      }
      delivered.push_back(std::move(d));
    }
    return delivered;
  }

 private:
  const TransferLimits& limits_;
  OutputSource& source_;

  static std::string names_of(const std::vector<Delivered>& delivered) {
    std::string done;
    for (const auto& before : delivered) done += (done.empty() ? "" : ", ") + quote_input(before.name);
    return done.empty() ? std::string("none") : done;
  }
  // The sink failed while a file was written into it (phase 3): nothing
  // was landed yet.
  TransferError sink_failed(const Planned& p, const Error& e) const {
    return failure(TransferErrorKind::delivery_failed, e.code(),
                   output_label(*p.output) + ": deliver " + quote_input(p.landing) + ": " + e.message() +
                       " (delivered before it: none)");
  }
  void skip(const std::string& match, std::string why) {
    skipped_.push_back(SkippedOutput{match, std::move(why) + "; not delivered"});
  }

  // A file found but not deliverable, and `why`: a literal output the
  // route requires refuses the transfer as `kind`; any other file is
  // skipped with a note, and the rest are delivered.
  std::optional<TransferError> skip_file(const DeclaredOutput& output, TransferErrorKind kind, int code,
                                         const std::string& why, const std::string& file) {
    std::string label = output_label(output);
    if (output.required && !output.is_glob())
      return failure(kind, code,
                     label + (kind == TransferErrorKind::required_missing ? " is required and cannot be delivered: "
                                                                          : ": ") + why);
    skip(file, label + ": " + why);
    return std::nullopt;
  }
  std::optional<TransferError> skip_planned(Planned& p, TransferErrorKind kind, int code, std::string why) {
    p.skipped = true;
    return skip_file(*p.output, kind, code, std::move(why), p.source_path);
  }

  // A required glob must still have a file planned after the skips.
  std::optional<TransferError> still_required(const DeclaredOutput& output) const {
    if (!output.required || !output.is_glob()) return std::nullopt;
    for (const auto& p : planned_)
      if (p.output == &output && !p.skipped) return std::nullopt;
    return failure(TransferErrorKind::required_missing, ENOENT,
                   output_label(output) + " is required and matched nothing deliverable (every match was skipped)");
  }

  std::vector<Planned> planned_;
  std::uint64_t total_ = 0;
  LandingNames taken_;
  std::map<std::string, std::string> source_of_;  // landing name -> source path, as planned
  std::vector<SkippedOutput> skipped_;
};

}  // namespace

std::string_view to_string(Disposition disposition) {
  return disposition == Disposition::land ? "land" : "consume";
}

Expected<Disposition> parse_disposition(std::string_view text) {
  if (text == "land") return Disposition::land;
  if (text == "consume") return Disposition::consume;
  return Error::invalid("disposition " + quote_input(text) + " is unknown (known: land, consume)");
}

bool DeclaredOutput::is_glob() const { return path.find_first_of("*?[") != std::string::npos; }

std::string_view to_string(TransferErrorKind kind) {
  switch (kind) {
    case TransferErrorKind::cap_exceeded: return "cap_exceeded";
    case TransferErrorKind::required_missing: return "required_missing";
    case TransferErrorKind::size_unknown: return "size_unknown";
    case TransferErrorKind::name_collision: return "name_collision";
    case TransferErrorKind::invalid_name: return "invalid_name";
    case TransferErrorKind::no_sink: return "no_sink";
    case TransferErrorKind::size_changed: return "size_changed";
    case TransferErrorKind::source_failed: return "source_failed";
    case TransferErrorKind::delivery_failed: return "delivery_failed";
  }
  return "?";
}

Expected<std::string> collision_key(std::string_view name) {
  auto key = utf8_map(name, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_CASEFOLD);
  if (!key) return Error::invalid("name " + quote_input(name) + " is not valid UTF-8");
  return std::move(*key);
}

Status check_collisions(const std::vector<std::string>& landing_names) {
  LandingNames taken;
  for (const auto& name : landing_names)
    if (Status s = taken.claim(name); !s) return s;
  return {};
}

Status validate_declaration(const std::vector<DeclaredOutput>& outputs, bool globs_allowed) {
  if (auto problem = check_declaration(outputs, globs_allowed)) return problem->error;
  return {};
}

TransferResult transfer(const std::vector<DeclaredOutput>& outputs, const TransferLimits& limits,
                        OutputSource& source, Sink* sink, Consumed consumed) {
  // Phase 1: the declaration alone.
  if (!sink) {
    for (const auto& output : outputs)
      if (output.disposition == Disposition::land)
        return failure(TransferErrorKind::no_sink, EINVAL,
                       output_label(output) + " lands, and no sink was given");
  }
  if (auto problem = check_declaration(outputs, /*globs_allowed=*/true)) return std::move(*problem);

  // Phase 2: stat and cap everything (a glob's match whose name cannot
  // land is skipped here, with a note).
  Transfer t(outputs, limits, source);
  auto finish = [&](TransferResult r) {
    r.set_skipped(t.take_skipped());
    return r;
  };
  for (const auto& output : outputs)
    if (auto problem = t.plan(output)) return finish(std::move(*problem));

  // Phase 3: read everything (into the sink's writers, not landed yet).
  if (auto problem = t.read_all(outputs, sink, consumed)) return finish(std::move(*problem));

  // Phase 4: deliver.
  return finish(t.deliver_all());
}

std::string sha256_hex(std::string_view bytes) { return Sha256::hex_of(bytes); }

}  // namespace corral
