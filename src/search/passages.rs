//! Passages: the sentences of an artifact that best match a query, so an agent reads the
//! evidence without the whole document.

use std::collections::HashSet;

/// A passage is built from whole sentences up to about this many characters.
const TARGET_CHARS: usize = 120;
/// and is cut (at a word boundary, with an ellipsis) beyond this many.
const MAX_CHARS: usize = 320;

/// Up to `max` passages of `text` that contain the most distinct query words (`words` as the
/// index analyses them; `analyze` analyses a passage the same way), best first. When no
/// passage contains a query word (the match was on a stemmed form the sentence split hid, or
/// on the title alone) the opening passage stands in.
pub fn best_passages(
    text: &str,
    words: &[String],
    analyze: impl Fn(&str) -> Vec<String>,
    max: usize,
) -> Vec<String> {
    let wanted: HashSet<&str> = words.iter().map(String::as_str).collect();
    let windows = windows(text);
    let mut scored: Vec<(usize, usize, usize)> = windows
        .iter()
        .enumerate()
        .map(|(position, window)| {
            let tokens = analyze(window);
            let distinct = tokens
                .iter()
                .filter(|t| wanted.contains(t.as_str()))
                .count();
            (distinct, position, window.len())
        })
        .filter(|(distinct, _, _)| *distinct > 0)
        .collect();
    // More distinct words first; then earlier passages.
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut out: Vec<String> = scored
        .into_iter()
        .take(max)
        .map(|(_, position, _)| windows[position].clone())
        .collect();
    if out.is_empty() {
        if let Some(first) = windows.into_iter().next() {
            out.push(first);
        }
    }
    out
}

/// Splits `text` into sentence windows of about [`TARGET_CHARS`], none longer than
/// [`MAX_CHARS`].
fn windows(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for sentence in sentences(text) {
        if !current.is_empty() && current.len() + sentence.len() + 1 > TARGET_CHARS {
            out.push(clip(std::mem::take(&mut current)));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(sentence);
    }
    if !current.trim().is_empty() {
        out.push(clip(current));
    }
    out
}

/// Sentences: split after `.`, `!`, `?` followed by whitespace, and at line breaks.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let end_here = match c {
            '\n' => true,
            '.' | '!' | '?' => chars.peek().is_none_or(|(_, next)| next.is_whitespace()),
            _ => false,
        };
        if end_here {
            let end = i + c.len_utf8();
            let piece = text[start..end].trim();
            if !piece.is_empty() {
                out.push(piece);
            }
            start = end;
        }
    }
    let rest = text[start..].trim();
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

fn clip(passage: String) -> String {
    if passage.len() <= MAX_CHARS {
        return passage;
    }
    let mut cut = MAX_CHARS;
    while !passage.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = &passage[..cut];
    let head = head.rsplit_once(' ').map(|(h, _)| h).unwrap_or(head);
    format!("{}…", head.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    }

    #[test]
    fn best_sentence_first_and_long_text_clipped() {
        let text = format!(
            "We met on Monday. Pricing came up twice and the renewal is at risk. {}",
            "Filler words go here. ".repeat(30)
        );
        let found = best_passages(&text, &words("renewal pricing"), words, 2);
        assert!(found[0].contains("renewal"));
        assert!(found.iter().all(|p| p.len() <= MAX_CHARS + '…'.len_utf8()));
        let none = best_passages("Nothing relevant.", &words("zebra"), words, 3);
        assert_eq!(none, vec!["Nothing relevant.".to_string()]);
    }
}
