//! Cutting text at a character boundary: the one helper every bounded message,
//! excerpt and stored note uses. It depends on nothing, so every crate can use it:
//! the model re-exports it as `railyard_model::text`.
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
    }
}
