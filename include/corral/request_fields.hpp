// request_fields: the one description of a request's fields. Each field
// has one entry here: its name (a batch job's key), its `corral run` flag,
// its routes-file key, which of those entry points accept it, its --help
// text, and the one parser that puts a value of it into a Job (a Request
// plus what it asks of the door). corral run's option table and --help, the
// batch job parser (json.cpp) and the routes file reader (routes_file.cpp)
// are all read off this table, so a field has the same validation and the
// same reason text wherever it comes from; only the prefix saying where
// differs ("--user: ", "field 'user': ", "routes.toml:4: route 'x': key
// 'tier': "). The docs test (tests/contracts/test_docs_agree.py) reads the
// table too, so a field cannot exist in one place only.
//
// Pure: no kernel, no files.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "corral/door.hpp"
#include "corral/status.hpp"

namespace corral {

// A value as an entry point hands it over. A flag's value is always text
// (a field's parser reads a number out of it); a JSON or TOML value keeps
// its type, which the parser checks.
struct FieldValue {
  enum class Type { text, integer, real, boolean, list, table, other };
  Type type = Type::text;
  std::string text;  // text; an integer's decimal digits ('-' first when negative)
  double real = 0;   // real
  bool boolean = false;
  std::vector<FieldValue> items;                            // list
  std::vector<std::pair<std::string, FieldValue>> entries;  // table, in source order
  std::string_view other;  // other: what it is, for messages ("null", "a date")
  int line = 0;            // where it is in its file (TOML), 0 unknown

  static FieldValue of_text(std::string text);
  static FieldValue of_boolean(bool value);
};

// "a string", "an integer", "an array", ... for messages.
std::string type_name(const FieldValue& value);

// The entry points, as bits of RequestField::entry_points.
enum EntryPoint : unsigned { kFlag = 1, kJobField = 2, kRouteKey = 4 };

// How a field's values come.
enum class FieldShape {
  one,     // one value; a flag given twice: the last one counts
  toggle,  // a flag with no value sets it; true or false in a job
  list,    // a repeatable flag, one item each; an array in a job or a route,
           // which replaces the field's default (pass_env: no PATH unless listed)
  table,   // a repeatable NAME=VALUE flag; an object (JSON) or table (TOML)
};

// One name per field: the job field and the routes key are `name`, and
// the flag is `name` with '-' for '_' (or its singular, for a repeatable
// flag of a list or table field, as --limit for limits; or a toggle that
// sets a value, as --untrusted). tests/request_fields_test.cpp checks it.
// A field renamed to get there keeps its old spelling as `alias`, accepted
// where it was accepted before (`alias_at`) and documented as an alias.
struct RequestField {
  std::string_view name{};       // the job field; names the field in every message
  std::string_view flag{};       // corral run's long option without "--"; "" : none
  char short_flag = 0;         // its short form; 0 : none
  std::string_view route_key{};  // the routes file key; "" : none
  unsigned entry_points = 0;   // EntryPoint bits
  std::string_view alias{};      // the old spelling (a flag without "--"); "" : none
  unsigned alias_at = 0;         // the EntryPoint bits where `alias` is accepted
  FieldShape shape = FieldShape::one;
  std::string_view value_name{};  // the flag's value in --help ("K=V", "UID")
  // A flag that takes no value and means this text (--untrusted:
  // provenance "untrusted"); "" : the flag takes the value.
  std::string_view flag_sets{};
  std::string_view help{};        // corral run --help's text ('\n' between lines)
  // Puts one value into `job`: the value (one, toggle: true/false), one
  // item (list) or one entry (table: `key` is its name). The error is the
  // reason alone; the entry point says where.
  Status (*apply)(Job& job, const FieldValue& value, std::string_view key) = nullptr;
  // list and table from a job or a route: empties the field first.
  void (*clear)(Job& job) = nullptr;

  bool accepts(EntryPoint from) const { return (entry_points & from) != 0; }
  bool flag_takes_value() const { return shape != FieldShape::toggle && flag_sets.empty(); }
};

// Every field, in corral run --help's order.
std::span<const RequestField> request_fields();
// The field named `name` (a job's key) / with long flag `flag` / routes
// key `key` and accepted there, by its name or its alias; nullptr when none.
const RequestField* field_named(std::string_view name);
const RequestField* field_by_flag(std::string_view flag);
const RequestField* field_by_route_key(std::string_view key);

// The names of the fields `from` accepts, in table order, comma-separated
// and wrapped at `width` columns (corral batch --help lists its job fields
// with it).
std::string field_names(EntryPoint from, std::size_t width = 80);

// A flag with its text (nullptr for a toggle): the error reads
// "--flag: REASON".
Status apply_flag(const RequestField& field, Job& job, const char* text);

// A job's or a route's value of `field`: clears a list or table, then
// applies the value, each item or each entry. `where(suffix, node, reason)`
// makes the error: `suffix` is "" for the value itself, "[N]" for a list's
// Nth item (1-based), ".KEY" for a table's entry; `node` is the value it
// was about (its line, for a file).
using FieldErrorAt = std::function<Error(std::string_view suffix, const FieldValue& node, const Error& reason)>;
Status apply_value(const RequestField& field, Job& job, const FieldValue& value, const FieldErrorAt& where);

// The rules across fields, once every field of a job or a command line is
// in: `source` and `interpreter` go together, a program is named, net host
// is not asked of tier container outside a route (check_asked_network), and
// validate_request (request.hpp).
Status finish_job(Job& job);

// net host asked explicitly in tier container without a route (whose own
// network rule applies instead): net_host_in_container(). The door asks it too.
Status check_asked_network(const Request& request, const Ask& ask);

}  // namespace corral
