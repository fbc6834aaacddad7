//! Human-readable output: aligned tables and key/value listings.

use serde_json::Value;

/// A cell's text: strings as they are, null as `-`, anything else as compact JSON.
pub fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

/// The value at a `/`-separated JSON pointer, or null.
pub fn at<'a>(value: &'a Value, pointer: &str) -> &'a Value {
    value.pointer(pointer).unwrap_or(&Value::Null)
}

/// Prints rows under headers with aligned columns.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let w = widths.get(i).copied().unwrap_or(0);
                format!("{c:<w$}")
            })
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    if rows.is_empty() {
        println!("(none)");
    }
    for row in rows {
        line(row.clone());
    }
}

/// Prints a resource's fields, one per line; nested values as compact JSON.
pub fn fields(value: &Value) {
    match value.as_object() {
        Some(map) => {
            let width = map.keys().map(|k| k.chars().count()).max().unwrap_or(0);
            for (k, v) in map {
                println!("{k:<width$}  {}", cell(v));
            }
        }
        None => println!("{}", cell(value)),
    }
}

/// Pretty JSON for `--json` and for tool results.
pub fn json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}
