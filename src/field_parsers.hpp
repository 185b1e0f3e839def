// The parser of each request field, one function per field, used only by
// the field table (request_fields.cpp). Each puts one value (one item of a
// list, one entry of a table: `key`) into a Job and returns the reason of
// a refusal without saying where the value came from.
#pragma once

#include <string_view>

#include "corral/request_fields.hpp"

namespace corral::field_parsers {

using Parser = Status(Job& job, const FieldValue& value, std::string_view key);

Parser tier, provenance, limit, acknowledge, confine_writes, write_path, net, loopback, env, pass_env, secret_env,
    input, output, artifact_root, cwd, chdir, user, rootfs, ro_bind, bind, tmpfs, dev_bind, grace, stdin_text,
    stdin_b64, binary_output, merge_output, on_output_limit, route, id, argv, source, interpreter, session;

// pass_env from a job or a route replaces the default ["PATH"].
void clear_pass_env(Job& job);

}  // namespace corral::field_parsers
