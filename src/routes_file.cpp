#include "corral/routes_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "corral/names.hpp"
#include "corral/request_fields.hpp"
#include "routes_scan.hpp"

// toml++ 3.3, header-only and confined to this file: nothing else of corral
// sees it, so libcorral.a/.so need no toml++ library at link time. No
// exceptions: a parse error is a value, like every other corral error.
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0
#include <toml++/toml.h>

namespace corral {
namespace {

std::string q(std::string_view s) { return quote_input(s); }

std::string_view type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::none: return "nothing";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
  }
  return "something else";
}

template <std::size_t N>
std::string known_list(const std::array<std::string_view, N>& names) {
  std::string out;
  for (auto name : names) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

std::string limit_names() {
  std::string out;
  for (const auto& info : all_limits()) out += (out.empty() ? "" : ", ") + std::string(info.name);
  return out;
}

// A table's entries in the order they appear in the file (toml++ keeps a
// table sorted by key), so the first problem reported is the first one a
// reader meets.
std::vector<std::pair<const toml::key*, const toml::node*>> in_file_order(const toml::table& table) {
  std::vector<std::pair<const toml::key*, const toml::node*>> items;
  for (auto&& [key, node] : table) items.emplace_back(&key, &node);
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    const auto& x = a.first->source().begin;
    const auto& y = b.first->source().begin;
    return x.line != y.line ? x.line < y.line : x.column < y.column;
  });
  return items;
}

// A TOML value as the field table takes it (request_fields.hpp), with its
// line for the message.
FieldValue field_value(const toml::node& node) {
  using Type = FieldValue::Type;
  FieldValue out;
  out.line = static_cast<int>(node.source().begin.line);
  if (auto* s = node.as_string()) {
    out.text = s->get();
  } else if (auto* i = node.as_integer()) {
    out.type = Type::integer;
    out.text = std::to_string(i->get());
  } else if (auto* f = node.as_floating_point()) {
    out.type = Type::real;
    out.real = f->get();
  } else if (auto* b = node.as_boolean()) {
    out.type = Type::boolean;
    out.boolean = b->get();
  } else if (auto* array = node.as_array()) {
    out.type = Type::list;
    for (std::size_t i = 0; i < array->size(); ++i) out.items.push_back(field_value(*array->get(i)));
  } else if (auto* table = node.as_table()) {
    out.type = Type::table;
    for (auto [key, value] : in_file_order(*table)) {
      out.entries.emplace_back(std::string(key->str()), field_value(*value));
      out.entries.back().second.line = static_cast<int>(key->source().begin.line);
    }
  } else {
    out.type = Type::other;
    out.other = type_name(node.type());
  }
  return out;
}

// Reads one table of the file (a route, or [host]); every error says
// "FILE:LINE: WHO: ..." with the dotted key.
class Reader {
 public:
  Reader(std::string_view path, std::string who) : path_(path), who_(std::move(who)) {}

  Error at(const toml::source_region& where, const std::string& why) const {
    return Error::invalid(std::string(path_) + ":" + std::to_string(where.begin.line) + ": " + who_ +
                          ": " + why);
  }
  Error unknown(const toml::key& key, const std::string& prefix, const std::string& known) const {
    return at(key.source(), "unknown key " + q(prefix + std::string(key.str())) + " (known: " + known + ")");
  }
  Error wrong_type(const toml::node& node, const std::string& key, std::string_view want) const {
    return at(node.source(), "key " + q(key) + " must be " + std::string(want) + ", not " +
                                 std::string(type_name(node.type())));
  }
  Error invalid(const toml::node& node, const std::string& key, const std::string& why) const {
    return at(node.source(), "key " + q(key) + ": " + why);
  }
  Error invalid_at(int line, const std::string& key, const Error& why) const {
    return Error(why.code(), std::string(path_) + ":" + std::to_string(line) + ": " + who_ + ": key " + q(key) +
                                 ": " + why.message());
  }

  Expected<std::string> string(const toml::node& node, const std::string& key) const {
    if (auto* s = node.as_string()) return s->get();
    return wrong_type(node, key, "a string");
  }
  Expected<bool> boolean(const toml::node& node, const std::string& key) const {
    if (auto* b = node.as_boolean()) return b->get();
    return wrong_type(node, key, "a boolean (true or false)");
  }
  Expected<std::int64_t> integer(const toml::node& node, const std::string& key) const {
    if (auto* i = node.as_integer()) return i->get();
    return wrong_type(node, key, "an integer");
  }
  // A non-negative integer, or at least 1 when `positive`.
  Expected<std::uint64_t> count(const toml::node& node, const std::string& key, bool positive) const {
    auto value = integer(node, key);
    if (!value) return std::move(value).error();
    if (*value < 0) return invalid(node, key, std::to_string(*value) + " is negative");
    if (positive && *value == 0) return invalid(node, key, "must be at least 1");
    return static_cast<std::uint64_t>(*value);
  }
  const toml::table* table(const toml::node& node, const std::string& key, Error& error) const {
    if (auto* t = node.as_table()) return t;
    error = wrong_type(node, key, "a table");
    return nullptr;
  }
  // An array of strings, each parsed by `parse` (which returns its own
  // Expected); errors name the element as key[i] (1-based).
  template <class T, class Parse>
  Expected<std::vector<T>> list(const toml::node& node, const std::string& key, Parse parse) const {
    auto* array = node.as_array();
    if (!array) return wrong_type(node, key, "an array of strings");
    std::vector<T> out;
    for (std::size_t i = 0; i < array->size(); ++i) {
      const toml::node& item = *array->get(i);
      std::string item_key = key + "[" + std::to_string(i + 1) + "]";
      auto text = string(item, item_key);
      if (!text) return std::move(text).error();
      auto parsed = parse(*text);
      if (!parsed) return invalid(item, item_key, parsed.error().message());
      out.push_back(std::move(*parsed));
    }
    return out;
  }

 private:
  std::string_view path_;
  std::string who_;
};

Expected<std::string> as_is(const std::string& text) { return text; }

Expected<Limit> limit_named(const std::string& text) {
  if (auto limit = limit_from_name(text)) return *limit;
  return Error::invalid(q(text) + " is not a limit (known: " + limit_names() + ")");
}

Status read_transfer(const Reader& r, const toml::node& node, TransferLimits& transfer) {
  Error error;
  const toml::table* table = r.table(node, "transfer", error);
  if (!table) return error;
  for (auto [key, value] : in_file_order(*table)) {
    std::string k = "transfer." + std::string(key->str());
    std::uint64_t* field = key->str() == "max_bytes_per_file" ? &transfer.max_bytes_per_file
                         : key->str() == "max_total_bytes"    ? &transfer.max_total_bytes
                         : key->str() == "max_files"          ? &transfer.max_files
                                                              : nullptr;
    if (!field) return r.unknown(*key, "transfer.", "max_bytes_per_file, max_total_bytes, max_files");
    auto n = r.count(*value, k, true);
    if (!n) return std::move(n).error();
    *field = *n;
  }
  return {};
}

Expected<DeclaredOutput> read_output(const Reader& r, const toml::node& node, const std::string& prefix) {
  Error error;
  const toml::table* table = r.table(node, prefix, error);
  if (!table) return error;
  DeclaredOutput out;
  bool has_path = false, has_media_type = false;
  for (auto [key, value] : in_file_order(*table)) {
    std::string_view name = key->str();
    std::string k = prefix + "." + std::string(name);
    if (name == "path" || name == "media_type" || name == "name" || name == "disposition") {
      auto text = r.string(*value, k);
      if (!text) return std::move(text).error();
      if (name == "path") {
        out.path = *text;
        has_path = true;
      } else if (name == "media_type") {
        out.media_type = *text;
        has_media_type = !text->empty();
      } else if (name == "name") {
        out.name = *text;
      } else {
        auto disposition = parse_disposition(*text);
        if (!disposition) return r.invalid(*value, k, disposition.error().message());
        out.disposition = *disposition;
      }
    } else if (name == "required") {
      auto flag = r.boolean(*value, k);
      if (!flag) return std::move(flag).error();
      out.required = *flag;
    } else {
      return r.unknown(*key, prefix + ".", "path, media_type, required, name, disposition");
    }
  }
  if (!has_path) return r.at(node.source(), "key " + q(prefix + ".path") + " is missing");
  if (!has_media_type)
    return r.at(node.source(), "key " + q(prefix + ".media_type") + " is missing (an output's media type is "
                               "declared, never sniffed)");
  return out;
}

// The keys of a route that are not request fields; the request fields a
// route takes (tier, provenance, limits, pass_env, secret_env,
// on_output_limit) come from the field table (request_fields.hpp).
constexpr std::array<std::string_view, 9> kRouteOnlyKeys{
    "name", "min_isolation", "requires", "egress_allow", "outputs", "transfer", "acknowledge_network_egress",
    "acknowledged_unenforced", "allow_host_paths",
};

std::string route_keys() {
  std::string out = known_list(kRouteOnlyKeys);
  for (const auto& field : request_fields())
    if (field.accepts(kRouteKey)) out += ", " + std::string(field.route_key);
  return out;
}

// A request field's value, read through the field table into `scratch`,
// and what the route keeps of it.
Status read_field(const Reader& r, const RequestField& field, const std::string& k, const toml::node& node,
                  Job& scratch, RouteSpec& spec) {
  FieldValue value = field_value(node);
  Status st = apply_value(field, scratch, value, [&](std::string_view suffix, const FieldValue& at, const Error& why) {
    return r.invalid_at(at.line ? at.line : value.line, k + std::string(suffix), why);
  });
  if (!st) return st;
  const Request& req = scratch.request;
  if (field.name == "tier") spec.tier = value.text;
  else if (field.name == "provenance") spec.provenance = scratch.ask.provenance;
  else if (field.name == "limits") spec.limits = req.limits;
  else if (field.name == "on_output_limit") spec.kill_on_output_limit = req.on_output_limit == OutputLimitPolicy::kill;
  else if (field.name == "pass_env") spec.env_passthrough = req.pass_env;
  else if (field.name == "secret_env") {
    spec.secrets.clear();
    for (const auto& secret : req.secrets) spec.secrets.push_back(secret.name);
  } else {
    return r.invalid_at(value.line, k, Error::invalid("is not a route's"));  // a table row claims a key read nowhere
  }
  return {};
}

Expected<RouteSpec> read_route(std::string_view path, const toml::table& table, std::size_t index) {
  RouteSpec spec;
  // Name the route in every message when it has a usable name.
  std::string who = "route #" + std::to_string(index + 1);
  if (auto* name = table.get("name"); name && name->is_string()) who = "route " + q(name->as_string()->get());
  Reader r(path, who);
  bool has_name = false;
  spec.env_passthrough = {"PATH"};  // the default of every run (request.hpp)

  Job scratch;  // the request fields a route sets, read as a job's are
  for (auto [key, value] : in_file_order(table)) {
    std::string k(key->str());
    Status st;
    if (const RequestField* field = field_by_route_key(k)) {
      st = read_field(r, *field, k, *value, scratch, spec);
    } else if (k == "name") {
      auto s = r.string(*value, k);
      if (!s) return std::move(s).error();
      spec.name = *s;
      has_name = true;
    } else if (k == "min_isolation") {
      auto s = r.string(*value, k);
      if (!s) return std::move(s).error();
      auto level = parse_isolation(*s);
      if (!level) return r.invalid(*value, k, level.error().message());
      spec.min_isolation = *level;
    } else if (k == "requires") {
      auto caps = r.list<Capability>(*value, k, [](const std::string& s) { return parse_capability(s); });
      if (!caps) return std::move(caps).error();
      spec.required_capabilities = std::move(*caps);
    } else if (k == "egress_allow" || k == "allow_host_paths") {
      auto items = r.list<std::string>(*value, k, as_is);
      if (!items) return std::move(items).error();
      (k == "egress_allow" ? spec.egress_allow : spec.allow_host_paths) = std::move(*items);
    } else if (k == "acknowledged_unenforced") {
      auto limits = r.list<Limit>(*value, k, limit_named);
      if (!limits) return std::move(limits).error();
      spec.acknowledged_unenforced = {limits->begin(), limits->end()};
    } else if (k == "acknowledge_network_egress") {
      auto flag = r.boolean(*value, k);
      if (!flag) return std::move(flag).error();
      spec.acknowledge_network_egress = *flag;
    } else if (k == "transfer") {
      st = read_transfer(r, *value, spec.transfer);
    } else if (k == "outputs") {
      auto* array = value->as_array();
      if (!array) return r.wrong_type(*value, k, "an array of tables ([[route.outputs]])");
      for (std::size_t i = 0; i < array->size(); ++i) {
        auto out = read_output(r, *array->get(i), "outputs[" + std::to_string(i + 1) + "]");
        if (!out) return std::move(out).error();
        spec.outputs.push_back(std::move(*out));
      }
    } else {
      return r.unknown(*key, "", route_keys());
    }
    if (!st) return st.error();
  }
  if (!has_name) return r.at(table.source(), "key 'name' is missing (every route is named)");
  return spec;
}

Status read_host(std::string_view path, const toml::node& node, HostPolicy& policy) {
  Reader r(path, "[host]");
  auto* table = node.as_table();
  if (!table) return r.wrong_type(node, "host", "a table ([host])");
  for (auto [key, value] : in_file_order(*table)) {
    std::string k(key->str());
    if (k != "floor" && k != "trusted_floor" && k != "untrusted_floor")
      return r.unknown(*key, "", "floor, trusted_floor, untrusted_floor");
    auto text = r.string(*value, k);
    if (!text) return std::move(text).error();
    auto level = parse_isolation(*text);
    if (!level) return r.invalid(*value, k, level.error().message());
    // The file may raise the host's floors, never lower them.
    Isolation current = k == "floor" ? Isolation::none
                      : k == "trusted_floor" ? policy.trusted_floor
                                             : policy.untrusted_floor;
    if (*level < current)
      return r.invalid(*value, k, std::string(to_string(*level)) + " would lower the floor below " +
                                      std::string(to_string(current)) + "; a routes file can only raise it");
    if (k == "floor") policy.floor_for_all = *level;
    else if (k == "trusted_floor") policy.trusted_floor = *level;
    else policy.untrusted_floor = *level;
  }
  return {};
}

}  // namespace

Expected<RoutesFile> parse_routes(std::string_view text, std::string_view path) {
  RoutesFile file;
  file.path = std::string(path);
  if (Status st = check_toml_bounds(text, path); !st) return st.error();
  toml::parse_result parsed = toml::parse(text, path);
  if (!parsed) {
    const auto& e = parsed.error();
    return Error::invalid(file.path + ":" + std::to_string(e.source().begin.line) + ": not valid TOML: " +
                          std::string(e.description()));
  }
  const toml::table& top = parsed.table();
  Reader r(path, "routes file");
  for (auto [key, value] : in_file_order(top)) {
    if (key->str() == "host") {
      if (Status st = read_host(path, *value, file.policy); !st) return st.error();
    } else if (key->str() == "route") {
      if (!value->is_array_of_tables())
        return r.wrong_type(*value, "route", "an array of tables ([[route]])");
      const toml::array& routes = *value->as_array();
      for (std::size_t i = 0; i < routes.size(); ++i) {
        const toml::table& table = *routes.get(i)->as_table();
        auto spec = read_route(path, table, i);
        if (!spec) return std::move(spec).error();
        file.routes.push_back(std::move(*spec));
        file.lines.push_back(static_cast<int>(table.source().begin.line));
      }
    } else {
      return r.unknown(*key, "", "route, host");
    }
  }
  if (file.routes.empty())
    return Error::invalid(file.path + ": defines no routes (add [[route]] tables)");
  return file;
}

Expected<RoutesFile> load_routes_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return Error::from_errno(errno, "routes file '" + path + "'");
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Error::from_errno(err, "routes file '" + path + "': read");
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > (16u << 20)) {
      ::close(fd);
      return Error::invalid("routes file '" + path + "': larger than 16 MiB; that is not a routes file");
    }
  }
  ::close(fd);
  return parse_routes(text, path);
}

HostEnforcementView::HostEnforcementView(const HostFacts& host) {
  for (Tier tier : {Tier::none, Tier::os_process, Tier::container}) {
    auto& limits = table_[std::string(to_string(tier))];
    for (auto& entry : enforcement_map(host, tier))
      if (auto limit = limit_from_name(entry.name))
        limits[*limit] = Entry{std::move(entry.how), std::move(entry.note)};
  }
}

namespace {
// "process" is the CLI's name of os_process; anything else unknown is "".
std::string_view canonical_tier(std::string_view tier) {
  auto parsed = parse_tier(tier);
  return parsed ? to_string(*parsed) : std::string_view{};
}
}  // namespace

std::string_view HostEnforcementView::how(std::string_view tier, Limit limit) const {
  auto t = table_.find(canonical_tier(tier));
  if (t == table_.end()) return {};
  auto e = t->second.find(limit);
  return e == t->second.end() ? std::string_view{} : std::string_view(e->second.how);
}

std::string_view HostEnforcementView::note(std::string_view tier, Limit limit) const {
  auto t = table_.find(canonical_tier(tier));
  if (t == table_.end()) return {};
  auto e = t->second.find(limit);
  return e == t->second.end() ? std::string_view{} : std::string_view(e->second.note);
}

Expected<TierCapabilities> host_tier_capabilities(std::string_view tier, const HostFacts& host) {
  auto caps = tier_capabilities(tier);
  if (!caps) return caps;
  if (caps->isolation == Isolation::os_process && caps->egress == Egress::allowlist) {
    // The allow-list is seccomp (sockets limited to AF_UNIX and TCP) plus
    // Landlock TCP connect rules; closing is seccomp's no-network alone.
    if (!host.seccomp) caps->egress = Egress::unrestricted;
    else if (host.landlock_abi < 4) caps->egress = Egress::closed;
  }
  // As root a process-tier run has a uid of its own on the host, and every
  // process of it is killed at the deadline, at cancel and at the end of
  // the run: escapees of the group too (the enforcement map's "uid").
  if (caps->isolation == Isolation::os_process && host.root) caps->reaps_descendants = true;
  return caps;
}

Expected<Router> build_routes(const RoutesFile& file, const HostFacts& host,
                              const std::function<void(const Route&)>& on_route) {
  Router router(file.policy);
  HostEnforcementView view(host);
  for (std::size_t i = 0; i < file.routes.size(); ++i) {
    const RouteSpec& spec = file.routes[i];
    std::string where = file.path + ":" + std::to_string(i < file.lines.size() ? file.lines[i] : 0) + ": ";
    // An empty tier gets a blank declaration: the Router refuses it by name.
    TierCapabilities caps;
    if (!spec.tier.empty()) {
      auto declared = host_tier_capabilities(spec.tier, host);
      if (!declared) return declared.error().context(where + "route " + q(spec.name));
      caps = *declared;
    }
    auto route = router.add(spec, caps, view);
    if (!route) return Error(route.error().code(), where + route.error().message());
    if (on_route) on_route(*route);
  }
  return router;
}

Expected<Route> load_route(const std::string& path, std::string_view name, const HostFacts& host) {
  auto file = load_routes_file(path);
  if (!file) return std::move(file).error();
  auto router = build_routes(*file, host);
  if (!router) return std::move(router).error();
  if (const Route* route = router->find(name)) return *route;
  std::string names;
  for (const auto& n : router->names()) names += (names.empty() ? "" : ", ") + n;
  return Error::invalid("no route " + q(name) + " in " + path + " (routes: " + names + ")");
}

}  // namespace corral
