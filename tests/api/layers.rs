//! The import rules of the source tree:
//! 1. the domain (all of `src/` but `http/`, `ops/`, `lib.rs`, `main.rs`) never references the
//!    HTTP side, the operations, nor poem;
//! 2. a domain module references only modules in strictly lower layers of [`DOMAIN_ORDER`];
//! 3. in each directory module, the children (files and folders beside `mod.rs`) never reference
//!    each other in a cycle.
//!
//! Files are read as tokens, without comments, literals and `#[cfg(test)]` items; each `use`
//! tree and each path starting with `crate`, `$crate`, `super` or `self` is resolved to absolute
//! module segments.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The domain's top-level modules in layers, lowest first. A module may reference another only
/// in a strictly lower layer; a new module must be placed here.
#[rustfmt::skip]
const DOMAIN_ORDER: &[&[&str]] = &[
    &["timestamp", "ids", "correlation", "crypto", "cron", "llm", "background"],
    &["db", "validation"],
    &["auth"],
    &["search", "integrations", "platform"],
    &["state", "ingest"],
    &["memory", "notify"],
    &["tools"],
    &["agents", "import"],
    &["engine"],
    &["config"],
    &["workers"],
];

/// The top-level modules that are not domain: the HTTP side and the operations.
const OUTSIDE_DOMAIN: [&str; 2] = ["http", "ops"];

/// Source tokens with their line numbers.
type Tokens = [(usize, String)];

/// A module path, or a referenced path, as segments.
type Segments = Vec<String>;

/// Every module path of the tree.
type Modules = BTreeSet<Segments>;

/// Paths as written, each with its line.
type Written = Vec<(usize, Segments)>;

/// A path written at a line of a file (relative to `src/`): crate-internal, as absolute module
/// segments (`["engine", "runs", "insert_new"]`), or external (only poem's crates are kept).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Ref {
    file: String,
    line: usize,
    internal: bool,
    path: Segments,
}

impl Ref {
    /// The module the path is written in.
    fn from(&self) -> Segments {
        module_of(&self.file)
    }

    fn show(&self) -> String {
        let path = self.path.join("::");
        let root = if self.internal { "crate::" } else { "" };
        format!("src/{}:{}: {root}{path}", self.file, self.line)
    }
}

/// Every module of the tree (from the file paths) and every reference of every file.
struct Tree {
    modules: Modules,
    refs: Vec<Ref>,
}

/// The module of a file: `engine/runs.rs` is `engine::runs`, `engine/mod.rs` is `engine`,
/// `lib.rs` and `main.rs` are the crate root.
fn module_of(file: &str) -> Segments {
    let stem = file.trim_end_matches(".rs");
    let mut module: Segments = stem.split('/').map(Into::into).collect();
    if module.last().is_some_and(|s| s == "mod") || module == ["lib"] || module == ["main"] {
        module.pop();
    }
    module
}

/// Domain modules are all but the crate root, the HTTP side and the operations.
fn in_domain(module: &[String]) -> bool {
    let top = module.first().map_or("", |m| m.as_str());
    !top.is_empty() && !OUTSIDE_DOMAIN.contains(&top)
}

/// The tokens of Rust source, without comments (block comments taken as unnested) and
/// literals: words (identifiers, keywords, numbers, `$crate`, macro variables), `::`, and single
/// punctuation characters.
fn tokens(text: &str) -> Vec<(usize, String)> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let word = |ch: char| ch.is_alphanumeric() || ch == '_';
    // The index after the first `end` from `i` on, past backslash escapes if `escapes`.
    let past = |mut i: usize, end: &str, escapes: bool| {
        let end: Vec<char> = end.chars().collect();
        while i < c.len() && !c[i..].starts_with(&end) {
            i += if escapes && c[i] == '\\' { 2 } else { 1 };
        }
        i + end.len()
    };
    let (mut out, mut line, mut i) = (Vec::new(), 1, 0);
    while i < c.len() {
        let (start, ch) = (i, c[i]);
        i += 1;
        match (ch, at(i)) {
            ('/', '/') => i = past(i, "\n", false),
            ('/', '*') => i = past(i + 1, "*/", false),
            ('"', _) => i = past(i, "\"", true),
            ('\'', '\\') => i = past(i, "'", true),
            ('\'', _) if at(i + 1) == '\'' => i += 2,
            (':', ':') => {
                out.push((line, "::".into()));
                i += 1;
            }
            (_, next) if word(ch) || ch == '$' && word(next) => {
                while word(at(i)) {
                    i += 1;
                }
                let text: String = c[start..i].iter().collect();
                let hashes = (i..c.len()).take_while(|&j| c[j] == '#').count();
                if (text == "r" || text == "br") && at(i + hashes) == '"' {
                    i = past(i + hashes + 1, &format!("\"{}", "#".repeat(hashes)), false);
                } else if text == "r" && hashes == 1 {
                    i += 1; // A raw identifier (`r#type`): its word comes next.
                } else {
                    out.push((line, text));
                }
            }
            _ if !ch.is_whitespace() => out.push((line, ch.into())),
            _ => {}
        }
        let newlines = c[start..i.min(c.len())].iter().filter(|&&ch| ch == '\n');
        line += newlines.count();
    }
    out
}

/// The text of token `i`, or `""` past either end.
fn tok(toks: &Tokens, i: usize) -> &str {
    toks.get(i).map_or("", |t| t.1.as_str())
}

/// The index of the bracket closing the one at `open` (`open` itself when it opens none).
fn matching(toks: &Tokens, open: usize) -> usize {
    let mut depth = 0;
    for (j, (_, t)) in toks.iter().enumerate().skip(open) {
        depth += match t.as_str() {
            "(" | "[" | "{" => 1,
            ")" | "]" | "}" => -1,
            _ => 0,
        };
        if depth <= 0 {
            return j;
        }
    }
    toks.len()
}

/// Reads the use tree (or the plain path) at token `i` under `path`, pushing each full path it
/// names with the line of its last segment: groups are expanded, and `self` or `*` in a group
/// names the group's path. Returns the index after the tree.
fn use_tree(toks: &Tokens, mut i: usize, mut path: Segments, out: &mut Written) -> usize {
    let mut line = 0;
    loop {
        let t = tok(toks, i);
        let whole = t == "*" || t == "self" && !path.is_empty();
        match t {
            "{" => {
                i += 1;
                while !matches!(tok(toks, i), "}" | ";" | "") {
                    i = use_tree(toks, i, path.clone(), out).max(i + 1);
                    i += usize::from(tok(toks, i) == ",");
                }
                return i + 1;
            }
            "::" if path.is_empty() => path.push("::".into()), // `::name`: an external crate
            _ if whole || t.starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') => {
                if !whole {
                    path.push(t.into());
                }
                (line, i) = (toks[i].0, i + 1);
                if whole || tok(toks, i) != "::" {
                    break;
                }
            }
            _ => break,
        }
        i += 1;
    }
    if tok(toks, i) == "as" {
        i += 2;
    }
    if line > 0 {
        out.push((line, path)); // (`line` is 0 when the tree named nothing)
    }
    i
}

/// Resolves a path written in module `scope` to `(internal, absolute segments)`; `None` for an
/// external crate other than poem.
fn resolve(scope: &[String], raw: &[String]) -> Option<(bool, Segments)> {
    let first = raw.first()?.as_str();
    let ups = raw.iter().take_while(|s| *s == "super").count();
    let (mut path, rest) = match first {
        "crate" | "$crate" => (vec![], &raw[1..]),
        "self" => (scope.to_vec(), &raw[1..]),
        "super" if ups <= scope.len() => (scope[..scope.len() - ups].to_vec(), &raw[ups..]),
        _ if first.starts_with("poem") => return Some((false, raw.to_vec())),
        _ => return None,
    };
    path.extend_from_slice(rest);
    Some((true, path))
}

/// The references of one file (path relative to `src/`), given every module of the tree.
fn references(file: &str, text: &str, modules: &Modules) -> BTreeSet<Ref> {
    let toks = tokens(text);
    let (mut scope, mut inline) = (module_of(file), Vec::new()); // inline: depths of `mod x {`
    let (mut depth, mut found, mut i) = (0, BTreeSet::new(), 0);
    while i < toks.len() {
        let (t, mut next) = (tok(&toks, i), i + 1);
        let before = |n: usize| tok(&toks, i.wrapping_sub(n));
        // A path starts here, unless it is a visibility (`pub(in crate::x)`).
        let starts = ["crate", "$crate", "super", "self"].contains(&t) || t.starts_with("poem");
        let starts = starts && tok(&toks, i + 1) == "::" && before(1) != "::";
        let starts = starts && !(before(1) == "in" && before(2) == "(");
        let mut paths = Vec::new();
        match t {
            "#" => {
                let open = i + 1 + usize::from(tok(&toks, i + 1) == "!");
                let close = matching(&toks, open);
                let attribute: Vec<&str> = (open..close).map(|j| tok(&toks, j)).collect();
                let has = |word| attribute.contains(&word);
                if attribute.get(1) == Some(&"cfg") && has("test") && !has("not") && !has("any") {
                    if open > i + 1 {
                        break; // `#![cfg(test)]`: the rest is test code.
                    }
                    // Skip the item: through its first `;` or its first `{...}`.
                    let end = (close..toks.len()).find(|&j| matches!(tok(&toks, j), ";" | "{"));
                    next = end.map_or(toks.len(), |j| matching(&toks, j) + 1);
                }
            }
            "{" => depth += 1,
            "}" => {
                if inline.last() == Some(&depth) {
                    inline.pop();
                    scope.pop();
                }
                depth -= 1;
            }
            "mod" if tok(&toks, i + 2) == "{" => {
                scope.push(tok(&toks, i + 1).into());
                inline.push(depth + 1);
            }
            "use" => next = use_tree(&toks, i + 1, vec![], &mut paths),
            _ if starts => next = use_tree(&toks, i, vec![], &mut paths),
            _ => {}
        }
        for (line, mut raw) in paths {
            // In a `use`, a first segment naming a child module is relative to this module.
            if t == "use" && modules.contains(&[&scope[..], &raw[..1]].concat()) {
                raw.insert(0, "self".into());
            }
            if let Some((internal, path)) = resolve(&scope, &raw) {
                let file = file.to_string();
                found.insert(Ref {
                    file,
                    line,
                    internal,
                    path,
                });
            }
        }
        i = next;
    }
    found
}

/// Reads every module and reference from `(path relative to src/, text)` pairs.
fn parse_tree<S: AsRef<str>>(files: &[(S, S)]) -> Tree {
    let mut modules = BTreeSet::new();
    for module in files.iter().map(|f| module_of(f.0.as_ref())) {
        modules.extend((0..=module.len()).map(|n| module[..n].to_vec()));
    }
    let mut refs = Vec::new();
    for (file, text) in files {
        refs.extend(references(file.as_ref(), text.as_ref(), &modules));
    }
    Tree { modules, refs }
}

/// Rule 1: the domain never references the HTTP side, the operations, nor poem.
fn layer_violations(tree: &Tree) -> Vec<&Ref> {
    let top = |r: &Ref| r.path.first().map_or(String::new(), |m| m.clone());
    let outside = |r: &&Ref| !r.internal || OUTSIDE_DOMAIN.contains(&top(r).as_str());
    let domain = tree.refs.iter().filter(|r| in_domain(&r.from()));
    domain.filter(outside).collect()
}

/// The layer of a domain module in [`DOMAIN_ORDER`], counted from 1.
fn layer_of(module: &str) -> Option<usize> {
    let index = DOMAIN_ORDER.iter().position(|l| l.contains(&module));
    index.map(|n| n + 1)
}

/// Rule 2: each domain module is placed in [`DOMAIN_ORDER`] and references only lower layers.
fn order_violations(tree: &Tree) -> Vec<String> {
    let top = tree.modules.iter().filter(|m| m.len() == 1 && in_domain(m));
    let unplaced = top.filter(|m| layer_of(&m[0]).is_none());
    let unplaced = unplaced.map(|m| format!("module `{}` is not in DOMAIN_ORDER", m[0]));
    let mut found: Vec<String> = unplaced.collect();
    let domain = tree.refs.iter().filter(|r| in_domain(&r.from()));
    for r in domain.filter(|r| r.internal) {
        let (m, n) = (&r.from()[0], r.path.first().map_or("", |n| n.as_str()));
        if let (Some(lm), Some(ln)) = (layer_of(m), layer_of(n)) {
            if m != n && ln >= lm {
                let layers = format!("`{m}` is in layer {lm}, `{n}` in {ln}");
                found.push(format!("{} ({layers})", r.show()));
            }
        }
    }
    found
}

/// The HTTP side's one mapping of domain errors to statuses and bodies.
const ERROR_MAP: &str = "http/api/errors.rs";

/// Rule 4: the error map references no route file of `http::api` (the routes take its failure
/// types with `From`; it reads only the envelopes and the domain's errors).
fn error_map_violations(tree: &Tree) -> Vec<&Ref> {
    let routes = |r: &&Ref| {
        r.internal
            && r.path.len() > 2
            && r.path[..2] == ["http".to_string(), "api".to_string()]
            && tree.modules.contains(&r.path[..3].to_vec())
            && r.path[2] != "errors"
    };
    tree.refs
        .iter()
        .filter(|r| r.file == ERROR_MAP)
        .filter(routes)
        .collect()
}

/// Rule 3: in each directory module, "a file of child a references child b" is acyclic. One
/// finding per simple cycle, with the references that make it.
fn sibling_cycles(tree: &Tree) -> Vec<String> {
    let mut found = Vec::new();
    for dir in &tree.modules {
        let kids = tree.modules.iter().filter(|m| m.len() == dir.len() + 1);
        let kids = kids.filter(|m| m.starts_with(dir));
        let kids: Vec<&String> = kids.map(|m| &m[dir.len()]).collect();
        let child = |p: &[String]| {
            let name = p.get(dir.len()).filter(|_| p.starts_with(dir))?;
            kids.iter().position(|k| *k == name)
        };
        let mut edges: BTreeMap<(usize, usize, &str, usize), Vec<String>> = BTreeMap::new();
        for r in tree.refs.iter().filter(|r| r.internal) {
            if let (Some(a), Some(b)) = (child(&r.from()), child(&r.path)) {
                if a != b {
                    let path = format!("crate::{}", r.path.join("::"));
                    edges.entry((a, b, &r.file, r.line)).or_default().push(path);
                }
            }
        }
        let n = kids.len();
        let mut reach = vec![vec![false; n]; n];
        edges.keys().for_each(|&(a, b, ..)| reach[a][b] = true);
        for k in 0..n {
            for a in 0..n {
                for b in 0..n {
                    reach[a][b] |= reach[a][k] && reach[k][b];
                }
            }
        }
        // Only edges inside a strongly connected set can be on a cycle.
        let edge = |a: usize, b: usize| reach[b][a] && edges.keys().any(|e| (e.0, e.1) == (a, b));
        let on_cycles: Vec<usize> = (0..n).filter(|&x| reach[x][x]).collect();
        let dir: String = dir.iter().map(|d| format!("{d}/")).collect();
        for cycle in simple_cycles(&on_cycles, &edge) {
            let next = cycle.iter().cycle().skip(1);
            let steps: Vec<(usize, usize)> =
                cycle.iter().zip(next).map(|(&a, &b)| (a, b)).collect();
            let names = cycle.iter().chain(&cycle[..1]).map(|&x| kids[x].as_str());
            let names: Vec<&str> = names.collect();
            let mut text = format!("src/{dir}: {}", names.join(" -> "));
            for ((a, b, file, line), paths) in &edges {
                if steps.contains(&(*a, *b)) {
                    let (a, b, paths) = (kids[*a], kids[*b], paths.join(", "));
                    text += &format!("\n    {a} -> {b}: src/{file}:{line}: {paths}");
                }
            }
            found.push(text);
        }
    }
    found
}

/// The simple cycles among `nodes`, each from its smallest node (at most 20, enough to report).
fn simple_cycles(nodes: &[usize], edge: &dyn Fn(usize, usize) -> bool) -> Vec<Vec<usize>> {
    let (mut found, mut paths) = (Vec::new(), Vec::from_iter(nodes.iter().map(|&n| vec![n])));
    while let Some(path) = paths.pop().filter(|_| found.len() < 20) {
        let (start, last) = (path[0], path[path.len() - 1]);
        for &n in nodes.iter().filter(|&&n| edge(last, n)) {
            if n == start {
                found.push(path.clone());
            } else if n > start && !path.contains(&n) {
                paths.push([&path[..], &[n]].concat());
            }
        }
    }
    found.sort();
    found
}

/// Every `.rs` file under `src`, as (path relative to `src` joined with `/`, text), sorted.
fn read_sources(src: &Path) -> Vec<(String, String)> {
    let (mut dirs, mut files) = (vec![src.to_path_buf()], Vec::new());
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).expect("read a directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let parts = path.strip_prefix(src).expect("a file under src");
                let parts: Vec<_> = parts.iter().map(|p| p.to_string_lossy()).collect();
                let text = std::fs::read_to_string(&path).expect("read a source file");
                files.push((parts.join("/"), text));
            }
        }
    }
    files.sort();
    files
}

fn source_tree() -> Tree {
    parse_tree(&read_sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
    ))
}

#[test]
fn domain_code_never_imports_the_http_side_or_the_operations() {
    let tree = source_tree();
    let found: Vec<String> = layer_violations(&tree).iter().map(|r| r.show()).collect();
    assert!(
        found.is_empty(),
        "domain code crosses layers:\n{}",
        found.join("\n")
    );
}

#[test]
fn domain_modules_import_only_lower_layers() {
    let found = order_violations(&source_tree());
    assert!(
        found.is_empty(),
        "against DOMAIN_ORDER:\n{}",
        found.join("\n")
    );
}

#[test]
fn sibling_modules_import_each_other_one_way() {
    let found = sibling_cycles(&source_tree());
    assert!(
        found.is_empty(),
        "circles between sibling modules:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_error_map_reads_no_route() {
    let tree = source_tree();
    let found: Vec<String> = error_map_violations(&tree)
        .iter()
        .map(|r| r.show())
        .collect();
    assert!(
        found.is_empty(),
        "the error map imports route files:\n{}",
        found.join("\n")
    );
}

/// The checker itself, on planted sources: each kind of violation is caught.
mod planted {
    use super::*;

    /// The lines of the layer violations in one file.
    fn crossings(file: &str, text: &str) -> Vec<usize> {
        let tree = parse_tree(&[(file, text)]);
        layer_violations(&tree).iter().map(|r| r.line).collect()
    }

    #[test]
    fn an_error_map_that_reads_a_route_is_caught() {
        let tree = parse_tree(&[
            (
                ERROR_MAP,
                "use super::{tools::ToolCallResponse, ApiTags};\nuse crate::http::envelope::E;\n\
                 fn f() -> super::keys::K { todo!() }",
            ),
            ("http/api/mod.rs", "pub enum ApiTags {}"),
            ("http/api/tools.rs", "pub enum ToolCallResponse {}"),
            ("http/api/keys.rs", "pub struct K;"),
            ("http/envelope.rs", "pub struct E;"),
            ("http/api/tools_extra.rs", "use super::errors::ToolFailure;"),
        ]);
        let lines: Vec<usize> = error_map_violations(&tree).iter().map(|r| r.line).collect();
        assert_eq!(lines, vec![1, 3]);
    }

    #[test]
    fn domain_paths_to_http_ops_or_poem_are_caught_at_their_line() {
        let caught = [
            (
                "engine/foo.rs",
                "pub(crate) use crate::{http::envelope::X};",
                1,
            ),
            ("engine/foo.rs", "use super::super::http::X;", 1),
            (
                "auth.rs",
                "fn f() {\n    let x = crate::ops::import::run();\n}",
                2,
            ),
            (
                "auth.rs",
                "fn f() {\n    for x in crate::http::all() {}\n}",
                2,
            ),
            ("auth.rs", "use poem_openapi::Object;", 1),
            (
                "engine/foo.rs",
                "use crate::{\n    a::b,\n    http::c,\n};",
                3,
            ),
            (
                "engine/foo.rs",
                "#[cfg(test)]\nmod t {}\nuse crate::http::X;",
                3,
            ),
        ];
        for (file, text, line) in caught {
            assert_eq!(crossings(file, text), [line], "{text}");
        }
    }

    #[test]
    fn comments_strings_test_items_and_the_http_side_itself_are_not_caught() {
        let ignored = [
            ("engine/foo.rs", "// the HTTP side (crate::http) maps this"),
            (
                "engine/foo.rs",
                "/* crate::http::X */ /// See [`crate::ops`].\nfn f() {}",
            ),
            (
                "engine/foo.rs",
                "const S: &str = \"crate::http::x \\\" crate::ops\";",
            ),
            (
                "engine/foo.rs",
                "const R: &str = r#\"crate::http\"#; let r#type = 1;",
            ),
            (
                "engine/foo.rs",
                "fn f<'a>(x: &'a str) -> char { '\"' } // crate::http",
            ),
            (
                "engine/foo.rs",
                "#[cfg(test)]\nmod tests {\n    use crate::http::X;\n}",
            ),
            ("engine/foo.rs", "use std::{\n    ops::Bound,\n};"),
            ("engine/foo.rs", "pub(in crate::http) fn f() {}"),
            ("http/api/foo.rs", "use crate::http::X;\nuse poem::Route;"),
        ];
        for (file, text) in ignored {
            assert!(crossings(file, text).is_empty(), "{text}");
        }
    }

    #[test]
    fn use_trees_and_relative_paths_resolve_to_absolute_modules() {
        let runs = "use super::{evaluate::{self, A as B}, *};\nuse self::inner::C;\n\
                    use serde::S;\nmod m {\n    use super::f;\n}\nfn f() { super::E::new(); }";
        let files = [("engine/mod.rs", "use runs::E;"), ("engine/runs.rs", runs)];
        let tree = parse_tree(&[files[0], files[1], ("engine/evaluate.rs", "")]);
        let paths: Vec<String> = tree.refs.iter().map(|r| r.path.join("::")).collect();
        let expected = [
            "engine::runs::E",
            "engine",
            "engine::evaluate",
            "engine::evaluate::A",
            "engine::runs::inner::C",
            "engine::runs::f",
            "engine::E::new",
        ];
        assert_eq!(paths, expected);
    }

    #[test]
    fn references_up_the_domain_order_and_unplaced_modules_are_caught() {
        let order = |file, text| order_violations(&parse_tree(&[(file, text)]));
        assert_eq!(order("ingest/foo.rs", "use crate::engine::X;").len(), 1);
        assert_eq!(order("db.rs", "use crate::validation::X;").len(), 1); // the same layer
        assert!(order("engine/foo.rs", "use crate::ingest::X;").is_empty());
        assert!(order("http/foo.rs", "use crate::config::X;").is_empty());
        assert!(order("newcomer.rs", "")[0].contains("`newcomer` is not in DOMAIN_ORDER"));
    }

    #[test]
    fn cycles_between_siblings_are_caught_but_not_uses_of_the_parent() {
        let (mod_rs, b) = (
            "pub mod a;\npub mod b;\npub struct Z;",
            "use crate::engine::a::Y;",
        );
        let tree = |a| {
            parse_tree(&[
                ("engine/mod.rs", mod_rs),
                ("engine/a.rs", a),
                ("engine/b.rs", b),
            ])
        };
        let expected = "src/engine/: a -> b -> a\n    \
                        a -> b: src/engine/a.rs:1: crate::engine::b::X\n    \
                        b -> a: src/engine/b.rs:1: crate::engine::a::Y";
        assert_eq!(sibling_cycles(&tree("use super::b::X;")), [expected]);
        assert!(sibling_cycles(&tree("use super::Z;")).is_empty());
    }
}
