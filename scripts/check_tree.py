#!/usr/bin/env python3
"""Keeps the tree's structure as docs/architecture.md describes it. Fails (exit 1, one line per
finding) on:

  layer     an #include <polymoe/...> that goes up a layer
            (core < numbers < kernels < policies < table < io)
  env       an environment variable read in a library header (tuning is a kernel parameter)
  global    a mutable global or function-local static in a library header
  list      a hand-typed list of policies outside the pairing tables: one code line naming three or
            more dispatchers, quant schemes or kernels of the tables
  citation  a run or issue number in a code comment (comments say why, never which run or issue)

  check_tree.py [ROOT]        check the tree at ROOT (default: this script's checkout)
  check_tree.py --self-test   plant one violation of each kind and check that each is reported

Findings of work still in progress are listed, with their count per file and rule, in
scripts/check_tree.baseline ("path rule count"); the check fails on any finding beyond it and on a
baseline entry that no longer matches (so the list only shrinks).
"""
import os
import re
import sys

# Layers, bottom first: a header may include its own layer and those below.
LAYERS = [
    ("core", re.compile(r"^include/polymoe/core/")),
    ("numbers", re.compile(r"^include/polymoe/(codecs|quantize)/")),
    ("kernels", re.compile(r"^kernels/polymoe/kernels/")),
    ("policies", re.compile(r"^policies/polymoe/(a2a|quant|kernel)/")),
    ("table", re.compile(r"^(policies/polymoe/[^/]+\.hpp|include/polymoe/polymoe\.hpp)$")),
    ("io", re.compile(r"^include/polymoe/io/")),
]
INCLUDE_ROOTS = ["include", "kernels", "policies"]
TABLE_FILES = {"policies/polymoe/pairing_table.hpp", "policies/polymoe/mpi_table.hpp",
               "cuda/include/polymoe/cuda_table.hpp"}
LIBRARY = re.compile(r"^(include|kernels|policies)/.*\.hpp$")
CODE = re.compile(r"(\.(hpp|cpp|h|cmake|sh|py)|CMakeLists\.txt)$")
SKIP_DIRS = {".git", "build", "docs", "data", "corpus_hf_layer", "corpus_layer_input", "corpus_safetensors"}
SCAN_ROOTS = ["include", "kernels", "policies", "cuda", "python", "tools", "tests", "bench", "scripts", "examples",
              "cmake", "CMakeLists.txt"]

CITATION = re.compile(r"\b(issues?|runs?)\s*#?\d+", re.IGNORECASE)
ENV = re.compile(r"\b(std::)?(getenv|secure_getenv)\s*\(|\benviron\b")
DECL_HEAD = re.compile(r"^\s*((inline|static|thread_local)\s+)+[\w:<>,\s\*&]*?\b\w+\s*$")


def mutable_global(code):
    """A declaration `inline|static T name = ...;` (namespace scope or function-local static) whose
    type is not const: the head before its initializer has no parenthesis (not a function)."""
    m = re.search(r"[={;]", code)
    if not m:
        return False
    head = code[:m.start()]
    if "(" in head or re.search(r"\b(const|constexpr|constinit|using|return|typedef)\b", head):
        return False
    if "[" in head:  # arrays: inline T name[] = ...
        head = head[:head.index("[")]
    return bool(DECL_HEAD.match(head))


def layer_of(path):
    for i, (name, rx) in enumerate(LAYERS):
        if rx.search(path):
            return i, name
    return None, None


def resolve_include(inc, files):
    for root in INCLUDE_ROOTS:
        p = f"{root}/{inc}"
        if p in files:
            return p
    return None


def strip_comment(line, lang):
    """(code, comment) of one line; good enough for the habits of this tree."""
    if lang == "hash":
        i = line.find("#")
        return (line, "") if i < 0 else (line[:i], line[i + 1:])
    in_str = False
    i = 0
    while i < len(line) - 1:
        c = line[i]
        if c == '"' and (i == 0 or line[i - 1] != "\\"):
            in_str = not in_str
        elif not in_str and line.startswith("//", i):
            return line[:i], line[i + 2:]
        i += 1
    return line, ""


def policy_names(files):
    """The names of the tables' policies, per axis, read from the table files."""
    names = {"a2a": set(), "quant": set(), "kernel": set()}
    for t in TABLE_FILES:
        for axis, name in re.findall(r"\b(a2a|quant|kernel)::(\w+)", files.get(t, "")):
            names[axis].add(name)
    return names


def listed(code, axis, names, cmake):
    found = set(n for a, n in re.findall(r"\b(a2a|quant|kernel)::(\w+)", code) if a == axis and n in names)
    found |= set(n for n in re.findall(r'"(\w+)"', code) if n in names)
    if cmake:
        found |= set(n for n in re.findall(r"[\w-]+", code) if n.replace("-", "_") in names)
    return found


def check(files):
    """files: {relative path: text}. Returns findings as 'path:line: rule: text'."""
    out = []
    names = policy_names(files)
    for path, text in sorted(files.items()):
        lang = "hash" if path.endswith((".cmake", ".sh", ".py", "CMakeLists.txt")) else "c"
        cmake = path.endswith((".cmake", "CMakeLists.txt"))
        library = bool(LIBRARY.search(path))
        mine, mine_name = layer_of(path)
        in_block = False
        runs = {}
        for n, line in enumerate(text.splitlines(), 1):
            if lang == "c" and in_block:
                code, comment = "", line
                if "*/" in line:
                    in_block = False
                    code = line[line.index("*/") + 2:]
            else:
                code, comment = strip_comment(line, lang)
                if lang == "c" and "/*" in code:
                    i = code.index("/*")
                    comment += code[i:]
                    code = code[:i]
                    in_block = "*/" not in comment
            where = f"{path}:{n}"
            if comment and CITATION.search(comment) and not path.startswith("scripts/check_tree"):
                out.append(f"{where}: citation: a run or issue number in a comment: {line.strip()}")
            if library and lang == "c":
                if ENV.search(code):
                    out.append(f"{where}: env: an environment variable read in a library header: {line.strip()}")
                if mutable_global(code):
                    out.append(f"{where}: global: a mutable global or static in a library header: {line.strip()}")
            m = re.match(r'\s*#\s*include\s*<(polymoe/[^>]+)>', code)
            if m and mine is not None:
                target = resolve_include(m.group(1), files)
                theirs, theirs_name = layer_of(target) if target else (None, None)
                if theirs is not None and theirs > mine:
                    out.append(f"{where}: layer: {mine_name} includes {theirs_name} ({m.group(1)})")
            if path not in TABLE_FILES and not path.startswith("scripts/check_tree"):
                for axis, known in names.items():
                    found = listed(code, axis, known, cmake)
                    if len(found) >= 3:
                        out.append(f"{where}: list: {len(found)} {axis} policies typed outside the pairing tables "
                                   f"({', '.join(sorted(found))})")
                    # one policy a line: lines that are the same but for the policy they name
                    shape = shape_of(code, known, axis) if len(found) == 1 else None
                    run = runs.setdefault(axis, [None, []])
                    if shape is not None and shape == run[0]:
                        run[1].append((n, next(iter(found))))
                    else:
                        report_run(out, path, axis, run[1])
                        runs[axis] = [shape, [(n, next(iter(found)))] if shape is not None else []]
        for axis, run in runs.items():
            report_run(out, path, axis, run[1])
    return out


def shape_of(code, known, axis):
    """The line with the policy's name blanked: lines of one shape differ only in the policy."""
    blank = re.sub(r"\b(a2a|quant|kernel)::(\w+)", lambda m: f"{m.group(1)}::@" if m.group(2) in known else m.group(0), code)
    blank = re.sub(r'"(\w+)"', lambda m: '"@"' if m.group(1) in known else m.group(0), blank)
    return blank.strip()


def report_run(out, path, axis, run):
    if len({name for _, name in run}) >= 3:
        out.append(f"{path}:{run[0][0]}: list: {len(run)} lines naming one {axis} policy each, of one shape, "
                   f"typed outside the pairing tables ({', '.join(name for _, name in run)})")


def read_tree(root):
    files = {}
    for top in SCAN_ROOTS:
        base = os.path.join(root, top)
        if os.path.isfile(base):
            files[top] = open(base, encoding="utf-8", errors="replace").read()
            continue
        for d, dirs, names in os.walk(base):
            dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")]
            for f in names:
                rel = os.path.relpath(os.path.join(d, f), root)
                if CODE.search(f):
                    files[rel] = open(os.path.join(d, f), encoding="utf-8", errors="replace").read()
    return files


def self_test():
    table = ("using core = table<dispatcher_row<a2a::local>, kernel_row<kernel::reference>, kernel_row<kernel::tiled>,\n"
             "    scheme_row<quant::fp32>, scheme_row<quant::bf16>, scheme_row<quant::fp8>>;\n")
    clean = {
        "policies/polymoe/pairing_table.hpp": table,
        "include/polymoe/core/a.hpp": "#include <polymoe/core/b.hpp>\n// why: the sum is in slot order\n",
        "include/polymoe/core/b.hpp": "inline constexpr int k = 3;\nstatic const int j = 2;\n",
        "kernels/polymoe/kernels/k.hpp": "#include <polymoe/core/a.hpp>\nstruct tuning { int rows = 4; };\n",
        "tests/t.cpp": "static_assert(x<quant::fp32> && y<quant::bf16>);\n",
    }
    plants = {
        "layer": ("include/polymoe/core/c.hpp", "#include <polymoe/kernels/k.hpp>\n"),
        "env": ("kernels/polymoe/kernels/e.hpp", "const char* s = std::getenv(\"POLYMOE_X\");\n"),
        "global": ("kernels/polymoe/kernels/g.hpp", "inline int knob = -1;\n"),
        "list": ("tools/l.cpp", "using L = mp_list<quant::fp32, quant::bf16, quant::fp8>;\n"),
        "list ": ("tests/l.cpp", "f<quant::fp32>();\nf<quant::bf16>();\nf<quant::fp8>();\n"),
        "citation": ("kernels/polymoe/kernels/c.hpp", "int x;  // measured in run 12\n"),
    }
    bad = check(clean)
    ok = not bad
    if bad:
        print("self-test: the clean tree is reported:", *bad, sep="\n  ")
    for rule, (path, text) in plants.items():
        found = [f for f in check({**clean, path: text}) if f": {rule.strip()}:" in f]
        print(f"self-test: planted {rule:8} -> {'reported' if found else 'NOT REPORTED'}")
        ok &= bool(found)
    return 0 if ok else 1


def read_baseline(path):
    allowed = {}
    if os.path.exists(path):
        for line in open(path, encoding="utf-8"):
            line = line.split("#", 1)[0].strip()
            if line:
                f, rule, n = line.split()
                allowed[(f, rule)] = int(n)
    return allowed


def rule_key(finding):
    """(path, rule) of a finding 'path:line: rule: text'."""
    path, _, rest = finding.partition(":")
    return path, rest.split(": ", 2)[1]


def against_baseline(findings, allowed):
    """The findings beyond the baseline, and the baseline entries that no longer match."""
    counts = {}
    for f in findings:
        counts[rule_key(f)] = counts.get(rule_key(f), 0) + 1
    new = [f for f in findings if counts[rule_key(f)] > allowed.get(rule_key(f), 0)]
    stale = [f"{p} {r} {n} (now {counts.get((p, r), 0)})" for (p, r), n in sorted(allowed.items())
             if counts.get((p, r), 0) != n]
    return new, stale


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..")
    findings = check(read_tree(root))
    allowed = read_baseline(os.path.join(here, "check_tree.baseline"))
    new, stale = against_baseline(findings, allowed)
    for f in new:
        print(f)
    for s in stale:
        print(f"baseline entry no longer matches, update scripts/check_tree.baseline: {s}")
    print(f"check_tree: {len(findings)} finding(s), {sum(allowed.values())} in the baseline, "
          f"{len(new)} new, {len(stale)} stale baseline entr{'y' if len(stale) == 1 else 'ies'}")
    return 1 if new or stale else 0


if __name__ == "__main__":
    sys.exit(main())
