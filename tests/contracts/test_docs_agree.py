"""The docs agree with the binary: every verb, option, job field, limit and
Result key the code has appears in `--help`, corral(1) and README.md (and
job fields in schema/job.schema.json), README has no repeated section, the
man page renders JSON with its quotes, and the process tier has one
spelling in output.

The lists come from the code itself: the verb table (src/cli/commands.cpp),
each verb's getopt_long table (src/cli/*.cpp), the one description of a
request's fields (src/request_fields.cpp: its flags, job fields and routes
keys), the limit table (corral run --help), a real Result. A failure names
what is missing and where, e.g.
    --stdin (src/cli/run.cpp) is not in corral(1)
so an option or field added without docs fails here by name.
"""
import glob
import json
import os
import re
import subprocess

import pytest

from contract_support import CLI, ROOT, cli, corral, schema  # noqa: F401 (cli: a fixture)


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def man_text():
    # groff source with its escapes undone, as a reader searching it would see it.
    return read("man/corral.1").replace("\\-", "-").replace("\\(dq", '"').replace("\\&", "")


def rendered_man():
    p = subprocess.run(["groff", "-man", "-Tutf8", "-P", "-cbou", os.path.join(ROOT, "man/corral.1")],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip("groff is not installed")
    return p.stdout.replace("\u2010", "-").replace("\u2212", "-")


def verbs():
    """The verb table of the binary (src/cli/commands.cpp)."""
    found = re.findall(r'\{"([a-z][a-z-]*)",\s*[a-z_]+_main\}', read("src/cli/commands.cpp"))
    assert found, "no verb table found in src/cli/commands.cpp"
    return found


FIELDS_SOURCE = "src/request_fields.cpp"
ENTRY_POINTS = {"kAll": {"flag", "job", "route"}, "kCliJob": {"flag", "job"}, "kJobField": {"job"},
                "kFlag": {"flag"}, "kRouteKey": {"route"}}


def field_rows():
    """The rows of the request field table (src/request_fields.cpp), each
    {"name", "flag", "route_key", "entries", "alias", "alias_at"}: the one description of a
    request's fields that corral run's flags, the job parser and the routes
    file reader are read off."""
    text = read(FIELDS_SOURCE)
    table = text[text.index("constexpr RequestField kFields[]"):]
    rows = []
    for row in re.findall(r'\{\.name = "[^"]*".*?\.apply = [\w:]+', table, re.S):
        get = lambda key: (re.search(rf'\.{key} = "([^"]*)"', row) or [None, ""])[1]
        entries = set()
        for word in re.search(r"\.entry_points = ([\w |]+)", row).group(1).split("|"):
            entries |= ENTRY_POINTS[word.strip()]
        alias_at = set()
        at = re.search(r"\.alias_at = ([\w |]+)", row)
        for word in (at.group(1).split("|") if at else []):
            alias_at |= ENTRY_POINTS[word.strip()]
        rows.append({"name": get("name"), "flag": get("flag"), "route_key": get("route_key"), "entries": entries,
                     "alias": get("alias"), "alias_at": alias_at, "flag_sets": get("flag_sets"),
                     "list": bool(re.search(r"\.shape = FieldShape::(list|table)", row))})
    assert {"argv", "binds", "limits"} <= {r["name"] for r in rows}, f"the field table was not found in {FIELDS_SOURCE}"
    return rows


def option_tables():
    """{source file: [long option names]} from every getopt_long table in
    src/cli, and corral run's request-field flags from the field table."""
    tables = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "src/cli/*.cpp"))):
        names = re.findall(r'\{"([a-z][a-z0-9-]*)",\s*(?:no|required|optional)_argument', open(path).read())
        if names:
            tables[os.path.relpath(path, ROOT)] = sorted(set(names) - {"help"})
    assert tables, "no getopt_long tables found in src/cli"
    flags = {r["flag"] for r in field_rows() if "flag" in r["entries"] and r["flag"]}
    flags |= {r["alias"] for r in field_rows() if "flag" in r["alias_at"]}
    tables["src/cli/run.cpp"] = sorted(set(tables.get("src/cli/run.cpp", [])) | flags)
    return tables


def verb_help(verb):
    p = corral(verb, "--help")
    return p.stdout + p.stderr


def job_fields(rows=None):
    """The keys the job parser accepts: the field table's job fields."""
    return sorted(r["name"] for r in (rows or field_rows()) if "job" in r["entries"])


def limit_names():
    text = corral("run", "--help").stdout
    table = re.search(r"^limits \(.*?(?=\n\n|\Z)", text, re.M | re.S).group(0).splitlines()[1:]
    names = [l.split()[0] for l in table if l.strip()]
    assert "wall_seconds" in names
    return names


def section(text, start, end_pattern=r"\n#{1,3} "):
    i = text.index(start)
    m = re.search(end_pattern, text[i + len(start):])
    return text[i: i + len(start) + (m.start() if m else len(text))]


def missing(words, text):
    return [w for w in words if not re.search(r"(?<![A-Za-z0-9_-])" + re.escape(w) + r"(?![A-Za-z0-9_])", text)]


def test_every_verb_is_in_help_man_synopsis_man_commands_and_readme(cli):
    top = subprocess.run([CLI, "--help"], capture_output=True, text=True).stdout
    man = man_text()
    synopsis = man[man.index(".SH SYNOPSIS"):man.index(".SH DESCRIPTION")]
    commands = man[man.index(".SH COMMANDS"):man.index(".SH OPTIONS")]
    readme = read("README.md")
    problems = []
    for verb in verbs():
        if not re.search(rf"^  {verb}\b", top, re.M):
            problems.append(f"verb {verb} is not in `corral --help`")
        if not re.search(rf"^\.B corral {verb}\b", synopsis, re.M):
            problems.append(f"verb {verb} is not in corral(1) SYNOPSIS (a '.B corral {verb}' line)")
        if f'.SS "corral {verb}' not in commands and f".SS corral {verb}" not in commands:
            problems.append(f"verb {verb} has no '.SS \"corral {verb} ...\"' under corral(1) COMMANDS")
        if f"corral {verb}" not in readme:
            problems.append(f"verb {verb} is not in README.md (as `corral {verb}`)")
    assert not problems, "\n".join(problems)


def test_every_option_is_in_its_verbs_help_the_man_page_and_readme(cli):
    man, readme = man_text(), read("README.md")
    known = set(verbs())
    problems = []
    for path, names in option_tables().items():
        verb = os.path.splitext(os.path.basename(path))[0]
        helps = verb_help(verb) if verb in known else None
        for name in names:
            opt = f"--{name}"
            if helps is not None and not missing([opt], helps) == []:
                problems.append(f"{opt} ({path}) is not in `corral {verb} --help`")
            if missing([opt], man):
                problems.append(f"{opt} ({path}) is not in corral(1) (man/corral.1)")
            if missing([opt], readme):
                problems.append(f"{opt} ({path}) is not in README.md")
    assert not problems, "options without docs:\n  " + "\n  ".join(problems)


def test_every_option_in_help_is_accepted_by_the_binary(cli):
    # The other direction: --help does not document an option the parser lacks.
    problems = []
    tables = option_tables()
    for verb in verbs():
        path = f"src/cli/{verb}.cpp"
        if path not in tables:
            continue
        for opt in sorted(set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]+)", verb_help(verb)))):
            if opt not in tables[path] and opt not in ("help", "opt"):  # --opt: "--opt=value" conventions
                problems.append(f"`corral {verb} --help` names --{opt}, which {path} does not parse")
    assert not problems, "\n".join(problems)


def field_doc_problems(rows):
    """What the docs lack of the field table `rows`: a job field missing from
    corral(1)'s corral batch section, README's ### corral batch, the job
    schema, `corral batch --help` or the Python package; a flag missing from
    `corral run --help`, corral(1) or README; a routes key missing from
    README's ### routes_file or examples/routes.toml; a flag the Python
    package maps to a job field that the table gives another."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import corral as pkg
    from corral import _cli
    fields = job_fields(rows)
    man = man_text()
    man_batch = man[man.index('.SS "corral batch'):]
    man_batch = man_batch[:man_batch.index("\n.SS ")]
    readme = read("README.md")
    readme_batch = section(readme, "### corral batch")
    readme_routes = section(readme, "### routes_file")
    example_routes = read("examples/routes.toml")
    props = set(schema("job.schema.json")["properties"])
    where = f"({FIELDS_SOURCE})"
    problems = [f"job field {f} {where} is not in corral(1)'s corral batch section" for f in missing(fields, man_batch)]
    problems += [f"job field {f} {where} is not in README.md's ### corral batch" for f in missing(fields, readme_batch)]
    problems += [f"job field {f} {where} is not in schema/job.schema.json" for f in fields if f not in props]
    job_aliases = {r["alias"] for r in field_rows() if "job" in r.get("alias_at", set())}
    problems += [f"schema/job.schema.json has {f}, which {FIELDS_SOURCE} does not describe"
                 for f in sorted(props - set(job_fields()) - job_aliases)]
    problems += [f"job field {f} {where} is not in `corral batch --help`" for f in missing(fields, verb_help("batch"))]
    problems += [f"job field {f} {where} is not in the Python package's JOB_FIELDS" for f in fields
                 if f not in pkg.JOB_FIELDS]
    run_help = verb_help("run")
    for r in rows:
        if "flag" in r["entries"] and r["flag"]:
            opt = "--" + r["flag"]
            problems += [f"{opt} {where} is not in {doc}" for doc, text in
                         (("`corral run --help`", run_help), ("corral(1)", man), ("README.md", readme))
                         if missing([opt], text)]
            mapped = _cli._FLAGS.get(r["name"])
            if mapped and mapped[0] != opt and "job" in r["entries"]:
                problems.append(f"the Python package maps job field {r['name']} to {mapped[0]}; {where} says {opt}")
        if r.get("alias"):
            # The old spelling stays accepted and documented as an alias.
            old = "--" + r["alias"] if "flag" in r["alias_at"] else r["alias"]
            docs = []
            if "flag" in r["alias_at"]:
                docs += [("README.md", readme), ("corral(1)", man), ("`corral run --help`", run_help)]
            if "job" in r["alias_at"]:
                docs += [("README.md's ### corral batch", readme_batch), ("corral(1)'s corral batch section", man_batch)]
            if "route" in r["alias_at"]:
                docs += [("README.md's ### routes_file", readme_routes)]
            problems += [f"alias {old} of {r['name']} {where} is not in {doc}" for doc, text in docs
                         if missing([old], text)]
        if "route" in r["entries"]:
            key = r["route_key"]
            problems += [f"routes key {key} {where} is not in {doc}" for doc, text in
                         (("README.md's ### routes_file", readme_routes), ("examples/routes.toml", example_routes))
                         if missing([key], text)]
    return problems


def test_every_field_is_in_help_the_man_page_readme_schema_and_python(cli):
    problems = field_doc_problems(field_rows())
    assert not problems, "fields without docs:\n  " + "\n  ".join(problems)


def test_a_field_added_to_the_table_but_not_documented_fails(cli):
    # The check above, on a table with one more row that no doc names.
    extra = {"name": "zz_new_field", "flag": "zz-new-flag", "route_key": "zz_new_key",
             "entries": {"flag", "job", "route"}}
    problems = field_doc_problems(field_rows() + [extra])
    for want in ("job field zz_new_field", "--zz-new-flag", "routes key zz_new_key"):
        assert any(want in p for p in problems), f"{want} undocumented, not reported: {problems}"
    assert not field_doc_problems(field_rows())


def one_name_problems(rows):
    """Fields whose name differs between entry points: the routes key must
    be the job field's name, and the flag the name with '-' for '_' (its
    singular for a repeatable flag of a list or table field; any word for
    a toggle that sets a value, as --untrusted)."""
    problems = []
    for r in rows:
        name = r["name"]
        if "route" in r["entries"] and r["route_key"] != name:
            problems.append(f"field {name}: routes key {r['route_key']}")
        if "flag" in r["entries"] and r["flag"] and not r["flag_sets"]:
            flag = r["flag"].replace("-", "_")
            if flag != name and not (r["list"] and flag + "s" == name):
                problems.append(f"field {name}: flag --{r['flag']}")
    return problems


def test_a_field_has_one_name_at_every_entry_point():
    assert not one_name_problems(field_rows())
    renamed = [dict(r, route_key="env_passthrough") if r["name"] == "pass_env" else r for r in field_rows()]
    assert one_name_problems(renamed) == ["field pass_env: routes key env_passthrough"]


def test_every_limit_is_in_the_man_page_readme_and_job_schema(cli):
    names = limit_names()
    schema_names = schema("job.schema.json")["properties"]["limits"]["propertyNames"]["enum"]
    problems = [f"limit {n} is not in corral(1)" for n in missing(names, man_text())]
    problems += [f"limit {n} is not in README.md" for n in missing(names, read("README.md"))]
    problems += [f"limit {n} is not in schema/job.schema.json limits" for n in names if n not in schema_names]
    problems += [f"schema/job.schema.json names limit {n}, which corral run --help does not"
                 for n in schema_names if n not in names]
    assert not problems, "\n".join(problems)


def test_every_result_key_is_in_the_man_page_readme_and_schema(cli):
    r = json.loads(corral("run", "--json", "--", "true").stdout)
    man_json = man_text()
    man_json = man_json[man_json.index(".SH JSON RESULT"):]
    man_json = man_json[:man_json.index("\n.SH ", 1)]
    readme = read("README.md")
    required = schema("result.schema.json")["$defs"]["result"]["required"]
    problems = [f"Result key {k} is not in corral(1) JSON RESULT" for k in missing(sorted(r), man_json)]
    problems += [f"Result key {k} is not in README.md" for k in missing(sorted(r), readme)]
    problems += [f"Result key {k} is not required by schema/result.schema.json" for k in r if k not in required]
    assert not problems, "\n".join(problems)


def test_readme_has_no_repeated_section():
    heads = re.findall(r"^(#{1,4} .+)$", read("README.md"), re.M)
    repeated = sorted({h for h in heads if heads.count(h) > 1})
    assert not repeated, f"README.md repeats: {repeated}"


def test_the_man_page_renders_json_with_its_quotes():
    # groff eats '"' in macro arguments: every JSON fragment of the source must
    # come out of groff as written.
    source = read("man/corral.1").replace("\\(dq", '"').replace("\\-", "-").replace("\\ ", " ")
    fragments = set()
    for line in source.splitlines():
        text = re.sub(r"^\.[A-Z]{1,2} ?", "", line)
        text = re.sub(r"\\f[BIRP]", "", text)
        fragments.update(re.findall(r'\{[^{}]*"[^{}]*\}', text))
    assert fragments, "no JSON fragment found in man/corral.1"
    out = re.sub(r"\s+", " ", rendered_man())
    lost = [f for f in sorted(fragments) if re.sub(r"\s+", " ", f) not in out]
    assert not lost, "groff drops the quotes of (write \\(dq in macro lines): " + ", ".join(lost)


def test_one_spelling_of_the_process_tier_in_output(cli):
    # `process` is accepted on input; output always says os_process, the ladder's name.
    r = json.loads(corral("run", "--json", "--tier", "process", "--", "true").stdout)
    assert r["tier"] == "os_process"
    e = corral("enforcement", "--tier", "process").stdout
    assert re.search(r"^tier os_process$", e, re.M) and not re.search(r"^tier process$", e, re.M), e
    j = json.loads(corral("enforcement", "--tier", "process", "--json").stdout)
    assert list(j["tiers"]) == ["os_process"], list(j["tiers"])
