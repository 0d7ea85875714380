//! Cutting text at a character boundary: the one helper every bounded message,
//! excerpt, stored note and shown value uses. Limits are in bytes (what is stored or
//! sent) or, for the `_chars` functions, in characters (what people read). It depends
//! on nothing, so every crate can use it: the model re-exports it as
//! `railyard_model::text`.
#![warn(missing_docs)]

/// The longest prefix of `text` of at most `max` bytes that ends on a character
/// boundary.
pub fn prefix(text: &str, max: usize) -> &str {
    &text[..text.floor_char_boundary(max)]
}

/// `text` cut to at most `max` bytes at a character boundary, with `mark` appended
/// when anything was cut (the mark is not counted in `max`).
pub fn cut(text: &str, max: usize, mark: &str) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut out = prefix(text, max).to_string();
    out.push_str(mark);
    out
}

/// `text` as an error message quotes a value it names: at most 80 bytes, marked `…`
/// when cut.
pub fn clip(text: &str) -> String {
    cut(text, 80, "…")
}

/// The first `max` characters of `text` (all of it when shorter).
pub fn prefix_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// The last `max` characters of `text` (all of it when shorter).
pub fn suffix_chars(text: &str, max: usize) -> &str {
    if max == 0 {
        return "";
    }
    match text.char_indices().nth_back(max - 1) {
        Some((start, _)) => &text[start..],
        None => text,
    }
}

/// `text` on one line (each run of whitespace, newlines included, one space), cut to
/// at most `max` characters with `mark` appended when anything was cut.
pub fn one_line(text: &str, max: usize, mark: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let kept = prefix_chars(&flat, max);
    if kept.len() == flat.len() {
        return flat;
    }
    format!("{kept}{mark}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_character_boundaries() {
        assert_eq!(prefix("héllo", 2), "h");
        assert_eq!(prefix("héllo", 3), "hé");
        assert_eq!(prefix("abc", 10), "abc");
        assert_eq!(cut("héllo", 2, "…"), "h…");
        assert_eq!(cut("abc", 3, "…"), "abc");
        assert_eq!(clip(&"a".repeat(81)), format!("{}…", "a".repeat(80)));
    }

    #[test]
    fn counts_characters_not_bytes() {
        assert_eq!(prefix_chars("héllo", 2), "hé");
        assert_eq!(prefix_chars("日本語", 2), "日本");
        assert_eq!(prefix_chars("hi", 10), "hi");
        assert_eq!(prefix_chars("hi", 0), "");
        assert_eq!(suffix_chars("héllo", 3), "llo");
        assert_eq!(suffix_chars("日本語", 2), "本語");
        assert_eq!(suffix_chars("hi", 10), "hi");
        assert_eq!(suffix_chars("hi", 0), "");
    }

    #[test]
    fn one_line_flattens_and_marks_a_cut() {
        assert_eq!(one_line("a\n  b\tc", 10, "…"), "a b c");
        assert_eq!(one_line("exactly 10", 10, "…"), "exactly 10");
        assert_eq!(one_line("one two three", 7, "..."), "one two...");
        assert_eq!(one_line("日本語です", 2, "…"), "日本…");
    }
}
