// names: the lexical rules for a relative path that corral creates or reads
// on someone's behalf (a staged input, a collected output, a landing name in
// a sink). One set of rules for every layer, so a name the workspace accepts
// is one the policy layer accepts too. Pure; no kernel.
#pragma once

#include <string>
#include <string_view>

#include "corral/status.hpp"

namespace corral {

// Not empty, not absolute, no `..` or `.` segment, no empty segment (so no
// trailing or doubled `/`), no backslash, no NUL or other control character,
// valid UTF-8, at most 4095 bytes with segments of at most 255. `what` names
// the caller's object in the message: "input 'a/../b' has a '..' segment".
Status validate_relative_name(std::string_view name, std::string_view what);

// Why `name` fails the rules above, or "" when it passes.
std::string relative_name_problem(std::string_view name);

// The name quoted for a message, control bytes and the bytes of ill-formed
// UTF-8 shown as \xNN.
std::string quote_name(std::string_view name);
// The same without the quotes.
std::string printable_name(std::string_view name);

// Someone's input as an error message shows it: quoted and escaped like
// quote_name, and cut after `max` bytes with its length said
// ("'aaa...' (1048576 bytes)"). A message goes to a terminal through
// printf's %s, where a NUL would cut it short and an escape sequence would
// act; and a message that repeats a megabyte of input names nothing clearly.
std::string quote_input(std::string_view text, std::size_t max = 160);

}  // namespace corral
