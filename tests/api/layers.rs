//! The layers' one rule, checked on the source tree: domain code never imports the HTTP side
//! (`src/http/`), nor poem, nor the operations (`src/ops/`). Everything under `src/` outside
//! those two folders is domain, except `main.rs` and `lib.rs`, which wire the layers together.

use std::path::{Path, PathBuf};

/// The paths in a file that cross into another layer, with their line numbers. Names inside a
/// `use crate::{...}` group are read with the `crate::` they are under.
fn crossings(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut in_crate_use = false;
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default().trim();
        if let Some(path) = code.strip_prefix("use ").or(code.strip_prefix("pub use ")) {
            in_crate_use = path.starts_with("crate::");
        }
        let names = code.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'));
        for name in names.filter(|n| !n.is_empty()) {
            let path = if in_crate_use && !name.starts_with("crate::") {
                format!("crate::{name}")
            } else {
                name.to_string()
            };
            let crosses = path.starts_with("poem")
                || path == "crate::http"
                || path.starts_with("crate::http::")
                || path == "crate::ops"
                || path.starts_with("crate::ops::");
            if crosses {
                found.push((n + 1, line.trim().to_string()));
                break;
            }
        }
        if code.ends_with(';') {
            in_crate_use = false;
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn domain_code_never_imports_the_http_side_or_the_operations() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let outside_domain = ["http", "ops", "main.rs", "lib.rs"];
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src/");
        let top = relative.components().next().expect("a path");
        if outside_domain.iter().any(|o| top.as_os_str() == *o) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read a source file");
        for (n, line) in crossings(&text) {
            found.push(format!("src/{}:{n}: {line}", relative.display()));
        }
    }
    assert!(
        found.is_empty(),
        "domain code crosses layers:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_direct_and_grouped_paths_only() {
    let grouped = "use crate::{\n    auth::AuthContext,\n    http::envelope::ResourceRef,\n};";
    assert_eq!(
        crossings(grouped),
        vec![(3, "http::envelope::ResourceRef,".to_string())]
    );
    assert_eq!(crossings("use poem_openapi::Object;").len(), 1);
    assert_eq!(crossings("let x = crate::ops::import::run();").len(), 1);
    assert!(crossings("use std::{\n    ops::Bound,\n};").is_empty());
    assert!(crossings("// the HTTP side (crate::http) maps this").is_empty());
}
